// Plausibility of a payload's population count (abf::plausible_fill,
// abf::check_fill; docs/protocol.md "Plausibility of the fill"): the exact
// limits, and a sweep of real builds from 1 to 1e6 digests, sparse to full,
// both protocols, with and without duplicates, none of which may ever be
// refused. The sweep prints how close the builds came to the bounds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

TEST(PlausibleFill, AnEmptyFilterHasNoBitSet) {
  const Layout layout{9600, 7};
  for (const FillCheck check : {FillCheck::kAnyInsertions, FillCheck::kDistinctInsertions}) {
    EXPECT_TRUE(describe_fill_fault(layout, 0, 0, check).empty());
    EXPECT_NE(describe_fill_fault(layout, 0, 1, check), "");
  }
}

TEST(PlausibleFill, OneInsertionSetsExactlyKBits) {
  const Layout layout{1 << 20, 7};
  for (const FillCheck check : {FillCheck::kAnyInsertions, FillCheck::kDistinctInsertions}) {
    EXPECT_NE(describe_fill_fault(layout, 1, 6, check), "");
    EXPECT_TRUE(describe_fill_fault(layout, 1, 7, check).empty());
    EXPECT_NE(describe_fill_fault(layout, 1, 8, check), "");
    // Two insertions: 7 (a duplicate) to 14 bits, whatever the model says.
    EXPECT_TRUE(describe_fill_fault(layout, 2, 14, check).empty());
    EXPECT_NE(describe_fill_fault(layout, 2, 15, check), "");
  }
  EXPECT_TRUE(describe_fill_fault(layout, 2, 7, FillCheck::kAnyInsertions).empty());
}

TEST(PlausibleFill, NeverMoreThanTheBitCount) {
  const Layout layout{64, 32};
  const FillBounds bounds = plausible_fill(layout, 1000, FillCheck::kDistinctInsertions);
  EXPECT_LE(bounds.high, 64u);
  EXPECT_TRUE(describe_fill_fault(layout, 1000, 64, FillCheck::kDistinctInsertions).empty());
}

TEST(PlausibleFill, TheMessageSaysWhatAndHowMuch) {
  const auto fault = describe_fill_fault({19200, 7}, 2000, 0, FillCheck::kAnyInsertions);
  EXPECT_NE(fault.find("2000 insertions set 0 of 19200 bits (k = 7); at least 7 expected"),
            std::string::npos)
      << fault;
}

// How far a build's popcount X lies from the model, in units of the
// margin's sigma (sqrt(k m q (1 - q))) and of the binomial sigma
// (sqrt(m q (1 - q))).
struct Distance {
  double sigmas = 0.0;
  double binomial_sigmas = 0.0;
};

Distance distance(const Filter& filter) {
  const double m = static_cast<double>(filter.bit_count());
  const double k = filter.hash_count();
  const double n = static_cast<double>(filter.inserted_item_count());
  const double q = std::exp(n * std::log1p(-k / m));
  const double expected = m * (1.0 - q);
  const double spread = std::sqrt(m * q * (1.0 - q));
  const double x = static_cast<double>(filter.popcount());
  if (spread == 0.0) return {};
  return {(x - expected) / (std::sqrt(k) * spread), (x - expected) / spread};
}

// Every legitimate build passes: n from 1 to 1e6, p from 0.95 (k = 1) to
// 1e-9 (k = 30), filled from one digest to capacity, both protocols.
TEST(PlausibleFill, NoLegitimateBuildIsEverRefused) {
  const auto pool = test::random_digests(1'000'000, 2026);
  const Key key = test::golden_key().key;
  double worst = 0.0, worst_binomial = 0.0;
  int builds = 0;
  for (const std::uint64_t n : {1, 2, 3, 10, 100, 1000, 10'000, 100'000, 1'000'000}) {
    for (const double p : {0.95, 0.5, 0.01, 1e-4, 1e-9}) {
      if (n == 1'000'000 && p < 0.01) continue;  // 30 MB filters: enough of these
      for (const double fill : {0.0, 0.01, 0.1, 0.5, 1.0}) {
        const auto count = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(fill * n));
        for (const bool keyed : {false, true}) {
          if (keyed && n == 1'000'000 && fill < 1.0) continue;
          SCOPED_TRACE(testing::Message() << "n " << n << " p " << p << " inserted " << count
                                          << (keyed ? " keyed" : ""));
          BuildOptions options;
          if (keyed) options.key = key;
          auto filter = build_filter(std::span(pool).first(count), {n, p}, options);
          ASSERT_TRUE(filter.has_value()) << filter.error().describe();
          ++builds;
          EXPECT_TRUE(check_fill(*filter, FillCheck::kDistinctInsertions).has_value());
          EXPECT_TRUE(check_fill(*filter, FillCheck::kAnyInsertions).has_value());
          const Distance d = distance(*filter);
          worst = std::max(worst, std::abs(d.sigmas));
          worst_binomial = std::max(worst_binomial, std::abs(d.binomial_sigmas));
        }
      }
    }
  }
  std::printf("fill sweep: %d builds, farthest %.2f margin sigmas (%.2f binomial sigmas); "
              "the bounds allow 8\n",
              builds, worst, worst_binomial);
  EXPECT_LT(worst, 8.0);
}

// Duplicates set fewer bits than their count: the upper bounds, which
// every load checks, still hold; only the distinct-insertions lower bound
// may fail (it is for callers who know there were none).
TEST(PlausibleFill, DuplicatesNeverFailTheUpperBounds) {
  constexpr std::size_t kInsertions = 100'000;
  const auto distinct = test::random_digests(kInsertions / 2, 7);
  for (const std::size_t copies : {2, 10, 100}) {
    const std::size_t unique = kInsertions / copies;
    ASSERT_LE(unique, distinct.size());
    std::vector<Digest> digests;
    digests.reserve(kInsertions);
    for (std::size_t i = 0; i < kInsertions; ++i) digests.push_back(distinct[i % unique]);
    for (const double p : {0.5, 0.01, 1e-6}) {
      SCOPED_TRACE(testing::Message() << copies << " copies, p " << p);
      auto filter = build_filter(digests, {kInsertions, p}, BuildOptions{});
      ASSERT_TRUE(filter.has_value());
      EXPECT_TRUE(check_fill(*filter, FillCheck::kAnyInsertions).has_value());
      if (copies >= 10) {
        const auto checked = check_fill(*filter, FillCheck::kDistinctInsertions);
        ASSERT_FALSE(checked.has_value()) << "a tenth of the digests cannot look like all of them";
        EXPECT_EQ(checked.error().code, ErrorCode::kSnapshotImplausibleFill);
      }
    }
  }
}

}  // namespace
}  // namespace abf
