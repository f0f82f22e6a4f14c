// The exact store (PROTOCOL.md section 1): the expensive, authoritative answer
// to "does this artifact exist in catalog version v?". A Bloom filter in front
// of it only ever saves calls; it never replaces one with a guess.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"

namespace abf::service {

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
};

// An exact store held in memory, with the same version semantics as the
// SQLite catalog: the reference the service tests compare against, and a
// stand-in for embedding. Thread-safe (one mutex; not meant to be fast).
class MemoryRepository final : public ArtifactRepository {
 public:
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

 private:
  // One lifetime of a digest in the catalog: [added, removed).
  struct Interval {
    std::uint64_t added = 0;
    std::uint64_t removed = 0;  // 0: never removed
  };
  bool exists_locked(const Digest& digest, std::uint64_t catalog_version) const;

  mutable std::mutex mutex_;
  std::uint64_t version_ = 0;
  std::map<Digest, std::vector<Interval>> intervals_;
};

}  // namespace abf::service
