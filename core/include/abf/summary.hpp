// A filter's summary: what a filter or filter set is, in one value (its
// layout, protocol, counts, catalog binding, fingerprints, and, when asked,
// how full it is). Every report of a filter is made from one: the CLI's
// summaries and JSON, `abf inspect`'s statistics, the service's gauges and
// the Python binding's info dicts. A new field added here reaches them all.
#pragma once

#include <cstdint>
#include <optional>

#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/fingerprint.hpp"
#include "abf/scheme.hpp"

namespace abf {

// Whether summarize() counts the set bits: that reads every word of the
// payload once; the rest reads only the filter's fields.
enum class SummaryBits : std::uint8_t { kSkip, kCount };

struct FilterSummary {
  // A plain filter is one shard: its n_i is n and its m_i is m.
  std::uint32_t shard_count = 1;
  std::uint64_t expected_item_count = 0;        // n of the set
  std::uint64_t shard_expected_item_count = 0;  // n_i of every shard
  double target_fpp = 0.0;                      // p
  std::uint64_t inserted_item_count = 0;        // summed over the shards, duplicates included
  std::uint64_t bit_count = 0;                  // m: summed over the shards
  std::uint64_t shard_bit_count = 0;            // m_i of every shard
  std::uint32_t hash_count = 0;                 // k of every shard
  std::uint32_t hash_protocol_version = 0;      // 1 (unkeyed) or 2 (keyed)
  bool keyed = false;
  KeyFingerprint key_fingerprint{};  // names the key (never the key); all zero unkeyed
  std::uint64_t catalog_version = 0;
  CatalogId catalog_id{};  // all zero: tied to no catalog
  // Of the digests inserted (a set: the shards' sum); none when unknown.
  std::optional<ContentFingerprint> content_fingerprint;
  // The modeled rate at the inserted count: (-expm1(-k * inserted / m))^k; a
  // set's is the mean over its shards (an absent digest meets one shard).
  double estimated_fpp = 0.0;
  // SummaryBits::kCount only (0 otherwise): set bits, and set bits / m.
  bool bits_counted = false;
  std::uint64_t popcount = 0;
  double fill_ratio = 0.0;
};

namespace detail {
// What a Filter and a FilterSet both answer, by the same names.
template <class F>
FilterSummary summarize_common(const F& f, SummaryBits bits) {
  FilterSummary s;
  s.expected_item_count = f.expected_item_count();
  s.target_fpp = f.target_fpp();
  s.inserted_item_count = f.inserted_item_count();
  s.bit_count = f.bit_count();
  s.hash_count = f.hash_count();
  s.hash_protocol_version = f.hash_protocol_version();
  s.keyed = f.scheme().keyed();
  s.key_fingerprint = f.scheme().key_fingerprint();
  s.catalog_version = f.catalog_version();
  s.catalog_id = f.catalog_id();
  s.content_fingerprint = f.content_fingerprint();
  s.estimated_fpp = f.estimate_false_positive_rate();
  if (bits == SummaryBits::kCount) {
    s.bits_counted = true;
    s.popcount = f.popcount();
    // As fill_ratio() computes it, from the one count.
    s.fill_ratio = static_cast<double>(s.popcount) / static_cast<double>(s.bit_count);
  }
  return s;
}
}  // namespace detail

// The summary of one filter.
inline FilterSummary summarize(const Filter& filter, SummaryBits bits = SummaryBits::kCount) {
  FilterSummary s = detail::summarize_common(filter, bits);
  s.shard_count = 1;
  s.shard_expected_item_count = filter.expected_item_count();
  s.shard_bit_count = filter.bit_count();
  return s;
}

// The summary of a filter set, as a whole (a one-shard set: its filter's).
inline FilterSummary summarize(const FilterSet& set, SummaryBits bits = SummaryBits::kCount) {
  FilterSummary s = detail::summarize_common(set, bits);
  s.shard_count = set.shard_count();
  s.shard_expected_item_count = set.shard_expected_item_count();
  s.shard_bit_count = set.shard_bit_count();
  return s;
}

}  // namespace abf
