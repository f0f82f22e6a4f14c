// ArtifactExistenceService and the bulk dedup job.
#include "abf/service/service.hpp"

#include <chrono>
#include <string>
#include <vector>

namespace abf::service {
namespace {

double ratio(std::uint64_t numerator, std::uint64_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

Error no_snapshot() {
  return Error{ErrorCode::kInvalidArgument,
               "existence service: no snapshot has been published yet; there is no catalog "
               "version to answer for"};
}

}  // namespace

double BatchCounts::negative_bypass_ratio() const noexcept { return ratio(negative, total); }
double BatchCounts::observed_false_positive_rate() const noexcept {
  return ratio(false_positive, negative + false_positive);
}
double BatchCounts::false_discovery_ratio() const noexcept { return ratio(false_positive, maybe); }

BatchCounts& BatchCounts::operator+=(const BatchCounts& other) noexcept {
  total += other.total;
  negative += other.negative;
  maybe += other.maybe;
  false_positive += other.false_positive;
  exact_lookups += other.exact_lookups;
  present += other.present;
  return *this;
}

ArtifactExistenceService::ArtifactExistenceService(const SnapshotPublisher& publisher,
                                                   ArtifactRepository& repository, Metrics* metrics,
                                                   ServiceOptions options)
    : publisher_(publisher),
      repository_(repository),
      metrics_(metrics),
      options_(options),
      binding_(repository.catalog_binding()) {}

Result<void> ArtifactExistenceService::check_snapshot(const Snapshot& snapshot) const {
  if (!binding_) return {};
  return check_snapshot_catalog(snapshot.filter, snapshot.source, binding_->id, binding_->name);
}

Result<ExistenceAnswer> ArtifactExistenceService::ask_store(const Digest& digest,
                                                            std::uint64_t version) const {
  auto found = repository_.exists_at_version(digest, version);
  if (!found) return std::unexpected(found.error());
  if (metrics_ != nullptr) metrics_->add(Counter::kExactLookup);
  return ExistenceAnswer{.exists = *found, .catalog_version = version};
}

Result<ExistenceAnswer> ArtifactExistenceService::exists(const Digest& digest) const {
  // One snapshot for the whole query: the version and the filter belong
  // together, whatever is published meanwhile.
  const auto snapshot = publisher_.current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  if (auto ok = check_snapshot(*snapshot); !ok) return std::unexpected(ok.error());
  return answer(digest, snapshot->catalog_version(),
                options_.use_filter ? snapshot.get() : nullptr);
}

Result<ExistenceAnswer> ArtifactExistenceService::exists(std::string_view digest_text) const {
  std::string_view hex = digest_text;
  if (hex.starts_with("sha256:")) hex.remove_prefix(7);
  auto digest = parse_hex_digest(hex);
  if (!digest) {
    if (metrics_ != nullptr) metrics_->add(Counter::kInvalidDigest);
    return fail(ErrorCode::kInvalidDigest, "existence query \"" +
                                               std::string(digest_text.substr(0, 80)) +
                                               "\": " + digest.error().message);
  }
  return exists(*digest);
}

Result<ExistenceAnswer> ArtifactExistenceService::exists_at_version(
    const Digest& digest, std::uint64_t catalog_version) const {
  // One reference for the whole query: a publish meanwhile does not change
  // the snapshot this answer is made with.
  const auto snapshot = options_.use_filter ? publisher_.current() : nullptr;
  if (snapshot != nullptr && snapshot->catalog_version() == catalog_version) {
    if (auto ok = check_snapshot(*snapshot); !ok) return std::unexpected(ok.error());
  }
  return answer(digest, catalog_version, snapshot.get());
}

Result<ExistenceAnswer> ArtifactExistenceService::answer(const Digest& digest,
                                                         std::uint64_t catalog_version,
                                                         const Snapshot* snapshot) const {
  if (snapshot == nullptr || snapshot->catalog_version() != catalog_version) {
    // No filter for this version: the store decides alone.
    auto answer = ask_store(digest, catalog_version);
    if (!answer) return answer;
    if (metrics_ != nullptr) {
      metrics_->add(Counter::kFilterBypass);
      metrics_->add(Counter::kQuery);
    }
    return answer;
  }
  if (!snapshot->filter.might_contain(digest)) {
    if (metrics_ != nullptr) {
      metrics_->add(Counter::kNegative);
      metrics_->add(Counter::kQuery);
    }
    return ExistenceAnswer{
        .exists = false, .filter_negative = true, .catalog_version = catalog_version};
  }
  auto answer = ask_store(digest, catalog_version);
  if (!answer) return answer;
  answer->false_positive = !answer->exists;
  if (metrics_ != nullptr) {
    metrics_->add(Counter::kMaybe);
    if (answer->false_positive) metrics_->add(Counter::kFalsePositive);
    metrics_->add(Counter::kQuery);
  }
  return answer;
}

Result<BatchCounts> ArtifactExistenceService::exists_batch(std::span<const Digest> digests,
                                                           std::span<bool> exists) const {
  const auto snapshot = publisher_.current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  return exists_batch(digests, exists, *snapshot);
}

Result<BatchCounts> ArtifactExistenceService::exists_batch(std::span<const Digest> digests,
                                                           std::span<bool> exists,
                                                           const Snapshot& snapshot) const {
  if (exists.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "existence service: answer span holds " +
                                                 std::to_string(exists.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  if (auto ok = check_snapshot(snapshot); !ok) return std::unexpected(ok.error());
  const std::uint64_t version = snapshot.catalog_version();
  BatchCounts counts;
  counts.total = digests.size();
  if (!options_.use_filter) {
    if (auto asked = repository_.exists_at_version(digests, version, exists); !asked) {
      return std::unexpected(asked.error());
    }
    counts.exact_lookups = digests.size();
    for (std::size_t i = 0; i < digests.size(); ++i) counts.present += exists[i] ? 1 : 0;
    if (metrics_ != nullptr) {
      metrics_->add(Counter::kExactLookup, counts.exact_lookups);
      metrics_->add(Counter::kFilterBypass, counts.total);
      metrics_->add(Counter::kQuery, counts.total);
    }
    return counts;
  }

  // Precheck the whole batch with the batch engine; only the Maybe digests
  // go to the store, in one batch call.
  std::vector<Answer> answers(digests.size());
  if (auto queried = snapshot.filter.query(digests, answers, options_.backend); !queried) {
    return std::unexpected(queried.error());
  }
  std::vector<std::uint32_t> maybe_index;
  std::vector<Digest> maybe_digests;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    if (answers[i] == Answer::kMaybe) {
      maybe_index.push_back(static_cast<std::uint32_t>(i));
      maybe_digests.push_back(digests[i]);
    }
    exists[i] = false;
  }
  if (!maybe_digests.empty()) {
    auto found = std::make_unique<bool[]>(maybe_digests.size());
    std::span<bool> found_span(found.get(), maybe_digests.size());
    if (auto asked = repository_.exists_at_version(maybe_digests, version, found_span); !asked) {
      return std::unexpected(asked.error());
    }
    for (std::size_t j = 0; j < maybe_index.size(); ++j) {
      exists[maybe_index[j]] = found_span[j];
      if (found_span[j]) {
        ++counts.present;
      } else {
        ++counts.false_positive;
      }
    }
  }
  counts.maybe = maybe_digests.size();
  counts.negative = counts.total - counts.maybe;
  counts.exact_lookups = counts.maybe;
  if (metrics_ != nullptr) {
    metrics_->add(Counter::kQuery, counts.total);
    metrics_->add(Counter::kNegative, counts.negative);
    metrics_->add(Counter::kMaybe, counts.maybe);
    metrics_->add(Counter::kFalsePositive, counts.false_positive);
    metrics_->add(Counter::kExactLookup, counts.exact_lookups);
  }
  return counts;
}

Result<DedupReport> bulk_dedup(
    const ArtifactExistenceService& service, DigestReader& input,
    const std::function<Result<void>(std::span<const Digest>)>& emit_absent,
    std::size_t batch_size) {
  const auto start = std::chrono::steady_clock::now();
  if (batch_size == 0) batch_size = 65536;
  // Pinned: every batch of the job answers at this one version.
  const auto snapshot = service.publisher().current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  if (auto ok = service.check_snapshot(*snapshot); !ok) return std::unexpected(ok.error());
  DedupReport report;
  report.catalog_version = snapshot->catalog_version();
  std::vector<Digest> batch(batch_size);
  std::vector<Digest> absent;
  absent.reserve(batch_size);
  auto exists = std::make_unique<bool[]>(batch_size);
  for (;;) {
    auto count = input.read(batch);
    if (!count) return std::unexpected(count.error());
    if (*count == 0) break;
    const std::span<const Digest> part(batch.data(), *count);
    auto counts = service.exists_batch(part, std::span<bool>(exists.get(), *count), *snapshot);
    if (!counts) return std::unexpected(counts.error());
    report.counts += *counts;
    absent.clear();
    for (std::size_t i = 0; i < part.size(); ++i) {
      if (!exists[i]) absent.push_back(part[i]);
    }
    if (!absent.empty()) {
      if (auto emitted = emit_absent(absent); !emitted) return std::unexpected(emitted.error());
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace abf::service
