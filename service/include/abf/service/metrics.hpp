// Observability (docs/protocol.md section 9): the service's counters, the current
// snapshot's gauges, and the derived ratios, exported as Prometheus text
// exposition and as JSON.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace abf::service {

struct Snapshot;

// The counters. The first four and the load failures carry the names of
// section 9; the others are this service's additions.
enum class Counter : std::size_t {
  kQuery,                // artifact_bloom.query.count: answers given (valid digests)
  kNegative,             // artifact_bloom.negative.count: answered absent by the filter alone
  kMaybe,                // artifact_bloom.maybe.count: the filter said Maybe
  kFalsePositive,        // artifact_bloom.false_positive.count: Maybe, then the store said absent
  kExactLookup,          // artifact_bloom.exact_lookup.count: digests asked of the exact store
  kFilterBypass,         // artifact_bloom.filter_bypass.count: store asked without the filter
                         //   (filter disabled, or a version other than the snapshot's)
  kInvalidDigest,        // artifact_bloom.invalid_digest.count: malformed digests refused
  kSnapshotLoadFailure,  // artifact_bloom.snapshot.load_failure.count
  kSnapshotPublish,      // artifact_bloom.snapshot.publish.count
  kHeadLookup,           // artifact_bloom.head_lookup.count: filter absent, asked at the
                         //   catalog's head (added after the snapshot's version, or over
                         //   the service's bound on those it holds)
  kHeadPresent,          // artifact_bloom.head_present.count: of those, present at the head
                         //   (absent answers the snapshot alone would have got wrong)
};
inline constexpr std::size_t kCounterCount = 11;

// The dotted name of a counter, e.g. "artifact_bloom.negative.count".
std::string_view counter_name(Counter counter) noexcept;

// Everything exported at one moment.
struct MetricsSnapshot {
  std::array<std::uint64_t, kCounterCount> counters{};
  std::uint64_t operator[](Counter counter) const noexcept {
    return counters[static_cast<std::size_t>(counter)];
  }

  // Gauges of the serving snapshot; has_snapshot false (and zeros) if none.
  // For a filter set (FilterSet): bits and inserted digests summed over
  // the shards, expected_item_count the set's n (the shards' n_i sum to a
  // little more, their headroom, but the set takes no more than n),
  // hash_count every shard's k, fill_ratio the set bits over all bits, and
  // estimated_fpp the shards' mean modeled rate (an absent digest meets one
  // shard, each with probability 1/S).
  bool has_snapshot = false;
  std::uint64_t bit_count = 0;
  std::uint64_t hash_count = 0;
  std::uint64_t expected_item_count = 0;
  std::uint64_t inserted_item_count = 0;
  std::uint64_t shard_count = 0;  // 1 for a plain snapshot
  std::uint64_t catalog_version = 0;
  double fill_ratio = 0.0;
  double estimated_fpp = 0.0;  // modeled rate at the inserted count
  double target_fpp = 0.0;
  double age_seconds = 0.0;  // since this process published the snapshot

  // Derived (section 9). A ratio whose denominator is 0 is reported as 0.
  // total is the query counter: every answer given, bypassed ones included.
  double negative_bypass_ratio() const noexcept;         // negative / total
  double observed_false_positive_rate() const noexcept;  // fp / (negative + fp)
  double false_discovery_ratio() const noexcept;         // fp / maybe
};

// Prometheus text exposition format 0.0.4: one `# HELP`, `# TYPE` and sample
// line per metric, named by Prometheus' conventions rather than the dotted
// names: counters end in _total (artifact_bloom.negative.count is
// artifact_bloom_negative_total), no gauge ends in _count (a histogram's
// suffix: _hash_functions, _expected_items, _shards, _inserted_items), sizes
// are in bytes (artifact_bloom.bit_count is artifact_bloom_size_bytes, m / 8:
// promtool refuses bits), values in 0..1 end in _ratio (_fill_ratio,
// _estimated_false_positive_ratio, _target_false_positive_ratio and the
// derived _negative_bypass_ratio, _observed_false_positive_ratio,
// _false_discovery_ratio), and times are seconds (_snapshot_age_seconds).
// docs/service.md has the whole table.
std::string to_prometheus(const MetricsSnapshot& metrics);

// One source of a many-source exposition (a server's tenant): its metrics,
// and the labels its samples carry, as they go inside the braces (values
// already escaped), e.g. tenant="a".
struct LabelledMetrics {
  std::string_view labels;
  const MetricsSnapshot* metrics = nullptr;
};
// The exposition of several sources: each family's HELP and TYPE once, then
// one sample per source with its labels, in the order given ("" for none).
// A source with empty labels writes its samples as to_prometheus does.
std::string to_prometheus(std::span<const LabelledMetrics> sources);

// A JSON object: "counters" and "gauges" keyed by the dotted names, and
// "derived" with negativeBypassRatio, observedFalsePositiveRate and
// falseDiscoveryRatio. Pretty-printed when `indent` >= 0.
std::string to_json(const MetricsSnapshot& metrics, int indent = 2);

// Counters safe to bump from any number of threads: each thread adds to one
// of kShards cache-line-sized shards with relaxed atomics, so the hot path
// never contends on a shared line; reads sum the shards. A read taken while
// others count sees each counter at some value it passed through; counters
// read together are not one atomic cut (fine for monitoring).
class Metrics {
 public:
  static constexpr std::size_t kShards = 16;

  void add(Counter counter, std::uint64_t amount = 1) noexcept;
  std::uint64_t get(Counter counter) const noexcept;

  // The counters now, plus the gauges of `current` (may be null).
  MetricsSnapshot collect(const Snapshot* current) const;

 private:
  struct alignas(64) Shard {
    std::array<std::atomic<std::uint64_t>, kCounterCount> values{};
  };
  std::array<Shard, kShards> shards_{};
};

}  // namespace abf::service
