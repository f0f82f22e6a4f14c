// MemoryRepository: the in-memory exact store with catalog versions.
#include "abf/service/artifact_repository.hpp"

#include <algorithm>
#include <iterator>
#include <random>
#include <string>

#include "catalog_reach.hpp"

namespace abf::service {

Result<CatalogContent> content_in_reach(ArtifactRepository& catalog, std::uint64_t version,
                                        std::string_view named, std::string_view catalog_name,
                                        std::string_view consequence) {
  auto content = catalog.content_at_version(version);
  if (content || content.error().code != ErrorCode::kInvalidArgument) return content;
  auto latest = catalog.latest_version();
  const std::string reach =
      latest ? "only reaches version " + std::to_string(*latest) : content.error().message;
  return fail(ErrorCode::kCatalogMismatch,
              std::string(named) + " is of catalog version " + std::to_string(version) + ", but " +
                  std::string(catalog_name) + " " + reach +
                  " (a damaged catalog, or one restored from an older backup?)" +
                  std::string(consequence) + "; refused");
}

bool MemoryRepository::exists_locked(const Digest& digest, std::uint64_t catalog_version) const {
  const auto it = intervals_.find(digest);
  if (it == intervals_.end()) return false;
  for (const Interval& interval : it->second) {
    if (interval.added <= catalog_version &&
        (interval.removed == 0 || interval.removed > catalog_version)) {
      return true;
    }
  }
  return false;
}

std::uint64_t MemoryRepository::add(std::span<const Digest> digests) {
  const std::lock_guard lock(mutex_);
  const std::uint64_t version = ++version_;
  CatalogContent content = contents_.back();
  std::uint64_t added = 0;
  for (const Digest& digest : digests) {
    auto& list = intervals_[digest];
    if (!list.empty() && list.back().removed == 0) continue;  // present already
    list.push_back({version, 0});
    ++content.item_count;
    content.fingerprint += ContentFingerprint::of(digest);
    ++added;
  }
  contents_.push_back(content);
  changes_.emplace_back(added, 0);
  return version;
}

std::uint64_t MemoryRepository::remove(std::span<const Digest> digests) {
  const std::lock_guard lock(mutex_);
  const std::uint64_t version = ++version_;
  CatalogContent content = contents_.back();
  std::uint64_t removed = 0;
  for (const Digest& digest : digests) {
    const auto it = intervals_.find(digest);
    if (it == intervals_.end() || it->second.back().removed != 0) continue;
    it->second.back().removed = version;
    --content.item_count;
    content.fingerprint -= ContentFingerprint::of(digest);
    ++removed;
  }
  contents_.push_back(content);
  changes_.emplace_back(0, removed);
  return version;
}

std::vector<Digest> MemoryRepository::digests_at_version(std::uint64_t catalog_version) const {
  const std::lock_guard lock(mutex_);
  std::vector<Digest> out;
  for (const auto& [digest, list] : intervals_) {
    if (exists_locked(digest, catalog_version)) out.push_back(digest);
  }
  return out;
}

Result<bool> MemoryRepository::exists_at_version(const Digest& digest,
                                                 std::uint64_t catalog_version) {
  const std::lock_guard lock(mutex_);
  return exists_locked(digest, catalog_version);
}

Result<void> MemoryRepository::exists_at_version(std::span<const Digest> digests,
                                                 std::uint64_t catalog_version,
                                                 std::span<bool> exists) {
  if (exists.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "memory repository: answer span holds " +
                                                 std::to_string(exists.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  const std::lock_guard lock(mutex_);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    exists[i] = exists_locked(digests[i], catalog_version);
  }
  return {};
}

Result<std::uint64_t> MemoryRepository::latest_version() {
  const std::lock_guard lock(mutex_);
  return version_;
}

Result<CatalogContent> MemoryRepository::content_at_version(std::uint64_t catalog_version) {
  const std::lock_guard lock(mutex_);
  if (catalog_version > version_) {
    return fail(ErrorCode::kInvalidArgument,
                "memory repository: version " + std::to_string(catalog_version) +
                    " does not exist (latest is " + std::to_string(version_) + ")");
  }
  return contents_[catalog_version];
}

Result<void> MemoryRepository::check_range_locked(std::uint64_t after, std::uint64_t upto) const {
  if (after > upto || upto > version_) {
    return fail(ErrorCode::kInvalidArgument,
                "memory repository: no version range (" + std::to_string(after) + ", " +
                    std::to_string(upto) + "] (latest is " + std::to_string(version_) + ")");
  }
  return {};
}

Result<VersionChanges> MemoryRepository::changes_between(std::uint64_t after, std::uint64_t upto) {
  const std::lock_guard lock(mutex_);
  if (auto ok = check_range_locked(after, upto); !ok) return std::unexpected(ok.error());
  VersionChanges changes{.versions = upto - after};
  for (std::uint64_t version = after + 1; version <= upto; ++version) {
    changes.added += changes_[version - 1].first;
    changes.removed += changes_[version - 1].second;
  }
  return changes;
}

Result<void> MemoryRepository::for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                                     const DigestSink& sink,
                                                     std::size_t chunk_size) {
  if (chunk_size == 0) chunk_size = 65536;
  std::vector<Digest> added;
  {
    const std::lock_guard lock(mutex_);
    if (auto ok = check_range_locked(after, upto); !ok) return ok;
    for (const auto& [digest, list] : intervals_) {
      for (const Interval& interval : list) {
        if (interval.added > after && interval.added <= upto) added.push_back(digest);
      }
    }
  }
  // The sink is called without the lock: it may ask this store again.
  for (std::size_t at = 0; at < added.size(); at += chunk_size) {
    const std::span<const Digest> part(added.data() + at, std::min(chunk_size, added.size() - at));
    if (auto ok = sink(part); !ok) return ok;
  }
  return {};
}

Result<std::vector<Digest>> MemoryRepository::sample_at_version(std::uint64_t catalog_version,
                                                                 std::size_t count) {
  if (auto known = content_at_version(catalog_version); !known) {
    return std::unexpected(known.error());
  }
  std::vector<Digest> all = digests_at_version(catalog_version);
  std::vector<Digest> out;
  std::ranges::sample(all, std::back_inserter(out), static_cast<std::ptrdiff_t>(count),
                      std::mt19937_64(std::random_device{}()));
  return out;
}

std::optional<CatalogBinding> MemoryRepository::catalog_binding() const {
  if (!id_) return std::nullopt;
  return CatalogBinding{*id_, "memory catalog " + id_->hex()};
}

}  // namespace abf::service
