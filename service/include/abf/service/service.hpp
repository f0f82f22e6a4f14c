// The absence-first existence service (docs/protocol.md sections 1 and 8): a
// digest is checked, then the serving snapshot's filter may prove it absent;
// only a `Maybe` costs an exact lookup. Every answer equals the exact store's
// answer at the catalog's head: the newest version H the store holds, read
// once per request (or per dedup job), not the snapshot's version v.
//
// Answering at the head (docs/protocol.md section 8, "Answering at the catalog's
// head"): the filter of v says `absent` only about v. A digest absent at v
// is absent at H unless a version in (v, H] added it, so a filter `absent`
// is final only when the digest is not among the digests added after v;
// otherwise it is asked of the store at H, like a `Maybe`. Removals after v
// need no check: a removal only ever turns present into absent, so a digest
// absent at v and not added since is absent at H whatever was removed, and
// every digest the store is asked about is asked at H, where removals are
// already applied. The added digests are read from the store once per
// snapshot version and held in memory (extended as H grows), up to
// ServiceOptions::head_cache_digests; over that bound every filter `absent`
// is asked of the store at H instead (exact, slower), never answered from
// the filter alone.
//
// A service over a store that names its catalog (ArtifactRepository::
// catalog_binding(); a SqliteCatalog always does) answers only with
// snapshots of that catalog that hold what it holds at their version: any
// other, one that names no catalog, or one whose content fingerprint or item
// count differs from the catalog's at its version, is refused with
// kCatalogMismatch (check_snapshot_binding, docs/protocol.md section 8). Binding
// the publisher too keeps such a snapshot from ever being served:
//
//   abf::service::Metrics metrics;
//   auto catalog = abf::service::SqliteCatalog::open("catalog.db");
//   abf::service::SnapshotPublisher publisher(&metrics, *catalog);
//   publisher.load_and_publish("catalog-42.abf");  // kCatalogMismatch if of another catalog,
//                                                  // or not what version 42 holds
//   abf::service::ArtifactExistenceService service(publisher, *catalog, &metrics);
//   auto answer = service.exists("sha256:9f86d0...");   // Result<ExistenceAnswer>
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/io.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/metrics.hpp"
#include "abf/service/snapshot_publisher.hpp"

namespace abf::service {

// The default bound on the digests added after the snapshot's version that
// a service holds in memory: 2 Mi digests, 64 MiB of 32-byte records.
inline constexpr std::uint64_t kDefaultHeadCacheDigests = std::uint64_t{1} << 21;

struct ServiceOptions {
  // false: every query goes straight to the exact store (the baseline the
  // filter is measured against; answers are the same).
  bool use_filter = true;
  // The engine that prechecks batches (FilterSet::query: a filter set's
  // batch is partitioned by shard inside the call).
  Backend backend = Backend::kAuto;
  // true: answer at the catalog's head (see the top of this file). false:
  // answer at the snapshot's own version (the answers of a catalog frozen at
  // it; nothing is read to find the head).
  bool answer_at_head = true;
  // The most digests added after the snapshot's version held in memory to
  // check filter `absent` answers against (32 bytes each). A lag of more
  // additions makes every filter `absent` an exact lookup at the head until
  // a newer snapshot is published. 0: always so.
  std::uint64_t head_cache_digests = kDefaultHeadCacheDigests;
  // A batch of at most this many digests (exists_batch) asks the store about
  // every digest, whatever the filter answers, so that a missing digest the
  // filter answers `absent` costs what one it answers `maybe` does: the
  // response time of a small request then tells nothing of the raw filter
  // answer (docs/protocol.md section 10). The counters still count the
  // filter's answers (negative, maybe) and exact_lookup every digest asked.
  // abf serve sets 1 for a keyed tenant; 0: never.
  std::size_t ask_store_up_to = 0;
};

// One answer. `exists` is the exact store's answer, or false when the filter
// proved absence; never a guess.
struct ExistenceAnswer {
  bool exists = false;
  bool filter_negative = false;  // absent by the filter alone: no store call was made
  bool false_positive = false;   // the filter said Maybe, the store said absent
  // The filter said absent, but the digest may have been added after the
  // snapshot's version, so the store was asked at catalog_version.
  bool head_lookup = false;
  std::uint64_t catalog_version = 0;  // the version this answer is exact for
};

// What a batch (or a whole dedup job) cost.
struct BatchCounts {
  std::uint64_t total = 0;           // digests answered
  std::uint64_t negative = 0;        // absent by the filter alone
  std::uint64_t maybe = 0;           // filter said Maybe
  std::uint64_t false_positive = 0;  // Maybe, then absent in the store
  // Filter `absent`, asked of the store at the head because added after the
  // snapshot's version (or all of them, over head_cache_digests).
  std::uint64_t head_lookups = 0;
  // Of those, present at the head: each an `absent` the snapshot alone
  // would have answered wrongly.
  std::uint64_t head_present = 0;
  std::uint64_t exact_lookups = 0;  // digests the store was asked about (maybe + head_lookups)
  std::uint64_t present = 0;        // answered present (by the store)

  std::uint64_t lookups_avoided() const noexcept { return total - exact_lookups; }
  // Section 9 ratios; 0 when the denominator is 0.
  double negative_bypass_ratio() const noexcept;         // negative / total
  double observed_false_positive_rate() const noexcept;  // fp / (negative + fp)
  double false_discovery_ratio() const noexcept;         // fp / maybe

  BatchCounts& operator+=(const BatchCounts& other) noexcept;
};

// How far a snapshot lags its catalog's head (docs/protocol.md section 8).
struct CatalogLag {
  std::uint64_t snapshot_version = 0;  // v, the snapshot's catalogVersion
  std::uint64_t head_version = 0;      // H, the catalog's newest version
  std::uint64_t versions_behind = 0;   // H - v
  std::uint64_t digests_added = 0;     // additions recorded in (v, H]
  std::uint64_t digests_removed = 0;   // removals recorded in (v, H]
};

class AddedDigests;  // the digests added after a snapshot's version (service.cpp)

// The version one request (or one dedup job) answers at, read once and used
// for every digest of it: from ArtifactExistenceService::head.
struct Head {
  std::uint64_t catalog_version = 0;  // H: the answers are exact for this version
  CatalogLag lag;
  // The digests added in (v, H'] for some H' >= H (a superset of those of
  // (v, H] is as good: a digest outside it was not added in (v, H]). Null
  // when nothing was added or when over the bound.
  std::shared_ptr<const AddedDigests> added;
  // More digests were added after v than head_cache_digests: every filter
  // `absent` is asked of the store.
  bool over_bound = false;

  // Whether a filter `absent` for `digest` must be confirmed by the store at
  // catalog_version: only when it may have been added after the snapshot.
  bool must_ask(const Digest& digest) const noexcept;
};

// Thread-safe: any number of threads may query at once. The publisher, the
// repository and the metrics must outlive the service.
//
// The catalog rule: when the repository names its catalog (read once, at
// construction), every call that uses a snapshot, for its filter or for its
// catalog version, first checks it with check_snapshot() and answers
// kCatalogMismatch, never an answer, for a snapshot of another catalog or of
// none. Calls that use no snapshot (exists_at_version of another version, or
// with the filter disabled) just ask the store.
class ArtifactExistenceService {
 public:
  ArtifactExistenceService(const SnapshotPublisher& publisher, ArtifactRepository& repository,
                           Metrics* metrics = nullptr, ServiceOptions options = {});

  // Whether `digest` exists at the catalog's head (at the serving snapshot's
  // version with answer_at_head false). kInvalidArgument if no snapshot has
  // been published; kCatalogMismatch for a snapshot of another catalog;
  // kCatalog for a catalog whose head is older than the snapshot (restored
  // from a backup?); store errors as the store reports them (kCatalog).
  Result<ExistenceAnswer> exists(const Digest& digest) const;

  // The same for a digest as text: 64 hex digits, optionally "sha256:"
  // prefixed, either case. A malformed digest is kInvalidDigest (counted),
  // never `absent`.
  Result<ExistenceAnswer> exists(std::string_view digest_text) const;

  // Whether `digest` exists at `catalog_version`. The version rule: the
  // filter is consulted only when `catalog_version` is the serving
  // snapshot's catalogVersion v, or newer but not newer than the head (with
  // answer_at_head), where its `absent` is checked against the digests added
  // after v as exists() does. For any other version (older: the filter lacks
  // what was removed since; beyond the head) the exact store is asked
  // directly, counted as a filter bypass. So a snapshot of 42 never answers
  // `absent` for a query at 43 from the filter alone.
  Result<ExistenceAnswer> exists_at_version(const Digest& digest,
                                            std::uint64_t catalog_version) const;

  // The batch form, at the head read once for the batch (or at `head`,
  // from head(snapshot), which pins one version across several batches),
  // with the serving snapshot (or `snapshot`): the whole batch is prechecked
  // with the batch engine and only the Maybe digests, and the `absent` ones
  // that Head::must_ask, go to the store, in one batch call. exists[i]
  // answers digests[i]; `exists` must be at least as long
  // (kInvalidArgument). On error no counts are recorded.
  Result<BatchCounts> exists_batch(std::span<const Digest> digests, std::span<bool> exists) const;
  Result<BatchCounts> exists_batch(std::span<const Digest> digests, std::span<bool> exists,
                                   const Snapshot& snapshot) const;
  Result<BatchCounts> exists_batch(std::span<const Digest> digests, std::span<bool> exists,
                                   const Snapshot& snapshot, const Head& head) const;
  // The same verdicts in the form a find-missing answer needs: the indices
  // into `digests` of those that do not exist, ascending, appended to
  // `missing` (no bool per digest in between). Counts and errors as above.
  Result<BatchCounts> find_missing(std::span<const Digest> digests, const Snapshot& snapshot,
                                   const Head& head, std::vector<std::uint32_t>& missing) const;

  // Reads the catalog's head once and prepares what answering there with
  // `snapshot` needs: the digests added after its version, from memory when
  // held (read from the store when the head moved past them; at most one
  // thread reads at a time, the others keep answering with what is held).
  // With answer_at_head false, or the filter disabled, the head is the
  // snapshot's own version. kCatalogMismatch as check_snapshot; kCatalog
  // when the catalog's head is older than the snapshot; store errors.
  Result<Head> head(const Snapshot& snapshot) const;

  // How far the serving snapshot lags the catalog's head, read now (one
  // store query; nothing is cached). kInvalidArgument without a snapshot;
  // kCatalog for a head older than the snapshot; store errors.
  Result<CatalogLag> lag() const;

  // Whether this service may answer with `snapshot`: always when the
  // repository names no catalog; otherwise check_snapshot_binding against
  // the repository: its catalog id, and what the catalog holds at the
  // snapshot's version (kCatalogMismatch naming both ids, or both
  // fingerprints and counts). A snapshot that a publisher bound to this
  // same repository published has passed that check (Snapshot::
  // checked_against) and is not checked again: the per-query cost is one
  // pointer comparison.
  Result<void> check_snapshot(const Snapshot& snapshot) const;

  const ServiceOptions& options() const noexcept { return options_; }
  const SnapshotPublisher& publisher() const noexcept { return publisher_; }
  // The repository's catalog, as read at construction; none when unbound.
  const std::optional<CatalogBinding>& catalog_binding() const noexcept { return binding_; }

 private:
  // exists_batch and find_missing: the verdicts into `exists` when it is
  // not null, else the missing indices into `missing`.
  Result<BatchCounts> answer_batch(std::span<const Digest> digests, std::span<bool>* exists,
                                   std::vector<std::uint32_t>* missing, const Snapshot& snapshot,
                                   const Head& head) const;
  Result<ExistenceAnswer> ask_store(const Digest& digest, std::uint64_t version) const;
  // The filter of `snapshot` (null: none) is used only for its own version,
  // or, with `head`, for a version in (v, head->catalog_version].
  Result<ExistenceAnswer> answer(const Digest& digest, std::uint64_t catalog_version,
                                 const Snapshot* snapshot, const Head* head) const;
  // head() at a head already read (or at a version in (v, head]).
  Result<Head> head_at(const Snapshot& snapshot, std::uint64_t head_version) const;
  // The digests added in (after, upto'] for an upto' >= upto: held ones, or
  // read from the store (extending held ones of the same `after`).
  Result<std::shared_ptr<const AddedDigests>> added_since(std::uint64_t after,
                                                          std::uint64_t upto) const;
  // The lag of a snapshot of `snapshot_version` at head `head_version`.
  Result<CatalogLag> lag_of(std::uint64_t snapshot_version, std::uint64_t head_version) const;
  // The catalog's head version, read for `snapshot`, after checking that
  // the catalog's history is the one seen before (history_): a version
  // whose recorded content changed (a backup restored, then advanced again)
  // drops the held added digests and checks the snapshot's own version
  // again; kCatalogMismatch when the snapshot no longer matches it.
  Result<std::uint64_t> read_head(const Snapshot& snapshot) const;

  // The head last read, with its recorded content, and the snapshot content
  // it was checked with; under history_mutex_.
  struct History {
    bool valid = false;
    std::uint64_t version = 0;
    CatalogContent content;
    std::uint64_t snapshot_version = 0;
    std::uint64_t snapshot_items = 0;
    std::optional<ContentFingerprint> snapshot_fingerprint;
  };
  mutable std::mutex history_mutex_;
  mutable History history_;
  // Bumped (under cache_mutex_) when a rewrite drops cache_: added digests
  // read before it are not kept.
  mutable std::uint64_t history_generation_ = 0;

  const SnapshotPublisher& publisher_;
  ArtifactRepository& repository_;
  Metrics* metrics_;
  ServiceOptions options_;
  std::optional<CatalogBinding> binding_;
  // The digests added after one snapshot version, as last read; replaced
  // (never changed) under cache_mutex_, read by one thread at a time under
  // load_mutex_ (taken first).
  mutable std::mutex cache_mutex_;
  mutable std::mutex load_mutex_;
  mutable std::shared_ptr<const AddedDigests> cache_;
};

// The result of a bulk dedup job.
struct DedupReport {
  BatchCounts counts;
  std::uint64_t catalog_version = 0;  // the version every answer is exact for (the head)
  CatalogLag lag;                     // how far the snapshot lagged it
  double seconds = 0.0;  // wall time of the whole job, input reading included
};

// The bulk dedup job: streams `input` through the service in batches of
// `batch_size`, all with the snapshot serving when it starts and at the
// catalog's head read then (both pinned for the whole job: one version for
// the whole output), and hands `emit_absent` the digests that are not in
// the catalog there, in input order. kInvalidArgument without a snapshot;
// kCatalogMismatch, before any input is read, for a snapshot the service
// refuses (check_snapshot); input errors (kInvalidDigest with line or offset) and errors returned
// by `emit_absent` stop the job and are returned as they are.
Result<DedupReport> bulk_dedup(
    const ArtifactExistenceService& service, DigestReader& input,
    const std::function<Result<void>(std::span<const Digest>)>& emit_absent,
    std::size_t batch_size = 65536);

}  // namespace abf::service
