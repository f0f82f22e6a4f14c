// SqliteCatalog's writes: add and remove, each one write transaction making
// one new catalog version (sqlite_catalog.hpp).
#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sqlite_catalog_state.hpp"

namespace abf::service {

using namespace sqlite_detail;

namespace {

// The input is read in chunks of kChunk digests, and sorted and written in
// runs of up to this many (128 MiB): in key
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

// Rows of one multi-row INSERT (kInsertRows + 1 parameters; SQLite allows
// 32,766): add's statement overhead once per this many digests.
constexpr std::size_t kInsertRows = 128;
constexpr const char* kAnyArtifactSql = "SELECT 1 FROM artifacts LIMIT 1";

// Digests in memory as binary records, so the span forms share the readers'.
DigestReader reader_of(std::span<const Digest> digests) {
  return DigestReader::from_memory(
      std::string_view(reinterpret_cast<const char*>(digests.data()), digests.size_bytes()),
      InputFormat::kBinary, "<digests>");
}

}  // namespace

// Whether `artifacts` holds any row (inside the caller's transaction).
Result<bool> SqliteCatalog::State::has_any_artifact() {
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
class SqliteCatalog::State::Inserter {
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
      return std::unexpected(
          state_.error("adding " + pending_.front().hex() + " .. " + pending_.back().hex(), rc));
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
Result<CatalogChange> SqliteCatalog::State::change(
    bool adding, const std::function<Result<std::size_t>(std::span<Digest>)>& next) {
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
}  // namespace abf::service
