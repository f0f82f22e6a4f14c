// Layout selection (docs/protocol.md section 3) against layout.tsv and the
// worked values of the spec.
#include <gtest/gtest.h>

#include <string>

#include "abf/layout.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

ErrorCode code_named(const std::string& name) {
  if (name == "filter_too_large") return ErrorCode::kFilterTooLarge;
  if (name == "invalid_expected_item_count") return ErrorCode::kInvalidExpectedItemCount;
  if (name == "invalid_false_positive_rate") return ErrorCode::kInvalidFalsePositiveRate;
  ADD_FAILURE() << "unknown error name in layout.tsv: " << name;
  return ErrorCode::kInvalidArgument;
}

TEST(Layout, MatchesEveryGoldenRow) {
  const auto rows = test::read_tsv("vectors/layout.tsv");
  ASSERT_GE(rows.size(), 245u);
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 4u);
    const BloomSpec spec{std::stoull(row[0]), test::parse_hex_float(row[1])};
    const auto layout = choose_layout(spec);
    SCOPED_TRACE("n = " + row[0] + ", p = " + row[2]);
    if (row[3] == "ok") {
      ASSERT_TRUE(layout.has_value()) << layout.error().describe();
      EXPECT_EQ(layout->bit_count, std::stoull(row[4]));
      EXPECT_EQ(layout->hash_count, std::stoul(row[5]));
    } else {
      ASSERT_FALSE(layout.has_value());
      EXPECT_EQ(layout.error().code, code_named(row[3])) << layout.error().describe();
    }
  }
}

TEST(Layout, VeryLowRateUsesThirtyTwoProbes) {
  const auto layout = choose_layout({1'000'000, 1e-20});
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->hash_count, 32u);
}

TEST(Layout, VeryHighRateUsesOneProbe) {
  const auto layout = choose_layout({1'000'000, 0.95});
  ASSERT_TRUE(layout.has_value());
  EXPECT_EQ(layout->hash_count, 1u);
  EXPECT_EQ(layout->bit_count, 333'824u);
}

TEST(Layout, RejectsItemCountAboveTwoToThirty) {
  const auto layout = choose_layout({(std::uint64_t{1} << 30) + 1, 0.5});
  ASSERT_FALSE(layout.has_value());
  EXPECT_EQ(layout.error().code, ErrorCode::kInvalidExpectedItemCount);
}

TEST(Layout, RejectsZeroItems) {
  EXPECT_EQ(choose_layout({0, 0.01}).error().code, ErrorCode::kInvalidExpectedItemCount);
}

TEST(Layout, RejectsRatesOutsideTheOpenUnitInterval) {
  for (const double p : {0.0, 1.0, -0.5, 2.0, std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(choose_layout({1000, p}).error().code, ErrorCode::kInvalidFalsePositiveRate) << p;
  }
}

TEST(Layout, RejectsFiltersAboveTwoToThirtyBits) {
  EXPECT_EQ(choose_layout({std::uint64_t{1} << 30, 1e-9}).error().code, ErrorCode::kFilterTooLarge);
}

TEST(Layout, ModeledRateOfChosenLayoutMeetsTarget) {
  for (const double p : {0.5, 0.1, 0.01, 0.001, 1e-6}) {
    const auto layout = choose_layout({123'457, p});
    ASSERT_TRUE(layout.has_value());
    EXPECT_LE(modeled_false_positive_rate(*layout, 123'457), p);
    EXPECT_EQ(layout->bit_count % 64, 0u);
  }
}

}  // namespace
}  // namespace abf
