// SqliteCatalog's schema and its migrations: the SQL of a new catalog (schema
// 3), the reads of the schema version and catalog id, and the upgrade of a
// schema-1 or schema-2 catalog to schema 3 (sqlite_catalog.hpp).
#include <sqlite3.h>

#include <array>
#include <cstring>
#include <string>
#include <vector>

#include "sqlite_catalog_state.hpp"

namespace abf::service {

using namespace sqlite_detail;

namespace {

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
// Every interval ever recorded: the upgrade's one pass over the artifacts.
constexpr const char* kIntervalsSql =
    "SELECT digest, added_version, removed_version FROM artifacts";
constexpr const char* kVersionListSql = "SELECT version FROM versions ORDER BY version";
constexpr const char* kSetContentSql =
    "UPDATE versions SET item_count = ?2, fingerprint = ?3 WHERE version = ?1";

}  // namespace

namespace sqlite_detail {

std::string create_schema_sql(const CatalogId& id) {
  std::string sql(kCreateSchema);
  sql += kCreateCatalogTable;
  sql += "INSERT INTO abf_catalog (catalog_id) VALUES (X'" + id.hex() + "');\nCOMMIT;\n";
  return sql;
}

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

bool known_schema(std::int64_t schema) noexcept {
  return schema == kSchemaWithoutCatalogId || schema == kSchemaWithoutContent ||
         schema == kCatalogSchemaVersion;
}

}  // namespace sqlite_detail

// Schema 1 or 2 -> 3, in one write transaction that first re-reads the
// schema version (another writer may have upgraded the catalog meanwhile;
// then its work stands). From 1: a new random catalog id. From 1 or 2: the
// item count and fingerprint of every version, computed from the
// artifacts in one pass: each interval [added, removed) adds its digest's
// element at `added` and subtracts it at `removed`, and a version's
// content is the running sum of those changes up to it. Rows of
// `artifacts` are not touched; of `versions`, only the two new columns.
Result<void> SqliteCatalog::State::upgrade() {
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
    if (auto ok = exec(kAddContentColumns, "upgrading to schema 3 (adding version contents)"); !ok)
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
Result<void> SqliteCatalog::State::compute_every_content() {
  // Runs from open(), before the persistent statements are prepared.
  auto latest_stmt = prepare(kLatestSql);
  if (!latest_stmt) return std::unexpected(latest_stmt.error());
  const int latest_rc = sqlite3_step(latest_stmt->get());
  if (latest_rc != SQLITE_ROW) {
    return std::unexpected(error("reading the latest version", latest_rc));
  }
  const auto latest_now = std::optional<std::uint64_t>(sqlite3_column_int64(latest_stmt->get(), 0));
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

Result<void> SqliteCatalog::State::create_added_index() {
  return exec(kAddedIndexSql, "creating the index of added versions");
}

}  // namespace abf::service
