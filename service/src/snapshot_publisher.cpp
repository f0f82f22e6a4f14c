// SnapshotPublisher: verified loads and a lock-free current() (see the header
// for why two slots and not std::atomic<std::shared_ptr>).
#include "abf/service/snapshot_publisher.hpp"

#include <thread>
#include <utility>

#include "abf/service/metrics.hpp"
#include "catalog_reach.hpp"

namespace abf::service {

Result<void> check_snapshot_catalog(const FilterSet& filter, std::string_view source,
                                    const CatalogId& expected, std::string_view catalog) {
  const CatalogId& actual = filter.catalog_id();
  if (!actual.is_zero() && actual == expected) return {};
  const std::string named = "snapshot " + std::string(source);
  const std::string theirs = std::string(catalog) + " (catalogId " + expected.hex() + ")";
  if (actual.is_zero()) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " names no catalog (catalogId " + actual.hex() +
                    "), so it cannot answer for " + theirs +
                    "; build it from the catalog (abf build --from-catalog); refused");
  }
  return fail(ErrorCode::kCatalogMismatch,
              named + " is of catalog " + actual.hex() + ", not of " + theirs +
                  ": its absent answers would be wrong there; refused");
}

namespace {

// How many of the version's digests the binding check probes the filter
// with: 64 B-tree seeks and 64 lookups per load, well under a millisecond.
constexpr std::size_t kMembershipSample = 64;

// How to make a snapshot that passes: from the catalog, at that version.
std::string rebuild_hint(std::uint64_t version) {
  return "; rebuild it from the catalog: abf build --from-catalog DB --catalog-version " +
         std::to_string(version) + " (with its -n and -p)";
}

}  // namespace

Result<void> check_snapshot_content(const FilterSet& filter, std::string_view source,
                                    ArtifactRepository& catalog, std::string_view catalog_name) {
  const std::uint64_t version = filter.catalog_version();
  const std::string named = "snapshot " + std::string(source);
  const std::string theirs = std::string(catalog_name);
  auto content = content_in_reach(catalog, version, named, theirs,
                                  ": what the snapshot holds cannot be checked");
  if (!content) return std::unexpected(content.error());
  const auto& fingerprint = filter.content_fingerprint();
  if (!fingerprint) {
    return fail(ErrorCode::kCatalogMismatch,
                named +
                    " carries no content fingerprint (written before fingerprints, or a "
                    "merge of an input without one), so nothing shows that it holds what " +
                    theirs + " holds at version " + std::to_string(version) + "; refused" +
                    rebuild_hint(version));
  }
  const std::uint64_t inserted = filter.inserted_item_count();
  if (*fingerprint != content->fingerprint || inserted != content->item_count) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " does not hold what " + theirs + " holds at catalog version " +
                    std::to_string(version) + ": the snapshot's content fingerprint is " +
                    fingerprint->hex() + " over " + std::to_string(inserted) +
                    " insertions, the catalog's " + content->fingerprint.hex() + " over " +
                    std::to_string(content->item_count) +
                    " digests (a catalog restored from a backup and changed since, or a "
                    "snapshot built from other digests?): its absent answers would be wrong "
                    "there; refused" +
                    rebuild_hint(version));
  }
  // Equal fingerprints and counts: the header describes the catalog's set.
  // The payload must also be one that set can give (a zeroed payload, or
  // k, n and p rewritten together, keep the header's fingerprint).
  if (auto filled = check_fill(filter, FillCheck::kDistinctInsertions, std::string(source));
      !filled) {
    return fail(filled.error().code, named + ", bound to " + theirs + " at version " +
                                         std::to_string(version) + ": " + filled.error().message +
                                         "; refused" + rebuild_hint(version));
  }
  // Last, the bits themselves: a filter of the version's digests answers
  // maybe for every one of them, so one `absent` among a random sample is
  // proof. This catches what the header cannot show, e.g. m, k and p
  // rewritten with the payload cut to the new length (its fill can stay
  // plausible). A filter that loses a fraction f of the members passes
  // with probability (1 - f)^kMembershipSample: 0.9^64 < 0.0012.
  auto sample = catalog.sample_at_version(version, kMembershipSample);
  if (!sample) return std::unexpected(sample.error());
  for (const Digest& digest : *sample) {
    if (!filter.might_contain(digest)) {
      return fail(ErrorCode::kCatalogMismatch,
                  named + " answers absent for " + digest.hex() + ", which " + theirs +
                      " holds at catalog version " + std::to_string(version) +
                      ": its bits are not a filter of that version's digests (a payload or "
                      "layout rewritten?); refused" +
                      rebuild_hint(version));
    }
  }
  return {};
}

Result<void> check_snapshot_binding(const FilterSet& filter, std::string_view source,
                                    ArtifactRepository& catalog) {
  const auto binding = catalog.catalog_binding();
  if (!binding) return {};
  if (auto same = check_snapshot_catalog(filter, source, binding->id, binding->name); !same) {
    return same;
  }
  return check_snapshot_content(filter, source, catalog, binding->name);
}

SnapshotPublisher::SnapshotPublisher(Metrics* metrics) : metrics_(metrics) {}

SnapshotPublisher::SnapshotPublisher(Metrics* metrics, ArtifactRepository& catalog)
    : metrics_(metrics) {
  if (const auto binding = catalog.catalog_binding()) {
    catalog_id_ = binding->id;
    catalog_ = &catalog;
  }
}

SnapshotPublisher::~SnapshotPublisher() = default;

std::shared_ptr<const Snapshot> SnapshotPublisher::current() const noexcept {
  // seq_cst on the announce (fetch_add) and the re-check (load) pairs with
  // the publisher's flip (store) and drain check (load): in the single total
  // order either the publisher sees this reader and waits, or this reader
  // sees the flip and backs out without touching the slot.
  for (;;) {
    const unsigned index = active_.load(std::memory_order_seq_cst);
    const Slot& slot = slots_[index];
    slot.readers.fetch_add(1, std::memory_order_seq_cst);
    if (active_.load(std::memory_order_seq_cst) == index) {
      std::shared_ptr<const Snapshot> snapshot = slot.snapshot;
      slot.readers.fetch_sub(1, std::memory_order_release);
      return snapshot;
    }
    slot.readers.fetch_sub(1, std::memory_order_release);
  }
}

void SnapshotPublisher::count_failure() noexcept {
  failures_.fetch_add(1, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->add(Counter::kSnapshotLoadFailure);
}

Result<std::shared_ptr<const Snapshot>> SnapshotPublisher::load_and_publish(
    const std::filesystem::path& path, LoadMode mode) {
  LoadOptions options;
  options.mode = mode;
  return load_and_publish(path, options);
}

Result<std::shared_ptr<const Snapshot>> SnapshotPublisher::load_and_publish(
    const std::filesystem::path& path, const LoadOptions& options) {
  // Load and verify outside the publish lock: it is the slow part.
  auto filter = load_filter_set(path, options);
  if (!filter) {
    count_failure();
    return std::unexpected(filter.error());
  }
  const std::lock_guard lock(publish_mutex_);
  return publish_locked(std::move(*filter), path.string());
}

Result<std::shared_ptr<const Snapshot>> SnapshotPublisher::publish(FilterSet filter,
                                                                   std::string source) {
  const std::lock_guard lock(publish_mutex_);
  return publish_locked(std::move(filter), std::move(source));
}

Result<std::shared_ptr<const Snapshot>> SnapshotPublisher::publish_locked(FilterSet filter,
                                                                          std::string source) {
  const unsigned old_index = active_.load(std::memory_order_relaxed);  // only publishers write it
  const unsigned new_index = 1 - old_index;
  Slot& old_slot = slots_[old_index];
  Slot& new_slot = slots_[new_index];
  if (catalog_ != nullptr) {
    if (auto bound = check_snapshot_binding(filter, source, *catalog_); !bound) {
      count_failure();
      return std::unexpected(bound.error());
    }
  }
  if (old_slot.snapshot != nullptr &&
      filter.catalog_version() < old_slot.snapshot->catalog_version()) {
    count_failure();
    return fail(ErrorCode::kInvalidArgument,
                "snapshot " + source + " is of catalog version " +
                    std::to_string(filter.catalog_version()) + ", older than the serving version " +
                    std::to_string(old_slot.snapshot->catalog_version()) + " (from " +
                    old_slot.snapshot->source + "); refused, the serving snapshot stays");
  }
  auto snapshot = std::make_shared<const Snapshot>(
      Snapshot{std::move(filter), std::move(source), publishes_.load(std::memory_order_relaxed) + 1,
               std::chrono::steady_clock::now(), catalog_});

  // Readers that announced themselves on the inactive slot before the last
  // flip are backing out; wait for them before writing it.
  while (new_slot.readers.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  new_slot.snapshot = snapshot;
  active_.store(new_index, std::memory_order_seq_cst);
  // Drop the old reference once its last reader has taken its copy; readers
  // holding a copy keep that snapshot alive and finish with it.
  while (old_slot.readers.load(std::memory_order_seq_cst) != 0) std::this_thread::yield();
  old_slot.snapshot.reset();

  publishes_.fetch_add(1, std::memory_order_relaxed);
  if (metrics_ != nullptr) metrics_->add(Counter::kSnapshotPublish);
  return snapshot;
}

std::uint64_t SnapshotPublisher::publish_count() const noexcept {
  return publishes_.load(std::memory_order_relaxed);
}

std::uint64_t SnapshotPublisher::load_failure_count() const noexcept {
  return failures_.load(std::memory_order_relaxed);
}

}  // namespace abf::service
