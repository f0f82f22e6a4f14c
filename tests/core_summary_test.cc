// abf::summarize (abf/summary.hpp): the one summary inspect, the JSON
// writers, the service's gauges, the Python binding and the set manifest
// take their fields from. Every field equals the accessor it stands for, on
// plain and keyed filters and on sets; the bit count is read only when asked.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

BuildOptions options_of(bool keyed) {
  BuildOptions options;
  options.catalog_version = 42;
  options.catalog_id = test::golden_catalog_id();
  if (keyed) options.key = test::golden_key().key;
  return options;
}

template <class F>
void expect_common_fields(const FilterSummary& s, const F& f) {
  EXPECT_EQ(s.expected_item_count, f.expected_item_count());
  EXPECT_EQ(s.target_fpp, f.target_fpp());
  EXPECT_EQ(s.inserted_item_count, f.inserted_item_count());
  EXPECT_EQ(s.bit_count, f.bit_count());
  EXPECT_EQ(s.hash_count, f.hash_count());
  EXPECT_EQ(s.hash_protocol_version, f.hash_protocol_version());
  EXPECT_EQ(s.keyed, f.scheme().keyed());
  EXPECT_EQ(s.key_fingerprint, f.scheme().key_fingerprint());
  EXPECT_EQ(s.catalog_version, f.catalog_version());
  EXPECT_EQ(s.catalog_id, f.catalog_id());
  EXPECT_EQ(s.content_fingerprint, f.content_fingerprint());
  EXPECT_EQ(s.estimated_fpp, f.estimate_false_positive_rate());
}

TEST(SummaryTest, AFilterSummaryIsItsAccessorsAndCountsBitsOnlyWhenAsked) {
  const auto digests = test::random_digests(5000, 31);
  for (const bool keyed : {false, true}) {
    auto filter = build_filter(digests, {20000, 0.001}, options_of(keyed));
    ASSERT_TRUE(filter.has_value()) << filter.error().describe();
    const FilterSummary counted = summarize(*filter);
    expect_common_fields(counted, *filter);
    EXPECT_EQ(counted.shard_count, 1u);
    EXPECT_EQ(counted.shard_expected_item_count, filter->expected_item_count());
    EXPECT_EQ(counted.shard_bit_count, filter->bit_count());
    EXPECT_EQ(counted.hash_protocol_version, keyed ? 2u : 1u);
    EXPECT_TRUE(counted.bits_counted);
    EXPECT_EQ(counted.popcount, filter->popcount());
    EXPECT_GT(counted.popcount, 0u);
    EXPECT_EQ(counted.fill_ratio, filter->fill_ratio());

    const FilterSummary skipped = summarize(*filter, SummaryBits::kSkip);
    expect_common_fields(skipped, *filter);
    EXPECT_FALSE(skipped.bits_counted);
    EXPECT_EQ(skipped.popcount, 0u);
    EXPECT_EQ(skipped.fill_ratio, 0.0);
  }
}

TEST(SummaryTest, ASetSummaryIsTheWholeSetWithItsShardShape) {
  const auto digests = test::random_digests(9000, 32);
  for (const bool keyed : {false, true}) {
    auto set = build_filter_set(digests, {30000, 0.01}, 4, options_of(keyed));
    ASSERT_TRUE(set.has_value()) << set.error().describe();
    const FilterSummary s = summarize(*set);
    expect_common_fields(s, *set);
    EXPECT_EQ(s.shard_count, 4u);
    EXPECT_EQ(s.shard_expected_item_count, set->shard_expected_item_count());
    EXPECT_EQ(s.shard_bit_count, set->shard_bit_count());
    EXPECT_EQ(s.bit_count, 4 * s.shard_bit_count);
    EXPECT_EQ(s.inserted_item_count, digests.size());
    EXPECT_EQ(s.popcount, set->popcount());
    EXPECT_FALSE(summarize(*set, SummaryBits::kSkip).bits_counted);
  }
}

}  // namespace
}  // namespace abf
