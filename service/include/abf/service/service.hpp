// The absence-first existence service (PROTOCOL.md sections 1 and 8): a
// digest is checked, then the serving snapshot's filter may prove it absent;
// only a `Maybe` costs an exact lookup, made at the snapshot's catalog
// version. Every answer equals the exact store's answer at that version.
//
// A service over a store that names its catalog (ArtifactRepository::
// catalog_binding(); a SqliteCatalog always does) answers only with
// snapshots of that catalog: any other, or one that names no catalog, is
// refused with kCatalogMismatch (PROTOCOL.md section 8). Binding the
// publisher too keeps such a snapshot from ever being served:
//
//   abf::service::Metrics metrics;
//   auto catalog = abf::service::SqliteCatalog::open("catalog.db");
//   auto binding = catalog->catalog_binding();
//   abf::service::SnapshotPublisher publisher(&metrics, binding->id, binding->name);
//   publisher.load_and_publish("catalog-42.abf");  // kCatalogMismatch if of another catalog
//   abf::service::ArtifactExistenceService service(publisher, *catalog, &metrics);
//   auto answer = service.exists("sha256:9f86d0...");   // Result<ExistenceAnswer>
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
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

struct ServiceOptions {
  // false: every query goes straight to the exact store (the baseline the
  // filter is measured against; answers are the same).
  bool use_filter = true;
  // The engine that prechecks batches (FilterSet::query: a filter set's
  // batch is partitioned by shard inside the call).
  Backend backend = Backend::kAuto;
};

// One answer. `exists` is the exact store's answer, or false when the filter
// proved absence; never a guess.
struct ExistenceAnswer {
  bool exists = false;
  bool filter_negative = false;       // absent by the filter alone: no store call was made
  bool false_positive = false;        // the filter said Maybe, the store said absent
  std::uint64_t catalog_version = 0;  // the version this answer is for
};

// What a batch (or a whole dedup job) cost.
struct BatchCounts {
  std::uint64_t total = 0;           // digests answered
  std::uint64_t negative = 0;        // absent by the filter alone
  std::uint64_t maybe = 0;           // filter said Maybe
  std::uint64_t false_positive = 0;  // Maybe, then absent in the store
  std::uint64_t exact_lookups = 0;   // digests the store was asked about
  std::uint64_t present = 0;         // answered present (by the store)

  std::uint64_t lookups_avoided() const noexcept { return total - exact_lookups; }
  // Section 9 ratios; 0 when the denominator is 0.
  double negative_bypass_ratio() const noexcept;         // negative / total
  double observed_false_positive_rate() const noexcept;  // fp / (negative + fp)
  double false_discovery_ratio() const noexcept;         // fp / maybe

  BatchCounts& operator+=(const BatchCounts& other) noexcept;
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

  // Whether `digest` exists at the serving snapshot's catalog version.
  // kInvalidArgument if no snapshot has been published; kCatalogMismatch for
  // a snapshot of another catalog; store errors as the store reports them
  // (kCatalog).
  Result<ExistenceAnswer> exists(const Digest& digest) const;

  // The same for a digest as text: 64 hex digits, optionally "sha256:"
  // prefixed, either case. A malformed digest is kInvalidDigest (counted),
  // never `absent`.
  Result<ExistenceAnswer> exists(std::string_view digest_text) const;

  // Whether `digest` exists at `catalog_version`. The version rule: the
  // filter is consulted only when `catalog_version` equals the serving
  // snapshot's catalogVersion. For any other version (newer: the filter lacks
  // what was added since; older: it lacks what was removed since) the exact
  // store is asked directly, counted as a filter bypass. So a snapshot of 42
  // never answers `absent` for a query at 43.
  Result<ExistenceAnswer> exists_at_version(const Digest& digest,
                                            std::uint64_t catalog_version) const;

  // The batch form, at the serving snapshot's version (or at `snapshot`'s,
  // which pins one snapshot across several batches): the whole batch is
  // prechecked with the batch engine and only the Maybe digests go to the
  // store, in one batch call. exists[i] answers digests[i]; `exists` must be
  // at least as long (kInvalidArgument). On error no counts are recorded.
  Result<BatchCounts> exists_batch(std::span<const Digest> digests, std::span<bool> exists) const;
  Result<BatchCounts> exists_batch(std::span<const Digest> digests, std::span<bool> exists,
                                   const Snapshot& snapshot) const;

  // Whether this service may answer with `snapshot`: always when the
  // repository names no catalog; otherwise check_snapshot_catalog against
  // the repository's (kCatalogMismatch naming both ids).
  Result<void> check_snapshot(const Snapshot& snapshot) const;

  const ServiceOptions& options() const noexcept { return options_; }
  const SnapshotPublisher& publisher() const noexcept { return publisher_; }
  // The repository's catalog, as read at construction; none when unbound.
  const std::optional<CatalogBinding>& catalog_binding() const noexcept { return binding_; }

 private:
  Result<ExistenceAnswer> ask_store(const Digest& digest, std::uint64_t version) const;
  // The filter of `snapshot` (null: none) is used only for its own version.
  Result<ExistenceAnswer> answer(const Digest& digest, std::uint64_t catalog_version,
                                 const Snapshot* snapshot) const;

  const SnapshotPublisher& publisher_;
  ArtifactRepository& repository_;
  Metrics* metrics_;
  ServiceOptions options_;
  std::optional<CatalogBinding> binding_;
};

// The result of a bulk dedup job.
struct DedupReport {
  BatchCounts counts;
  std::uint64_t catalog_version = 0;
  double seconds = 0.0;  // wall time of the whole job, input reading included
};

// The bulk dedup job: streams `input` through the service in batches of
// `batch_size`, all at the version of the snapshot serving when it starts
// (pinned for the whole job), and hands `emit_absent` the digests that are
// not in the catalog, in input order. kInvalidArgument without a snapshot;
// kCatalogMismatch, before any input is read, for a snapshot the service
// refuses (check_snapshot); input errors (kInvalidDigest with line or offset) and errors returned
// by `emit_absent` stop the job and are returned as they are.
Result<DedupReport> bulk_dedup(
    const ArtifactExistenceService& service, DigestReader& input,
    const std::function<Result<void>(std::span<const Digest>)>& emit_absent,
    std::size_t batch_size = 65536);

}  // namespace abf::service
