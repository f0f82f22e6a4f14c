// A tenant's exact store (tenant_store.hpp).
#include "tenant_store.hpp"

#include <string>

namespace abf::server {

void TenantStore::set_index(IndexSet index) {
  auto next =
      std::make_shared<service::IndexedRepository>(catalog_, std::move(index), head_cache_digests_);
  const std::lock_guard lock(mutex_);
  if (indexed_ != nullptr) {
    const auto counts = indexed_->counts();
    retired_.index_lookups += counts.index_lookups;
    retired_.store_lookups += counts.store_lookups;
  }
  indexed_ = std::move(next);
  seen_head_.reset();  // the new index is checked at the next head read
}

service::IndexedLookupCounts TenantStore::lookups() const {
  const std::lock_guard lock(mutex_);
  service::IndexedLookupCounts total = retired_;
  if (indexed_ != nullptr) {
    const auto counts = indexed_->counts();
    total.index_lookups += counts.index_lookups;
    total.store_lookups += counts.store_lookups;
  }
  return total;
}

Result<service::HeadRecord> TenantStore::head_record() {
  auto record = catalog_.head_record();
  if (!record) return record;
  if (!record->content) {
    // Without the head's recorded content a history rewritten under the
    // server (a schema-2 backup restored, then advanced to the same version
    // with other digests) looks unchanged, and the filter of the old history
    // would answer the new one's digests missing. No answer at the head,
    // then, until the catalog is upgraded (it is read again at every
    // request, so the upgrade is noticed without a restart).
    return fail(ErrorCode::kCatalog,
                std::string(kNoContentPrefix) +
                    (record->no_content_reason.empty()
                         ? std::string("the catalog records no content per version")
                         : record->no_content_reason));
  }
  const std::lock_guard lock(mutex_);
  if (indexed_ == nullptr) return record;
  const auto same = [](const service::HeadRecord& a, const service::HeadRecord& b) {
    return a.version == b.version && a.content == b.content;
  };
  if (seen_head_ && same(*seen_head_, *record)) return record;
  // The head moved: forward over the same history, or over a rewritten one.
  bool rewritten = false;
  if (seen_head_ && seen_head_->content) {
    if (record->version <= seen_head_->version) {
      rewritten = true;
    } else {
      auto then = catalog_.content_at_version(seen_head_->version);
      if (!then) return std::unexpected(then.error());
      rewritten = !(*then == *seen_head_->content);
    }
  }
  const IndexSet& index = indexed_->index();
  if (index.catalog_version() <= record->version) {
    auto at_w = catalog_.content_at_version(index.catalog_version());
    if (!at_w) return std::unexpected(at_w.error());
    const auto fingerprint = index.content_fingerprint();
    if (at_w->item_count != index.size() || (fingerprint && !(at_w->fingerprint == *fingerprint))) {
      seen_head_.reset();
      return fail(ErrorCode::kCatalogMismatch,
                  std::string(kIndexMismatchPrefix) + std::to_string(index.catalog_version()) +
                      " no longer matches the catalog, whose history was rewritten (a backup "
                      "restored?); rebuild the index and reload");
    }
  }
  if (rewritten) {
    // The added digests the index's store held came from the old history.
    auto fresh = std::make_shared<service::IndexedRepository>(catalog_, index, head_cache_digests_);
    const auto counts = indexed_->counts();
    retired_.index_lookups += counts.index_lookups;
    retired_.store_lookups += counts.store_lookups;
    indexed_ = std::move(fresh);
  }
  seen_head_ = *record;
  return record;
}

std::shared_ptr<service::IndexedRepository> TenantStore::current() const {
  const std::lock_guard lock(mutex_);
  return indexed_;
}

std::shared_ptr<const service::IndexedRepository> TenantStore::indexed() const { return current(); }

Result<bool> TenantStore::exists_at_version(const Digest& digest, std::uint64_t catalog_version) {
  if (const auto indexed = current()) return indexed->exists_at_version(digest, catalog_version);
  return catalog_.exists_at_version(digest, catalog_version);
}

Result<void> TenantStore::exists_at_version(std::span<const Digest> digests,
                                            std::uint64_t catalog_version, std::span<bool> exists) {
  if (const auto indexed = current()) {
    return indexed->exists_at_version(digests, catalog_version, exists);
  }
  return catalog_.exists_at_version(digests, catalog_version, exists);
}

}  // namespace abf::server
