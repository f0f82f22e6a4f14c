// Publishing snapshots (docs/protocol.md section 8): load and verify a filter,
// then swap the serving reference atomically. Readers never lock: a reader
// takes a reference to the current snapshot and keeps using that one
// snapshot for as long as it holds it, whatever is published meanwhile.
//
// A publisher may be bound to one catalog: it then publishes only snapshots
// of that catalog that hold what the catalog holds at their version
// (check_snapshot_binding).
//
// A snapshot here is a filter set (docs/protocol.md section 13): a plain ABF1
// snapshot is published as a set of one shard, a filter-set manifest as the
// whole set, loaded and verified as one unit.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/scheme.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/snapshot.hpp"

namespace abf::service {

class Metrics;

// One published, immutable snapshot: the filter of one catalog version, as
// a filter set (one shard for a plain snapshot). A FilterSet answers
// might_contain and query, and reports catalog_version, catalog_id, the
// layout and the statistics, as a Filter does.
struct Snapshot {
  FilterSet filter;
  std::string source;            // the file it came from, or "<memory>"
  std::uint64_t generation = 0;  // 1 for the first publish, +1 for each
  std::chrono::steady_clock::time_point published_at{};
  // The catalog whose binding check (check_snapshot_binding) this snapshot
  // passed when it was published, if the publisher was bound; a service over
  // that same store need not check it again (a version's contents never
  // change once committed).
  const ArtifactRepository* checked_against = nullptr;

  std::uint64_t catalog_version() const noexcept { return filter.catalog_version(); }
  const CatalogId& catalog_id() const noexcept { return filter.catalog_id(); }
};

// Whether a snapshot (`filter`, read from `source`) may answer for the
// catalog `expected`, named `catalog` in messages: only when its catalogId is
// `expected` and not zero. A zero catalogId (a snapshot built from files
// without --catalog-id, or any formatVersion-1 file) belongs to no catalog.
// kCatalogMismatch otherwise, with a message naming both ids in hex, e.g.
//   "snapshot foreign.abf is of catalog 1f..., not of catalog c.db (5f...):
//    its absent answers would be wrong there; refused"
// (A Filter converts to a one-shard FilterSet.)
Result<void> check_snapshot_catalog(const FilterSet& filter, std::string_view source,
                                    const CatalogId& expected, std::string_view catalog);

// Whether a snapshot of the right catalog (check_snapshot_catalog passed)
// holds exactly what `catalog` (named `catalog_name`) holds at the
// snapshot's catalogVersion (docs/protocol.md, section 8): the same id and
// version alone do not say so (a catalog restored from a backup and changed
// since has another version N; a build from a few of its digests given its
// --catalog-id; a header rewritten with checksums recomputed). In order:
//   - the version exists in the catalog (a snapshot newer than the
//     catalog's latest version is refused);
//   - the snapshot carries a content fingerprint (every shard of a set);
//   - its fingerprint and insertedItemCount equal the catalog's at that
//     version (CatalogContent);
//   - its payload passes check_fill with FillCheck::kDistinctInsertions
//     (a catalog version's digests are distinct);
//   - it answers maybe for each of 64 digests the catalog holds at that
//     version, picked at random (ArtifactRepository::sample_at_version): a
//     filter of those digests never answers absent for one of them.
// kSnapshotImplausibleFill for the fill; kCatalogMismatch for the others,
// naming the snapshot, the catalog, the version and both fingerprints and
// counts (or the digest answered absent), and saying how to rebuild it; the
// catalog's own error (kCatalog) when it cannot answer.
Result<void> check_snapshot_content(const FilterSet& filter, std::string_view source,
                                    ArtifactRepository& catalog, std::string_view catalog_name);

// Everything a snapshot must pass to answer for the catalog `catalog` holds
// (catalog.catalog_binding()): check_snapshot_catalog, then
// check_snapshot_content. Nothing when the store names no catalog.
Result<void> check_snapshot_binding(const FilterSet& filter, std::string_view source,
                                    ArtifactRepository& catalog);

// Holds the serving snapshot. Any number of threads may call current() while
// one or more threads publish; publishing calls are serialized among
// themselves.
//
// Why not std::atomic<std::shared_ptr>: libstdc++ 12 (Debian 12's GCC)
// implements it with a spin-lock bit in the control-block pointer
// (is_lock_free() is false), and its load() releases that bit with a relaxed
// store, a data race ThreadSanitizer reports (google/sanitizers#1558, fixed
// in later libstdc++). The std::atomic_load(&shared_ptr) free functions take
// a mutex from a global pool. Instead the reference lives in two slots with a
// reader count each (a left-right scheme): a reader announces itself on the
// active slot, re-checks that it is still active, copies the shared_ptr and
// leaves — lock-free (it retries only when a publish flipped the slot under
// it). A publisher fills the inactive slot once its readers have left, then
// flips. Each slot's count sits on its own cache line.
class SnapshotPublisher {
 public:
  // `metrics` (optional, must outlive the publisher) counts publishes and
  // load failures. Unbound: any verified snapshot is published.
  explicit SnapshotPublisher(Metrics* metrics = nullptr);
  // Bound to the catalog `catalog` holds (its catalog_binding(), read once;
  // `catalog` must outlive the publisher): every publish, the first and
  // every reload, first checks the snapshot with check_snapshot_binding, and
  // a refusal counts as a load failure and keeps the serving snapshot. A
  // store with a zero id refuses every snapshot (a catalog without an id
  // yet); a store that names no catalog leaves the publisher unbound.
  SnapshotPublisher(Metrics* metrics, ArtifactRepository& catalog);
  SnapshotPublisher(const SnapshotPublisher&) = delete;
  SnapshotPublisher& operator=(const SnapshotPublisher&) = delete;
  ~SnapshotPublisher();

  // Loads `path` with load_filter_set: a plain snapshot (every check of
  // section 7: checksums, protocol and format versions, lengths) or a filter
  // set's manifest (the manifest's rules, then every shard with section 7
  // and against the manifest; a set replaced while it loads is loaded
  // again), then publishes it. On any error
  // the serving snapshot stays as it was and a load failure is counted. A
  // snapshot whose catalogVersion is older than the serving one is refused
  // with kInvalidArgument (also counted): an older filter's negatives are not
  // valid for the newer catalog. An equal version is accepted (a rebuild).
  // With options.key for a keyed snapshot (kKeyRequired without it,
  // kKeyMismatch with another: both counted as load failures).
  Result<std::shared_ptr<const Snapshot>> load_and_publish(const std::filesystem::path& path,
                                                           const LoadOptions& options);
  Result<std::shared_ptr<const Snapshot>> load_and_publish(const std::filesystem::path& path,
                                                           LoadMode mode = LoadMode::kAuto);

  // Publishes a filter or filter set already in memory (a Filter converts to
  // a one-shard set); same version and catalog rules and counting.
  Result<std::shared_ptr<const Snapshot>> publish(FilterSet filter,
                                                  std::string source = "<memory>");

  // The catalog this publisher is bound to; none when unbound.
  const std::optional<CatalogId>& catalog_id() const noexcept { return catalog_id_; }
  // The store it checks snapshots against; null when unbound.
  ArtifactRepository* catalog() const noexcept { return catalog_; }

  // The serving snapshot, or null before the first successful publish.
  // Lock-free; the returned snapshot stays valid while it is held.
  std::shared_ptr<const Snapshot> current() const noexcept;

  // Successful publishes and failed loads (refusals included) so far.
  std::uint64_t publish_count() const noexcept;
  std::uint64_t load_failure_count() const noexcept;

 private:
  Result<std::shared_ptr<const Snapshot>> publish_locked(FilterSet filter, std::string source);
  void count_failure() noexcept;

  struct alignas(64) Slot {
    std::shared_ptr<const Snapshot> snapshot;
    mutable std::atomic<std::uint64_t> readers{0};
  };
  std::array<Slot, 2> slots_;
  std::atomic<unsigned> active_{0};
  std::mutex publish_mutex_;  // publishers only; never taken by current()
  std::atomic<std::uint64_t> publishes_{0};
  std::atomic<std::uint64_t> failures_{0};
  Metrics* metrics_ = nullptr;
  std::optional<CatalogId> catalog_id_;  // set once, at construction
  ArtifactRepository* catalog_ = nullptr;
};

}  // namespace abf::service
