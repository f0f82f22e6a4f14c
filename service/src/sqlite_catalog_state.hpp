// SqliteCatalog's connection and what its files share (internal to
// service/src): the connection's state, the statements prepared at open,
// the error messages, and the one read transaction (State::read). Each job
// of the catalog has its own file:
//   sqlite_catalog_schema.cpp  the schema and its migrations (upgrade)
//   sqlite_catalog_open.cpp    create, open and recovery
//   sqlite_catalog_reads.cpp   the reads
//   sqlite_catalog_writes.cpp  add and remove
#pragma once

#include <sqlite3.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <expected>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "abf/service/sqlite_catalog.hpp"

namespace abf::service {
namespace sqlite_detail {

// PRAGMA application_id: "ABFC" — tells an abf catalog from any other SQLite
// database before a table is read.
inline constexpr std::int32_t kApplicationId = 0x41424643;
static_assert(kApplicationId == 1094862403);
// The schema version before catalog ids; opened, and upgraded by writers.
inline constexpr std::int64_t kSchemaWithoutCatalogId = 1;
// The schema version before per-version contents; opened, and upgraded by
// writers.
inline constexpr std::int64_t kSchemaWithoutContent = 2;
// Input is read, and digests are handed to a sink, in chunks of this many.
inline constexpr std::size_t kChunk = 65536;

// The statements every connection prepares at open (State's Stmt members).
inline constexpr const char* kExistsSql =
    "SELECT 1 FROM artifacts WHERE digest = ?1 AND added_version <= ?2 "
    "AND (removed_version IS NULL OR removed_version > ?2) LIMIT 1";
inline constexpr const char* kLiveSql =
    "SELECT 1 FROM artifacts WHERE digest = ?1 AND removed_version IS NULL LIMIT 1";
inline constexpr const char* kInsertSql =
    "INSERT INTO artifacts (digest, added_version) VALUES (?1, ?2)";
inline constexpr const char* kCloseSql =
    "UPDATE artifacts SET removed_version = ?2 WHERE digest = ?1 AND removed_version IS NULL";
inline constexpr const char* kLatestSql = "SELECT MAX(version) FROM versions";
// The schema version as the file has it now (head_record reads it with the
// head: a long-lived reader notices a catalog upgraded, or an older backup
// restored, under it).
inline constexpr const char* kSchemaSql = "SELECT version FROM abf_schema";
inline constexpr const char* kVersionSql =
    "INSERT INTO versions (version, operation, created_unix, added, removed, item_count, "
    "fingerprint) VALUES (?1, ?2, strftime('%s', 'now'), ?3, ?4, ?5, ?6)";
// Schema 3: what a version holds, as its row keeps it.
inline constexpr const char* kContentSql =
    "SELECT item_count, fingerprint FROM versions WHERE version = ?1";

struct StmtDeleter {
  void operator()(sqlite3_stmt* stmt) const noexcept { sqlite3_finalize(stmt); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

struct DbDeleter {
  void operator()(sqlite3* db) const noexcept { sqlite3_close_v2(db); }
};
using Db = std::unique_ptr<sqlite3, DbDeleter>;

inline std::string describe_rc(sqlite3* db, int rc) {
  const int primary = rc & 0xff;
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    return "database is locked by another connection (busy timeout expired)";
  }
  if (primary == SQLITE_NOTADB) return "file is not a SQLite database";
  if (db != nullptr && sqlite3_errcode(db) == rc) return sqlite3_errmsg(db);
  return sqlite3_errstr(rc);
}

// kIo for what the disk did (full, a read or write error), kCatalog else.
inline Error catalog_error(const std::filesystem::path& path, std::string_view what, sqlite3* db,
                           int rc) {
  const int primary = rc & 0xff;
  const ErrorCode code =
      primary == SQLITE_FULL || primary == SQLITE_IOERR ? ErrorCode::kIo : ErrorCode::kCatalog;
  return Error{code,
               "catalog " + path.string() + ": " + std::string(what) + ": " + describe_rc(db, rc)};
}

inline std::string version_text(std::uint64_t version) { return std::to_string(version); }

// A SQLite result code that is not SQLITE_OK.
struct SqliteFailure {
  int rc;
  const char* what;  // "opening", "reading the header"
};

// sqlite_catalog_schema.cpp.
// The schema of a new catalog whose id is `id`, in one transaction.
std::string create_schema_sql(const CatalogId& id);
// The one schema version of the database, read inside the caller's
// transaction, if any.
Result<std::int64_t> read_schema_version(sqlite3* db, const std::filesystem::path& path);
// The id a catalog of schema 2 or later keeps in abf_catalog.
Result<CatalogId> read_catalog_id(sqlite3* db, const std::filesystem::path& path);
// A schema this code opens: 1, 2 or kCatalogSchemaVersion.
bool known_schema(std::int64_t schema) noexcept;

}  // namespace sqlite_detail

struct SqliteCatalog::State {
  using Stmt = sqlite_detail::Stmt;

  std::filesystem::path path;
  CatalogOpenOptions options;
  sqlite_detail::Db db;
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
    return sqlite_detail::catalog_error(path, what, db.get(), rc);
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

  // Ends a transaction opened by a caller that failed; errors are moot then.
  void rollback() noexcept {
    if (sqlite3_get_autocommit(db.get()) == 0) {
      sqlite3_exec(db.get(), "ROLLBACK", nullptr, nullptr, nullptr);
    }
  }

  // The one read transaction: under the connection's lock, BEGIN, `work`
  // (a callable returning a Result), then ROLLBACK, whatever `work`
  // answered: a read has nothing to commit, and its answer stands (a
  // consistent view of one version even while another process writes).
  template <class Work>
  auto read(Work&& work) -> decltype(work()) {
    const std::lock_guard lock(mutex);
    if (auto begun = exec("BEGIN", "starting a read transaction"); !begun) {
      return std::unexpected(begun.error());
    }
    auto result = std::forward<Work>(work)();
    rollback();
    return result;
  }

  // --- open and recovery (sqlite_catalog_open.cpp) ---
  // Opens the connection (again, dropping an earlier one) and reads the
  // header's application id; a failure is SQLite's result code.
  std::expected<std::int64_t, sqlite_detail::SqliteFailure> connect_and_read_application_id();
  // A writer's connection: WAL and synchronous commits.
  Result<void> use_wal();
  // kCatalog when the path now names another file than the one opened.
  Result<void> check_same_file() const;

  // --- schema and migrations (sqlite_catalog_schema.cpp) ---
  // Schema 1 or 2 -> 3, in one write transaction.
  Result<void> upgrade();
  // The upgrade's pass: item_count and fingerprint of every version.
  Result<void> compute_every_content();
  // The index of the digests each version added, where it is missing.
  Result<void> create_added_index();

  // --- reads (sqlite_catalog_reads.cpp), inside the caller's transaction ---
  Result<std::uint64_t> latest_version();
  Result<void> check_range(std::uint64_t after, std::uint64_t upto);
  Result<void> stream_digests(sqlite3_stmt* stmt, const DigestSink& sink, std::size_t chunk_size);
  Result<bool> lookup(sqlite3_stmt* stmt, const Digest& digest, std::uint64_t version);
  Result<Digest> column_digest(sqlite3_stmt* stmt, int column) const;
  Result<CatalogContent> walk_content(std::uint64_t catalog_version);
  Result<std::optional<CatalogContent>> kept_content(std::uint64_t catalog_version);
  Result<CatalogContent> content_locked(std::uint64_t catalog_version);
  // kInvalidArgument unless `catalog_version` exists (<= the latest).
  Result<void> check_version(std::uint64_t catalog_version);

  // --- writes (sqlite_catalog_writes.cpp) ---
  class Inserter;
  Result<bool> has_any_artifact();
  // The body of add/remove: one write transaction, one new version.
  Result<CatalogChange> change(bool adding,
                               const std::function<Result<std::size_t>(std::span<Digest>)>& next);
};

}  // namespace abf::service
