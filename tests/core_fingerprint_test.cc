// The content fingerprint (abf/fingerprint.hpp): its algebra. The golden
// values of the definition live in tests/data/vectors (see the vectors test).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "abf/fingerprint.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

std::vector<Digest> random_digests(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<Digest> digests(count);
  for (auto& digest : digests)
    for (auto& byte : digest.bytes) byte = static_cast<std::uint8_t>(rng());
  return digests;
}

TEST(ContentFingerprint, EmptySetIsZero) {
  EXPECT_EQ(ContentFingerprint::of(std::span<const Digest>{}), ContentFingerprint{});
}

TEST(ContentFingerprint, IsIndependentOfOrderAndPartition) {
  auto digests = random_digests(1000, 1);
  const ContentFingerprint whole = ContentFingerprint::of(digests);
  std::shuffle(digests.begin(), digests.end(), std::mt19937_64(2));
  EXPECT_EQ(ContentFingerprint::of(digests), whole);
  const std::span<const Digest> all(digests);
  EXPECT_EQ(ContentFingerprint::of(all.first(317)) + ContentFingerprint::of(all.subspan(317)), whole);
}

TEST(ContentFingerprint, SubtractionUndoesAddition) {
  const auto digests = random_digests(64, 3);
  ContentFingerprint sum = ContentFingerprint::of(digests);
  for (const auto& digest : digests) sum -= ContentFingerprint::of(digest);
  EXPECT_EQ(sum, ContentFingerprint{});
}

TEST(ContentFingerprint, CarriesAcrossTheHalves) {
  ContentFingerprint a{.low = ~0ULL, .high = 5};
  a += ContentFingerprint{.low = 1, .high = 0};
  EXPECT_EQ(a, (ContentFingerprint{.low = 0, .high = 6}));
  a -= ContentFingerprint{.low = 1, .high = 0};
  EXPECT_EQ(a, (ContentFingerprint{.low = ~0ULL, .high = 5}));
  ContentFingerprint top{.low = ~0ULL, .high = ~0ULL};
  top += ContentFingerprint{.low = 1, .high = 0};
  EXPECT_EQ(top, ContentFingerprint{});  // mod 2^128
}

TEST(ContentFingerprint, DiffersForDifferentSets) {
  const auto digests = random_digests(2, 4);
  EXPECT_NE(ContentFingerprint::of(std::span(digests).first(1)), ContentFingerprint::of(digests));
  // A digest inserted twice is not the same multiset as once.
  const std::vector<Digest> twice{digests[0], digests[0]};
  EXPECT_NE(ContentFingerprint::of(twice), ContentFingerprint::of(std::span(digests).first(1)));
}

TEST(ContentFingerprint, BytesAndHexRoundTrip) {
  const ContentFingerprint value{.low = 0x0706050403020100ULL, .high = 0x0f0e0d0c0b0a0908ULL};
  EXPECT_EQ(value.hex(), "000102030405060708090a0b0c0d0e0f");
  EXPECT_EQ(ContentFingerprint::from_bytes(value.bytes()), value);
  auto parsed = ContentFingerprint::parse_hex(value.hex());
  ASSERT_TRUE(parsed.has_value());
  EXPECT_EQ(*parsed, value);
  EXPECT_FALSE(ContentFingerprint::parse_hex("00").has_value());
}

}  // namespace
}  // namespace abf
