// SqliteCatalog: the versioned exact store on SQLite (sqlite3 C API).
#include "abf/service/sqlite_catalog.hpp"

#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace abf::service {
namespace {

// PRAGMA application_id: "ABFC" — tells an abf catalog from any other SQLite
// database before a table is read.
constexpr std::int32_t kApplicationId = 0x41424643;
// Input is read in chunks of this many digests.
constexpr std::size_t kChunk = 65536;
// ... and sorted and written in runs of up to this many (128 MiB): in key
// order, each run's inserts walk the artifacts' B-tree and the index of
// added versions once, front to back, so the pages a run changes are each
// changed while in SQLite's page cache, instead of being evicted (spilled
// to the WAL, read back, spilled again) when a catalog outgrows the cache
// inside the one write transaction: sorted only in chunks of kChunk,
// 2,000,000 random digests into a catalog of 5,000,000 took 24 s of CPU,
// 11 s of it the kernel's; in runs, 7 s (docs/performance.md, "Catalogs at
// import speed").
constexpr std::size_t kSortRun = std::size_t{1} << 22;
// kSortRun, or the environment variable ABF_TEST_CATALOG_RUN_DIGESTS (a
// count >= 1), which tests set to cross run boundaries with small inputs.
std::size_t sort_run_digests() {
  const char* text = std::getenv("ABF_TEST_CATALOG_RUN_DIGESTS");
  if (text == nullptr || *text == '\0') return kSortRun;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(text, &end, 10);
  return *end == '\0' && value >= 1 && value <= kSortRun ? static_cast<std::size_t>(value)
                                                         : kSortRun;
}
// Batch lookups sort their digests first when there are at least this many:
// walking the B-tree in key order keeps its pages hot in the CPU caches.
constexpr std::size_t kSortThreshold = 64;

// Schema 3; the catalog id is appended as the last statement's blob literal
// (create_schema_sql). The two content columns of `versions` are declared
// exactly as the upgrade from schema 2 adds them (kAddContentColumns), so an
// upgraded catalog and a new one have the same columns and constraints.
static_assert(kCatalogSchemaVersion == 3, "the SQL below writes schema version 3");
constexpr std::string_view kCreateSchema = R"sql(
PRAGMA application_id = 1094862403;
PRAGMA user_version = 3;
BEGIN;
CREATE TABLE abf_schema (version INTEGER NOT NULL);
INSERT INTO abf_schema (version) VALUES (3);
CREATE TABLE versions (
  version INTEGER PRIMARY KEY,
  operation TEXT NOT NULL,
  created_unix INTEGER NOT NULL,
  added INTEGER NOT NULL DEFAULT 0,
  removed INTEGER NOT NULL DEFAULT 0,
  item_count INTEGER NOT NULL DEFAULT 0,
  fingerprint BLOB NOT NULL DEFAULT X'00000000000000000000000000000000'
    CHECK (length(fingerprint) = 16)
);
INSERT INTO versions (version, operation, created_unix) VALUES (0, 'init', strftime('%s', 'now'));
CREATE TABLE artifacts (
  digest BLOB NOT NULL CHECK (length(digest) = 32),
  added_version INTEGER NOT NULL,
  removed_version INTEGER,
  PRIMARY KEY (digest, added_version)
) WITHOUT ROWID;
CREATE INDEX artifacts_by_added_version ON artifacts (added_version);
)sql";
// The index of the digests each version added (sqlite_catalog.hpp): made
// with the schema, and by writers for catalogs made before it.
constexpr const char* kAddedIndexSql =
    "CREATE INDEX IF NOT EXISTS artifacts_by_added_version ON artifacts (added_version)";
// Shared by create and the upgrade from schema 1.
constexpr std::string_view kCreateCatalogTable =
    "CREATE TABLE abf_catalog (catalog_id BLOB NOT NULL CHECK (length(catalog_id) = 16));\n";
// The upgrade from schema 2 (or 1): the columns of kCreateSchema's
// `versions` that schema 2 lacks. Their defaults (0, the empty set's
// fingerprint) are right for version 0 only; the upgrade computes every
// other row before it commits.
constexpr const char* kAddContentColumns =
    "ALTER TABLE versions ADD COLUMN item_count INTEGER NOT NULL DEFAULT 0;\n"
    "ALTER TABLE versions ADD COLUMN fingerprint BLOB NOT NULL DEFAULT "
    "X'00000000000000000000000000000000' CHECK (length(fingerprint) = 16);\n";

// The schema of a new catalog whose id is `id`, in one transaction.
std::string create_schema_sql(const CatalogId& id) {
  std::string sql(kCreateSchema);
  sql += kCreateCatalogTable;
  sql += "INSERT INTO abf_catalog (catalog_id) VALUES (X'" + id.hex() + "');\nCOMMIT;\n";
  return sql;
}

// The schema version before catalog ids; opened, and upgraded by writers.
constexpr std::int64_t kSchemaWithoutCatalogId = 1;
// The schema version before per-version contents; opened, and upgraded by
// writers.
constexpr std::int64_t kSchemaWithoutContent = 2;
static_assert(kApplicationId == 1094862403);

// Returns the mode in force: "wal" unless the filesystem cannot (then the
// mode the file had).
constexpr const char* kWalSql = "PRAGMA journal_mode = WAL";

constexpr const char* kExistsSql =
    "SELECT 1 FROM artifacts WHERE digest = ?1 AND added_version <= ?2 "
    "AND (removed_version IS NULL OR removed_version > ?2) LIMIT 1";
constexpr const char* kLiveSql =
    "SELECT 1 FROM artifacts WHERE digest = ?1 AND removed_version IS NULL LIMIT 1";
constexpr const char* kInsertSql = "INSERT INTO artifacts (digest, added_version) VALUES (?1, ?2)";
// Rows of one multi-row INSERT (kInsertRows + 1 parameters; SQLite allows
// 32,766): add's statement overhead once per this many digests.
constexpr std::size_t kInsertRows = 128;
constexpr const char* kAnyArtifactSql = "SELECT 1 FROM artifacts LIMIT 1";
constexpr const char* kCloseSql =
    "UPDATE artifacts SET removed_version = ?2 WHERE digest = ?1 AND removed_version IS NULL";
constexpr const char* kLatestSql = "SELECT MAX(version) FROM versions";
// The schema version as the file has it now (head_record reads it with the
// head: a long-lived reader notices a catalog upgraded, or an older backup
// restored, under it).
constexpr const char* kSchemaSql = "SELECT version FROM abf_schema";
constexpr const char* kVersionSql =
    "INSERT INTO versions (version, operation, created_unix, added, removed, item_count, "
    "fingerprint) VALUES (?1, ?2, strftime('%s', 'now'), ?3, ?4, ?5, ?6)";
// Schema 3: what a version holds, as its row keeps it.
constexpr const char* kContentSql =
    "SELECT item_count, fingerprint FROM versions WHERE version = ?1";
// The first digest present at ?2 at or after the key ?1 (sample_at_version).
constexpr const char* kSeekSql =
    "SELECT digest FROM artifacts WHERE digest >= ?1 AND added_version <= ?2 "
    "AND (removed_version IS NULL OR removed_version > ?2) ORDER BY digest LIMIT 1";
// Every interval ever recorded: the upgrade's one pass over the artifacts.
constexpr const char* kIntervalsSql =
    "SELECT digest, added_version, removed_version FROM artifacts";
constexpr const char* kVersionListSql = "SELECT version FROM versions ORDER BY version";
constexpr const char* kSetContentSql =
    "UPDATE versions SET item_count = ?2, fingerprint = ?3 WHERE version = ?1";
constexpr const char* kWalkSql =
    "SELECT digest FROM artifacts WHERE added_version <= ?1 "
    "AND (removed_version IS NULL OR removed_version > ?1) ORDER BY digest";
// Both read a range of a primary key or of artifacts_by_added_version.
constexpr const char* kChangesSql =
    "SELECT COALESCE(SUM(added), 0), COALESCE(SUM(removed), 0) FROM versions "
    "WHERE version > ?1 AND version <= ?2";
constexpr const char* kAddedSql =
    "SELECT digest FROM artifacts WHERE added_version > ?1 AND added_version <= ?2";
constexpr const char* kCountSql =
    "SELECT COUNT(*) FROM artifacts WHERE added_version <= ?1 "
    "AND (removed_version IS NULL OR removed_version > ?1)";

struct StmtDeleter {
  void operator()(sqlite3_stmt* stmt) const noexcept { sqlite3_finalize(stmt); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

struct DbDeleter {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbDeleter>;

std::string describe_rc(sqlite3* db, int rc) {
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    return "database is locked by another connection (busy timeout expired)";
  }
  if (primary == SQLITE_NOTADB) return "file is not a SQLite database";
  if (db != nullptr && sqlite3_errcode(db) == rc) return sqlite3_errmsg(db);
  return sqlite3_errstr(rc);
}

// kIo for what the disk did (full, a read or write error), kCatalog else.
Error catalog_error(const std::filesystem::path& path, std::string_view what, sqlite3* db, int rc) {
  const int primary = rc & 0xff;
  const ErrorCode code =
      primary == SQLITE_FULL || primary == SQLITE_IOERR ? ErrorCode::kIo : ErrorCode::kCatalog;
  return Error{code,
               "catalog " + path.string() + ": " + std::string(what) + ": " + describe_rc(db, rc)};
}

std::string version_text(std::uint64_t version) { return std::to_string(version); }

// The one schema version of the database, read inside the caller's
// transaction, if any.
Result<std::int64_t> read_schema_version(sqlite3* db, const std::filesystem::path& path) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v2(db, "SELECT version FROM abf_schema", -1, &raw, nullptr);
  Stmt stmt(raw);
  if (rc != SQLITE_OK) {
    if ((rc & 0xff) == SQLITE_ERROR) {
      return fail(ErrorCode::kCatalog,
                  "catalog " + path.string() + ": not an abf catalog (no abf_schema table)");
    }
    return std::unexpected(catalog_error(path, "reading the schema version", db, rc));
  }
  const int step = sqlite3_step(stmt.get());
  if (step != SQLITE_ROW) {
    if (step == SQLITE_DONE) {
      return fail(ErrorCode::kCatalog,
                  "catalog " + path.string() + ": not an abf catalog (empty abf_schema table)");
    }
    return std::unexpected(catalog_error(path, "reading the schema version", db, step));
  }
  return sqlite3_column_int64(stmt.get(), 0);
}

// The id a schema-2 catalog keeps in abf_catalog.
Result<CatalogId> read_catalog_id(sqlite3* db, const std::filesystem::path& path) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v2(db, "SELECT catalog_id FROM abf_catalog", -1, &raw, nullptr);
  Stmt stmt(raw);
  if (rc != SQLITE_OK)
    return std::unexpected(catalog_error(path, "reading the catalog id", db, rc));
  const int step = sqlite3_step(stmt.get());
  if (step != SQLITE_ROW && step != SQLITE_DONE) {
    return std::unexpected(catalog_error(path, "reading the catalog id", db, step));
  }
  CatalogId id;
  const void* blob = step == SQLITE_ROW ? sqlite3_column_blob(stmt.get(), 0) : nullptr;
  const bool sized =
      blob != nullptr && sqlite3_column_bytes(stmt.get(), 0) == static_cast<int>(id.bytes.size());
  // Copied before the next step, which frees the blob.
  if (sized) std::memcpy(id.bytes.data(), blob, id.bytes.size());
  if (!sized || sqlite3_step(stmt.get()) != SQLITE_DONE) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": damaged: abf_catalog must hold exactly one 16-byte "
                                         "catalog id");
  }
  if (id.is_zero()) {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": damaged: its catalog id is all zero");
  }
  return id;
}

// A SQLite result code that is not SQLITE_OK.
struct SqliteFailure {
  int rc;
  const char* what;  // "opening", "reading the header"
};

// The read-only connection met something only a writer can put right: a
// hot journal to roll back, or a WAL index to rebuild.
bool is_readonly_recovery(int rc) {
  return rc == SQLITE_READONLY_ROLLBACK || rc == SQLITE_READONLY_RECOVERY ||
         rc == SQLITE_READONLY_CANTINIT || rc == SQLITE_READONLY_CANTLOCK;
}

// Rolls back the hot journal of a killed writer (or rebuilds a WAL index)
// with a read-write connection that only reads: no version is created and
// no row changes, the database becomes what it was before the killed
// writer's transaction.
Result<void> roll_back_hot_journal(const std::filesystem::path& path, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);
  if (rc == SQLITE_OK) {
    sqlite3_extended_result_codes(raw, 1);
    sqlite3_busy_timeout(raw, busy_timeout_ms);
    rc = sqlite3_exec(raw, "SELECT COUNT(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
  }
  if (rc != SQLITE_OK) {
    return std::unexpected(catalog_error(
        path,
        "a writer was killed mid-change and left a journal that only a read-write connection "
        "can roll back (" +
            path.string() + "-journal), and opening one failed",
        db.get(), rc));
  }
  return {};
}

}  // namespace

struct SqliteCatalog::State {
  std::filesystem::path path;
  CatalogOpenOptions options;
  Db db;
  std::int64_t schema = kCatalogSchemaVersion;
  std::optional<CatalogId> catalog_id;  // none: schema 1, opened read-only
  std::mutex mutex;
  Stmt exists;
  Stmt live;
  Stmt insert;
  Stmt close;
  Stmt latest;
  Stmt version;  // schema 3 only, as is content: writers always have it
  Stmt content;  // a reader opened at an older schema prepares it once the file has schema 3
  Stmt schema_now;
  // The file the connection opened (its device and inode), so that a
  // catalog replaced by rename under a long-lived reader is noticed
  // (check_same_file) rather than answered from the old file for ever.
  std::optional<std::pair<dev_t, ino_t>> file_identity;

  Error error(std::string_view what, int rc) const {
    return catalog_error(path, what, db.get(), rc);
  }

  Result<Stmt> prepare(const char* sql) {
    sqlite3_stmt* stmt = nullptr;
    const int rc = sqlite3_prepare_v3(db.get(), sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
    if (rc != SQLITE_OK) return std::unexpected(error("preparing a statement", rc));
    return Stmt(stmt);
  }

  Result<void> exec(const char* sql, std::string_view what) {
    const int rc = sqlite3_exec(db.get(), sql, nullptr, nullptr, nullptr);
    if (rc != SQLITE_OK) return std::unexpected(error(what, rc));
    return {};
  }

  // Opens the connection (again, dropping an earlier one) and reads the
  // header's application id; a failure is SQLite's result code.
  std::expected<std::int64_t, SqliteFailure> connect_and_read_application_id() {
    db.reset();
    sqlite3* raw = nullptr;
    const int flags =
        (options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX;
    const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
    db.reset(raw);
    if (rc != SQLITE_OK) return std::unexpected(SqliteFailure{rc, "opening"});
    struct stat opened {};
    file_identity.reset();
    if (::stat(path.c_str(), &opened) == 0) file_identity = std::pair{opened.st_dev, opened.st_ino};
    sqlite3_extended_result_codes(raw, 1);
    sqlite3_busy_timeout(raw, options.busy_timeout_ms);
    sqlite3_stmt* stmt_raw = nullptr;
    int step = sqlite3_prepare_v2(raw, "PRAGMA application_id", -1, &stmt_raw, nullptr);
    Stmt stmt(stmt_raw);
    if (step == SQLITE_OK) step = sqlite3_step(stmt.get());
    if (step != SQLITE_ROW) return std::unexpected(SqliteFailure{step, "reading the header"});
    return sqlite3_column_int64(stmt.get(), 0);
  }

  // A writer's connection: WAL (kept in the database, so every later
  // connection uses it too) and a sync of the WAL at every commit, so a
  // committed version survives a crash or power loss. A catalog in rollback
  // mode is converted here; that waits, within the busy timeout, for its
  // readers. Where WAL is impossible (no shared memory on the filesystem)
  // the catalog keeps the mode it has.
  Result<void> use_wal() {
    sqlite3_stmt* raw = nullptr;
    int rc = sqlite3_prepare_v2(db.get(), kWalSql, -1, &raw, nullptr);
    Stmt stmt(raw);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
    if (rc != SQLITE_ROW) return std::unexpected(error("switching to WAL mode", rc));
    return exec("PRAGMA synchronous = FULL", "setting synchronous commits");
  }

  // Ends a transaction opened by a caller that failed; errors are moot then.
  void rollback() noexcept {
    if (sqlite3_get_autocommit(db.get()) == 0) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

  // kCatalog when the path now names another file than the one opened: a
  // backup restored by rename (`mv restored.db catalog.db`). The connection
  // would go on reading the old, unlinked file; answers from it could call a
  // digest of the new file absent.
  Result<void> check_same_file() const {
    if (!file_identity) return {};
    struct stat now {};
    if (::stat(path.c_str(), &now) != 0) {
      return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                           ": the file was removed or renamed since it was "
                                           "opened; restart to read the catalog at this path");
    }
    if (std::pair{now.st_dev, now.st_ino} != *file_identity) {
      return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                           ": the file was replaced since it was opened (a "
                                           "restore by rename?); restart to read the new file");
    }
    return {};
  }

  Result<std::uint64_t> latest_version() {
    sqlite3_stmt* stmt = latest.get();
    sqlite3_reset(stmt);
    const int rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) return std::unexpected(error("reading the latest version", rc));
    const auto value = static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 0));
    sqlite3_reset(stmt);
    return value;
  }

  // (after, upto] names versions that exist; inside the caller's transaction.
  Result<void> check_range(std::uint64_t after, std::uint64_t upto) {
    auto latest_now = latest_version();
    if (!latest_now) return std::unexpected(latest_now.error());
    if (after > upto || upto > *latest_now) {
      return fail(ErrorCode::kInvalidArgument,
                  "catalog " + path.string() + ": no version range (" + version_text(after) + ", " +
                      version_text(upto) + "] (latest is " + version_text(*latest_now) + ")");
    }
    return {};
  }

  // Steps `stmt`, whose first column is a digest, to the end, handing the
  // digests to `sink` in chunks of `chunk_size`.
  Result<void> stream_digests(sqlite3_stmt* stmt, const DigestSink& sink, std::size_t chunk_size) {
    std::vector<Digest> chunk;
    chunk.reserve(chunk_size);
    for (;;) {
      const int rc = sqlite3_step(stmt);
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return std::unexpected(error("reading digests", rc));
      const void* blob = sqlite3_column_blob(stmt, 0);
      if (blob == nullptr || sqlite3_column_bytes(stmt, 0) != static_cast<int>(Digest::kSize)) {
        return fail(ErrorCode::kCatalog,
                    "catalog " + path.string() + ": a stored digest is not 32 bytes");
      }
      Digest digest;
      std::memcpy(digest.bytes.data(), blob, Digest::kSize);
      chunk.push_back(digest);
      if (chunk.size() == chunk_size) {
        if (auto ok = sink(chunk); !ok) return ok;
        chunk.clear();
      }
    }
    if (!chunk.empty()) {
      if (auto ok = sink(chunk); !ok) return ok;
    }
    return {};
  }

  // One point lookup with the prepared statement (inside the caller's
  // transaction, if any).
  Result<bool> lookup(sqlite3_stmt* stmt, const Digest& digest, std::uint64_t version) {
    sqlite3_reset(stmt);
    sqlite3_bind_blob(stmt, 1, digest.bytes.data(), Digest::kSize, SQLITE_STATIC);
    if (sqlite3_bind_parameter_count(stmt) >= 2) {
      sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(version));
    }
    const int rc = sqlite3_step(stmt);
    sqlite3_reset(stmt);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return std::unexpected(error("looking up " + digest.hex(), rc));
  }

  // The digest in column `column` of the current row; kCatalog if it is not
  // 32 bytes.
  Result<Digest> column_digest(sqlite3_stmt* stmt, int column) const {
    const void* blob = sqlite3_column_blob(stmt, column);
    if (blob == nullptr || sqlite3_column_bytes(stmt, column) != static_cast<int>(Digest::kSize)) {
      return fail(ErrorCode::kCatalog,
                  "catalog " + path.string() + ": damaged: a stored digest is not 32 bytes");
    }
    Digest digest;
    std::memcpy(digest.bytes.data(), blob, Digest::kSize);
    return digest;
  }

  // What `catalog_version` holds, computed by walking its digests (inside the
  // caller's transaction): how a catalog of schema 1 or 2, opened read-only,
  // answers content_at_version, and what the tests compare the kept values
  // with.
  Result<CatalogContent> walk_content(std::uint64_t catalog_version) {
    auto stmt = prepare(kWalkSql);
    if (!stmt) return std::unexpected(stmt.error());
    sqlite3_bind_int64(stmt->get(), 1, static_cast<sqlite3_int64>(catalog_version));
    CatalogContent content;
    for (;;) {
      const int rc = sqlite3_step(stmt->get());
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return std::unexpected(error("reading digests", rc));
      auto digest = column_digest(stmt->get(), 0);
      if (!digest) return std::unexpected(digest.error());
      content.fingerprint += ContentFingerprint::of(*digest);
      ++content.item_count;
    }
    return content;
  }

  // Schema 3: what `catalog_version`'s row keeps (inside the caller's
  // transaction); none when there is no such row.
  Result<std::optional<CatalogContent>> kept_content(std::uint64_t catalog_version) {
    sqlite3_stmt* stmt = content.get();
    sqlite3_reset(stmt);
    sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(catalog_version));
    const int rc = sqlite3_step(stmt);
    if (rc == SQLITE_DONE) {
      sqlite3_reset(stmt);
      return std::optional<CatalogContent>{};
    }
    if (rc != SQLITE_ROW) {
      sqlite3_reset(stmt);
      return std::unexpected(
          error("reading the contents of version " + version_text(catalog_version), rc));
    }
    const void* blob = sqlite3_column_blob(stmt, 1);
    const bool sized = blob != nullptr && sqlite3_column_bytes(stmt, 1) == 16;
    const std::int64_t count = sqlite3_column_int64(stmt, 0);
    CatalogContent out;
    if (sized) {
      std::array<std::uint8_t, 16> bytes{};
      std::memcpy(bytes.data(), blob, bytes.size());
      out.fingerprint = ContentFingerprint::from_bytes(bytes);
    }
    sqlite3_reset(stmt);
    if (!sized || count < 0) {
      return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": damaged: version " +
                                           version_text(catalog_version) +
                                           " has no valid item count and 16-byte fingerprint");
    }
    out.item_count = static_cast<std::uint64_t>(count);
    return std::optional<CatalogContent>{out};
  }

  // What `catalog_version` holds (inside the caller's transaction): kept
  // (schema 3) or walked (older, read-only). kInvalidArgument if the version
  // does not exist yet.
  Result<CatalogContent> content_locked(std::uint64_t catalog_version) {
    auto latest_now = latest_version();
    if (!latest_now) return std::unexpected(latest_now.error());
    if (catalog_version > *latest_now) {
      return fail(ErrorCode::kInvalidArgument,
                  "catalog " + path.string() + ": version " + version_text(catalog_version) +
                      " does not exist (latest is " + version_text(*latest_now) + ")");
    }
    if (schema != kCatalogSchemaVersion) return walk_content(catalog_version);
    auto kept = kept_content(catalog_version);
    if (!kept) return std::unexpected(kept.error());
    if (!*kept) {
      return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": damaged: version " +
                                           version_text(catalog_version) + " has no row");
    }
    return **kept;
  }

  // Schema 1 or 2 -> 3, in one write transaction that first re-reads the
  // schema version (another writer may have upgraded the catalog meanwhile;
  // then its work stands). From 1: a new random catalog id. From 1 or 2: the
  // item count and fingerprint of every version, computed from the
  // artifacts in one pass: each interval [added, removed) adds its digest's
  // element at `added` and subtracts it at `removed`, and a version's
  // content is the running sum of those changes up to it. Rows of
  // `artifacts` are not touched; of `versions`, only the two new columns.
  Result<void> upgrade() {
    auto id = CatalogId::generate();
    if (!id) return std::unexpected(id.error());
    if (auto begun = exec("BEGIN IMMEDIATE", "starting the upgrade to schema 3"); !begun)
      return begun;
    auto result = [&]() -> Result<void> {
      auto schema_now = read_schema_version(db.get(), path);
      if (!schema_now) return std::unexpected(schema_now.error());
      if (*schema_now == kCatalogSchemaVersion) return {};
      if (*schema_now == kSchemaWithoutCatalogId) {
        std::string sql(kCreateCatalogTable);
        sql += "INSERT INTO abf_catalog (catalog_id) VALUES (X'" + id->hex() + "');\n";
        if (auto ok = exec(sql.c_str(), "upgrading to schema 3 (adding the catalog id)"); !ok)
          return ok;
      } else if (*schema_now != kSchemaWithoutContent) {
        return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": schema version " +
                                             std::to_string(*schema_now) +
                                             " changed while it was being upgraded");
      }
      if (auto ok = exec(kAddContentColumns, "upgrading to schema 3 (adding version contents)");
          !ok)
        return ok;
      return compute_every_content();
    }();
    if (!result) {
      rollback();
      return result;
    }
    if (auto done = exec("UPDATE abf_schema SET version = 3; PRAGMA user_version = 3;",
                         "upgrading to schema 3 (recording the schema version)");
        !done) {
      rollback();
      return done;
    }
    if (auto done = exec("COMMIT", "committing the upgrade to schema 3"); !done) {
      rollback();
      return done;
    }
    return {};
  }

  // The upgrade's pass (inside its transaction): fills item_count and
  // fingerprint of every row of `versions` from the artifacts.
  Result<void> compute_every_content() {
    // Runs from open(), before the persistent statements are prepared.
    auto latest_stmt = prepare(kLatestSql);
    if (!latest_stmt) return std::unexpected(latest_stmt.error());
    const int latest_rc = sqlite3_step(latest_stmt->get());
    if (latest_rc != SQLITE_ROW) {
      return std::unexpected(error("reading the latest version", latest_rc));
    }
    const auto latest_now =
        std::optional<std::uint64_t>(sqlite3_column_int64(latest_stmt->get(), 0));
    // One change per version, 24 bytes each: a catalog of a million versions
    // needs 24 MB here, for the length of the upgrade.
    struct Delta {
      ContentFingerprint fingerprint;
      std::int64_t count = 0;
    };
    std::vector<Delta> deltas(*latest_now + 1);
    auto intervals = prepare(kIntervalsSql);
    if (!intervals) return std::unexpected(intervals.error());
    for (;;) {
      const int rc = sqlite3_step(intervals->get());
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return std::unexpected(error("reading the artifacts", rc));
      auto digest = column_digest(intervals->get(), 0);
      if (!digest) return std::unexpected(digest.error());
      const ContentFingerprint element = ContentFingerprint::of(*digest);
      const std::int64_t added = sqlite3_column_int64(intervals->get(), 1);
      const bool removed_null = sqlite3_column_type(intervals->get(), 2) == SQLITE_NULL;
      const std::int64_t removed = removed_null ? 0 : sqlite3_column_int64(intervals->get(), 2);
      const auto beyond = [&](std::int64_t v) {
        return v < 0 || static_cast<std::uint64_t>(v) > *latest_now;
      };
      if (beyond(added) || (!removed_null && (beyond(removed) || removed <= added))) {
        return fail(ErrorCode::kCatalog,
                    "catalog " + path.string() + ": damaged: digest " + digest->hex() +
                        " has the interval [" + std::to_string(added) + ", " +
                        (removed_null ? std::string("open") : std::to_string(removed)) +
                        ") outside versions 0.." + version_text(*latest_now));
      }
      deltas[static_cast<std::size_t>(added)].fingerprint += element;
      ++deltas[static_cast<std::size_t>(added)].count;
      if (!removed_null) {
        deltas[static_cast<std::size_t>(removed)].fingerprint -= element;
        --deltas[static_cast<std::size_t>(removed)].count;
      }
    }
    // Running sums, in place: deltas[v] becomes the content of version v.
    for (std::size_t v = 1; v < deltas.size(); ++v) {
      deltas[v].fingerprint += deltas[v - 1].fingerprint;
      deltas[v].count += deltas[v - 1].count;
    }
    auto list = prepare(kVersionListSql);
    if (!list) return std::unexpected(list.error());
    std::vector<std::uint64_t> versions;
    for (;;) {
      const int rc = sqlite3_step(list->get());
      if (rc == SQLITE_DONE) break;
      if (rc != SQLITE_ROW) return std::unexpected(error("reading the versions", rc));
      versions.push_back(static_cast<std::uint64_t>(sqlite3_column_int64(list->get(), 0)));
    }
    auto update = prepare(kSetContentSql);
    if (!update) return std::unexpected(update.error());
    for (const std::uint64_t v : versions) {
      if (v >= deltas.size()) {  // only a negative version number, cast
        return fail(ErrorCode::kCatalog,
                    "catalog " + path.string() + ": damaged: a version number is negative");
      }
      const Delta& content = deltas[v];
      const auto bytes = content.fingerprint.bytes();
      sqlite3_reset(update->get());
      sqlite3_bind_int64(update->get(), 1, static_cast<sqlite3_int64>(v));
      sqlite3_bind_int64(update->get(), 2, content.count);
      sqlite3_bind_blob(update->get(), 3, bytes.data(), static_cast<int>(bytes.size()),
                        SQLITE_TRANSIENT);
      const int rc = sqlite3_step(update->get());
      if (rc != SQLITE_DONE) {
        return std::unexpected(error("recording the contents of version " + version_text(v), rc));
      }
    }
    return {};
  }

  // Whether `artifacts` holds any row (inside the caller's transaction).
  Result<bool> has_any_artifact() {
    auto stmt = prepare(kAnyArtifactSql);
    if (!stmt) return std::unexpected(stmt.error());
    const int rc = sqlite3_step(stmt->get());
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return std::unexpected(error("reading the artifacts", rc));
  }

  // Inserts rows (digest, version), kInsertRows to a statement (one
  // statement's parse, bind and VM run for that many rows), the rest one at
  // a time at flush(). The digests come in key order and are absent.
  class Inserter {
   public:
    Inserter(State& state, std::uint64_t version) : state_(state), version_(version) {}
    Result<void> prepare() {
      // ?1 the version, ?2 .. the digests.
      std::string sql = "INSERT INTO artifacts (digest, added_version) VALUES ";
      for (std::size_t i = 0; i < kInsertRows; ++i) {
        sql += (i == 0 ? "(?" : ", (?") + std::to_string(i + 2) + ", ?1)";
      }
      auto stmt = state_.prepare(sql.c_str());
      if (!stmt) return std::unexpected(stmt.error());
      many_ = std::move(*stmt);
      pending_.reserve(kInsertRows);
      return {};
    }
    Result<void> add(const Digest& digest) {
      pending_.push_back(digest);
      if (pending_.size() < kInsertRows) return {};
      sqlite3_stmt* stmt = many_.get();
      sqlite3_reset(stmt);
      sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(version_));
      for (std::size_t i = 0; i < kInsertRows; ++i) {
        sqlite3_bind_blob(stmt, static_cast<int>(i + 2), pending_[i].bytes.data(), Digest::kSize,
                          SQLITE_STATIC);
      }
      const int rc = sqlite3_step(stmt);
      sqlite3_reset(stmt);
      if (rc != SQLITE_DONE) {
        return std::unexpected(state_.error(
            "adding " + pending_.front().hex() + " .. " + pending_.back().hex(), rc));
      }
      pending_.clear();
      return {};
    }
    Result<void> flush() {
      for (const Digest& digest : pending_) {
        sqlite3_stmt* stmt = state_.insert.get();
        sqlite3_reset(stmt);
        sqlite3_bind_blob(stmt, 1, digest.bytes.data(), Digest::kSize, SQLITE_STATIC);
        sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(version_));
        const int rc = sqlite3_step(stmt);
        sqlite3_reset(stmt);
        if (rc != SQLITE_DONE) return std::unexpected(state_.error("adding " + digest.hex(), rc));
      }
      pending_.clear();
      return {};
    }

   private:
    State& state_;
    std::uint64_t version_;
    Stmt many_;
    std::vector<Digest> pending_;
  };

  // The body of add/remove: one write transaction, one new version.
  Result<CatalogChange> change(bool adding,
                               const std::function<Result<std::size_t>(std::span<Digest>)>& next) {
    if (options.read_only) {
      return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": opened read-only");
    }
    const std::string_view op = adding ? "add" : "remove";
    // IMMEDIATE takes the write lock now, so a competing writer is reported
    // before any input is read.
    if (auto begun = exec("BEGIN IMMEDIATE", "starting a write transaction"); !begun)
      return std::unexpected(begun.error());
    auto result = [&]() -> Result<CatalogChange> {
      auto latest_now = latest_version();
      if (!latest_now) return std::unexpected(latest_now.error());
      CatalogChange change;
      change.version = *latest_now + 1;
      // The new version's content: the previous one's, plus each digest
      // added, minus each removed (the fingerprint's algebra).
      auto previous = kept_content(*latest_now);
      if (!previous) return std::unexpected(previous.error());
      if (!*previous) {
        return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": damaged: version " +
                                             version_text(*latest_now) + " has no row");
      }
      CatalogContent next_content = **previous;
      // An add into a table without a row (a new catalog) asks nothing:
      // every digest of the run is absent (read again for each run: the
      // next one may repeat what this one added).
      bool ask = !adding;
      // The digests to insert, in key order, kInsertRows to a statement.
      Inserter inserter(*this, change.version);
      if (adding) {
        if (auto ready = inserter.prepare(); !ready) return std::unexpected(ready.error());
      }
      // The input in runs of up to kSortRun digests, each sorted whole and
      // written in key order (kSortRun).
      std::vector<Digest> run;
      const std::size_t run_digests = sort_run_digests();
      for (bool more = true; more;) {
        run.clear();
        while (run.size() < run_digests) {
          const std::size_t at = run.size();
          run.resize(at + std::min(kChunk, run_digests - at));
          auto count = next(std::span<Digest>(run).subspan(at));
          if (!count) return std::unexpected(count.error());
          run.resize(at + *count);
          if (*count == 0) {
            more = false;
            break;
          }
        }
        std::ranges::sort(run);
        if (!ask && !run.empty()) {
          auto any = has_any_artifact();
          if (!any) return std::unexpected(any.error());
          ask = *any;
        }
        const Digest* before = nullptr;
        for (const Digest& digest : run) {
          ++change.requested;
          // A repeat within the run: present (or absent, removing) since
          // the one before it.
          if (before != nullptr && *before == digest) {
            ++change.unchanged;
            continue;
          }
          before = &digest;
          if (adding) {
            if (ask) {
              auto present = lookup(live.get(), digest, 0);
              if (!present) return std::unexpected(present.error());
              if (*present) {
                ++change.unchanged;
                continue;
              }
            }
            if (auto added = inserter.add(digest); !added) return std::unexpected(added.error());
            ++change.changed;
            next_content.fingerprint += ContentFingerprint::of(digest);
          } else {
            sqlite3_stmt* stmt = close.get();
            sqlite3_reset(stmt);
            sqlite3_bind_blob(stmt, 1, digest.bytes.data(), Digest::kSize, SQLITE_STATIC);
            sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(change.version));
            const int rc = sqlite3_step(stmt);
            sqlite3_reset(stmt);
            if (rc != SQLITE_DONE) return std::unexpected(error("removing " + digest.hex(), rc));
            if (sqlite3_changes(db.get()) > 0) {
              ++change.changed;
              next_content.fingerprint -= ContentFingerprint::of(digest);
            } else {
              ++change.unchanged;
            }
          }
        }
        // The run's last rows, before the next run's lookups (which must
        // see them).
        if (auto flushed = inserter.flush(); !flushed) return std::unexpected(flushed.error());
      }
      sqlite3_stmt* stmt = version.get();
      sqlite3_reset(stmt);
      sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(change.version));
      sqlite3_bind_text(stmt, 2, op.data(), static_cast<int>(op.size()), SQLITE_STATIC);
      sqlite3_bind_int64(stmt, 3, adding ? static_cast<sqlite3_int64>(change.changed) : 0);
      sqlite3_bind_int64(stmt, 4, adding ? 0 : static_cast<sqlite3_int64>(change.changed));
      // A remove changes only digests that are present: never below zero.
      next_content.item_count = adding ? next_content.item_count + change.changed
                                       : next_content.item_count - change.changed;
      const auto fingerprint = next_content.fingerprint.bytes();
      sqlite3_bind_int64(stmt, 5, static_cast<sqlite3_int64>(next_content.item_count));
      sqlite3_bind_blob(stmt, 6, fingerprint.data(), static_cast<int>(fingerprint.size()),
                        SQLITE_STATIC);
      const int rc = sqlite3_step(stmt);
      sqlite3_reset(stmt);
      if (rc != SQLITE_DONE)
        return std::unexpected(error("recording version " + version_text(change.version), rc));
      if (auto done = exec("COMMIT", "committing version " + version_text(change.version)); !done) {
        return std::unexpected(done.error());
      }
      return change;
    }();
    if (!result) rollback();
    return result;
  }
};

SqliteCatalog::SqliteCatalog(std::unique_ptr<State> state) : state_(std::move(state)) {}
SqliteCatalog::SqliteCatalog(SqliteCatalog&&) noexcept = default;
SqliteCatalog& SqliteCatalog::operator=(SqliteCatalog&&) noexcept = default;
SqliteCatalog::~SqliteCatalog() = default;

const std::filesystem::path& SqliteCatalog::path() const noexcept { return state_->path; }

std::int64_t SqliteCatalog::schema_version() const noexcept { return state_->schema; }

const std::optional<CatalogId>& SqliteCatalog::catalog_id() const noexcept {
  return state_->catalog_id;
}

std::optional<CatalogBinding> SqliteCatalog::catalog_binding() const {
  if (state_->catalog_id) return CatalogBinding{*state_->catalog_id, "catalog " + path().string()};
  return CatalogBinding{CatalogId{}, "catalog " + path().string() +
                                         " (schema 1, opened read-only: no catalog id yet; "
                                         "`abf catalog upgrade` gives it one)"};
}

Result<SqliteCatalog> SqliteCatalog::create(const std::filesystem::path& path) {
  const auto exists_error = [&] {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": already exists; it is never overwritten");
  };
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) return exists_error();  // a link included
  // The catalog is built in a private folder made beside it (mkdtemp: a new
  // name, mode 0700), so nothing planted can be followed or overwritten: not
  // the database, nor the journal and WAL files SQLite makes next to it.
  // Then it is renamed into place without replacing anything, and the folder
  // removed: a failed init leaves no half-made catalog.
  auto id = CatalogId::generate();
  if (!id) return std::unexpected(id.error());
  const std::filesystem::path folder =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string pattern =
      (folder / ("." + path.filename().string().substr(0, NAME_MAX - 13) + ".init.XXXXXX"))
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": cannot create a private folder in '" + folder.string() +
                                         "': " + std::strerror(errno));
  }
  const std::filesystem::path private_folder = pattern;
  struct RemoveFolder {
    std::filesystem::path path;
    ~RemoveFolder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_folder{private_folder};
  const std::filesystem::path temp = private_folder / "catalog.db";
  {
    sqlite3* raw = nullptr;
    const int rc =
        sqlite3_open_v2(temp.c_str(), &raw,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    Db db(raw);
    if (rc != SQLITE_OK) {
      return std::unexpected(catalog_error(path, "creating the database", db.get(), rc));
    }
    sqlite3_extended_result_codes(db.get(), 1);
    const std::string sql = create_schema_sql(*id);
    int exec_rc = sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, nullptr);
    if (exec_rc == SQLITE_OK) {
      // WAL, kept in the file's header: readers never wait for a writer, and
      // a killed writer leaves nothing a reader must roll back (kWalSql).
      exec_rc = sqlite3_exec(db.get(), kWalSql, nullptr, nullptr, nullptr);
    }
    if (exec_rc == SQLITE_OK) {
      // Everything into the database file itself (and synced), so the file
      // alone is the catalog when it is renamed.
      exec_rc =
          sqlite3_exec(db.get(), "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
    }
    if (exec_rc != SQLITE_OK) {
      return std::unexpected(catalog_error(path, "creating the schema", db.get(), exec_rc));
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(private_folder / "catalog.db-wal", ec) &&
      std::filesystem::file_size(private_folder / "catalog.db-wal", ec) != 0) {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": cannot create: the new database kept a WAL");
  }
  // RENAME_NOREPLACE: an existing name (a file, or a link planted since the
  // check above) stays as it is. Where the filesystem lacks it, link(2),
  // which never replaces either.
  int moved = ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (moved != 0 && (errno == EINVAL || errno == ENOSYS)) {
    moved = ::link(temp.c_str(), path.c_str());
  }
  if (moved != 0) {
    if (errno == EEXIST) return exists_error();
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": cannot create: " + std::strerror(errno));
  }
  // The new name is durable once its folder is.
  if (const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return open(path);
}

Result<SqliteCatalog> SqliteCatalog::open(const std::filesystem::path& path,
                                          const CatalogOpenOptions& options) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": no such file (create one with `abf catalog init`)");
  }
  if (std::filesystem::is_directory(status)) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": is a directory");
  }
  // SQLite opens whatever the name is: a FIFO made every reader wait
  // forever for a writer, and a device (/dev/null) read as an empty
  // database. A link is followed (status), to what it names.
  if (!std::filesystem::is_regular_file(status)) {
    const auto kind = status.type();
    const char* what = kind == std::filesystem::file_type::fifo        ? "a FIFO"
                       : kind == std::filesystem::file_type::character ? "a character device"
                       : kind == std::filesystem::file_type::block     ? "a block device"
                       : kind == std::filesystem::file_type::socket    ? "a socket"
                                                                       : "not a regular file";
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": is " + std::string(what) + ", not a database file");
  }
  auto state = std::make_unique<State>();
  state->path = path;
  state->options = options;
  // Is it an abf catalog? Reading the header also reports "not a database"
  // and "locked" here, at open. A read-only connection cannot roll back the
  // hot journal a writer killed mid-change left (a catalog still in rollback
  // mode: made before WAL and not opened for writing since); SQLite answers
  // SQLITE_READONLY_ROLLBACK, and the journal is rolled back once by a
  // read-write connection that only reads, then the read-only one retries.
  auto id = state->connect_and_read_application_id();
  if (!id && options.read_only && is_readonly_recovery(id.error().rc)) {
    if (auto recovered = roll_back_hot_journal(path, options.busy_timeout_ms); !recovered) {
      return std::unexpected(recovered.error());
    }
    id = state->connect_and_read_application_id();
  }
  if (!id) return std::unexpected(state->error(id.error().what, id.error().rc));
  if (*id != kApplicationId) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": a SQLite database, but not an abf catalog "
                                         "(application_id " +
                                         std::to_string(*id) + ", expected " +
                                         std::to_string(kApplicationId) + ")");
  }
  sqlite3* db = state->db.get();
  auto schema = read_schema_version(db, path);
  if (!schema) return std::unexpected(schema.error());
  const bool known = *schema == kSchemaWithoutCatalogId || *schema == kSchemaWithoutContent ||
                     *schema == kCatalogSchemaVersion;
  if (!known) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": schema version " +
                                         std::to_string(*schema) +
                                         ", but this abf reads schema versions 1 to " +
                                         std::to_string(kCatalogSchemaVersion));
  }
  if (!options.read_only) {
    if (auto wal = state->use_wal(); !wal) return std::unexpected(wal.error());
    if (*schema != kCatalogSchemaVersion) {
      auto upgraded = state->upgrade();
      if (!upgraded) return std::unexpected(upgraded.error());
      schema = kCatalogSchemaVersion;
    }
  }
  if (*schema == kCatalogSchemaVersion && !options.read_only) {
    if (auto indexed = state->exec(kAddedIndexSql, "creating the index of added versions");
        !indexed) {
      return std::unexpected(indexed.error());
    }
  }
  if (*schema != kSchemaWithoutCatalogId) {
    auto id = read_catalog_id(db, path);
    if (!id) return std::unexpected(id.error());
    state->catalog_id = *id;
  }
  state->schema = *schema;
  const std::string cache =
      "PRAGMA cache_size = -" + std::to_string(std::max(1, options.cache_mib) * 1024);
  if (auto ok = state->exec(cache.c_str(), "setting the page cache"); !ok)
    return std::unexpected(ok.error());
  for (auto [slot, sql] : std::array<std::pair<Stmt State::*, const char*>, 8>{{
           {&State::exists, kExistsSql},
           {&State::live, kLiveSql},
           {&State::insert, kInsertSql},
           {&State::close, kCloseSql},
           {&State::latest, kLatestSql},
           {&State::version, kVersionSql},
           {&State::content, kContentSql},
           {&State::schema_now, kSchemaSql},
       }}) {
    // An older schema (read-only) lacks the content columns; its contents
    // are walked instead (content_at_version), and it is never written.
    if (state->schema != kCatalogSchemaVersion &&
        (slot == &State::version || slot == &State::content)) {
      continue;
    }
    auto stmt = state->prepare(sql);
    if (!stmt) return std::unexpected(stmt.error());
    (*state).*slot = std::move(*stmt);
  }
  return SqliteCatalog(std::move(state));
}

namespace {
// Digests in memory as binary records, so the span forms share the readers'.
DigestReader reader_of(std::span<const Digest> digests) {
  return DigestReader::from_memory(
      std::string_view(reinterpret_cast<const char*>(digests.data()), digests.size_bytes()),
      InputFormat::kBinary, "<digests>");
}
}  // namespace

Result<CatalogChange> SqliteCatalog::add(std::span<const Digest> digests) {
  auto reader = reader_of(digests);
  return add(reader);
}

Result<CatalogChange> SqliteCatalog::add(DigestReader& input) {
  const std::lock_guard lock(state_->mutex);
  return state_->change(true, [&](std::span<Digest> out) { return input.read(out); });
}

Result<CatalogChange> SqliteCatalog::remove(std::span<const Digest> digests) {
  auto reader = reader_of(digests);
  return remove(reader);
}

Result<CatalogChange> SqliteCatalog::remove(DigestReader& input) {
  const std::lock_guard lock(state_->mutex);
  return state_->change(false, [&](std::span<Digest> out) { return input.read(out); });
}

Result<bool> SqliteCatalog::exists_at_version(const Digest& digest, std::uint64_t catalog_version) {
  const std::lock_guard lock(state_->mutex);
  return state_->lookup(state_->exists.get(), digest, catalog_version);
}

Result<void> SqliteCatalog::exists_at_version(std::span<const Digest> digests,
                                              std::uint64_t catalog_version,
                                              std::span<bool> exists) {
  if (exists.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "catalog " + state_->path.string() +
                                                 ": answer span holds " +
                                                 std::to_string(exists.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  if (digests.empty()) return {};
  std::vector<std::uint32_t> order;
  if (digests.size() >= kSortThreshold) {
    order.resize(digests.size());
    std::iota(order.begin(), order.end(), 0u);
    std::ranges::sort(order, [&](std::uint32_t a, std::uint32_t b) {
      return digests[a].bytes < digests[b].bytes;
    });
  }
  const std::lock_guard lock(state_->mutex);
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  for (std::size_t j = 0; j < digests.size(); ++j) {
    const std::size_t i = order.empty() ? j : order[j];
    auto found = state_->lookup(state_->exists.get(), digests[i], catalog_version);
    if (!found) {
      state_->rollback();
      return std::unexpected(found.error());
    }
    exists[i] = *found;
  }
  if (auto done = state_->exec("COMMIT", "ending a read transaction"); !done) {
    state_->rollback();
    return std::unexpected(done.error());
  }
  return {};
}

Result<std::uint64_t> SqliteCatalog::latest_version() {
  const std::lock_guard lock(state_->mutex);
  return state_->latest_version();
}

Result<HeadRecord> SqliteCatalog::head_record() {
  const std::lock_guard lock(state_->mutex);
  if (auto same = state_->check_same_file(); !same) return std::unexpected(same.error());
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  auto result = [&]() -> Result<HeadRecord> {
    auto latest = state_->latest_version();
    if (!latest) return std::unexpected(latest.error());
    HeadRecord record{.version = *latest, .content = std::nullopt, .no_content_reason = {}};
    // The schema as the file has it now, not as it was opened: a writer may
    // have upgraded it since (then its contents are read from now on), or
    // an older backup may have been restored into it (then none are).
    sqlite3_stmt* schema_stmt = state_->schema_now.get();
    sqlite3_reset(schema_stmt);
    const int schema_rc = sqlite3_step(schema_stmt);
    const std::int64_t schema_now =
        schema_rc == SQLITE_ROW ? sqlite3_column_int64(schema_stmt, 0) : 0;
    sqlite3_reset(schema_stmt);
    if (schema_rc != SQLITE_ROW) {
      return std::unexpected(state_->error(
          "reading the schema version", schema_rc == SQLITE_DONE ? SQLITE_CORRUPT : schema_rc));
    }
    // Only schema 3 records contents; an older catalog (opened read-only)
    // would have to walk its digests, too slow for every request.
    if (schema_now != kCatalogSchemaVersion) {
      record.no_content_reason =
          "catalog " + state_->path.string() + " is at schema version " +
          std::to_string(schema_now) +
          ", which records no content per version, so a history rewritten under a "
          "long-lived reader (a backup restored, then advanced again) cannot be noticed; "
          "upgrade it with `abf catalog upgrade --db " + state_->path.string() +
          "` (or any `abf catalog add`/`remove`)";
      return record;
    }
    if (state_->content == nullptr) {
      auto prepared = state_->prepare(kContentSql);
      if (!prepared) return std::unexpected(prepared.error());
      state_->content = std::move(*prepared);
    }
    auto kept = state_->kept_content(*latest);
    if (!kept) return std::unexpected(kept.error());
    record.content = *kept;
    return record;
  }();
  state_->rollback();  // a read: nothing to commit
  return result;
}

namespace {
// Binds (after, upto] to ?1 and ?2.
void bind_range(sqlite3_stmt* stmt, std::uint64_t after, std::uint64_t upto) {
  sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(after));
  sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(upto));
}
}  // namespace

Result<VersionChanges> SqliteCatalog::changes_between(std::uint64_t after, std::uint64_t upto) {
  const std::lock_guard lock(state_->mutex);
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  auto result = [&]() -> Result<VersionChanges> {
    if (auto ok = state_->check_range(after, upto); !ok) return std::unexpected(ok.error());
    auto stmt = state_->prepare(kChangesSql);
    if (!stmt) return std::unexpected(stmt.error());
    bind_range(stmt->get(), after, upto);
    const int rc = sqlite3_step(stmt->get());
    if (rc != SQLITE_ROW) return std::unexpected(state_->error("reading version counts", rc));
    return VersionChanges{
        .versions = upto - after,
        .added = static_cast<std::uint64_t>(sqlite3_column_int64(stmt->get(), 0)),
        .removed = static_cast<std::uint64_t>(sqlite3_column_int64(stmt->get(), 1))};
  }();
  state_->rollback();  // a read transaction: nothing to commit
  return result;
}

Result<void> SqliteCatalog::for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                                  const DigestSink& sink, std::size_t chunk_size) {
  if (chunk_size == 0) chunk_size = kChunk;
  const std::lock_guard lock(state_->mutex);
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  auto result = [&]() -> Result<void> {
    if (auto ok = state_->check_range(after, upto); !ok) return ok;
    auto stmt = state_->prepare(kAddedSql);
    if (!stmt) return std::unexpected(stmt.error());
    bind_range(stmt->get(), after, upto);
    return state_->stream_digests(stmt->get(), sink, chunk_size);
  }();
  state_->rollback();  // a read transaction: nothing to commit
  return result;
}

Result<void> SqliteCatalog::for_each_digest_at_version(
    std::uint64_t catalog_version, const std::function<Result<void>(std::span<const Digest>)>& sink,
    std::size_t chunk_size) {
  if (chunk_size == 0) chunk_size = kChunk;
  const std::lock_guard lock(state_->mutex);
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  auto result = [&]() -> Result<void> {
    auto latest = state_->latest_version();
    if (!latest) return std::unexpected(latest.error());
    if (catalog_version > *latest) {
      return fail(ErrorCode::kInvalidArgument, "catalog " + state_->path.string() + ": version " +
                                                   version_text(catalog_version) +
                                                   " does not exist (latest is " +
                                                   version_text(*latest) + ")");
    }
    auto stmt = state_->prepare(kWalkSql);
    if (!stmt) return std::unexpected(stmt.error());
    sqlite3_bind_int64(stmt->get(), 1, static_cast<sqlite3_int64>(catalog_version));
    return state_->stream_digests(stmt->get(), sink, chunk_size);
  }();
  if (!result) {
    state_->rollback();
    return result;
  }
  if (auto done = state_->exec("COMMIT", "ending a read transaction"); !done) {
    state_->rollback();
    return done;
  }
  return {};
}

Result<std::uint64_t> SqliteCatalog::count_at_version(std::uint64_t catalog_version) {
  const std::lock_guard lock(state_->mutex);
  auto latest = state_->latest_version();
  if (!latest) return std::unexpected(latest.error());
  if (catalog_version > *latest) {
    return fail(ErrorCode::kInvalidArgument,
                "catalog " + state_->path.string() + ": version " + version_text(catalog_version) +
                    " does not exist (latest is " + version_text(*latest) + ")");
  }
  auto stmt = state_->prepare(kCountSql);
  if (!stmt) return std::unexpected(stmt.error());
  sqlite3_bind_int64(stmt->get(), 1, static_cast<sqlite3_int64>(catalog_version));
  const int rc = sqlite3_step(stmt->get());
  if (rc != SQLITE_ROW) return std::unexpected(state_->error("counting digests", rc));
  return static_cast<std::uint64_t>(sqlite3_column_int64(stmt->get(), 0));
}

Result<CatalogContent> SqliteCatalog::content_at_version(std::uint64_t catalog_version) {
  const std::lock_guard lock(state_->mutex);
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  auto result = state_->content_locked(catalog_version);
  state_->rollback();  // a read: nothing to commit
  return result;
}

Result<std::vector<Digest>> SqliteCatalog::sample_at_version(std::uint64_t catalog_version,
                                                             std::size_t count) {
  const std::lock_guard lock(state_->mutex);
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  auto result = [&]() -> Result<std::vector<Digest>> {
    auto content = state_->content_locked(catalog_version);
    if (!content) return std::unexpected(content.error());
    std::vector<Digest> out;
    if (content->item_count == 0 || count == 0) return out;
    if (content->item_count <= count) {
      auto walk = state_->prepare(kWalkSql);
      if (!walk) return std::unexpected(walk.error());
      sqlite3_bind_int64(walk->get(), 1, static_cast<sqlite3_int64>(catalog_version));
      for (int rc = sqlite3_step(walk->get()); rc != SQLITE_DONE; rc = sqlite3_step(walk->get())) {
        if (rc != SQLITE_ROW) return std::unexpected(state_->error("reading digests", rc));
        auto digest = state_->column_digest(walk->get(), 0);
        if (!digest) return std::unexpected(digest.error());
        out.push_back(*digest);
      }
      return out;
    }
    auto seek = state_->prepare(kSeekSql);
    if (!seek) return std::unexpected(seek.error());
    std::random_device entropy;
    std::mt19937_64 rng((static_cast<std::uint64_t>(entropy()) << 32) | entropy());
    const auto first_at_or_after = [&](const Digest& key) -> Result<std::optional<Digest>> {
      sqlite3_reset(seek->get());
      sqlite3_bind_blob(seek->get(), 1, key.bytes.data(), Digest::kSize, SQLITE_TRANSIENT);
      sqlite3_bind_int64(seek->get(), 2, static_cast<sqlite3_int64>(catalog_version));
      const int rc = sqlite3_step(seek->get());
      if (rc == SQLITE_DONE) return std::optional<Digest>{};
      if (rc != SQLITE_ROW) return std::unexpected(state_->error("sampling digests", rc));
      auto digest = state_->column_digest(seek->get(), 0);
      if (!digest) return std::unexpected(digest.error());
      return std::optional<Digest>{*digest};
    };
    for (std::size_t i = 0; i < count; ++i) {
      Digest key;
      for (std::size_t b = 0; b < Digest::kSize; b += 8) {
        const std::uint64_t word = rng();
        std::memcpy(key.bytes.data() + b, &word, 8);
      }
      auto found = first_at_or_after(key);
      if (!found) return std::unexpected(found.error());
      if (!*found) found = first_at_or_after(Digest{});  // past the last: wrap around
      if (!found) return std::unexpected(found.error());
      if (*found && std::ranges::find(out, **found) == out.end()) out.push_back(**found);
    }
    return out;
  }();
  state_->rollback();  // a read: nothing to commit
  return result;
}

Result<CatalogStats> SqliteCatalog::stats() {
  const std::lock_guard lock(state_->mutex);
  CatalogStats stats;
  stats.schema_version = state_->schema;
  stats.catalog_id = state_->catalog_id;
  if (auto begun = state_->exec("BEGIN", "starting a read transaction"); !begun) {
    return std::unexpected(begun.error());
  }
  const auto scalar = [&](const char* sql) -> Result<std::uint64_t> {
    auto stmt = state_->prepare(sql);
    if (!stmt) return std::unexpected(stmt.error());
    const int rc = sqlite3_step(stmt->get());
    if (rc != SQLITE_ROW) return std::unexpected(state_->error("reading statistics", rc));
    return static_cast<std::uint64_t>(sqlite3_column_int64(stmt->get(), 0));
  };
  auto result = [&]() -> Result<void> {
    const std::pair<std::uint64_t*, const char*> queries[] = {
        {&stats.latest_version, kLatestSql},
        {&stats.version_count, "SELECT COUNT(*) FROM versions"},
        {&stats.live_artifacts, "SELECT COUNT(*) FROM artifacts WHERE removed_version IS NULL"},
        {&stats.artifact_rows, "SELECT COUNT(*) FROM artifacts"},
        {&stats.removed_rows, "SELECT COUNT(*) FROM artifacts WHERE removed_version IS NOT NULL"},
    };
    for (const auto& [field, sql] : queries) {
      auto value = scalar(sql);
      if (!value) return std::unexpected(value.error());
      *field = *value;
    }
    auto content = state_->content_locked(stats.latest_version);
    if (!content) return std::unexpected(content.error());
    stats.latest_fingerprint = content->fingerprint;
    return {};
  }();
  state_->rollback();
  if (!result) return std::unexpected(result.error());
  std::error_code ec;
  const auto size = std::filesystem::file_size(state_->path, ec);
  stats.file_bytes = ec ? 0 : size;
  return stats;
}

namespace {

// Fills `builder` (a FilterBuilder or FilterSetBuilder made from
// options_for(catalog, ...)) with the catalog's digests at `catalog_version`
// and finishes it: refused for a catalog without an id, or one holding more
// digests than the spec expects.
template <class Builder>
auto fill_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version, const BloomSpec& spec,
                       Result<Builder> builder, Backend backend)
    -> decltype(std::move(*builder).finish()) {
  if (!builder) return std::unexpected(builder.error());
  if (!catalog.catalog_id()) {
    return fail(ErrorCode::kCatalog,
                "catalog " + catalog.path().string() +
                    ": schema 1, opened read-only, has no catalog id yet, so its snapshot would "
                    "belong to no catalog; run `abf catalog upgrade --db " +
                    catalog.path().string() + "` first");
  }
  auto count = catalog.count_at_version(catalog_version);
  if (!count) return std::unexpected(count.error());
  if (*count > spec.expected_item_count) {
    return fail(ErrorCode::kCapacityExceeded, "catalog " + catalog.path().string() + " holds " +
                                                  std::to_string(*count) + " digests at version " +
                                                  version_text(catalog_version) +
                                                  ", more than the expected item count " +
                                                  std::to_string(spec.expected_item_count));
  }
  auto walked = catalog.for_each_digest_at_version(
      catalog_version, [&](std::span<const Digest> chunk) { return builder->add(chunk, backend); });
  if (!walked) return std::unexpected(walked.error());
  return std::move(*builder).finish();
}

BuildOptions options_for(const SqliteCatalog& catalog, std::uint64_t catalog_version,
                         const std::optional<Key>& key,
                         std::uint32_t protocol = BuildOptions::kProtocolByKey) {
  BuildOptions options;
  options.catalog_version = catalog_version;
  options.catalog_id = catalog.catalog_id().value_or(CatalogId{});
  options.key = key;
  options.protocol = protocol != BuildOptions::kProtocolByKey
                         ? protocol
                         : (key ? probe::kProtocolKeyed : probe::kProtocolUnkeyed);  // classic
  return options;
}

}  // namespace

Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, const std::optional<Key>& key,
                                         Backend backend) {
  return fill_from_catalog(catalog, catalog_version, spec,
                           FilterBuilder::create(spec, options_for(catalog, catalog_version, key)),
                           backend);
}

Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, const std::optional<Key>& key,
                                         std::uint32_t protocol, Backend backend) {
  return fill_from_catalog(
      catalog, catalog_version, spec,
      FilterBuilder::create(spec, options_for(catalog, catalog_version, key, protocol)), backend);
}

Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, Backend backend) {
  return build_filter_from_catalog(catalog, catalog_version, spec, std::nullopt, backend);
}

Result<Filter> advance_filter(const Filter& base, SqliteCatalog& catalog,
                              std::uint64_t catalog_version, const std::optional<Key>& key,
                              Backend backend) {
  const std::string where = "advancing the filter of catalog " + catalog.path().string() +
                            " version " + version_text(base.catalog_version()) + " to " +
                            version_text(catalog_version);
  if (!catalog.catalog_id() || base.catalog_id() != *catalog.catalog_id()) {
    return fail(ErrorCode::kInvalidArgument, where + ": the filter is of catalog " +
                                                 base.catalog_id().hex() + ", not of this one");
  }
  if (base.catalog_version() > catalog_version) {
    return fail(ErrorCode::kInvalidArgument, where + ": the filter is newer");
  }
  // The base must be what the catalog holds at its version now: after a
  // backup was restored and advanced again, the same version number holds
  // other digests, and adding the new history to the old bits would keep
  // what is gone (and miss nothing the check below would see).
  auto at_base = catalog.content_at_version(base.catalog_version());
  if (!at_base) return std::unexpected(at_base.error());
  if (at_base->item_count != base.inserted_item_count() ||
      (base.info().content_fingerprint &&
       !(*base.info().content_fingerprint == at_base->fingerprint))) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": the catalog's version " + version_text(base.catalog_version()) +
                    " no longer holds what the filter was built from (its history was "
                    "rewritten); only a full build is exact");
  }
  auto changes = catalog.changes_between(base.catalog_version(), catalog_version);
  if (!changes) return std::unexpected(changes.error());
  if (changes->removed != 0) {
    // A Bloom filter cannot forget a digest: only a full build is exact.
    return fail(ErrorCode::kInvalidArgument,
                where + ": " + std::to_string(changes->removed) +
                    " digests were removed since; only a full build drops them");
  }
  if (base.inserted_item_count() + changes->added > base.expected_item_count()) {
    return fail(ErrorCode::kCapacityExceeded,
                where + ": " + std::to_string(base.inserted_item_count()) + " + " +
                    std::to_string(changes->added) + " digests exceed the expected item count " +
                    std::to_string(base.expected_item_count()));
  }
  // The added digests in a filter of the same spec, key and labels, then
  // OR-ed with base's bits: the same positions a build of both sets sets.
  auto builder =
      FilterBuilder::create(base.info().spec, BuildOptions{.catalog_version = catalog_version,
                                                           .catalog_id = base.catalog_id(),
                                                           .key = key});
  if (!builder) return std::unexpected(builder.error());
  if (!(builder->info().scheme == base.scheme())) {
    return fail(key ? ErrorCode::kKeyMismatch : ErrorCode::kKeyRequired,
                where + ": the filter's hash scheme (protocol " +
                    std::to_string(base.hash_protocol_version()) +
                    ") is not the one this key (or no key) makes");
  }
  auto read = catalog.for_each_digest_added(
      base.catalog_version(), catalog_version,
      [&](std::span<const Digest> chunk) { return builder->add(chunk, backend); });
  if (!read) return std::unexpected(read.error());
  auto added = std::move(*builder).finish();
  if (!added) return std::unexpected(added.error());
  const std::span<const std::uint64_t> old_words = base.words();
  const std::span<const std::uint64_t> new_words = added->words();
  auto words = allocate_words(old_words.size());
  for (std::size_t i = 0; i < old_words.size(); ++i) words.get()[i] = old_words[i] | new_words[i];
  FilterInfo info = added->info();
  info.inserted_item_count = base.inserted_item_count() + added->inserted_item_count();
  // The fingerprint of a union of disjoint sets is the sum of theirs; a base
  // without one leaves the result without one (as a merge would).
  info.content_fingerprint =
      base.info().content_fingerprint && info.content_fingerprint
          ? std::optional(*base.info().content_fingerprint + *info.content_fingerprint)
          : std::nullopt;
  return Filter::from_words(info, std::move(words), old_words.size());
}

Result<FilterSet> build_filter_set_from_catalog(SqliteCatalog& catalog,
                                                std::uint64_t catalog_version,
                                                const BloomSpec& spec, std::uint32_t shard_count,
                                                const std::optional<Key>& key, Backend backend) {
  return fill_from_catalog(
      catalog, catalog_version, spec,
      FilterSetBuilder::create(spec, shard_count, options_for(catalog, catalog_version, key)),
      backend);
}

}  // namespace abf::service
