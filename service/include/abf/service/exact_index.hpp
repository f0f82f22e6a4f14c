// The exact index (ABFX, abf/index.hpp) of a catalog: building it from the
// catalog, checking that one belongs to a catalog (as check_snapshot_binding
// does for snapshots), and a store that answers from it in memory with the
// catalog as the record and the fallback (`abf dedup --index`).
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abf/error.hpp"
#include "abf/index.hpp"
#include "abf/index_set.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/sqlite_catalog.hpp"

namespace abf::service {

// What build_index_from_catalog wrote.
struct IndexBuildReport {
  std::uint64_t catalog_version = 0;
  std::uint64_t digest_count = 0;
  ContentFingerprint fingerprint;
};

// Writes the index of `catalog` at `catalog_version` to `path` (an
// AtomicFile: it appears only when whole). The digests stream from one read
// transaction in ascending order (SqliteCatalog::for_each_digest_at_version,
// a walk of the artifacts' primary key), so memory stays bounded (one chunk
// of digests, and 8 bytes per block) for a catalog of any size (EXPLAIN
// QUERY PLAN of that walk: "SCAN artifacts", the WITHOUT ROWID table's
// primary key in digest order, no temporary B-tree for the ORDER BY). The header
// carries the catalog's id, the version, and the count and content
// fingerprint of the version's row; the digests streamed must add up to
// both, else kCatalog (a damaged catalog) and nothing is written.
// kInvalidArgument for a version the catalog lacks; kCatalog for a catalog
// without an id (schema 1, opened read-only); IndexWriter's errors.
Result<IndexBuildReport> build_index_from_catalog(
    SqliteCatalog& catalog, std::uint64_t catalog_version, const std::filesystem::path& path,
    std::uint32_t block_digests = kIndexDefaultBlockDigests);

// The same as an index set of `shard_count` shards (ABXS, docs/protocol.md
// section 14, "Index sets"): write_index_set with the catalog's walk at
// `catalog_version` as the source, read once to count each shard and once
// per group of `max_open_shards` shards to write them. Every pass must
// deliver the count the version's row records (kCatalog otherwise, before
// anything is written on the first pass), and the digests must add up to
// its fingerprint. shard_count 1 writes a manifest and one shard (a plain
// index is build_index_from_catalog's).
Result<IndexBuildReport> build_index_set_from_catalog(SqliteCatalog& catalog,
                                                      std::uint64_t catalog_version,
                                                      const std::filesystem::path& path,
                                                      std::uint32_t shard_count,
                                                      const IndexSetWriteOptions& options = {});

// Whether an index or index set (read from `source`; an Index converts to
// a one-shard IndexSet) may answer for the catalog
// `catalog` holds (catalog.catalog_binding(); nothing is checked when it
// names none), the rules check_snapshot_binding applies to a snapshot, in
// order: its catalogId is the catalog's and not zero; its version exists in
// the catalog; it carries a content fingerprint; that fingerprint and its
// digest count equal the catalog's at that version (CatalogContent); and
// its digests add up to that fingerprint (ContentFingerprint::of over the
// whole index, ~5 ns a digest, summed over a set's shards: an index whose
// header was rewritten, or whose digests are another set's, is refused). kCatalogMismatch naming the
// index, the catalog, the version and both values; the catalog's own error
// when it cannot answer. `verify_digests` false skips the last rule (the
// sum over the digests) for a caller that already checked this very Index
// object once (a loaded Index never changes): the Python binding checks an
// abf.Index that way on every call, at the cost of one catalog read.
Result<void> check_index_binding(const IndexSet& index, std::string_view source,
                                 ArtifactRepository& catalog, bool verify_digests = true);

// What an IndexedRepository's batch lookups cost.
struct IndexedLookupCounts {
  std::uint64_t index_lookups = 0;  // digests answered from the index alone
  std::uint64_t store_lookups = 0;  // digests passed on to the store
};

// An exact store that answers batch lookups from an index (or index set:
// each digest asked of its shard) of version w,
// exactly at any version v >= w the store holds, and passes everything else
// to `store` (the record). At v = w the index alone answers. At v > w (the
// catalog's head moved on; the rule the existence service applies to a
// lagging snapshot, docs/protocol.md section 8): a digest added in (w, v] is
// asked of the store (it may have been removed again); any other digest is
// absent at v if the index lacks it, and present if the index holds it and
// nothing was removed in (w, v] (asked of the store when something was).
// The digests added in (w, v] are read from the store once per v and held
// in memory, up to `added_cache_digests` (32 bytes each); over that every
// digest the index lacks is asked of the store instead (exact, slower).
// Versions older than w go to the store. The index must be of the store's
// catalog (check_index_binding; the constructor does not check it).
// Thread-safe; `store` must outlive it.
class IndexedRepository final : public ArtifactRepository {
 public:
  IndexedRepository(ArtifactRepository& store, IndexSet index,
                    std::uint64_t added_cache_digests = std::uint64_t{1} << 21);
  ~IndexedRepository() override;

  Result<bool> exists_at_version(const Digest& digest, std::uint64_t catalog_version) override;
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t catalog_version,
                                 std::span<bool> exists) override;
  // The rest is the store's.
  Result<std::uint64_t> latest_version() override { return store_.latest_version(); }
  Result<HeadRecord> head_record() override { return store_.head_record(); }
  Result<CatalogContent> content_at_version(std::uint64_t catalog_version) override {
    return store_.content_at_version(catalog_version);
  }
  Result<VersionChanges> changes_between(std::uint64_t after, std::uint64_t upto) override {
    return store_.changes_between(after, upto);
  }
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const DigestSink& sink, std::size_t chunk_size = 0) override {
    return store_.for_each_digest_added(after, upto, sink, chunk_size);
  }
  Result<std::vector<Digest>> sample_at_version(std::uint64_t catalog_version,
                                                std::size_t count) override {
    return store_.sample_at_version(catalog_version, count);
  }
  std::optional<CatalogBinding> catalog_binding() const override {
    return store_.catalog_binding();
  }

  const IndexSet& index() const noexcept { return index_; }
  IndexedLookupCounts counts() const noexcept;

 private:
  struct Since;  // what changed in (w, v]
  Result<std::shared_ptr<const Since>> since(std::uint64_t version);

  ArtifactRepository& store_;
  IndexSet index_;
  std::uint64_t added_cache_digests_;
  std::mutex mutex_;  // guards since_
  std::shared_ptr<const Since> since_;
  std::atomic<std::uint64_t> index_lookups_{0};
  std::atomic<std::uint64_t> store_lookups_{0};
};

}  // namespace abf::service
