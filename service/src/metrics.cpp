// Sharded counters and their Prometheus / JSON exposition.
#include "abf/service/metrics.hpp"

#include <cmath>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/service/snapshot_publisher.hpp"
#include "abf/summary.hpp"

namespace abf::service {
namespace {

constexpr std::array<std::string_view, kCounterCount> kCounterNames = {
    "artifact_bloom.query.count",
    "artifact_bloom.negative.count",
    "artifact_bloom.maybe.count",
    "artifact_bloom.false_positive.count",
    "artifact_bloom.exact_lookup.count",
    "artifact_bloom.filter_bypass.count",
    "artifact_bloom.invalid_digest.count",
    "artifact_bloom.snapshot.load_failure.count",
    "artifact_bloom.snapshot.publish.count",
    "artifact_bloom.head_lookup.count",
    "artifact_bloom.head_present.count",
};

// The Prometheus names (https://prometheus.io/docs/practices/naming/): a
// counter ends in _total. The dotted names above stay the JSON keys.
constexpr std::array<std::string_view, kCounterCount> kCounterPrometheusNames = {
    "artifact_bloom_query_total",
    "artifact_bloom_negative_total",
    "artifact_bloom_maybe_total",
    "artifact_bloom_false_positive_total",
    "artifact_bloom_exact_lookup_total",
    "artifact_bloom_filter_bypass_total",
    "artifact_bloom_invalid_digest_total",
    "artifact_bloom_snapshot_load_failure_total",
    "artifact_bloom_snapshot_publish_total",
    "artifact_bloom_head_lookup_total",
    "artifact_bloom_head_present_total",
};

constexpr std::array<std::string_view, kCounterCount> kCounterHelp = {
    "Existence queries answered (valid digests).",
    "Queries answered absent by the filter alone, without an exact lookup.",
    "Queries the filter answered Maybe.",
    "Maybe answers the exact store then answered absent.",
    "Digests looked up in the exact store.",
    "Queries sent to the exact store without consulting the filter.",
    "Malformed digests refused.",
    "Snapshot loads that failed or were refused; the previous snapshot kept serving.",
    "Snapshots published.",
    "Filter absent answers asked of the exact store at the catalog's head (the digest may have "
    "been added after the snapshot's version).",
    "Head lookups that found the digest present: absent answers the snapshot alone would have "
    "got wrong.",
};

double ratio(std::uint64_t numerator, std::uint64_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

// Each thread keeps to one shard, chosen round-robin when it first counts.
std::size_t shard_index() noexcept {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t index =
      next.fetch_add(1, std::memory_order_relaxed) % Metrics::kShards;
  return index;
}

std::string format_number(double value) {
  if (std::isnan(value)) return "NaN";
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", value);
  return buffer;
}

struct Gauge {
  std::string_view name;  // Prometheus: no _count (a histogram's suffix), ratios _ratio
  std::string_view help;
  double value;
};

// Beside each, the spec's dotted name (section 9), which to_json keeps.
std::vector<Gauge> gauges(const MetricsSnapshot& m) {
  return {
      // artifact_bloom.bit_count, in bytes: Prometheus' base unit (promtool
      // refuses "bits"); m is a multiple of 64, so m / 8 is exact.
      {"artifact_bloom_size_bytes", "Bytes of the serving filter's bits (m / 8, all its shards).",
       static_cast<double>(m.bit_count / 8)},
      // artifact_bloom.hash_count
      {"artifact_bloom_hash_functions", "Probes k of the serving filter.",
       static_cast<double>(m.hash_count)},
      // artifact_bloom.expected_item_count
      {"artifact_bloom_expected_items", "Design capacity n of the serving filter.",
       static_cast<double>(m.expected_item_count)},
      // artifact_bloom.inserted_item_count
      {"artifact_bloom_inserted_items", "Digests inserted in the serving filter.",
       static_cast<double>(m.inserted_item_count)},
      // artifact_bloom.shard_count (this service's addition)
      {"artifact_bloom_shards", "Shards of the serving filter set (1: one filter).",
       static_cast<double>(m.shard_count)},
      // artifact_bloom.catalog_version
      {"artifact_bloom_catalog_version", "Catalog version of the serving snapshot.",
       static_cast<double>(m.catalog_version)},
      // artifact_bloom.fill_ratio
      {"artifact_bloom_fill_ratio", "Set bits / m of the serving filter.", m.fill_ratio},
      // artifact_bloom.estimated_fpp
      {"artifact_bloom_estimated_false_positive_ratio",
       "Modeled false-positive rate at the inserted count.", m.estimated_fpp},
      // artifact_bloom.target_fpp
      {"artifact_bloom_target_false_positive_ratio",
       "Design false-positive rate of the serving filter.", m.target_fpp},
      // artifact_bloom.snapshot.age_seconds
      {"artifact_bloom_snapshot_age_seconds", "Seconds since the serving snapshot was published.",
       m.age_seconds},
      // negativeBypassRatio
      {"artifact_bloom_negative_bypass_ratio", "negative / total queries.",
       m.negative_bypass_ratio()},
      // observedFalsePositiveRate
      {"artifact_bloom_observed_false_positive_ratio",
       "false_positive / (negative + false_positive).", m.observed_false_positive_rate()},
      // falseDiscoveryRatio
      {"artifact_bloom_false_discovery_ratio", "false_positive / maybe.",
       m.false_discovery_ratio()},
  };
}

}  // namespace

std::string_view counter_name(Counter counter) noexcept {
  return kCounterNames[static_cast<std::size_t>(counter)];
}

double MetricsSnapshot::negative_bypass_ratio() const noexcept {
  return ratio((*this)[Counter::kNegative], (*this)[Counter::kQuery]);
}

double MetricsSnapshot::observed_false_positive_rate() const noexcept {
  const std::uint64_t fp = (*this)[Counter::kFalsePositive];
  return ratio(fp, (*this)[Counter::kNegative] + fp);
}

double MetricsSnapshot::false_discovery_ratio() const noexcept {
  return ratio((*this)[Counter::kFalsePositive], (*this)[Counter::kMaybe]);
}

void Metrics::add(Counter counter, std::uint64_t amount) noexcept {
  // Relaxed: a counter orders nothing; its shard is (almost always) this
  // thread's alone, so the line stays in this core's cache.
  shards_[shard_index()].values[static_cast<std::size_t>(counter)].fetch_add(
      amount, std::memory_order_relaxed);
}

std::uint64_t Metrics::get(Counter counter) const noexcept {
  std::uint64_t sum = 0;
  for (const Shard& shard : shards_) {
    sum += shard.values[static_cast<std::size_t>(counter)].load(std::memory_order_relaxed);
  }
  return sum;
}

MetricsSnapshot Metrics::collect(const Snapshot* current) const {
  MetricsSnapshot m;
  for (std::size_t i = 0; i < kCounterCount; ++i) m.counters[i] = get(static_cast<Counter>(i));
  if (current != nullptr) {
    // A filter set (one shard for a plain snapshot): bits and inserted
    // digests summed over the shards, n the set's, fill and modeled rate
    // over the whole set (abf::summarize).
    const FilterSummary filter = summarize(current->filter);
    m.has_snapshot = true;
    m.shard_count = filter.shard_count;
    m.bit_count = filter.bit_count;
    m.hash_count = filter.hash_count;
    m.expected_item_count = filter.expected_item_count;
    m.inserted_item_count = filter.inserted_item_count;
    m.catalog_version = filter.catalog_version;
    m.fill_ratio = filter.fill_ratio;
    m.estimated_fpp = filter.estimated_fpp;
    m.target_fpp = filter.target_fpp;
    m.age_seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - current->published_at)
            .count();
  }
  return m;
}

std::string to_prometheus(const MetricsSnapshot& metrics) {
  const LabelledMetrics source{{}, &metrics};
  return to_prometheus(std::span<const LabelledMetrics>(&source, 1));
}

std::string to_prometheus(std::span<const LabelledMetrics> sources) {
  std::string out;
  if (sources.empty()) return out;
  const auto sample = [&](const std::string& name, std::string_view labels,
                          const std::string& value) {
    out += name;
    if (!labels.empty()) {
      out += '{';
      out += labels;
      out += '}';
    }
    out += ' ';
    out += value;
    out += '\n';
  };
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    const std::string name(kCounterPrometheusNames[i]);
    out += "# HELP " + name + " " + std::string(kCounterHelp[i]) + "\n";
    out += "# TYPE " + name + " counter\n";
    for (const LabelledMetrics& source : sources) {
      sample(name, source.labels, std::to_string(source.metrics->counters[i]));
    }
  }
  // Every snapshot has the same gauges, in the same order.
  std::vector<std::vector<Gauge>> values;
  values.reserve(sources.size());
  for (const LabelledMetrics& source : sources) values.push_back(gauges(*source.metrics));
  for (std::size_t g = 0; g < values.front().size(); ++g) {
    const std::string name(values.front()[g].name);
    out += "# HELP " + name + " " + std::string(values.front()[g].help) + "\n";
    out += "# TYPE " + name + " gauge\n";
    for (std::size_t s = 0; s < sources.size(); ++s) {
      sample(name, sources[s].labels, format_number(values[s][g].value));
    }
  }
  return out;
}

std::string to_json(const MetricsSnapshot& metrics, int indent) {
  nlohmann::ordered_json json;
  json["counters"] = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    json["counters"][std::string(kCounterNames[i])] = metrics.counters[i];
  }
  json["hasSnapshot"] = metrics.has_snapshot;
  json["gauges"] = {
      {"artifact_bloom.bit_count", metrics.bit_count},
      {"artifact_bloom.hash_count", metrics.hash_count},
      {"artifact_bloom.expected_item_count", metrics.expected_item_count},
      {"artifact_bloom.inserted_item_count", metrics.inserted_item_count},
      {"artifact_bloom.shard_count", metrics.shard_count},
      {"artifact_bloom.catalog_version", metrics.catalog_version},
      {"artifact_bloom.fill_ratio", metrics.fill_ratio},
      {"artifact_bloom.estimated_fpp", metrics.estimated_fpp},
      {"artifact_bloom.target_fpp", metrics.target_fpp},
      {"artifact_bloom.snapshot.age_seconds", metrics.age_seconds},
  };
  json["derived"] = {
      {"negativeBypassRatio", metrics.negative_bypass_ratio()},
      {"observedFalsePositiveRate", metrics.observed_false_positive_rate()},
      {"falseDiscoveryRatio", metrics.false_discovery_ratio()},
  };
  return json.dump(indent);
}

}  // namespace abf::service
