// The Highway engine answers bit for bit as the scalar reference, on every
// target compiled into this binary that this CPU runs: each test runs once
// per target, forced with hwy::SetSupportedTargetsForTest (as
// hwy/tests/hwy_gtest.h does).
#include "hwy_targets.h"  // first: the same HWY_TARGETS as simd/probe_simd.cc

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/probe.hpp"
#include "hwy/targets.h"
#include "kernels.hpp"
#include "probe_simd.h"
#include "test_support.hpp"

namespace abf {
namespace {

constexpr std::uint64_t kMaxM = probe::kMaxBitCount;

// Bit counts at the edges: the smallest, small powers of two, odd multiples
// of 64, sizes the layout picks, and the largest two.
const std::vector<std::uint64_t>& small_bit_counts() {
  static const std::vector<std::uint64_t> counts = {
      64, 128, 192, 64 * 7, 64 * 1001, 64 * 12345, 333824, 9592960, 64 * 1677721};
  return counts;
}
const std::vector<std::uint64_t>& all_bit_counts() {
  static const std::vector<std::uint64_t> counts = [] {
    auto c = small_bit_counts();
    c.push_back(kMaxM - 64);
    c.push_back(kMaxM);
    return c;
  }();
  return counts;
}

// h1 / h2 values that stress the reduction for modulus m.
std::vector<std::uint64_t> adversarial_words(std::uint64_t m) {
  const std::uint64_t all = std::numeric_limits<std::uint64_t>::max();
  const std::uint64_t top_multiple = all / m * m;  // the largest multiple of m
  std::vector<std::uint64_t> words = {0,
                                      1,
                                      2,
                                      63,
                                      64,
                                      65,
                                      m - 1,
                                      m,
                                      m + 1,
                                      2 * m - 1,
                                      2 * m,
                                      m * 12345,
                                      m * (m / 64) - 1,
                                      top_multiple,
                                      top_multiple - 1,
                                      top_multiple + 1,
                                      std::uint64_t{1} << 32,
                                      (std::uint64_t{1} << 34) - 1,
                                      std::uint64_t{1} << 34,
                                      (std::uint64_t{1} << 40) + 63,
                                      (std::uint64_t{1} << 58) - 1,
                                      std::uint64_t{1} << 58,
                                      (std::uint64_t{1} << 63) - 1,
                                      std::uint64_t{1} << 63,
                                      (std::uint64_t{1} << 63) + 1,
                                      all - 64,
                                      all - 1,
                                      all,
                                      0x5555555555555555,
                                      0xaaaaaaaaaaaaaaaa};
  return words;
}

std::vector<Digest> adversarial_digests(std::uint64_t m) {
  const auto words = adversarial_words(m);
  std::vector<Digest> digests;
  for (const std::uint64_t h1 : words) {
    for (const std::uint64_t h2 : words) digests.push_back(test::digest_with_words(h1, h2));
  }
  return digests;
}

// A random bitset of m bits with about `1 - 2^-ors` of them set.
std::vector<std::uint64_t> random_bitset(std::uint64_t m, int ors, std::uint64_t seed) {
  std::uint64_t state = seed;
  auto next = [&state] {  // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  std::vector<std::uint64_t> words(m / 64, 0);
  for (auto& word : words) {
    for (int i = 0; i < ors; ++i) word |= next();
  }
  return words;
}

// Fill for k probes that leaves a mix of answers: 1/2, 7/8 or 15/16.
int ors_for(std::uint32_t k) { return k <= 2 ? 1 : (k <= 8 ? 3 : 4); }

// A bitset whose fill leaves a mix of answers for k probes, with a quarter
// of `digests` inserted so some answers are Maybe at any k.
std::vector<std::uint64_t> mixed_bitset(std::uint64_t m, std::uint32_t k,
                                        const std::vector<Digest>& digests, std::uint64_t seed) {
  auto words = random_bitset(m, ors_for(k), seed);
  scalar::insert_batch(probe::unkeyed_scheme(m, k), words.data(), digests.data(),
                       digests.size() / 4);
  return words;
}

std::vector<Answer> scalar_answers(const probe::FilterView& view, const Digest* digests,
                                   std::size_t count) {
  std::vector<Answer> answers(count);
  scalar::query_batch(view, digests, count, answers.data());
  return answers;
}

// Runs simd::query_batch into a buffer with sentinels on both sides, checks
// the sentinels survived, and returns the answers.
std::vector<Answer> simd_answers(const probe::FilterView& view, const Digest* digests,
                                 std::size_t count) {
  const auto sentinel = static_cast<Answer>(0xA5);
  std::vector<Answer> buffer(count + 2, sentinel);
  simd::query_batch(view, digests, count, buffer.data() + 1);
  EXPECT_EQ(buffer.front(), sentinel) << "wrote before the answers";
  EXPECT_EQ(buffer.back(), sentinel) << "wrote past the answers";
  return {buffer.begin() + 1, buffer.end() - 1};
}

class SimdEngineTest : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

std::string target_test_name(const ::testing::TestParamInfo<std::int64_t>& info) {
  return hwy::TargetName(info.param);
}

INSTANTIATE_TEST_SUITE_P(Targets, SimdEngineTest,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         target_test_name);

TEST(SimdTargets, CompilesTheBaselineAndTheBestTarget) {
  const auto targets = simd::compiled_targets();
  ASSERT_FALSE(targets.empty());
  // The best supported target is what an unforced dispatch picks.
  EXPECT_EQ(simd::target_name(), targets.front());
  EXPECT_EQ(simd_target_name(), simd::target_name());
}

TEST_P(SimdEngineTest, DispatchesToTheForcedTarget) {
  EXPECT_EQ(simd::target_name(), hwy::TargetName(GetParam()));
}

TEST_P(SimdEngineTest, ReductionEqualsModuloForEveryBitCountShape) {
  std::mt19937_64 rng(3);
  std::vector<std::uint64_t> counts = all_bit_counts();
  for (int i = 0; i < 200; ++i) counts.push_back(64 * (1 + rng() % (kMaxM / 64)));
  for (std::uint64_t shift = 6; shift <= 30; ++shift) {  // powers of two and neighbours
    counts.push_back(std::uint64_t{1} << shift);
    if (shift > 6) counts.push_back((std::uint64_t{1} << shift) - 64);
    if (shift < 30) counts.push_back((std::uint64_t{1} << shift) + 64);
  }
  for (const std::uint64_t m : counts) {
    auto x = adversarial_words(m);
    for (int i = 0; i < 64; ++i) x.push_back(rng());
    std::vector<std::uint64_t> out(x.size());
    simd::reduce_batch(m, x.data(), x.size(), out.data());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(out[i], x[i] % m) << x[i] << " mod " << m;
  }
}

TEST_P(SimdEngineTest, ProbeStartsEqualTheProtocolForAdversarialWords) {
  for (const std::uint64_t m : all_bit_counts()) {
    const auto digests = adversarial_digests(m);
    std::vector<std::uint64_t> first(digests.size()), step(digests.size());
    simd::probe_starts(probe::unkeyed_scheme(m, 1), digests.data(), digests.size(), first.data(),
                       step.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      const auto* bytes = digests[i].bytes.data();
      ASSERT_EQ(first[i], probe::first_index(probe::h1_of(bytes), m))
          << "h1 " << probe::h1_of(bytes) << " m " << m;
      ASSERT_EQ(step[i], probe::step_of(probe::h2_of(bytes), m))
          << "h2 " << probe::h2_of(bytes) << " m " << m;
    }
  }
}

TEST_P(SimdEngineTest, ProbeStartsEqualTheProtocolForRandomDigestsAndBitCounts) {
  std::mt19937_64 rng(7);
  std::vector<std::uint64_t> counts = all_bit_counts();
  for (int i = 0; i < 300; ++i) counts.push_back(64 * (1 + rng() % (kMaxM / 64)));
  const auto digests = test::random_digests(2000, 11);
  std::vector<std::uint64_t> first(digests.size()), step(digests.size());
  for (const std::uint64_t m : counts) {
    simd::probe_starts(probe::unkeyed_scheme(m, 1), digests.data(), digests.size(), first.data(),
                       step.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      const auto* bytes = digests[i].bytes.data();
      ASSERT_EQ(first[i], probe::first_index(probe::h1_of(bytes), m)) << "m " << m;
      ASSERT_EQ(step[i], probe::step_of(probe::h2_of(bytes), m)) << "m " << m;
    }
  }
}

TEST_P(SimdEngineTest, QueryEqualsScalarForEveryHashCount) {
  for (const std::uint64_t m : small_bit_counts()) {
    auto digests = test::random_digests(2500, m);
    const auto adversarial = adversarial_digests(m);
    digests.insert(digests.end(), adversarial.begin(), adversarial.end());
    std::map<int, std::vector<std::uint64_t>> base;  // one random fill per density
    for (const int ors : {1, 3, 4}) base[ors] = random_bitset(m, ors, m * 33 + ors);
    for (std::uint32_t k = 1; k <= probe::kMaxHashCount; ++k) {
      auto words = base[ors_for(k)];
      scalar::insert_batch(probe::unkeyed_scheme(m, k), words.data(), digests.data(),
                           digests.size() / 4);
      const probe::FilterView view = probe::make_view(words.data(), probe::unkeyed_scheme(m, k));
      const auto expected = scalar_answers(view, digests.data(), digests.size());
      const auto got = simd_answers(view, digests.data(), digests.size());
      ASSERT_EQ(got, expected) << "m " << m << " k " << k;
      // Both answers occur, so the comparison means something.
      if (m >= 64 * 1001) {
        EXPECT_NE(std::count(expected.begin(), expected.end(), Answer::kMaybe), 0);
        EXPECT_NE(std::count(expected.begin(), expected.end(), Answer::kDefinitelyNot), 0);
      }
    }
  }
}

TEST_P(SimdEngineTest, InsertEqualsScalarForEveryHashCount) {
  for (const std::uint64_t m : small_bit_counts()) {
    auto digests = test::random_digests(1500, m + 1);
    const auto adversarial = adversarial_digests(m);
    digests.insert(digests.end(), adversarial.begin(), adversarial.end());
    for (std::uint32_t k = 1; k <= probe::kMaxHashCount; ++k) {
      std::vector<std::uint64_t> expected(m / 64, 0), got(m / 64, 0);
      scalar::insert_batch(probe::unkeyed_scheme(m, k), expected.data(), digests.data(),
                           digests.size());
      simd::insert_batch(probe::unkeyed_scheme(m, k), got.data(), digests.data(), digests.size());
      ASSERT_EQ(got, expected) << "m " << m << " k " << k;
    }
  }
}

// The partitioned build's scatter: every probe position lands in its
// bucket exactly once, as its offset in the bucket's range, or, when the
// bucket is full, is set in the words and counted. Small capacities make
// buckets overflow; the adversarial digests repeat positions.
TEST_P(SimdEngineTest, ScatterPutsEveryPositionInItsBucketOrInTheWords) {
  for (const std::uint64_t m : small_bit_counts()) {
    auto digests = test::random_digests(1100, m + 2);
    const auto adversarial = adversarial_digests(m);
    digests.insert(digests.end(), adversarial.begin(), adversarial.end());
    for (const std::uint32_t k : {1u, 2u, 7u, 32u}) {
      for (const unsigned range_bits : {6u, 9u, 20u}) {
        const std::size_t bucket_count = static_cast<std::size_t>((m - 1) >> range_bits) + 1;
        for (const std::uint32_t capacity : {1u, 5u, 4096u}) {
          const std::size_t stride = capacity + 3;
          if (bucket_count * stride > (std::size_t{1} << 22)) continue;  // keep it small
          std::vector<std::uint32_t> entries(bucket_count * stride + 64, 0xFFFFFFFFu);
          std::vector<std::uint32_t> fill(bucket_count, 0);
          std::vector<std::uint64_t> words(m / 64, 0);
          std::uint64_t overflowed = 0;
          const simd::PositionBuckets buckets{range_bits,     capacity,    stride,
                                              entries.data(), fill.data(), &overflowed};
          // Two calls: the second appends behind the first.
          const std::size_t half = digests.size() / 2;
          simd::scatter_positions(probe::unkeyed_scheme(m, k), words.data(), digests.data(), half,
                                  buckets);
          simd::scatter_positions(probe::unkeyed_scheme(m, k), words.data(), digests.data() + half,
                                  digests.size() - half, buckets);
          // Expected: every position, as (bucket, offset), in a multiset.
          std::map<std::uint64_t, std::uint64_t> expected;
          for (const Digest& digest : digests) {
            std::uint64_t i = probe::first_index(probe::h1_of(digest.bytes.data()), m);
            const std::uint64_t step = probe::step_of(probe::h2_of(digest.bytes.data()), m);
            for (std::uint32_t j = 0; j < k; ++j, i = probe::advance(i, step, m)) ++expected[i];
          }
          // Bucketed positions, plus one per overflowed position set in words.
          std::map<std::uint64_t, std::uint64_t> got;
          std::uint64_t bucketed = 0;
          for (std::size_t b = 0; b < bucket_count; ++b) {
            ASSERT_LE(fill[b], capacity);
            for (std::uint32_t e = 0; e < fill[b]; ++e) {
              const std::uint32_t offset = entries[b * stride + e];
              ASSERT_LT(offset, std::uint64_t{1} << range_bits);
              ++got[(std::uint64_t{b} << range_bits) + offset];
              ++bucketed;
            }
            for (std::size_t e = fill[b]; e < stride; ++e) {
              ASSERT_EQ(entries[b * stride + e], 0xFFFFFFFFu) << "wrote past bucket " << b;
            }
          }
          std::uint64_t total = 0;
          for (const auto& [position, count] : expected) {
            total += count;
            const std::uint64_t in_buckets = got.contains(position) ? got[position] : 0;
            ASSERT_LE(in_buckets, count) << "m " << m << " position " << position;
            if (in_buckets < count) {  // the rest overflowed into the words
              ASSERT_NE(words[position / 64] & probe::mask_of(position), 0u)
                  << "m " << m << " k " << k << " position " << position;
            }
          }
          ASSERT_EQ(bucketed + overflowed, total)
              << "m " << m << " k " << k << " range_bits " << range_bits;
          for (const auto& [position, count] : got) ASSERT_TRUE(expected.contains(position));
          // No bit in the words that no overflowed position explains.
          for (std::size_t w = 0; w < words.size(); ++w) {
            for (std::uint64_t bits = words[w]; bits != 0; bits &= bits - 1) {
              const std::uint64_t position = 64 * w + std::countr_zero(bits);
              ASSERT_TRUE(expected.contains(position)) << "stray bit " << position;
            }
          }
          if (total <= capacity) {
            EXPECT_EQ(overflowed, 0u) << "m " << m;
          }
          if (capacity == 1 && bucket_count < total) {
            EXPECT_GT(overflowed, 0u) << "m " << m;
          }
        }
      }
    }
  }
}

// m = 2^30 - 64 and 2^30: 128 MiB bitsets, allocated once for the suite.
struct LargeBitsets {
  std::vector<std::uint64_t> a = std::vector<std::uint64_t>(kMaxM / 64, 0);
  std::vector<std::uint64_t> b = std::vector<std::uint64_t>(kMaxM / 64, 0);
};
LargeBitsets& large_bitsets() {
  static LargeBitsets bitsets;
  return bitsets;
}

TEST_P(SimdEngineTest, InsertAndQueryEqualScalarAtTheLargestBitCounts) {
  auto& large = large_bitsets();
  for (const std::uint64_t m : {kMaxM - 64, kMaxM}) {
    auto digests = test::random_digests(3000, m);
    const auto adversarial = adversarial_digests(m);
    digests.insert(digests.end(), adversarial.begin(), adversarial.end());
    const std::size_t word_count = m / 64;
    for (const std::uint32_t k : {1u, 2u, 7u, 31u, 32u}) {
      std::fill(large.a.begin(), large.a.begin() + word_count, 0);
      std::fill(large.b.begin(), large.b.begin() + word_count, 0);
      scalar::insert_batch(probe::unkeyed_scheme(m, k), large.a.data(), digests.data(),
                           digests.size() / 2);
      simd::insert_batch(probe::unkeyed_scheme(m, k), large.b.data(), digests.data(),
                         digests.size() / 2);
      ASSERT_TRUE(std::equal(large.a.begin(), large.a.begin() + word_count, large.b.begin()))
          << "m " << m << " k " << k;
      const probe::FilterView view = probe::make_view(large.a.data(), probe::unkeyed_scheme(m, k));
      const auto expected = scalar_answers(view, digests.data(), digests.size());
      ASSERT_EQ(simd_answers(view, digests.data(), digests.size()), expected)
          << "m " << m << " k " << k;
      EXPECT_GE(std::count(expected.begin(), expected.end(), Answer::kMaybe),
                static_cast<std::ptrdiff_t>(digests.size() / 2));
    }
  }
}

TEST_P(SimdEngineTest, EveryBatchSizeAndStartingElement) {
  const std::uint64_t m = 64 * 1001;
  const std::uint32_t k = 5;
  const auto digests = test::random_digests(5200, 5);
  const auto words = mixed_bitset(m, k, digests, 3);
  const probe::FilterView view = probe::make_view(words.data(), probe::unkeyed_scheme(m, k));
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 33; ++n) sizes.push_back(n);  // 0, 1, lanes - 1, lanes, lanes + 1
  for (const std::size_t n : {1023u, 1024u, 1025u, 2047u, 2048u, 2049u, 5000u}) sizes.push_back(n);
  for (const std::size_t offset : {0u, 1u, 2u, 3u, 7u, 131u}) {
    for (const std::size_t n : sizes) {
      const Digest* start = digests.data() + offset;
      const auto expected = scalar_answers(view, start, n);
      ASSERT_EQ(simd_answers(view, start, n), expected) << "offset " << offset << " n " << n;
      std::vector<std::uint64_t> a(m / 64, 0), b(m / 64, 0);
      scalar::insert_batch(probe::unkeyed_scheme(m, k), a.data(), start, n);
      simd::insert_batch(probe::unkeyed_scheme(m, k), b.data(), start, n);
      ASSERT_EQ(b, a) << "offset " << offset << " n " << n;
    }
  }
}

// Runs of members and of non-members in one batch: the engine switches
// between compaction and the straight finish from block to block.
TEST_P(SimdEngineTest, RunsOfMembersAndNonMembersInOneBatch) {
  for (const std::uint64_t m : {std::uint64_t{64 * 1001}, std::uint64_t{9592960}}) {
    for (const std::uint32_t k : {1u, 4u, 7u, 32u}) {
      const auto members = test::random_digests(5000, m + k);
      const auto others = test::random_digests(5000, m + k + 1000);
      std::vector<std::uint64_t> words(m / 64, 0);
      scalar::insert_batch(probe::unkeyed_scheme(m, k), words.data(), members.data(),
                           members.size());
      std::vector<Digest> batch;
      const std::size_t runs[] = {2048, 1500, 3000, 700, 1024, 2100};
      for (std::size_t r = 0; r < std::size(runs); ++r) {
        const auto& source = r % 2 == 0 ? members : others;
        batch.insert(batch.end(), source.begin() + 100 * r, source.begin() + 100 * r + runs[r]);
      }
      const probe::FilterView view = probe::make_view(words.data(), probe::unkeyed_scheme(m, k));
      ASSERT_EQ(simd_answers(view, batch.data(), batch.size()),
                scalar_answers(view, batch.data(), batch.size()))
          << "m " << m << " k " << k;
    }
  }
}

TEST_P(SimdEngineTest, DigestsAtAnOddByteAddress) {
  // Digest has alignment 1: an array of them may start at any byte.
  const std::uint64_t m = 9592960;
  const std::uint32_t k = 7;
  const auto source = test::random_digests(3000, 9);
  const auto words = mixed_bitset(m, k, source, 4);
  const probe::FilterView view = probe::make_view(words.data(), probe::unkeyed_scheme(m, k));
  for (const std::size_t byte_offset : {1u, 3u, 8u, 13u}) {
    std::vector<std::uint8_t> buffer(source.size() * Digest::kSize + 64);
    std::memcpy(buffer.data() + byte_offset, source.data(), source.size() * Digest::kSize);
    const auto* shifted =
        std::launder(reinterpret_cast<const Digest*>(buffer.data() + byte_offset));
    ASSERT_EQ(simd_answers(view, shifted, source.size()),
              scalar_answers(view, source.data(), source.size()))
        << "byte offset " << byte_offset;
    std::vector<std::uint64_t> a(m / 64, 0), b(m / 64, 0);
    scalar::insert_batch(probe::unkeyed_scheme(m, k), a.data(), source.data(), source.size());
    simd::insert_batch(probe::unkeyed_scheme(m, k), b.data(), shifted, source.size());
    ASSERT_EQ(b, a) << "byte offset " << byte_offset;
  }
}

// tests/data/vectors/probes.tsv: digest, m, k, the k bit indices in order.
TEST_P(SimdEngineTest, GoldenProbeSequences) {
  const auto rows = test::read_tsv("vectors/probes.tsv");
  ASSERT_FALSE(rows.empty());
  std::map<std::uint64_t, std::vector<std::size_t>> rows_by_m;
  for (std::size_t r = 0; r < rows.size(); ++r) rows_by_m[std::stoull(rows[r][1])].push_back(r);
  auto& large = large_bitsets();
  for (const auto& [m, row_ids] : rows_by_m) {
    const std::size_t word_count = m / 64;
    ASSERT_LE(word_count, large.a.size());
    auto* inserted = large.a.data();  // every row of this m inserted by the engine
    auto* expected = large.b.data();  // every listed bit
    std::fill(inserted, inserted + word_count, 0);
    std::fill(expected, expected + word_count, 0);
    for (const std::size_t r : row_ids) {
      const auto& row = rows[r];
      const Digest digest = test::digest_from_hex(row[0]);
      const auto k = static_cast<std::uint32_t>(std::stoul(row[2]));
      const auto indices = test::split_numbers(row[3]);
      ASSERT_EQ(indices.size(), k);
      std::uint64_t first = 0, step = 0;
      simd::probe_starts(probe::unkeyed_scheme(m, 1), &digest, 1, &first, &step);
      EXPECT_EQ(first, indices[0]) << row[0] << " m " << m;
      if (k >= 2) {
        EXPECT_EQ(step, (indices[1] + m - indices[0]) % m) << row[0] << " m " << m;
      }

      simd::insert_batch(probe::unkeyed_scheme(m, k), inserted, &digest, 1);
      // A filter holding exactly these bits: Maybe; without any one of them:
      // Definitely Not. The probe bits are set in the `expected` union.
      for (const auto i : indices) expected[i / 64] |= std::uint64_t{1} << (i % 64);
      const probe::FilterView view = probe::make_view(inserted, probe::unkeyed_scheme(m, k));
      Answer answer{};
      simd::query_batch(view, &digest, 1, &answer);
      EXPECT_EQ(answer, Answer::kMaybe) << row[0] << " m " << m << " k " << k;
      for (const auto i : indices) {
        const std::uint64_t saved = inserted[i / 64];
        inserted[i / 64] &= ~(std::uint64_t{1} << (i % 64));
        simd::query_batch(view, &digest, 1, &answer);
        EXPECT_EQ(answer, Answer::kDefinitelyNot) << row[0] << " m " << m << " bit " << i;
        inserted[i / 64] = saved;
      }
    }
    ASSERT_TRUE(std::equal(inserted, inserted + word_count, expected)) << "m " << m;
  }
}

// The golden digest sets of builds.tsv, computed once (SHA-256 of text).
const std::vector<Digest>& golden_members() {
  static const std::vector<Digest> members = test::member_digests(100000);
  return members;
}
const std::vector<Digest>& golden_non_members() {
  static const std::vector<Digest> probes = [] {
    std::vector<Digest> d;
    d.reserve(100000);
    for (std::uint64_t i = 0; i < 100000; ++i) d.push_back(test::non_member_digest(i));
    return d;
  }();
  return probes;
}

// tests/data/vectors/builds.tsv: whole builds through the SIMD engine.
TEST_P(SimdEngineTest, GoldenBuilds) {
  const auto rows = test::read_tsv("vectors/builds.tsv");
  ASSERT_FALSE(rows.empty());
  const auto& members = golden_members();
  const auto& probes = golden_non_members();
  for (const auto& row : rows) {
    const std::uint64_t member_count = std::stoull(row[0]);
    const std::uint64_t m = std::stoull(row[3]);
    const auto k = static_cast<std::uint32_t>(std::stoul(row[4]));
    ASSERT_LE(member_count, members.size());
    std::vector<std::uint64_t> words(m / 64, 0);
    simd::insert_batch(probe::unkeyed_scheme(m, k), words.data(), members.data(), member_count);
    std::uint64_t popcount = 0;
    for (const auto w : words) popcount += static_cast<std::uint64_t>(std::popcount(w));
    EXPECT_EQ(popcount, std::stoull(row[5])) << "members " << member_count;
    const auto payload = sha256(std::span<const std::uint8_t>(
        reinterpret_cast<const std::uint8_t*>(words.data()), words.size() * 8));
    EXPECT_EQ(payload.hex(), row[6]) << "members " << member_count;

    const probe::FilterView view = probe::make_view(words.data(), probe::unkeyed_scheme(m, k));
    std::vector<Answer> answers(probes.size());
    simd::query_batch(view, probes.data(), probes.size(), answers.data());
    std::vector<std::uint64_t> maybe;
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (answers[i] == Answer::kMaybe) maybe.push_back(i);
    }
    EXPECT_EQ(maybe, test::split_numbers(row.size() > 7 ? row[7] : ""))
        << "members " << member_count;
    std::vector<Answer> member_answers(member_count);
    simd::query_batch(view, members.data(), member_count, member_answers.data());
    EXPECT_EQ(std::count(member_answers.begin(), member_answers.end(), Answer::kMaybe),
              static_cast<std::ptrdiff_t>(member_count))
        << "a member answered Definitely Not";
  }
}

}  // namespace
}  // namespace abf
