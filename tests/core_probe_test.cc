// The probe sequence (docs/protocol.md sections 4 and 4b) against probes.tsv and
// v2/probes-v2.tsv; the portable SipHash (abf/siphash.hpp) against OpenSSL's,
// the reference; key fingerprints against v2/key-fingerprints.tsv; and the
// division-free Reducer against `%`.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <limits>
#include <set>
#include <vector>

#include "abf/probe.hpp"
#include "abf/scheme.hpp"
#include "kernels.hpp"
#include "keyed_hash.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

std::vector<std::uint64_t> probe_sequence(probe::HashPair h, std::uint64_t m, std::uint32_t k) {
  std::vector<std::uint64_t> indices;
  std::uint64_t i = probe::first_index(h.h1, m);
  const std::uint64_t step = probe::step_of(h.h2, m);
  for (std::uint32_t j = 0; j < k; ++j) {
    indices.push_back(i);
    i = probe::advance(i, step, m);
  }
  return indices;
}

std::vector<std::uint64_t> probe_sequence(const Digest& digest, std::uint64_t m, std::uint32_t k) {
  return probe_sequence(probe::unkeyed_hashes(digest.bytes.data()), m, k);
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

// v2/probes-v2.tsv: key, digest, m, k, indices. Step 1 by both host
// implementations of SipHash: OpenSSL's (the scalar reference) and the
// portable one the SIMD tails and the CUDA kernels use.
TEST(KeyedProbe, MatchesEveryGoldenSequence) {
  const auto rows = test::read_tsv("vectors/v2/probes-v2.tsv");
  ASSERT_GE(rows.size(), 80u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 5u);
    const Key key = *Key::parse_hex(row[0]);
    const probe::KeySchedule schedule = probe::make_key_schedule(key.bytes().data());
    const Digest digest = test::digest_from_hex(row[1]);
    const auto m = std::stoull(row[2]);
    const auto k = static_cast<std::uint32_t>(std::stoul(row[3]));
    const auto expected = test::split_numbers(row[4]);
    EXPECT_EQ(probe_sequence(detail::openssl_keyed_hashes(schedule, digest.bytes.data()), m, k),
              expected)
        << "OpenSSL, key " << row[0] << " digest " << row[1] << " m=" << m << " k=" << k;
    EXPECT_EQ(probe_sequence(probe::keyed_hashes(schedule, digest.bytes.data()), m, k), expected)
        << "portable, key " << row[0] << " digest " << row[1] << " m=" << m << " k=" << k;
  }
}

// The portable SipHash-2-4-128 equals OpenSSL's for every message length
// around the 8-byte blocks and for adversarial and random keys.
TEST(SipHash, PortableEqualsOpenSslForEveryLengthAndKey) {
  std::vector<std::array<std::uint8_t, 16>> keys(4);
  keys[1].fill(0xff);
  keys[2][0] = 1;
  keys[3][15] = 0x80;
  for (const Digest& random : test::random_digests(40, 77)) {
    std::array<std::uint8_t, 16> key;
    std::copy_n(random.bytes.begin(), 16, key.begin());
    keys.push_back(key);
  }
  std::vector<std::uint8_t> message(80);
  for (std::size_t i = 0; i < message.size(); ++i) message[i] = static_cast<std::uint8_t>(i * 37);
  for (const auto& key : keys) {
    const probe::KeySchedule schedule = probe::make_key_schedule(key.data());
    std::uint8_t recovered[16];
    detail::key_bytes_of(schedule, recovered);
    ASSERT_TRUE(std::equal(key.begin(), key.end(), recovered)) << "the schedule loses the key";
    for (std::size_t length = 0; length <= message.size(); ++length) {
      const probe::Sip128 portable = probe::siphash24_128(schedule, message.data(), length);
      const probe::Sip128 reference = detail::openssl_siphash(key.data(), message.data(), length);
      ASSERT_EQ(portable.lo, reference.lo) << "length " << length;
      ASSERT_EQ(portable.hi, reference.hi) << "length " << length;
    }
    // The 32-byte form the kernels use, from the digest's four words.
    for (const Digest& digest : test::random_digests(50, key[0] + 1)) {
      const std::uint8_t* d = digest.bytes.data();
      const probe::Sip128 words =
          probe::siphash24_128_digest(schedule, probe::load_le64(d), probe::load_le64(d + 8),
                                      probe::load_le64(d + 16), probe::load_le64(d + 24));
      const probe::Sip128 reference = detail::openssl_siphash(key.data(), d, 32);
      ASSERT_EQ(words.lo, reference.lo);
      ASSERT_EQ(words.hi, reference.hi);
    }
  }
}

// The portable SipHash is constexpr: usable in a kernel's constant setup.
TEST(SipHash, IsUsableAtCompileTime) {
  constexpr std::uint8_t kKey[16] = {};
  constexpr std::uint8_t kMessage[1] = {0};
  constexpr probe::Sip128 tag = probe::siphash24_128(probe::make_key_schedule(kKey), kMessage, 1);
  static_assert(tag.lo != 0 || tag.hi != 0);
  SUCCEED();
}

// v2/key-fingerprints.tsv: keyFingerprint of each key.
TEST(KeyFingerprint, MatchesTheGoldenFingerprints) {
  const auto keys = test::vector_keys();
  ASSERT_GE(keys.size(), 3u);
  for (const auto& key : keys) {
    EXPECT_EQ(key_fingerprint(key.key).hex(), key.fingerprint_hex) << key.hex;
    EXPECT_EQ(Scheme::keyed({64, 1}, key.key)->key_fingerprint().hex(), key.fingerprint_hex);
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
