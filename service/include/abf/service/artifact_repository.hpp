// The exact store (docs/protocol.md section 1): the expensive, authoritative answer
// to "does this artifact exist in catalog version v?". A Bloom filter in front
// of it only ever saves calls; it never replaces one with a guess.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/fingerprint.hpp"
#include "abf/scheme.hpp"

namespace abf::service {

// The catalog a store holds, as the snapshots used with it must name it
// (docs/protocol.md section 8): a snapshot of another catalog would turn its
// `absent` answers into wrong answers.
struct CatalogBinding {
  // The catalog's id. Zero for a catalog that has no id yet: no snapshot
  // matches it (a snapshot's zero catalogId means "of no catalog").
  CatalogId id;
  // Names the catalog in error messages ("catalog /srv/catalog.db").
  std::string name;
};

// What one catalog version holds, as a snapshot built from that version
// must carry it (docs/protocol.md, section 8): the number of digests present
// and the content fingerprint of that set (abf/fingerprint.hpp). Two
// catalog states with the same id and version but different contents (a
// catalog restored from a backup and advanced again) differ here.
struct CatalogContent {
  std::uint64_t item_count = 0;
  ContentFingerprint fingerprint;  // zero for the empty set

  friend bool operator==(const CatalogContent&, const CatalogContent&) = default;
};

// The catalog's newest version and its recorded content (head_record).
struct HeadRecord {
  std::uint64_t version = 0;
  std::optional<CatalogContent> content;  // none where the store keeps no record
  // Without a content: why, and how to make the store keep one, where the
  // store can say (a SqliteCatalog older than schema 3: `abf catalog
  // upgrade`). A reader that answers at the head more than once cannot
  // notice a rewritten history without the content (abf serve refuses).
  std::string no_content_reason;
};

// What the versions in (after, upto] changed, from the store's per-version
// record (no digest is read).
struct VersionChanges {
  std::uint64_t versions = 0;  // upto - after
  std::uint64_t added = 0;     // digests added (each addition once, re-additions included)
  std::uint64_t removed = 0;   // digests removed
};

// Receives digests in chunks; an error it returns stops the walk.
using DigestSink = std::function<Result<void>(std::span<const Digest>)>;

// The exact store interface. Catalog versions are integers that grow by one
// with every change; version 0 is the empty catalog. An artifact exists at
// version v when it was added at a version <= v and not removed at a version
// <= v.
class ArtifactRepository {
 public:
  virtual ~ArtifactRepository() = default;

  // Whether `digest` exists at `catalog_version`. Errors: kCatalog when the
  // store cannot answer (I/O, lock timeout, corrupt database).
  virtual Result<bool> exists_at_version(const Digest& digest, std::uint64_t catalog_version) = 0;

  // The batch form: exists[i] for digests[i], all at `catalog_version`, as one
  // unit of work (one transaction for a database). `exists` must be at least
  // as long as `digests` (kInvalidArgument otherwise). On error the contents
  // of `exists` are unspecified.
  virtual Result<void> exists_at_version(std::span<const Digest> digests,
                                         std::uint64_t catalog_version, std::span<bool> exists) = 0;

  // The newest catalog version the store knows.
  virtual Result<std::uint64_t> latest_version() = 0;

  // The newest version and, where the store records it, what that version
  // held when it was committed, read together. What a service watches to
  // notice a catalog rewritten under it (a backup restored, then advanced
  // again: the same version numbers with other contents; docs/protocol.md
  // section 8). The default reads latest_version() and records nothing; a
  // store that keeps per-version contents should override it.
  virtual Result<HeadRecord> head_record() {
    auto latest = latest_version();
    if (!latest) return std::unexpected(latest.error());
    return HeadRecord{.version = *latest, .content = std::nullopt, .no_content_reason = {}};
  }

  // What `catalog_version` holds: its item count and content fingerprint.
  // kInvalidArgument if the version does not exist yet (greater than
  // latest_version()); kCatalog when the store cannot answer.
  virtual Result<CatalogContent> content_at_version(std::uint64_t catalog_version) = 0;
  // What the versions in (after, upto] added and removed. kInvalidArgument
  // if after > upto or upto is newer than latest_version().
  virtual Result<VersionChanges> changes_between(std::uint64_t after, std::uint64_t upto) = 0;

  // Streams every digest added at a version in (after, upto] to `sink`, in
  // chunks of at most `chunk_size` (0: a default), in no particular order,
  // from one consistent view of the store: a digest added, removed and added
  // again in the range comes once per addition; one removed again after its
  // addition still comes (a superset of those present at `upto` that were
  // absent at `after` is all a caller may rely on). This is what answers
  // "may the snapshot of `after` be wrong about this digest at `upto`?"
  // (docs/protocol.md section 8). Same errors as changes_between, then the
  // store's, then the sink's, as they are.
  virtual Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                             const DigestSink& sink,
                                             std::size_t chunk_size = 0) = 0;

  // Up to `count` digests present at `catalog_version`, picked at random
  // (every one when the version holds no more than `count`): what the
  // binding check probes a snapshot's filter with (check_snapshot_content).
  // kInvalidArgument if the version does not exist yet.
  virtual Result<std::vector<Digest>> sample_at_version(std::uint64_t catalog_version,
                                                        std::size_t count) = 0;

  // The catalog this store holds, when it names one. An
  // ArtifactExistenceService over a store that names one uses only
  // snapshots of that catalog (check_snapshot_catalog). None (the default):
  // the store names no catalog, and snapshots are not checked; a store that
  // can hold more than one catalog should override this.
  virtual std::optional<CatalogBinding> catalog_binding() const { return std::nullopt; }
};

// An exact store held in memory, with the same version semantics as the
// SQLite catalog: the reference the service tests compare against, and a
// stand-in for embedding. Thread-safe (one mutex; not meant to be fast).
class MemoryRepository final : public ArtifactRepository {
 public:
  // A store that names no catalog (snapshots used with it are not checked).
  MemoryRepository() = default;
  // A store bound to catalog `id`, as a SqliteCatalog is to its own.
  explicit MemoryRepository(const CatalogId& id) : id_(id) {}

  // Adds the digests as one new version (those already present are left as
  // they are) and returns that version.
  std::uint64_t add(std::span<const Digest> digests);
  // Removes the digests as one new version (those absent are ignored) and
  // returns that version.
  std::uint64_t remove(std::span<const Digest> digests);
  // Every digest present at `catalog_version`, in ascending byte order.
  std::vector<Digest> digests_at_version(std::uint64_t catalog_version) const;

  Result<bool> exists_at_version(const Digest& digest, std::uint64_t catalog_version) override;
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t catalog_version,
                                 std::span<bool> exists) override;
  Result<std::uint64_t> latest_version() override;
  // Kept per version, as a schema-3 SqliteCatalog keeps it.
  Result<CatalogContent> content_at_version(std::uint64_t catalog_version) override;
  Result<VersionChanges> changes_between(std::uint64_t after, std::uint64_t upto) override;
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const DigestSink& sink, std::size_t chunk_size = 0) override;
  Result<std::vector<Digest>> sample_at_version(std::uint64_t catalog_version,
                                                std::size_t count) override;
  // {id, "memory catalog <id>"} when constructed with an id; none otherwise.
  std::optional<CatalogBinding> catalog_binding() const override;

 private:
  // One lifetime of a digest in the catalog: [added, removed).
  struct Interval {
    std::uint64_t added = 0;
    std::uint64_t removed = 0;  // 0: never removed
  };
  bool exists_locked(const Digest& digest, std::uint64_t catalog_version) const;
  Result<void> check_range_locked(std::uint64_t after, std::uint64_t upto) const;

  std::optional<CatalogId> id_;
  mutable std::mutex mutex_;
  std::uint64_t version_ = 0;
  std::map<Digest, std::vector<Interval>> intervals_;
  std::vector<CatalogContent> contents_{CatalogContent{}};  // [v]: version v's
  // changes_[v - 1]: what version v added and removed.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> changes_;
};

}  // namespace abf::service
