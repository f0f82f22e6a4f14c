// SqliteCatalog's reads: point and batch lookups, the head, version ranges,
// walks and samples of a version, contents and statistics. Each read of more
// than one statement runs in one read transaction (State::read).
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sqlite_catalog_state.hpp"

namespace abf::service {

using namespace sqlite_detail;

namespace {

// Batch lookups sort their digests first when there are at least this many:
// walking the B-tree in key order keeps its pages hot in the CPU caches.
constexpr std::size_t kSortThreshold = 64;

// The first digest present at ?2 at or after the key ?1 (sample_at_version).
constexpr const char* kSeekSql =
    "SELECT digest FROM artifacts WHERE digest >= ?1 AND added_version <= ?2 "
    "AND (removed_version IS NULL OR removed_version > ?2) ORDER BY digest LIMIT 1";
// Every digest present at ?1, in key order.
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

// Binds (after, upto] to ?1 and ?2.
void bind_range(sqlite3_stmt* stmt, std::uint64_t after, std::uint64_t upto) {
  sqlite3_bind_int64(stmt, 1, static_cast<sqlite3_int64>(after));
  sqlite3_bind_int64(stmt, 2, static_cast<sqlite3_int64>(upto));
}

}  // namespace

Result<std::uint64_t> SqliteCatalog::State::latest_version() {
  sqlite3_stmt* stmt = latest.get();
  sqlite3_reset(stmt);
  const int rc = sqlite3_step(stmt);
  if (rc != SQLITE_ROW) return std::unexpected(error("reading the latest version", rc));
  const auto value = static_cast<std::uint64_t>(sqlite3_column_int64(stmt, 0));
  sqlite3_reset(stmt);
  return value;
}

// (after, upto] names versions that exist; inside the caller's transaction.
Result<void> SqliteCatalog::State::check_range(std::uint64_t after, std::uint64_t upto) {
  auto latest_now = latest_version();
  if (!latest_now) return std::unexpected(latest_now.error());
  if (after > upto || upto > *latest_now) {
    return fail(ErrorCode::kInvalidArgument, "catalog " + path.string() + ": no version range (" +
                                                 version_text(after) + ", " + version_text(upto) +
                                                 "] (latest is " + version_text(*latest_now) + ")");
  }
  return {};
}

// Steps `stmt`, whose first column is a digest, to the end, handing the
// digests to `sink` in chunks of `chunk_size`.
Result<void> SqliteCatalog::State::stream_digests(sqlite3_stmt* stmt, const DigestSink& sink,
                                                  std::size_t chunk_size) {
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
Result<bool> SqliteCatalog::State::lookup(sqlite3_stmt* stmt, const Digest& digest,
                                          std::uint64_t version) {
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
Result<Digest> SqliteCatalog::State::column_digest(sqlite3_stmt* stmt, int column) const {
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
Result<CatalogContent> SqliteCatalog::State::walk_content(std::uint64_t catalog_version) {
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
Result<std::optional<CatalogContent>> SqliteCatalog::State::kept_content(
    std::uint64_t catalog_version) {
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

Result<void> SqliteCatalog::State::check_version(std::uint64_t catalog_version) {
  auto latest_now = latest_version();
  if (!latest_now) return std::unexpected(latest_now.error());
  if (catalog_version > *latest_now) {
    return fail(ErrorCode::kInvalidArgument,
                "catalog " + path.string() + ": version " + version_text(catalog_version) +
                    " does not exist (latest is " + version_text(*latest_now) + ")");
  }
  return {};
}

// What `catalog_version` holds (inside the caller's transaction): kept
// (schema 3) or walked (older, read-only). kInvalidArgument if the version
// does not exist yet.
Result<CatalogContent> SqliteCatalog::State::content_locked(std::uint64_t catalog_version) {
  if (auto ok = check_version(catalog_version); !ok) return std::unexpected(ok.error());
  if (schema != kCatalogSchemaVersion) return walk_content(catalog_version);
  auto kept = kept_content(catalog_version);
  if (!kept) return std::unexpected(kept.error());
  if (!*kept) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": damaged: version " +
                                         version_text(catalog_version) + " has no row");
  }
  return **kept;
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
  return state_->read([&]() -> Result<void> {
    for (std::size_t j = 0; j < digests.size(); ++j) {
      const std::size_t i = order.empty() ? j : order[j];
      auto found = state_->lookup(state_->exists.get(), digests[i], catalog_version);
      if (!found) return std::unexpected(found.error());
      exists[i] = *found;
    }
    return {};
  });
}

Result<std::uint64_t> SqliteCatalog::latest_version() {
  const std::lock_guard lock(state_->mutex);
  return state_->latest_version();
}

Result<HeadRecord> SqliteCatalog::head_record() {
  return state_->read([&]() -> Result<HeadRecord> {
    if (auto same = state_->check_same_file(); !same) return std::unexpected(same.error());
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
      return std::unexpected(state_->error("reading the schema version",
                                           schema_rc == SQLITE_DONE ? SQLITE_CORRUPT : schema_rc));
    }
    // Only schema 3 records contents; an older catalog (opened read-only)
    // would have to walk its digests, too slow for every request.
    if (schema_now != kCatalogSchemaVersion) {
      record.no_content_reason =
          "catalog " + state_->path.string() + " is at schema version " +
          std::to_string(schema_now) +
          ", which records no content per version, so a history rewritten under a "
          "long-lived reader (a backup restored, then advanced again) cannot be noticed; "
          "upgrade it with `abf catalog upgrade --db " +
          state_->path.string() + "` (or any `abf catalog add`/`remove`)";
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
  });
}

Result<VersionChanges> SqliteCatalog::changes_between(std::uint64_t after, std::uint64_t upto) {
  return state_->read([&]() -> Result<VersionChanges> {
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
  });
}

Result<void> SqliteCatalog::for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                                  const DigestSink& sink, std::size_t chunk_size) {
  if (chunk_size == 0) chunk_size = kChunk;
  return state_->read([&]() -> Result<void> {
    if (auto ok = state_->check_range(after, upto); !ok) return ok;
    auto stmt = state_->prepare(kAddedSql);
    if (!stmt) return std::unexpected(stmt.error());
    bind_range(stmt->get(), after, upto);
    return state_->stream_digests(stmt->get(), sink, chunk_size);
  });
}

Result<void> SqliteCatalog::for_each_digest_at_version(
    std::uint64_t catalog_version, const std::function<Result<void>(std::span<const Digest>)>& sink,
    std::size_t chunk_size) {
  if (chunk_size == 0) chunk_size = kChunk;
  return state_->read([&]() -> Result<void> {
    if (auto ok = state_->check_version(catalog_version); !ok) return ok;
    auto stmt = state_->prepare(kWalkSql);
    if (!stmt) return std::unexpected(stmt.error());
    sqlite3_bind_int64(stmt->get(), 1, static_cast<sqlite3_int64>(catalog_version));
    return state_->stream_digests(stmt->get(), sink, chunk_size);
  });
}

Result<std::uint64_t> SqliteCatalog::count_at_version(std::uint64_t catalog_version) {
  return state_->read([&]() -> Result<std::uint64_t> {
    if (auto ok = state_->check_version(catalog_version); !ok) return std::unexpected(ok.error());
    auto stmt = state_->prepare(kCountSql);
    if (!stmt) return std::unexpected(stmt.error());
    sqlite3_bind_int64(stmt->get(), 1, static_cast<sqlite3_int64>(catalog_version));
    const int rc = sqlite3_step(stmt->get());
    if (rc != SQLITE_ROW) return std::unexpected(state_->error("counting digests", rc));
    return static_cast<std::uint64_t>(sqlite3_column_int64(stmt->get(), 0));
  });
}

Result<CatalogContent> SqliteCatalog::content_at_version(std::uint64_t catalog_version) {
  return state_->read([&] { return state_->content_locked(catalog_version); });
}

Result<std::vector<Digest>> SqliteCatalog::sample_at_version(std::uint64_t catalog_version,
                                                             std::size_t count) {
  return state_->read([&]() -> Result<std::vector<Digest>> {
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
  });
}

Result<CatalogStats> SqliteCatalog::stats() {
  CatalogStats stats;
  stats.schema_version = state_->schema;
  stats.catalog_id = state_->catalog_id;
  const auto scalar = [&](const char* sql) -> Result<std::uint64_t> {
    auto stmt = state_->prepare(sql);
    if (!stmt) return std::unexpected(stmt.error());
    const int rc = sqlite3_step(stmt->get());
    if (rc != SQLITE_ROW) return std::unexpected(state_->error("reading statistics", rc));
    return static_cast<std::uint64_t>(sqlite3_column_int64(stmt->get(), 0));
  };
  auto result = state_->read([&]() -> Result<void> {
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
  });
  if (!result) return std::unexpected(result.error());
  std::error_code ec;
  const auto size = std::filesystem::file_size(state_->path, ec);
  stats.file_bytes = ec ? 0 : size;
  return stats;
}
}  // namespace abf::service
