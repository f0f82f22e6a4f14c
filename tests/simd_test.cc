// The Highway engine answers bit for bit as the scalar reference, on every
// target compiled into this binary that this CPU runs, for both protocols:
// each test runs once per (target, hashProtocolVersion), the target forced
// with hwy::SetSupportedTargetsForTest (as hwy/tests/hwy_gtest.h does). For
// protocol 2 the reference hashes with OpenSSL and the engine with its own
// SipHash in vector lanes; the keys vary from test to test, adversarial ones
// (all zero, all ones, one bit apart) among them.
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
#include <tuple>
#include <vector>

#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/fingerprint.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"
#include "abf/simd/target.hpp"
#include "hwy/targets.h"
#include "engine.hpp"
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
std::vector<std::uint64_t> mixed_bitset(const probe::Scheme& scheme,
                                        const std::vector<Digest>& digests, std::uint64_t seed) {
  auto words = random_bitset(scheme.bit_count, ors_for(scheme.hash_count), seed);
  scalar::insert_batch(scheme, words.data(), digests.data(), digests.size() / 4);
  return words;
}

// (h1, h2) of every digest by the reference (OpenSSL for protocol 2).
std::vector<probe::HashPair> reference_hashes(const probe::Scheme& scheme,
                                              const std::vector<Digest>& digests) {
  std::vector<probe::HashPair> hashes(digests.size());
  scalar::hash_batch(scheme, digests.data(), digests.size(), hashes.data());
  return hashes;
}

// Keys for the keyed runs: adversarial ones first, then pseudo-random.
probe::KeySchedule test_key(std::uint64_t salt) {
  std::uint8_t key[16] = {};
  switch (salt % 5) {
    case 0:  // all zero
      break;
    case 1:  // all ones
      std::memset(key, 0xff, sizeof key);
      break;
    case 2:  // one bit set, the highest
      key[15] = 0x80;
      break;
    case 3:  // the golden key (vectors/v2)
      std::memcpy(key, test::golden_key().key.bytes().data(), 16);
      break;
    default: {
      const auto random = test::random_digests(1, salt)[0];
      std::memcpy(key, random.bytes.data(), 16);
    }
  }
  return probe::make_key_schedule(key);
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

// Param: (Highway target, hashProtocolVersion).
class SimdEngineTest : public ::testing::TestWithParam<std::tuple<std::int64_t, std::uint32_t>> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(target()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }

  std::int64_t target() const { return std::get<0>(GetParam()); }
  std::uint32_t protocol() const { return std::get<1>(GetParam()); }
  bool keyed() const { return protocol() == probe::kProtocolKeyed; }
  // The scheme of layout (m, k) under this test's protocol; keyed schemes
  // take the key test_key(m + k + salt).
  probe::Scheme scheme(std::uint64_t m, std::uint32_t k, std::uint64_t salt = 0) const {
    probe::Scheme s = probe::unkeyed_scheme(m, k);
    if (keyed()) {
      s.protocol = probe::kProtocolKeyed;
      s.key = test_key(m + k + salt);
    }
    return s;
  }
};

std::string engine_test_name(
    const ::testing::TestParamInfo<std::tuple<std::int64_t, std::uint32_t>>& info) {
  return std::string(hwy::TargetName(std::get<0>(info.param))) + "_protocol" +
         std::to_string(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    Targets, SimdEngineTest,
    ::testing::Combine(::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                       ::testing::Values(probe::kProtocolUnkeyed, probe::kProtocolKeyed)),
    engine_test_name);

TEST(SimdTargets, CompilesTheBaselineAndTheBestTarget) {
  const auto targets = simd::compiled_targets();
  ASSERT_FALSE(targets.empty());
  // The best supported target is what an unforced dispatch picks.
  EXPECT_EQ(simd::target_name(), targets.front());
  EXPECT_EQ(simd_target_name(), simd::target_name());
}

// The engine's own switch (simd::use_target, behind abf::use_simd_target,
// ABF_SIMD_TARGET and abf bench --simd-target): each target by name, the
// list unchanged whichever runs, a name not in it refused without effect,
// and "best" back to the first.
TEST(SimdTargets, UseTargetRunsEachTargetByNameAndBestRestores) {
  const auto targets = simd::compiled_targets();
  ASSERT_FALSE(targets.empty());
  for (const auto& name : targets) {
    ASSERT_TRUE(simd::use_target(name)) << name;
    EXPECT_EQ(simd::target_name(), name);
    EXPECT_EQ(simd::compiled_targets(), targets) << "after choosing " << name;
    EXPECT_FALSE(simd::use_target("NO_SUCH_TARGET"));
    EXPECT_EQ(simd::target_name(), name) << "a refused name changed the target";
  }
  ASSERT_TRUE(simd::use_target("best"));
  EXPECT_EQ(simd::target_name(), targets.front());
  const auto refused = use_simd_target("NO_SUCH_TARGET");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find(targets.front()), std::string::npos)
      << "the error lists the targets: " << refused.error().message;
  ASSERT_TRUE(use_simd_target(targets.back()).has_value());
  EXPECT_EQ(simd_target_name(), targets.back());
  ASSERT_TRUE(use_simd_target("best").has_value());
  EXPECT_EQ(simd_target_name(), targets.front());
}

TEST_P(SimdEngineTest, DispatchesToTheForcedTarget) {
  EXPECT_EQ(simd::target_name(), hwy::TargetName(target()));
}

// Step 1 alone: the vector hasher against the reference, for every batch
// size around the lane counts and several keys.
TEST_P(SimdEngineTest, HashesEqualTheReference) {
  auto digests = test::random_digests(700, 21);
  for (const auto& adversarial : adversarial_digests(64)) digests.push_back(adversarial);
  Digest ones;
  ones.bytes.fill(0xff);
  digests.push_back(ones);
  digests.push_back(Digest{});
  for (std::uint64_t salt = 0; salt < 10; ++salt) {
    const probe::Scheme s = scheme(64, 1, salt);
    const auto expected = reference_hashes(s, digests);
    for (const std::size_t n : {0u, 1u, 2u, 3u, 4u, 7u, 8u, 9u, 15u, 16u, 17u, 100u}) {
      std::vector<probe::HashPair> got(n + 1, probe::HashPair{1, 2});
      simd::hash_batch(s, digests.data() + salt, n, got.data());
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got[i].h1, expected[salt + i].h1) << "n " << n << " i " << i;
        ASSERT_EQ(got[i].h2, expected[salt + i].h2) << "n " << n << " i " << i;
      }
      EXPECT_EQ(got[n].h1, 1u) << "wrote past the batch";
    }
    std::vector<probe::HashPair> all(digests.size());
    simd::hash_batch(s, digests.data(), digests.size(), all.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      ASSERT_EQ(all[i].h1, expected[i].h1) << digests[i].hex();
      ASSERT_EQ(all[i].h2, expected[i].h2) << digests[i].hex();
    }
  }
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
    const probe::Scheme s = scheme(m, 1);
    const auto hashes = reference_hashes(s, digests);
    simd::probe_starts(s, digests.data(), digests.size(), first.data(), step.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      ASSERT_EQ(first[i], probe::first_index(hashes[i].h1, m))
          << "h1 " << hashes[i].h1 << " m " << m;
      ASSERT_EQ(step[i], probe::step_of(hashes[i].h2, m)) << "h2 " << hashes[i].h2 << " m " << m;
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
    const probe::Scheme s = scheme(m, 1);
    const auto hashes = reference_hashes(s, digests);
    simd::probe_starts(s, digests.data(), digests.size(), first.data(), step.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      ASSERT_EQ(first[i], probe::first_index(hashes[i].h1, m)) << "m " << m;
      ASSERT_EQ(step[i], probe::step_of(hashes[i].h2, m)) << "m " << m;
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
      scalar::insert_batch(scheme(m, k), words.data(), digests.data(), digests.size() / 4);
      const probe::FilterView view = probe::make_view(words.data(), scheme(m, k));
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
      scalar::insert_batch(scheme(m, k), expected.data(), digests.data(), digests.size());
      simd::insert_batch(scheme(m, k), got.data(), digests.data(), digests.size());
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
      const probe::Scheme s = scheme(m, k);
      // Expected: every position, as (bucket, offset), in a multiset; the
      // same for every bucket shape below.
      std::map<std::uint64_t, std::uint64_t> expected;
      for (const probe::HashPair& h : reference_hashes(s, digests)) {
        std::uint64_t i = probe::first_index(h.h1, m);
        const std::uint64_t step = probe::step_of(h.h2, m);
        for (std::uint32_t j = 0; j < k; ++j, i = probe::advance(i, step, m)) ++expected[i];
      }
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
          simd::scatter_positions(s, words.data(), digests.data(), half, buckets);
          simd::scatter_positions(s, words.data(), digests.data() + half, digests.size() - half,
                                  buckets);
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
      scalar::insert_batch(scheme(m, k), large.a.data(), digests.data(), digests.size() / 2);
      simd::insert_batch(scheme(m, k), large.b.data(), digests.data(), digests.size() / 2);
      ASSERT_TRUE(std::equal(large.a.begin(), large.a.begin() + word_count, large.b.begin()))
          << "m " << m << " k " << k;
      const probe::FilterView view = probe::make_view(large.a.data(), scheme(m, k));
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
  const auto words = mixed_bitset(scheme(m, k), digests, 3);
  const probe::FilterView view = probe::make_view(words.data(), scheme(m, k));
  std::vector<std::size_t> sizes;
  for (std::size_t n = 0; n <= 33; ++n) sizes.push_back(n);  // 0, 1, lanes - 1, lanes, lanes + 1
  for (const std::size_t n : {1023u, 1024u, 1025u, 2047u, 2048u, 2049u, 5000u}) sizes.push_back(n);
  for (const std::size_t offset : {0u, 1u, 2u, 3u, 7u, 131u}) {
    for (const std::size_t n : sizes) {
      const Digest* start = digests.data() + offset;
      const auto expected = scalar_answers(view, start, n);
      ASSERT_EQ(simd_answers(view, start, n), expected) << "offset " << offset << " n " << n;
      std::vector<std::uint64_t> a(m / 64, 0), b(m / 64, 0);
      scalar::insert_batch(scheme(m, k), a.data(), start, n);
      simd::insert_batch(scheme(m, k), b.data(), start, n);
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
      scalar::insert_batch(scheme(m, k), words.data(), members.data(), members.size());
      std::vector<Digest> batch;
      const std::size_t runs[] = {2048, 1500, 3000, 700, 1024, 2100};
      for (std::size_t r = 0; r < std::size(runs); ++r) {
        const auto& source = r % 2 == 0 ? members : others;
        batch.insert(batch.end(), source.begin() + 100 * r, source.begin() + 100 * r + runs[r]);
      }
      const probe::FilterView view = probe::make_view(words.data(), scheme(m, k));
      ASSERT_EQ(simd_answers(view, batch.data(), batch.size()),
                scalar_answers(view, batch.data(), batch.size()))
          << "m " << m << " k " << k;
    }
  }
}

// The two ways the AVX-512 rounds pack their survivors (to memory; through
// a register, the default on Zen 4) answer alike,
// on this target's kernels, whichever the CPU would pick: random fills at
// every density, runs of members and non-members, batch sizes around the
// lane count and the block. Other targets take neither, and must agree too.
TEST_P(SimdEngineTest, EitherCompressFormAnswersAsScalar) {
  EXPECT_NE(simd::compress_form(), simd::CompressForm::kAuto);
  for (const auto form : {simd::CompressForm::kMemory, simd::CompressForm::kRegister}) {
    simd::force_compress_form(form);
    EXPECT_EQ(simd::compress_form(), form);
    for (const std::uint64_t m : {std::uint64_t{64 * 1001}, std::uint64_t{9592960}}) {
      for (const std::uint32_t k : {1u, 3u, 7u, 13u}) {
        const auto members = test::random_digests(3000, m + k);
        auto batch = test::random_digests(6000, m + k + 7);
        batch.insert(batch.begin() + 1000, members.begin(), members.end());
        const auto adversarial = adversarial_digests(m);
        batch.insert(batch.end(), adversarial.begin(), adversarial.end());
        auto words = random_bitset(m, ors_for(k), m + k);
        scalar::insert_batch(scheme(m, k), words.data(), members.data(), members.size());
        const probe::FilterView view = probe::make_view(words.data(), scheme(m, k));
        for (const std::size_t n :
             {std::size_t{1}, std::size_t{9}, std::size_t{1023}, std::size_t{1025}, batch.size()}) {
          ASSERT_EQ(simd_answers(view, batch.data(), n), scalar_answers(view, batch.data(), n))
              << "form " << static_cast<int>(form) << " m " << m << " k " << k << " n " << n;
        }
      }
    }
  }
  simd::force_compress_form(simd::CompressForm::kAuto);
  EXPECT_NE(simd::compress_form(), simd::CompressForm::kAuto);
}

TEST_P(SimdEngineTest, DigestsAtAnOddByteAddress) {
  // Digest has alignment 1: an array of them may start at any byte.
  const std::uint64_t m = 9592960;
  const std::uint32_t k = 7;
  const auto source = test::random_digests(3000, 9);
  const auto words = mixed_bitset(scheme(m, k), source, 4);
  const probe::FilterView view = probe::make_view(words.data(), scheme(m, k));
  for (const std::size_t byte_offset : {1u, 3u, 8u, 13u}) {
    std::vector<std::uint8_t> buffer(source.size() * Digest::kSize + 64);
    std::memcpy(buffer.data() + byte_offset, source.data(), source.size() * Digest::kSize);
    const auto* shifted =
        std::launder(reinterpret_cast<const Digest*>(buffer.data() + byte_offset));
    ASSERT_EQ(simd_answers(view, shifted, source.size()),
              scalar_answers(view, source.data(), source.size()))
        << "byte offset " << byte_offset;
    std::vector<std::uint64_t> a(m / 64, 0), b(m / 64, 0);
    scalar::insert_batch(scheme(m, k), a.data(), source.data(), source.size());
    simd::insert_batch(scheme(m, k), b.data(), shifted, source.size());
    ASSERT_EQ(b, a) << "byte offset " << byte_offset;
  }
}

// The vector content fingerprint (one digest a lane) equals the library's
// XXH3-128 summed a digest at a time, for every batch length around the lane
// counts, at odd byte addresses, and on digests that stress its 32-bit
// pieces: zero and all-ones words, words equal to XXH3's secret (a product
// by zero), halves of 0xffffffff (the carries of the 128-bit product), and
// long runs of one digest whose sum carries out of the low half again and
// again. No protocol enters: once per target.
class SimdTargetTest : public ::testing::TestWithParam<std::int64_t> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(GetParam()); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

INSTANTIATE_TEST_SUITE_P(Targets, SimdTargetTest,
                         ::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                         [](const ::testing::TestParamInfo<std::int64_t>& info) {
                           return std::string(hwy::TargetName(info.param));
                         });

TEST_P(SimdTargetTest, ContentFingerprintEqualsTheLibrary) {
  auto digests = test::random_digests(2000, 31);
  for (const auto& adversarial : adversarial_digests(64)) digests.push_back(adversarial);
  const auto with_words = [](std::uint64_t w0, std::uint64_t w1, std::uint64_t w2,
                             std::uint64_t w3) {
    Digest d;
    const std::uint64_t words[4] = {w0, w1, w2, w3};
    for (int w = 0; w < 4; ++w) {
      for (int b = 0; b < 8; ++b) d.bytes[8 * w + b] = static_cast<std::uint8_t>(words[w] >> 8 * b);
    }
    return d;
  };
  // XXH3's default secret, first 32 bytes (xxhash.h, XXH3_kSecret): inputs
  // only, the expected sums come from the library.
  const std::uint64_t secret[4] = {0xbe4ba423396cfeb8ull, 0x1cad21f72c81017cull,
                                   0xdb979083e96dd4deull, 0x1f67b3b7a4a44072ull};
  const std::uint64_t ones = ~std::uint64_t{0};
  const std::uint64_t edges[] = {0, ones, 0xffffffffull, 0xffffffff00000000ull,
                                 0x8000000000000000ull, 1};
  for (const std::uint64_t a : edges) {
    for (const std::uint64_t b : edges) {
      digests.push_back(with_words(a, b, a, b));
      digests.push_back(with_words(secret[0] ^ a, secret[1] ^ b, secret[2] ^ a, secret[3] ^ b));
      digests.push_back(with_words(secret[0], secret[1] ^ a, secret[2] ^ b, secret[3]));
    }
  }
  const auto reference = [](const Digest* first, std::size_t n) {
    return detail::content_fingerprint_one_by_one({first, n});
  };
  for (std::size_t n = 0; n <= 40; ++n) {
    for (const std::size_t at : {0u, 1u, 5u}) {
      ASSERT_EQ(simd::content_fingerprint(digests.data() + at, n), reference(digests.data() + at, n))
          << "n " << n << " at " << at;
    }
  }
  ASSERT_EQ(simd::content_fingerprint(digests.data(), digests.size()),
            reference(digests.data(), digests.size()));
  for (const std::size_t byte_offset : {1u, 3u, 13u}) {
    std::vector<std::uint8_t> buffer(digests.size() * Digest::kSize + 64);
    std::memcpy(buffer.data() + byte_offset, digests.data(), digests.size() * Digest::kSize);
    const auto* shifted =
        std::launder(reinterpret_cast<const Digest*>(buffer.data() + byte_offset));
    ASSERT_EQ(simd::content_fingerprint(shifted, digests.size()),
              reference(digests.data(), digests.size()))
        << "byte offset " << byte_offset;
  }
  for (const Digest& repeated : {with_words(ones, ones, ones, ones), digests[7]}) {
    const std::vector<Digest> run(1000, repeated);
    const auto got = simd::content_fingerprint(run.data(), run.size());
    ASSERT_EQ(got, reference(run.data(), run.size())) << repeated.hex();
    ContentFingerprint times;  // 1000 x the element, by repeated addition
    for (int i = 0; i < 1000; ++i) times += ContentFingerprint::of(repeated);
    ASSERT_EQ(got, times);
  }
  // The public sum reaches this kernel through the fallback row.
  ASSERT_NE(detail::fallback_fingerprint(), nullptr) << "the simd row lost its fingerprint";
  EXPECT_EQ(detail::fallback_fingerprint(), detail::fallback_engine().fingerprint);
  EXPECT_EQ(ContentFingerprint::of(std::span<const Digest>(digests)),
            reference(digests.data(), digests.size()));
}

// One probe sequence of the golden vectors.
struct GoldenProbe {
  probe::Scheme scheme;
  std::string digest_hex;
  std::vector<std::uint64_t> indices;
};

// vectors/probes.tsv (protocol 1: digest, m, k, indices) or
// vectors/v2/probes-v2.tsv (protocol 2: key, digest, m, k, indices).
std::vector<GoldenProbe> golden_probes(std::uint32_t protocol) {
  std::vector<GoldenProbe> probes;
  const bool keyed = protocol == probe::kProtocolKeyed;
  for (const auto& row :
       test::read_tsv(keyed ? "vectors/v2/probes-v2.tsv" : "vectors/probes.tsv")) {
    const std::size_t c = keyed ? 1 : 0;  // the key's column shifts the rest
    probe::Scheme scheme = probe::unkeyed_scheme(
        std::stoull(row.at(c + 1)), static_cast<std::uint32_t>(std::stoul(row.at(c + 2))));
    if (keyed) {
      scheme.protocol = probe::kProtocolKeyed;
      scheme.key = probe::make_key_schedule(Key::parse_hex(row.at(0))->bytes().data());
    }
    probes.push_back({scheme, row.at(c), test::split_numbers(row.at(c + 3))});
  }
  return probes;
}

// The golden probe sequences (both protocols): the starts, the inserted
// bits, and a query that needs every one of them.
TEST_P(SimdEngineTest, GoldenProbeSequences) {
  const auto probes = golden_probes(protocol());
  ASSERT_FALSE(probes.empty());
  std::map<std::uint64_t, std::vector<std::size_t>> probes_by_m;
  for (std::size_t r = 0; r < probes.size(); ++r)
    probes_by_m[probes[r].scheme.bit_count].push_back(r);
  auto& large = large_bitsets();
  for (const auto& [m, ids] : probes_by_m) {
    const std::size_t word_count = m / 64;
    ASSERT_LE(word_count, large.a.size());
    auto* inserted = large.a.data();  // every sequence of this m inserted by the engine
    auto* expected = large.b.data();  // every listed bit
    std::fill(inserted, inserted + word_count, 0);
    std::fill(expected, expected + word_count, 0);
    for (const std::size_t r : ids) {
      const GoldenProbe& golden = probes[r];
      const Digest digest = test::digest_from_hex(golden.digest_hex);
      const auto& indices = golden.indices;
      ASSERT_EQ(indices.size(), golden.scheme.hash_count);
      std::uint64_t first = 0, step = 0;
      simd::probe_starts(golden.scheme, &digest, 1, &first, &step);
      EXPECT_EQ(first, indices[0]) << golden.digest_hex << " m " << m;
      if (indices.size() >= 2) {
        EXPECT_EQ(step, (indices[1] + m - indices[0]) % m) << golden.digest_hex << " m " << m;
      }

      // Only the sequences of one key share a bitset meaningfully, but any
      // union is a valid filter for the Maybe test below.
      simd::insert_batch(golden.scheme, inserted, &digest, 1);
      for (const auto i : indices) expected[i / 64] |= std::uint64_t{1} << (i % 64);
      const probe::FilterView view = probe::make_view(inserted, golden.scheme);
      Answer answer{};
      simd::query_batch(view, &digest, 1, &answer);
      EXPECT_EQ(answer, Answer::kMaybe) << golden.digest_hex << " m " << m;
      for (const auto i : indices) {
        const std::uint64_t saved = inserted[i / 64];
        inserted[i / 64] &= ~(std::uint64_t{1} << (i % 64));
        simd::query_batch(view, &digest, 1, &answer);
        EXPECT_EQ(answer, Answer::kDefinitelyNot)
            << golden.digest_hex << " m " << m << " bit " << i;
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

// One whole build of the golden vectors.
struct GoldenBuild {
  probe::Scheme scheme;
  std::uint64_t member_count = 0;
  std::uint64_t popcount = 0;
  std::string payload_sha256;
  std::vector<std::uint64_t> maybe;  // non-member indices answering Maybe
  std::uint64_t non_members = 0;     // how many non-members the row covers
};

// vectors/builds.tsv (protocol 1) or vectors/v2/builds-v2.tsv (protocol 2).
std::vector<GoldenBuild> golden_builds(std::uint32_t protocol) {
  std::vector<GoldenBuild> builds;
  if (protocol == probe::kProtocolKeyed) {
    for (const auto& row : test::read_tsv("vectors/v2/builds-v2.tsv")) {
      probe::Scheme scheme = probe::unkeyed_scheme(
          std::stoull(row.at(4)), static_cast<std::uint32_t>(std::stoul(row.at(5))));
      scheme.protocol = probe::kProtocolKeyed;
      scheme.key = probe::make_key_schedule(Key::parse_hex(row.at(0))->bytes().data());
      builds.push_back({scheme, std::stoull(row.at(1)), std::stoull(row.at(6)), row.at(7),
                        test::split_numbers(row.size() > 8 ? row[8] : ""), 20000});
    }
    return builds;
  }
  for (const auto& row : test::read_tsv("vectors/builds.tsv")) {
    builds.push_back({probe::unkeyed_scheme(std::stoull(row.at(3)),
                                            static_cast<std::uint32_t>(std::stoul(row.at(4)))),
                      std::stoull(row.at(0)), std::stoull(row.at(5)), row.at(6),
                      test::split_numbers(row.size() > 7 ? row[7] : ""), 100000});
  }
  return builds;
}

// The golden builds (both protocols) through the SIMD engine.
TEST_P(SimdEngineTest, GoldenBuilds) {
  const auto builds = golden_builds(protocol());
  ASSERT_FALSE(builds.empty());
  const auto& members = golden_members();
  const auto& probes = golden_non_members();
  for (const GoldenBuild& build : builds) {
    const std::uint64_t m = build.scheme.bit_count;
    ASSERT_LE(build.member_count, members.size());
    std::vector<std::uint64_t> words(m / 64, 0);
    simd::insert_batch(build.scheme, words.data(), members.data(), build.member_count);
    std::uint64_t popcount = 0;
    for (const auto w : words) popcount += static_cast<std::uint64_t>(std::popcount(w));
    EXPECT_EQ(popcount, build.popcount) << "members " << build.member_count;
    const auto payload = sha256(std::span<const std::uint8_t>(
        reinterpret_cast<const std::uint8_t*>(words.data()), words.size() * 8));
    EXPECT_EQ(payload.hex(), build.payload_sha256) << "members " << build.member_count;

    const probe::FilterView view = probe::make_view(words.data(), build.scheme);
    std::vector<Answer> answers(build.non_members);
    simd::query_batch(view, probes.data(), answers.size(), answers.data());
    std::vector<std::uint64_t> maybe;
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (answers[i] == Answer::kMaybe) maybe.push_back(i);
    }
    EXPECT_EQ(maybe, build.maybe) << "members " << build.member_count;
    std::vector<Answer> member_answers(build.member_count);
    simd::query_batch(view, members.data(), build.member_count, member_answers.data());
    EXPECT_EQ(std::count(member_answers.begin(), member_answers.end(), Answer::kMaybe),
              static_cast<std::ptrdiff_t>(build.member_count))
        << "a member answered Definitely Not";
  }
}

}  // namespace
}  // namespace abf
