// The exact duplicate handling behind `abf build --distinct` and `abf
// dedup` (cli/distinct.cpp, compiled in here): the external sort across
// many spilled runs, and the set of digests already written.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "../cli/distinct.cpp"  // NOLINT: the CLI's own code, tested without the binary
#include "test_support.hpp"

namespace abf::cli {
namespace {

namespace fs = std::filesystem;

// Digests with many repeats: `count` draws from `distinct` values.
std::vector<Digest> with_repeats(std::size_t count, std::size_t distinct, std::uint64_t seed) {
  const auto pool = test::random_digests(distinct, seed);
  std::vector<Digest> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(pool[(i * 7919 + i / 3) % distinct]);
  return out;
}

struct Collected {
  std::vector<Digest> digests;
  std::size_t calls = 0;
  std::size_t largest = 0;
};

Result<void> collect(DistinctDigests& distinct, Collected& out, std::size_t chunk) {
  return distinct.finish(
      [&](std::span<const Digest> digests) -> Result<void> {
        out.digests.insert(out.digests.end(), digests.begin(), digests.end());
        ++out.calls;
        out.largest = std::max(out.largest, digests.size());
        return {};
      },
      chunk);
}

TEST(DistinctDigests, MergesSpilledRunsIntoAscendingDistinctDigests) {
  const test::TempDir temp("abf-distinct");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  // Runs of 1,000: about 60 of them spill to the temporary file, and the
  // last stays in memory.
  for (const std::size_t distinct_count : {1u, 999u, 1000u, 1001u, 20'000u, 60'000u}) {
    SCOPED_TRACE(distinct_count);
    const auto input = with_repeats(60'000, distinct_count, distinct_count);
    DistinctDigests distinct(dir.string(), 1000);
    // Added in uneven pieces.
    for (std::size_t begin = 0, step = 1; begin < input.size();
         begin += step, step = step * 3 % 997 + 1) {
      const std::size_t count = std::min(step, input.size() - begin);
      ASSERT_TRUE(distinct.add(std::span(input.data() + begin, count)).has_value());
    }
    Collected out;
    ASSERT_TRUE(collect(distinct, out, 777).has_value());
    std::set<Digest> expected(input.begin(), input.end());
    EXPECT_TRUE(std::ranges::equal(out.digests, expected));
    EXPECT_EQ(distinct.input_count(), input.size());
    EXPECT_EQ(distinct.distinct_count(), expected.size());
    EXPECT_LE(out.largest, 777u);
    if (distinct_count >= 20'000) EXPECT_GT(distinct.spilled_runs(), 10u);
  }
  // The temporary file had no name: nothing is left in the folder.
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(DistinctDigests, SmallInputStaysInMemory) {
  DistinctDigests distinct("/nonexistent-folder", 1000);
  const auto input = with_repeats(1500, 300, 3);  // runs cut to 300 never spill
  ASSERT_TRUE(distinct.add(input).has_value());
  Collected out;
  ASSERT_TRUE(collect(distinct, out, 64).has_value());
  EXPECT_EQ(out.digests.size(), 300u);
  EXPECT_EQ(distinct.spilled_runs(), 0u);
}

TEST(DistinctDigests, UnusableTemporaryFolderIsAClearError) {
  DistinctDigests distinct("/nonexistent-folder", 1000);
  const auto input = test::random_digests(5000, 4);
  const auto added = distinct.add(input);
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kIo);
  EXPECT_NE(added.error().message.find("/nonexistent-folder"), std::string::npos);
  EXPECT_NE(added.error().message.find("TMPDIR"), std::string::npos);
}

TEST(DistinctDigests, SinkErrorsStopTheMerge) {
  const test::TempDir temp("abf-distinct");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  DistinctDigests distinct(dir.string(), 1000);
  ASSERT_TRUE(distinct.add(test::random_digests(10'000, 5)).has_value());
  std::size_t calls = 0;
  const auto finished = distinct.finish(
      [&](std::span<const Digest>) -> Result<void> {
        ++calls;
        return fail(ErrorCode::kCapacityExceeded, "full");
      },
      100);
  ASSERT_FALSE(finished.has_value());
  EXPECT_EQ(finished.error().code, ErrorCode::kCapacityExceeded);
  EXPECT_EQ(calls, 1u);
}

TEST(DigestSet, KeepsEachDigestOnceAcrossGrowth) {
  DigestSet set;
  const auto digests = test::random_digests(10'000, 6);
  for (const Digest& d : digests) EXPECT_TRUE(set.insert(d));
  for (const Digest& d : digests) EXPECT_FALSE(set.insert(d));
  EXPECT_EQ(set.size(), digests.size());
  // The all-zero digest (the table's empty mark) is a digest like any other.
  EXPECT_TRUE(set.insert(Digest{}));
  EXPECT_FALSE(set.insert(Digest{}));
  EXPECT_EQ(set.size(), digests.size() + 1);
}

// Digests that agree in their first 24 bytes still spread: the hash mixes
// all four words.
TEST(DigestSet, CraftedDigestsSharingAPrefixStayDistinct) {
  DigestSet set;
  std::vector<Digest> crafted(5000);
  for (std::size_t i = 0; i < crafted.size(); ++i) {
    crafted[i].bytes.fill(0xab);
    crafted[i].bytes[30] = static_cast<std::uint8_t>(i >> 8);
    crafted[i].bytes[31] = static_cast<std::uint8_t>(i);
  }
  for (const Digest& d : crafted) EXPECT_TRUE(set.insert(d));
  for (const Digest& d : crafted) EXPECT_FALSE(set.insert(d));
  EXPECT_EQ(set.size(), crafted.size());
}

}  // namespace
}  // namespace abf::cli
