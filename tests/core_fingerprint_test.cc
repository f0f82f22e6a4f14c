// The content fingerprint (abf/fingerprint.hpp): its algebra, the golden
// vectors (tests/data/vectors/fingerprint.tsv, written by an independent
// Python implementation, scripts/fingerprint-vectors), and every build path
// giving a set's fingerprint whatever its backend, order, chunking, threads
// and partition.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include <tbb/global_control.h>

#include "abf/abf.hpp"
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

TEST(ContentFingerprintVectors, EveryElementMatches) {
  int rows = 0;
  for (const auto& row : test::read_tsv("vectors/fingerprint.tsv")) {
    if (row.at(0) != "element") continue;
    ++rows;
    EXPECT_EQ(ContentFingerprint::of(test::digest_from_hex(row.at(1))).hex(), row.at(2)) << row.at(1);
  }
  EXPECT_GE(rows, 8);
}

TEST(ContentFingerprintVectors, EverySetMatches) {
  for (const auto& vector : test::fingerprint_vectors()) {
    EXPECT_EQ(ContentFingerprint::of(vector.digests).hex(), vector.fingerprint_hex) << vector.name;
  }
}

TEST(ContentFingerprintVectors, TheVectorsPartsSumToTheWhole) {
  const auto whole = test::fingerprint_vector("member-1000");
  const auto sum_of = [](std::initializer_list<const char*> names) {
    ContentFingerprint sum;
    for (const char* name : names) sum += *ContentFingerprint::parse_hex(test::fingerprint_vector(name).fingerprint_hex);
    return sum.hex();
  };
  EXPECT_EQ(sum_of({"member-1000-first-half", "member-1000-second-half"}), whole.fingerprint_hex);
  EXPECT_EQ(sum_of({"member-1000-shard-3-0", "member-1000-shard-3-1", "member-1000-shard-3-2"}),
            whole.fingerprint_hex);
}

// Every way to build member-1000 (and member-10000, large enough for the
// parallel and partitioned paths) gives the vector's fingerprint.
TEST(ContentFingerprintBuilds, EveryBuildPathGivesTheVectorsFingerprint) {
  for (const char* name : {"member-1000", "member-10000", "member-10-twice", "empty"}) {
    SCOPED_TRACE(name);
    const auto vector = test::fingerprint_vector(name);
    const BloomSpec spec{std::max<std::uint64_t>(vector.digests.size(), 1), 0.01};
    for (const Backend backend : {Backend::kScalar, Backend::kSimd, Backend::kAuto}) {
      auto filter = build_filter(vector.digests, spec, BuildOptions{}, backend);
      ASSERT_TRUE(filter.has_value()) << filter.error().describe();
      ASSERT_TRUE(filter->content_fingerprint().has_value());
      EXPECT_EQ(filter->content_fingerprint()->hex(), vector.fingerprint_hex) << backend.name();
    }
    // Chunked, reversed, on one thread.
    {
      tbb::global_control one(tbb::global_control::max_allowed_parallelism, 1);
      auto reversed = vector.digests;
      std::reverse(reversed.begin(), reversed.end());
      auto builder = FilterBuilder::create(spec, BuildOptions{});
      ASSERT_TRUE(builder.has_value());
      const std::span<const Digest> all(reversed);
      for (std::size_t at = 0; at < all.size(); at += 333) {
        ASSERT_TRUE(builder->add(all.subspan(at, std::min<std::size_t>(333, all.size() - at))));
      }
      auto filter = std::move(*builder).finish();
      ASSERT_TRUE(filter.has_value());
      EXPECT_EQ(filter->content_fingerprint()->hex(), vector.fingerprint_hex);
    }
    // A set of 3 shards: each shard its own part, the set the sum.
    auto set = build_filter_set(vector.digests, {std::max<std::uint64_t>(vector.digests.size(), 3), 0.01}, 3);
    ASSERT_TRUE(set.has_value()) << set.error().describe();
    ASSERT_TRUE(set->content_fingerprint().has_value());
    EXPECT_EQ(set->content_fingerprint()->hex(), vector.fingerprint_hex);
    for (std::uint32_t i = 0; i < 3; ++i) {
      std::vector<Digest> part;
      for (const Digest& digest : vector.digests) {
        if (shard_of(digest, 3) == i) part.push_back(digest);
      }
      EXPECT_EQ(set->shard(i).content_fingerprint(), ContentFingerprint::of(part)) << "shard " << i;
    }
  }
  // The 3-shard split of member-1000 is the vector's.
  auto set = build_filter_set(test::member_digests(1000), {1000, 0.01}, 3);
  ASSERT_TRUE(set.has_value());
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(set->shard(i).content_fingerprint()->hex(),
              test::fingerprint_vector("member-1000-shard-3-" + std::to_string(i)).fingerprint_hex);
  }
}

// Large batches sum the fingerprint in blocks over the arena's threads.
TEST(ContentFingerprintBuilds, AParallelBuildSumsTheSameFingerprint) {
  const auto digests = test::random_digests(300'000, 11);
  const ContentFingerprint expected = ContentFingerprint::of(digests);
  for (const std::size_t threads : {1, 2, 4}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    auto filter = build_filter(digests, {300'000, 0.01}, BuildOptions{});
    ASSERT_TRUE(filter.has_value());
    EXPECT_EQ(filter->content_fingerprint(), expected) << threads << " threads";
  }
}

}  // namespace
}  // namespace abf
