// The probe sequence (PROTOCOL.md section 4) against probes.tsv, and the
// division-free Reducer against `%`.
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <vector>

#include "abf/probe.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

std::vector<std::uint64_t> probe_sequence(const Digest& digest, std::uint64_t m, std::uint32_t k) {
  std::vector<std::uint64_t> indices;
  std::uint64_t i = probe::first_index(probe::h1_of(digest.bytes.data()), m);
  const std::uint64_t step = probe::step_of(probe::h2_of(digest.bytes.data()), m);
  for (std::uint32_t j = 0; j < k; ++j) {
    indices.push_back(i);
    i = probe::advance(i, step, m);
  }
  return indices;
}

TEST(Probe, MatchesEveryGoldenSequence) {
  const auto rows = test::read_tsv("vectors/probes.tsv");
  ASSERT_GE(rows.size(), 300u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 4u);
    const Digest digest = test::digest_from_hex(row[0]);
    const auto m = std::stoull(row[1]);
    const auto k = static_cast<std::uint32_t>(std::stoul(row[2]));
    EXPECT_EQ(probe_sequence(digest, m, k), test::split_numbers(row[3]))
        << row[0] << " m=" << m << " k=" << k;
  }
}

TEST(Probe, ReadsBigEndianWords) {
  const Digest digest = test::digest_with_words(0x0102030405060708ull, 0xf0e0d0c0b0a09080ull);
  EXPECT_EQ(probe::h1_of(digest.bytes.data()), 0x0102030405060708ull);
  EXPECT_EQ(probe::h2_of(digest.bytes.data()), 0xf0e0d0c0b0a09080ull);
}

TEST(Probe, PositionsOfOneDigestAreDistinct) {
  for (const std::uint64_t m : {64ull, 128ull, 192ull, 9'600ull, (1ull << 30)}) {
    for (const Digest& digest : test::random_digests(200, m)) {
      const auto indices = probe_sequence(digest, m, 32);
      EXPECT_EQ(std::set(indices.begin(), indices.end()).size(), 32u);
    }
  }
}

TEST(Probe, AdvanceIsExactModularAddition) {
  const std::uint64_t m = (1ull << 30);
  EXPECT_EQ(probe::advance(m - 1, m - 1, m), m - 2);
  EXPECT_EQ(probe::advance(0, 1, m), 1u);
  EXPECT_EQ(probe::advance(m - 1, 1, m), 0u);
}

std::vector<std::uint64_t> adversarial_words(std::uint64_t m) {
  const std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
  std::vector<std::uint64_t> words = {0,
                                      1,
                                      2,
                                      m - 1,
                                      m,
                                      m + 1,
                                      2 * m,
                                      2 * m - 1,
                                      1ull << 63,
                                      (1ull << 63) - 1,
                                      (1ull << 63) + 1,
                                      max,
                                      max - 1,
                                      max / m * m,
                                      max / m * m - 1,
                                      (max / m) * m + (m - 1)};
  for (const Digest& digest : test::random_digests(500, m * 7 + 3)) {
    words.push_back(probe::h1_of(digest.bytes.data()));
  }
  return words;
}

std::vector<std::uint64_t> divisors() {
  std::vector<std::uint64_t> ms = {1,
                                   2,
                                   3,
                                   63,
                                   64,
                                   128,
                                   192,
                                   64 * 3 * 5 * 7,
                                   64 * 1001,
                                   9'600,
                                   14'377'664,
                                   (1ull << 30) - 64,
                                   (1ull << 30),
                                   (1ull << 32) - 1};
  for (const Digest& digest : test::random_digests(50, 99)) {
    ms.push_back((probe::h1_of(digest.bytes.data()) % (1ull << 24) + 1) * 64);
  }
  return ms;
}

TEST(Reducer, EqualsModuloForEveryDivisorAndAdversarialWord) {
  for (const std::uint64_t m : divisors()) {
    const probe::Reducer reducer(m);
    for (const std::uint64_t x : adversarial_words(m)) {
      ASSERT_EQ(reducer.reduce(x), x % m) << "x = " << x << ", m = " << m;
      ASSERT_EQ(reducer.reduce(x | 1), (x | 1) % m) << "x = " << x << ", m = " << m;
    }
  }
}

TEST(Reducer, IsUsableAtCompileTime) {
  constexpr probe::Reducer reducer(14'377'664);
  static_assert(reducer.reduce(0xffffffffffffffffull) == 0xffffffffffffffffull % 14'377'664);
  static_assert(reducer.reduce(123) == 123);
  SUCCEED();
}

}  // namespace
}  // namespace abf
