// Exact indexes of a catalog: building, binding, and the indexed store.
#include "abf/service/exact_index.hpp"

#include <algorithm>
#include <utility>

#include "catalog_reach.hpp"

namespace abf::service {

namespace {

// What an index of `catalog` at `version` carries in its header (the
// catalog's id and content there), with that content; kCatalog for a
// catalog without an id.
Result<std::pair<IndexIdentity, CatalogContent>> index_identity(SqliteCatalog& catalog,
                                                                std::uint64_t version,
                                                                const std::string& where) {
  if (!catalog.catalog_id()) {
    return fail(ErrorCode::kCatalog,
                where +
                    " has no catalog id yet (schema 1): open it for writing once "
                    "(abf catalog upgrade) so that an index can name it");
  }
  auto content = catalog.content_at_version(version);
  if (!content) return std::unexpected(content.error());
  IndexIdentity identity;
  identity.catalog_id = *catalog.catalog_id();
  identity.catalog_version = version;
  identity.content_fingerprint = content->fingerprint;
  return std::pair{identity, *content};
}

}  // namespace

Result<IndexBuildReport> build_index_from_catalog(SqliteCatalog& catalog,
                                                  std::uint64_t catalog_version,
                                                  const std::filesystem::path& path,
                                                  std::uint32_t block_digests) {
  const std::string where = "catalog " + catalog.path().string();
  auto identified = index_identity(catalog, catalog_version, where);
  if (!identified) return std::unexpected(identified.error());
  auto& [identity, content] = *identified;
  identity.block_digests = block_digests;
  auto writer = IndexWriter::create(path, identity, content.item_count);
  if (!writer) return std::unexpected(writer.error());
  ContentFingerprint streamed;
  std::uint64_t count = 0;
  auto walked = catalog.for_each_digest_at_version(
      catalog_version, [&](std::span<const Digest> chunk) -> Result<void> {
        if (count + chunk.size() > content.item_count) {
          return fail(ErrorCode::kCatalog,
                      where + ": version " + std::to_string(catalog_version) +
                          " holds more digests than its versions row records (" +
                          std::to_string(content.item_count) + "): a damaged catalog");
        }
        streamed += ContentFingerprint::of(chunk);
        count += chunk.size();
        return writer->add(chunk);
      });
  if (!walked) return std::unexpected(walked.error());
  if (count != content.item_count || streamed != content.fingerprint) {
    return fail(ErrorCode::kCatalog,
                where + ": version " + std::to_string(catalog_version) + " holds " +
                    std::to_string(count) + " digests with content fingerprint " + streamed.hex() +
                    ", but its versions row records " + std::to_string(content.item_count) +
                    " and " + content.fingerprint.hex() + ": a damaged catalog; no index written");
  }
  if (auto committed = writer->commit(); !committed) return std::unexpected(committed.error());
  return IndexBuildReport{catalog_version, count, streamed};
}

Result<IndexBuildReport> build_index_set_from_catalog(SqliteCatalog& catalog,
                                                      std::uint64_t catalog_version,
                                                      const std::filesystem::path& path,
                                                      std::uint32_t shard_count,
                                                      const IndexSetWriteOptions& options) {
  const std::string where = "catalog " + catalog.path().string();
  auto identified = index_identity(catalog, catalog_version, where);
  if (!identified) return std::unexpected(identified.error());
  auto& [identity, content] = *identified;
  identity.block_digests = options.block_digests;
  const std::uint64_t expected = content.item_count;
  const auto damaged = [&](std::uint64_t count) {
    return fail(ErrorCode::kCatalog,
                where + ": version " + std::to_string(catalog_version) + " holds " +
                    (count > expected ? "more than " + std::to_string(expected)
                                      : std::to_string(count)) +
                    " digests, but its versions row records " + std::to_string(expected) +
                    ": a damaged catalog; no index written");
  };
  auto written = write_index_set(
      path, identity, shard_count,
      [&](const IndexDigestSink& sink) -> Result<void> {
        std::uint64_t count = 0;
        auto walked = catalog.for_each_digest_at_version(
            catalog_version, [&](std::span<const Digest> chunk) -> Result<void> {
              count += chunk.size();
              if (count > expected) return damaged(count);
              return sink(chunk);
            });
        if (!walked) return walked;
        if (count != expected) return damaged(count);
        return {};
      },
      options);
  if (!written) {
    // A fingerprint other than the row's is the catalog's damage too.
    if (written.error().code == ErrorCode::kInvalidArgument &&
        written.error().message.find("add up to") != std::string::npos) {
      return fail(ErrorCode::kCatalog, where + ": version " + std::to_string(catalog_version) +
                                           ": " + written.error().message +
                                           " (its versions row): a damaged catalog; no index "
                                           "written");
    }
    return std::unexpected(written.error());
  }
  return IndexBuildReport{catalog_version, written->digest_count, written->fingerprint};
}

Result<void> check_index_binding(const IndexSet& index, std::string_view source,
                                 ArtifactRepository& catalog, bool verify_digests) {
  const auto binding = catalog.catalog_binding();
  if (!binding) return {};
  const std::string named = "index " + std::string(source);
  const std::string theirs = binding->name + " (catalogId " + binding->id.hex() + ")";
  const std::uint64_t version = index.catalog_version();
  const std::string hint = "; rebuild it: abf index --db DB --version " + std::to_string(version);
  if (index.catalog_id().is_zero()) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " names no catalog (catalogId " + index.catalog_id().hex() +
                    "), so it cannot answer for " + theirs + "; refused" + hint);
  }
  if (index.catalog_id() != binding->id) {
    return fail(ErrorCode::kCatalogMismatch, named + " is of catalog " + index.catalog_id().hex() +
                                                 ", not of " + theirs +
                                                 ": its answers would be wrong there; refused");
  }
  auto content = content_in_reach(catalog, version, named, binding->name, "");
  if (!content) return std::unexpected(content.error());
  const auto fingerprint = index.content_fingerprint();
  if (!fingerprint) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " carries no content fingerprint, so nothing shows that it holds what " +
                    binding->name + " holds at version " + std::to_string(version) + "; refused" +
                    hint);
  }
  if (*fingerprint != content->fingerprint || index.size() != content->item_count) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " does not hold what " + binding->name + " holds at catalog version " +
                    std::to_string(version) + ": the index's content fingerprint is " +
                    fingerprint->hex() + " over " + std::to_string(index.size()) +
                    " digests, the catalog's " + content->fingerprint.hex() + " over " +
                    std::to_string(content->item_count) +
                    (index.size() < content->item_count && index.shard_count() == 1
                         ? " (one shard of an index set? pass the set's manifest; or a catalog "
                           "restored from a backup and changed since?); refused"
                         : " (a catalog restored from a backup and changed since?); refused") +
                    hint);
  }
  if (!verify_digests) return {};
  if (const auto actual = index.digests_fingerprint(); actual != *fingerprint) {
    return fail(ErrorCode::kCatalogMismatch,
                named + "'s digests add up to content fingerprint " + actual.hex() + ", not the " +
                    fingerprint->hex() +
                    " its header (and the catalog) records: a header rewritten over other "
                    "digests; refused" +
                    hint);
  }
  return {};
}

// ---------------------------------------------------------------------------

// What versions (w, upto] changed: the digests they added (sorted; none
// held when over the bound) and whether any were removed.
struct IndexedRepository::Since {
  std::uint64_t upto = 0;
  bool removed_any = false;
  bool over_bound = false;
  std::vector<Digest> added;
};

IndexedRepository::IndexedRepository(ArtifactRepository& store, IndexSet index,
                                     std::uint64_t added_cache_digests)
    : store_(store), index_(std::move(index)), added_cache_digests_(added_cache_digests) {}

IndexedRepository::~IndexedRepository() = default;

IndexedLookupCounts IndexedRepository::counts() const noexcept {
  return {index_lookups_.load(std::memory_order_relaxed),
          store_lookups_.load(std::memory_order_relaxed)};
}

Result<std::shared_ptr<const IndexedRepository::Since>> IndexedRepository::since(
    std::uint64_t version) {
  const std::lock_guard lock(mutex_);
  if (since_ != nullptr && since_->upto == version) return since_;
  const std::uint64_t w = index_.catalog_version();
  auto changes = store_.changes_between(w, version);
  if (!changes) return std::unexpected(changes.error());
  auto next = std::make_shared<Since>();
  next->upto = version;
  next->removed_any = changes->removed != 0;
  // Checked on the recorded counts before a digest is read.
  next->over_bound = changes->added > added_cache_digests_;
  if (!next->over_bound && changes->added != 0) {
    next->added.reserve(changes->added);
    auto read = store_.for_each_digest_added(w, version, [&](std::span<const Digest> part) {
      next->added.insert(next->added.end(), part.begin(), part.end());
      return Result<void>{};
    });
    if (!read) return std::unexpected(read.error());
    std::sort(next->added.begin(), next->added.end());
  }
  since_ = next;
  return since_;
}

Result<bool> IndexedRepository::exists_at_version(const Digest& digest,
                                                  std::uint64_t catalog_version) {
  bool found = false;
  if (auto ok = exists_at_version(std::span(&digest, 1), catalog_version, std::span(&found, 1));
      !ok) {
    return std::unexpected(ok.error());
  }
  return found;
}

Result<void> IndexedRepository::exists_at_version(std::span<const Digest> digests,
                                                  std::uint64_t catalog_version,
                                                  std::span<bool> exists) {
  if (exists.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "indexed store: answer span holds " +
                                                 std::to_string(exists.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  const std::uint64_t w = index_.catalog_version();
  if (catalog_version < w) {
    store_lookups_.fetch_add(digests.size(), std::memory_order_relaxed);
    return store_.exists_at_version(digests, catalog_version, exists);
  }
  if (auto ok = index_.contains(digests, exists); !ok) return ok;
  if (catalog_version == w) {
    index_lookups_.fetch_add(digests.size(), std::memory_order_relaxed);
    return {};
  }
  auto changed = since(catalog_version);  // kInvalidArgument beyond the store's latest
  if (!changed) return std::unexpected(changed.error());
  const Since& s = **changed;
  std::vector<std::size_t> ask;
  std::vector<Digest> ask_digests;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const bool held = exists[i];
    const bool added =
        s.over_bound ? !held : std::binary_search(s.added.begin(), s.added.end(), digests[i]);
    if (added || (held && s.removed_any)) {
      ask.push_back(i);
      ask_digests.push_back(digests[i]);
    }
  }
  if (!ask.empty()) {
    auto found = std::make_unique<bool[]>(ask.size());
    if (auto asked = store_.exists_at_version(ask_digests, catalog_version,
                                              std::span(found.get(), ask.size()));
        !asked) {
      return asked;
    }
    for (std::size_t j = 0; j < ask.size(); ++j) exists[ask[j]] = found[j];
  }
  store_lookups_.fetch_add(ask.size(), std::memory_order_relaxed);
  index_lookups_.fetch_add(digests.size() - ask.size(), std::memory_order_relaxed);
  return {};
}

}  // namespace abf::service
