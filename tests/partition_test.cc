// The partitioned build (simd/partition.cpp) against the scalar
// reference: the bitset may not depend on the slot or thread count, the
// bucket range, the round size, how the digests arrive in add() calls, or
// whether positions went through a bucket or overflowed into the words.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <span>
#include <vector>

#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "abf/snapshot.hpp"
#include "block_pool.hpp"
#include "kernels.hpp"
#include "parallel.hpp"
#include "partition.hpp"
#include "test_support.hpp"
#include "thread_support.hpp"
#include "words_pool.hpp"

namespace abf {
namespace {

using detail::PartitionedBuild;
using detail::PartitionTuning;

using test::kGeometries;
using test::max_threads;
using test::scalar_bits;
using test::with_threads;

// Adds `digests` in chunks of the given sizes (the last repeats), then flushes.
std::vector<std::uint64_t> partitioned_bits(const probe::Scheme& scheme, std::size_t slots,
                                            const PartitionTuning& tuning,
                                            std::span<const Digest> digests,
                                            std::span<const std::size_t> chunks,
                                            std::uint64_t* overflowed = nullptr) {
  std::vector<std::uint64_t> words(scheme.bit_count / 64, 0);
  PartitionedBuild build(scheme, slots, tuning);
  std::size_t offset = 0;
  for (std::size_t c = 0; offset < digests.size(); ++c) {
    const std::size_t size =
        std::min(chunks[std::min(c, chunks.size() - 1)], digests.size() - offset);
    build.add(words.data(), digests.data() + offset, size);
    offset += size;
  }
  build.flush(words.data());
  if (overflowed != nullptr) *overflowed = build.overflowed();
  return words;
}
std::vector<std::uint64_t> partitioned_bits(std::uint64_t bit_count, std::uint32_t hash_count,
                                            std::size_t slots, const PartitionTuning& tuning,
                                            std::span<const Digest> digests,
                                            std::span<const std::size_t> chunks,
                                            std::uint64_t* overflowed = nullptr) {
  return partitioned_bits(probe::unkeyed_scheme(bit_count, hash_count), slots, tuning, digests,
                          chunks, overflowed);
}

// Keyed (protocol 2) schemes scatter through the SIMD engine's SipHash.
TEST(PartitionedBuild, KeyedSchemesEqualScalarAtEveryThreadCount) {
  const auto digests = test::random_digests(6000, 44);
  const std::size_t chunks[] = {1, 1000, 2500};
  for (const auto& [m, k] : kGeometries) {
    const probe::Scheme scheme = test::keyed_scheme(m, k);
    const auto expected = scalar_bits(scheme, digests);
    for (int threads = 1; threads <= max_threads(); ++threads) {
      with_threads(threads, [&] {
        for (const PartitionTuning tuning : {PartitionTuning{}, PartitionTuning{9, 4096}}) {
          EXPECT_EQ(
              partitioned_bits(scheme, static_cast<std::size_t>(threads), tuning, digests, chunks),
              expected)
              << "m=" << m << " k=" << k << " threads=" << threads;
        }
      });
    }
  }
}

TEST(PartitionedBuild, EqualsScalarForEveryGeometryThreadCountRangeAndRoundSize) {
  const auto digests = test::random_digests(6000, 41);
  const std::size_t chunks[] = {1, 7, 1000, 64, 2500};
  for (const auto& [m, k] : kGeometries) {
    const auto expected = scalar_bits(m, k, digests);
    for (int threads = 1; threads <= max_threads(); ++threads) {
      with_threads(threads, [&] {
        // Ranges of one word up to the default; budgets from one that makes
        // every round a handful of digests (and buckets overflow) to the
        // default.
        for (const unsigned range_bits : {6u, 9u, 13u, 20u}) {
          for (const std::size_t budget : {std::size_t{1}, std::size_t{64} << 10, std::size_t{0}}) {
            const PartitionTuning tuning{range_bits, budget};
            EXPECT_EQ(
                partitioned_bits(m, k, static_cast<std::size_t>(threads), tuning, digests, chunks),
                expected)
                << "m=" << m << " k=" << k << " threads=" << threads << " range_bits=" << range_bits
                << " budget=" << budget;
          }
        }
      });
    }
  }
}

TEST(PartitionedBuild, SlotsNeedNotMatchTheThreads) {
  // More slots than threads, and fewer: each slot is one task's at a time.
  const auto digests = test::random_digests(20000, 42);
  const std::size_t chunks[] = {3333};
  const auto expected = scalar_bits(1437824, 7, digests);
  for (const std::size_t slots : {1u, 3u, 16u}) {
    for (const int threads : {1, 2, max_threads()}) {
      with_threads(threads, [&] {
        EXPECT_EQ(partitioned_bits(1437824, 7, slots, {12, 64 << 10}, digests, chunks), expected)
            << slots << " slots, " << threads << " threads";
      });
    }
  }
}

TEST(PartitionedBuild, IsIndependentOfInputOrder) {
  auto digests = test::random_digests(30000, 43);
  const auto expected = scalar_bits(1437824, 10, digests);
  std::mt19937_64 random(44);
  const std::size_t chunks[] = {4096};
  for (int round = 0; round < 3; ++round) {
    std::ranges::shuffle(digests, random);
    with_threads(max_threads(), [&] {
      EXPECT_EQ(partitioned_bits(1437824, 10, static_cast<std::size_t>(max_threads()), {14, 0},
                                 digests, chunks),
                expected);
    });
  }
}

TEST(PartitionedBuild, AFloodOfOneDigestOverflowsItsBucketsAndStaysExact) {
  // Dedup input: one digest 50,000 times among random ones. Its k buckets
  // fill long before the round ends; the rest of its positions take the
  // atomic path, concurrently from every slot.
  auto digests = test::random_digests(20000, 45);
  const Digest repeated = digests[17];
  digests.insert(digests.end(), 50000, repeated);
  std::ranges::shuffle(digests, std::mt19937_64(46));
  const std::uint64_t m = std::uint64_t{1} << 20;
  const auto expected = scalar_bits(m, 7, digests);
  const std::size_t chunks[] = {10000};
  with_threads(max_threads(), [&] {
    std::uint64_t overflowed = 0;
    EXPECT_EQ(partitioned_bits(m, 7, static_cast<std::size_t>(max_threads()), {9, 256 << 10},
                               digests, chunks, &overflowed),
              expected);
    EXPECT_GT(overflowed, 0u);
  });
}

TEST(PartitionedBuild, RandomDigestsStayOffTheAtomicPathWithTheDefaultTuning) {
  // The default buckets hold a round with 25% headroom: uniformly random
  // digests never fill one.
  const auto digests = test::random_digests(400000, 47);
  const std::uint64_t m = std::uint64_t{1} << 26;  // 8 MiB, 64 buckets
  const auto expected = scalar_bits(m, 7, digests);
  const std::size_t chunks[] = {65536};
  for (const std::size_t slots : {1u, 2u}) {
    std::uint64_t overflowed = 0;
    EXPECT_EQ(partitioned_bits(m, 7, slots, {}, digests, chunks, &overflowed), expected);
    EXPECT_EQ(overflowed, 0u) << slots << " slots";
  }
}

TEST(PartitionedBuild, ClampsRangesToAWordAndToTheLargestFilter) {
  const auto digests = test::random_digests(3000, 49);
  const std::size_t chunks[] = {1000};
  const auto expected = scalar_bits(191872, 7, digests);
  for (const unsigned range_bits : {0u, 5u, 31u, 63u, 200u}) {
    EXPECT_EQ(partitioned_bits(191872, 7, 2, {range_bits, 0}, digests, chunks), expected)
        << "range_bits=" << range_bits;
  }
  EXPECT_EQ(PartitionedBuild(probe::unkeyed_scheme(191872, 7), 1, {0, 0}).bucket_count(),
            191872u / 64);
  EXPECT_EQ(PartitionedBuild(probe::unkeyed_scheme(191872, 7), 1, {63, 0}).bucket_count(), 1u);
}

TEST(PartitionedBuild, SizesItsRoundsFromTheBudget) {
  // Default: twice the filter's size in entries (at most 256 MiB), shared
  // by the slots; a round fills the buckets to 80%.
  const std::uint64_t m = std::uint64_t{1} << 30;  // 128 MiB: 1024 buckets of 2^20 bits
  const PartitionedBuild one(probe::unkeyed_scheme(m, 7), 1);
  EXPECT_EQ(one.bucket_count(), 1024u);
  EXPECT_EQ(one.bucket_capacity(), (256u << 20) / 4 / 1024);
  EXPECT_EQ(one.round_digests(), std::size_t{65536} * 1024 * 4 / 5 / 7);
  const PartitionedBuild small(probe::unkeyed_scheme(std::uint64_t{1} << 28, 7),
                               1);  // 32 MiB: 256 buckets
  EXPECT_EQ(small.bucket_capacity(), (64u << 20) / 4 / 256);
  const PartitionedBuild four(probe::unkeyed_scheme(m, 7), 4);
  EXPECT_EQ(four.bucket_capacity(), one.bucket_capacity() / 4);
  // A bucket never holds fewer than 64 entries, whatever the budget.
  const PartitionedBuild tiny(probe::unkeyed_scheme(m, 7), 4, {20, 1});
  EXPECT_EQ(tiny.bucket_capacity(), 64u);
}

TEST(PartitionedBuild, BucketsStartAnOddNumberOfCacheLinesApart) {
  // The scatter writes every bucket's tail at once: an odd stride in lines
  // gives the first 2^s buckets 2^s different sets of any cache of 2^s sets
  // (partition.cpp, stride_for). Checked for an L2 of 1024 sets, over
  // budgets that make the capacity an even, odd and partial number of lines.
  constexpr std::size_t kSets = 1024;
  constexpr std::size_t kLineEntries = 16;
  for (const std::uint64_t m :
       {std::uint64_t{1} << 28, std::uint64_t{959295488}, std::uint64_t{1} << 30}) {
    for (const std::size_t slots : {1, 2, 3}) {
      for (const std::size_t budget_mib : {0, 7, 100, 256}) {
        const PartitionedBuild build(probe::unkeyed_scheme(m, 7), slots, {20, budget_mib << 20});
        const std::size_t stride = build.bucket_stride();
        ASSERT_GE(stride, build.bucket_capacity());
        ASSERT_EQ(stride % kLineEntries, 0u) << stride;
        EXPECT_EQ(stride / kLineEntries % 2, 1u) << "m=" << m << " slots=" << slots;
        std::vector<bool> taken(kSets, false);
        for (std::size_t b = 0; b < std::min(build.bucket_count(), kSets); ++b) {
          const std::size_t set = b * (stride / kLineEntries) % kSets;
          EXPECT_FALSE(taken[set]) << "buckets share set " << set << " (m=" << m << ")";
          taken[set] = true;
        }
      }
    }
  }
}

// 30M expected items at p = 0.01: a 34 MiB filter, past kPartitionMinBytes,
// so FilterBuilder takes the partitioned path.
constexpr BloomSpec kPartitionedSpec{30'000'000, 0.01};
std::uint64_t partitioned_filter_bytes() { return choose_layout(kPartitionedSpec)->bit_count / 8; }

// The snapshot bytes of the scalar build of `digests` (kPartitionedSpec).
std::vector<std::uint8_t> scalar_snapshot(std::span<const Digest> digests,
                                          std::uint64_t catalog_version = 0) {
  auto reference = build_filter(digests, kPartitionedSpec, catalog_version, Backend::kScalar);
  EXPECT_TRUE(reference.has_value());
  return reference ? serialize_snapshot(*reference) : std::vector<std::uint8_t>{};
}

TEST(PartitionedBuild, BuilderPartitionsFiltersBeyondTheLlcAndEqualsTheScalarBuild) {
  ASSERT_GE(partitioned_filter_bytes(), detail::kPartitionMinBytes);
  const BloomSpec spec = kPartitionedSpec;
  const auto digests = test::random_digests(300'000, 48);
  const auto expected = scalar_snapshot(digests, 5);
  for (const int threads : {1, 2, 3}) {
    with_threads(threads, [&] {
      auto builder = FilterBuilder::create(spec, 5);
      ASSERT_TRUE(builder.has_value());
      std::size_t offset = 0;
      // SIMD chunks through the buckets, a scalar chunk straight into the
      // bits in between: both end up in the one bitset.
      for (const auto& [size, backend] :
           {std::pair{100'000u, Backend::kSimd}, std::pair{1u, Backend::kSimd},
            std::pair{50'000u, Backend::kScalar}, std::pair{149'999u, Backend::kAuto}}) {
        ASSERT_TRUE(builder->add(std::span(digests).subspan(offset, size), backend));
        offset += size;
      }
      ASSERT_EQ(offset, digests.size());
      auto finished = std::move(*builder).finish();
      ASSERT_TRUE(finished.has_value()) << finished.error().describe();
      EXPECT_EQ(serialize_snapshot(*finished), expected) << threads << " threads";
    });
  }
}

TEST(PartitionedBuild, ReleasingTheCachedBuffersFreesTheBucketsAndLaterBuildsStillMatch) {
  const auto digests = test::random_digests(40'000, 50);
  const auto expected = scalar_snapshot(digests);
  const auto build_and_compare = [&] {
    auto built = build_filter(digests, kPartitionedSpec, 0, Backend::kSimd);
    ASSERT_TRUE(built.has_value()) << built.error().describe();
    EXPECT_EQ(serialize_snapshot(*built), expected);
  };
  with_threads(2, [&] {
    build_and_compare();
    // Two slots' buckets, twice the filter between them, kept for the next.
    EXPECT_GE(detail::pooled_entry_bytes(), 2 * partitioned_filter_bytes());
    release_cached_buffers();
    EXPECT_EQ(detail::pooled_entry_bytes(), 0u);
    build_and_compare();  // fresh buckets
    EXPECT_GT(detail::pooled_entry_bytes(), 0u);
    build_and_compare();  // the kept ones
  });
  release_cached_buffers();
  EXPECT_EQ(detail::pooled_entry_bytes(), 0u);
}

// Builds that finish one after another keep one build's buffers between
// them, not each one's: the last build's replace the ones held.
TEST(PartitionedBuild, BuildsAliveAtOnceLeaveOneBuildsBuffersPooled) {
  const auto digests = test::random_digests(20'000, 51);
  release_cached_buffers();
  with_threads(2, [&] {
    {
      auto alone = FilterBuilder::create(kPartitionedSpec, 0);
      ASSERT_TRUE(alone.has_value());
      ASSERT_TRUE(alone->add(digests, Backend::kSimd).has_value());
      ASSERT_TRUE(std::move(*alone).finish().has_value());
    }
    const std::size_t one_build = detail::pooled_entry_bytes();
    ASSERT_GT(one_build, 0u);
    release_cached_buffers();
    {
      std::vector<FilterBuilder> builders;
      for (int i = 0; i < 4; ++i) {
        auto builder = FilterBuilder::create(kPartitionedSpec, 0);
        ASSERT_TRUE(builder.has_value());
        ASSERT_TRUE(builder->add(digests, Backend::kSimd).has_value());
        builders.push_back(std::move(*builder));
      }
      for (auto& builder : builders) ASSERT_TRUE(std::move(builder).finish().has_value());
    }
    EXPECT_EQ(detail::pooled_entry_bytes(), one_build);
  });
  release_cached_buffers();
}

// allocate_words keeps a freed bitset of 2-256 MiB for the next allocation
// of its size: handed out again zeroed (a build relies on it), replaced by a
// bitset of another size freed later, never kept below 2 MiB or above the
// budget, and freed by release_cached_buffers.
TEST(WordsPool, AFreedBitsetIsReusedZeroedAndReleased) {
  release_cached_buffers();
  ASSERT_EQ(detail::pooled_words_bytes(), 0u);
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const std::size_t words = 4 * kMiB / 8;
  const std::uint64_t* first = nullptr;
  {
    auto dirty = allocate_words(words);
    first = dirty.get();
    std::fill_n(dirty.get(), words, ~std::uint64_t{0});
  }
  EXPECT_EQ(detail::pooled_words_bytes(), 4 * kMiB);
  {
    auto again = allocate_words(words);
    EXPECT_EQ(again.get(), first) << "the freed block was not reused";
    EXPECT_EQ(detail::pooled_words_bytes(), 0u);
    EXPECT_TRUE(std::all_of(again.get(), again.get() + words, [](std::uint64_t w) {
      return w == 0;
    })) << "a reused block came back with bits set";
  }
  { auto other = allocate_words(2 * words); }  // another size: freed last, kept instead
  EXPECT_EQ(detail::pooled_words_bytes(), 8 * kMiB);
  { auto small = allocate_words(kMiB / 8); }
  { auto large = allocate_words((detail::kBuildScratchBudget + 2 * kMiB) / 8); }
  EXPECT_EQ(detail::pooled_words_bytes(), 8 * kMiB)
      << "kept a block below 2 MiB or above the budget";
  release_cached_buffers();
  EXPECT_EQ(detail::pooled_words_bytes(), 0u);
}

// The pool under both: blocks of one size at a time, within both caps; a
// block it will not keep leaves it as it was.
TEST(BlockPool, KeepsBlocksOfOneSizeWithinItsCapsAndHandsThemBack) {
  detail::BlockPool pool(/*min_block_bytes=*/64, /*max_blocks=*/3, /*max_held_bytes=*/1024);
  const auto block = [] { return std::malloc(256); };
  void* a = block();
  void* b = block();
  pool.give(a, 256);
  pool.give(b, 256);
  EXPECT_EQ(pool.held_bytes(), 512u);
  EXPECT_EQ(pool.take(128), nullptr) << "handed out a block of another size";
  void* first = pool.take(256);
  EXPECT_TRUE(first == a || first == b);
  pool.give(first, 256);
  pool.give(block(), 256);
  pool.give(block(), 256);  // a fourth: past max_blocks, freed
  EXPECT_EQ(pool.held_bytes(), 3 * 256u);
  pool.give(std::malloc(32), 32);      // below min_block_bytes: freed, the pool unchanged
  pool.give(std::malloc(2048), 2048);  // above max_held_bytes: likewise
  EXPECT_EQ(pool.held_bytes(), 3 * 256u);
  pool.give(std::malloc(512), 512);  // another size: replaces the three
  EXPECT_EQ(pool.held_bytes(), 512u);
  pool.give(std::malloc(512), 512);
  pool.give(std::malloc(512), 512);  // a third would pass 1024 bytes: freed
  EXPECT_EQ(pool.held_bytes(), 1024u);
  void* one = pool.take(512);
  void* two = pool.take(512);
  EXPECT_NE(one, nullptr);
  EXPECT_NE(two, nullptr);
  EXPECT_EQ(pool.take(512), nullptr);
  EXPECT_EQ(pool.held_bytes(), 0u);
  std::free(one);
  std::free(two);
  pool.give(std::malloc(512), 512);
  pool.clear();
  EXPECT_EQ(pool.held_bytes(), 0u);
  // replace: the blocks given replace those held, within the caps.
  pool.give(std::malloc(256), 256);
  pool.replace(256, {std::malloc(256), std::malloc(256)});
  EXPECT_EQ(pool.held_bytes(), 512u);
  pool.replace(128, {std::malloc(128), std::malloc(128), std::malloc(128), std::malloc(128)});
  EXPECT_EQ(pool.held_bytes(), 3 * 128u) << "kept more than max_blocks";
  pool.replace(600, {std::malloc(600), std::malloc(600)});
  EXPECT_EQ(pool.held_bytes(), 600u) << "kept more than max_held_bytes";
  pool.replace(32, {std::malloc(32)});  // below min_block_bytes: nothing kept
  EXPECT_EQ(pool.held_bytes(), 0u);
  pool.give(std::malloc(256), 256);
  pool.clear();
}

TEST(PartitionedBuild, BuilderFollowsALargerArenaAndKeepsWhatWasBuffered) {
  // A library caller may add chunks from arenas of different sizes. When
  // the arena grows, the builder sets the buffered positions and starts
  // over with more slots; a bucket dropped on the way would lose bits.
  const auto digests = test::random_digests(90'000, 49);
  const auto expected = scalar_snapshot(digests);
  auto builder = FilterBuilder::create(kPartitionedSpec, 0);
  ASSERT_TRUE(builder.has_value());
  with_threads(
      1, [&] { ASSERT_TRUE(builder->add(std::span(digests).subspan(0, 30'000), Backend::kSimd)); });
  with_threads(3, [&] {
    ASSERT_TRUE(builder->add(std::span(digests).subspan(30'000, 30'000), Backend::kSimd));
  });
  with_threads(
      2, [&] { ASSERT_TRUE(builder->add(std::span(digests).subspan(60'000), Backend::kSimd)); });
  auto finished = std::move(*builder).finish();
  ASSERT_TRUE(finished.has_value()) << finished.error().describe();
  EXPECT_EQ(serialize_snapshot(*finished), expected);
}

}  // namespace
}  // namespace abf
