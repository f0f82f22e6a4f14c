// A tenant's exact store: its catalog with the exact index in front.
// Internal.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "abf/digest.hpp"
#include "abf/index.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/sqlite_catalog.hpp"

namespace abf::server {

// The starts of two head errors find_missing answers in their own words:
// the index's version rewritten, and a catalog that records no content.
inline constexpr std::string_view kIndexMismatchPrefix = "index of catalog version ";
inline constexpr std::string_view kNoContentPrefix = "no answer at the catalog's head: ";

// A tenant's exact store: its catalog, with the exact index (when one is
// configured) answering batch lookups in front of it. The index is replaced
// whole at a reload (set_index) while requests run: each batch takes the
// index that serves when it starts and keeps it to its end. Everything but
// the lookups is the catalog's, so the publisher (bound to this store)
// checks snapshots against the catalog exactly as without an index.
class TenantStore final : public service::ArtifactRepository {
 public:
  explicit TenantStore(service::SqliteCatalog& catalog, std::uint64_t head_cache_digests)
      : catalog_(catalog), head_cache_digests_(head_cache_digests) {}

  // Serves `index` from now on (it must have passed check_index_binding).
  void set_index(IndexSet index);
  // The index serving now; null without one.
  std::shared_ptr<const service::IndexedRepository> indexed() const;
  // Digests answered by every index this store has served (from the index
  // alone, or passed on to the catalog), since start. A batch in flight
  // on an index while a reload replaces it may go uncounted.
  service::IndexedLookupCounts lookups() const;

  Result<bool> exists_at_version(const Digest& digest, std::uint64_t catalog_version) override;
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t catalog_version,
                                 std::span<bool> exists) override;
  Result<std::uint64_t> latest_version() override { return catalog_.latest_version(); }
  // The catalog's, after checking the serving index against it whenever the
  // head's record changed: an index whose version now holds other digests
  // (the catalog's history rewritten, a backup restored) is kCatalogMismatch
  // until a reload; a head that moved otherwise than forward over an
  // unchanged history drops the index's held added digests.
  Result<service::HeadRecord> head_record() override;
  Result<service::CatalogContent> content_at_version(std::uint64_t catalog_version) override {
    return catalog_.content_at_version(catalog_version);
  }
  Result<service::VersionChanges> changes_between(std::uint64_t after,
                                                  std::uint64_t upto) override {
    return catalog_.changes_between(after, upto);
  }
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const service::DigestSink& sink,
                                     std::size_t chunk_size = 0) override {
    return catalog_.for_each_digest_added(after, upto, sink, chunk_size);
  }
  Result<std::vector<Digest>> sample_at_version(std::uint64_t catalog_version,
                                                std::size_t count) override {
    return catalog_.sample_at_version(catalog_version, count);
  }
  std::optional<service::CatalogBinding> catalog_binding() const override {
    return catalog_.catalog_binding();
  }

 private:
  std::shared_ptr<service::IndexedRepository> current() const;

  service::SqliteCatalog& catalog_;
  std::uint64_t head_cache_digests_;
  mutable std::mutex mutex_;  // guards indexed_ (the pointer, not what it points to) and retired_
  std::shared_ptr<service::IndexedRepository> indexed_;
  service::IndexedLookupCounts retired_;  // the replaced indexes' counts
  // The head record last seen with an index serving (under mutex_).
  std::optional<service::HeadRecord> seen_head_;
};

}  // namespace abf::server
