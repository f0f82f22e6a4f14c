// The one-line protocols 3 and 4 (docs/protocol.md sections 3c, 4c, 6)
// against the golden vectors of tests/data/vectors/v3: the layout and its
// modeled rate to the last bit, the probe blocks and bits, and whole builds
// through the scalar reference.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/digest.hpp"
#include "abf/layout_blocked.hpp"
#include "abf/scheme.hpp"
#include "blocked_kernels.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

ErrorCode code_named(const std::string& name) {
  if (name == "filter_too_large") return ErrorCode::kFilterTooLarge;
  if (name == "invalid_expected_item_count") return ErrorCode::kInvalidExpectedItemCount;
  if (name == "invalid_false_positive_rate") return ErrorCode::kInvalidFalsePositiveRate;
  ADD_FAILURE() << "unknown error name in layout-v3.tsv: " << name;
  return ErrorCode::kInvalidArgument;
}

std::string hex_float(double x) {
  char text[40];
  std::snprintf(text, sizeof text, "%a", x);
  return text;
}

// The exact bits, not a tolerance: the model is part of the protocol.
void expect_same_bits(double actual, double expected) {
  EXPECT_EQ(std::bit_cast<std::uint64_t>(actual), std::bit_cast<std::uint64_t>(expected))
      << "got " << hex_float(actual) << ", expected " << hex_float(expected);
}

TEST(BlockedLayout, MatchesEveryGoldenRowAndItsModeledRateToTheBit) {
  const auto rows = test::read_tsv("vectors/v3/layout-v3.tsv");
  ASSERT_EQ(rows.size(), 483u);
  std::size_t ok = 0;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 7u);
    SCOPED_TRACE("n = " + row[0] + ", p = " + row[2]);
    const BloomSpec spec{std::stoull(row[0]), test::parse_hex_float(row[1])};
    const auto layout = choose_blocked_layout(spec);
    if (row[3] == "ok") {
      ++ok;
      ASSERT_TRUE(layout.has_value()) << layout.error().describe();
      EXPECT_EQ(layout->bit_count, std::stoull(row[4]));
      EXPECT_EQ(layout->hash_count, std::stoul(row[5]));
      expect_same_bits(modeled3(spec.expected_item_count, layout->bit_count / 512),
                       test::parse_hex_float(row[6]));
      expect_same_bits(modeled_blocked_false_positive_rate(*layout, spec.expected_item_count),
                       test::parse_hex_float(row[6]));
    } else {
      ASSERT_FALSE(layout.has_value()) << "got m = " << layout->bit_count;
      EXPECT_EQ(layout.error().code, code_named(row[3])) << layout.error().describe();
    }
  }
  EXPECT_EQ(ok, 329u);
}

TEST(BlockedLayout, ModeledRateMatchesEveryGoldenLoad) {
  const auto rows = test::read_tsv("vectors/v3/modeled-v3.tsv");
  ASSERT_GE(rows.size(), 20u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 4u);
    SCOPED_TRACE("x = " + row[0] + ", B = " + row[1]);
    expect_same_bits(modeled3(std::stoull(row[0]), std::stoull(row[1])),
                     test::parse_hex_float(row[2]));
  }
}

// Section 3c's worked values, and the properties the search relies on.
TEST(BlockedLayout, WorkedValuesAndTheSearchsInvariants) {
  const auto at = [](std::uint64_t n, double p) { return choose_blocked_layout({n, p}); };
  EXPECT_EQ(at(1'000'000, 0.01)->bit_count, 10'099'712u);
  EXPECT_EQ(at(1'000'000, 0.001)->bit_count, 15'725'056u);
  EXPECT_EQ(at(1'000'000, 0.1)->bit_count, 5'879'296u);
  EXPECT_EQ(at(10'000'000'000, 0.01)->bit_count, 100'993'077'760u);
  for (const double p : {0.5, 0.1, 0.01, 1e-3, 1e-4}) {
    for (const std::uint64_t n : {1ull, 7ull, 1000ull, 123'457ull, 50'000'000ull}) {
      const auto layout = at(n, p);
      ASSERT_TRUE(layout.has_value()) << n << " " << p;
      const std::uint64_t blocks = layout->bit_count / 512;
      EXPECT_EQ(layout->bit_count % 512, 0u);
      EXPECT_EQ(layout->hash_count, 8u);
      EXPECT_LE(modeled3(n, blocks), p);
      if (blocks > 1) EXPECT_GT(modeled3(n, blocks - 1), p) << "not the smallest B";
    }
  }
  // The limits: n up to 2^36, m up to 2^40.
  EXPECT_EQ(at(0, 0.01).error().code, ErrorCode::kInvalidExpectedItemCount);
  EXPECT_EQ(at((std::uint64_t{1} << 36) + 1, 0.5).error().code,
            ErrorCode::kInvalidExpectedItemCount);
  EXPECT_TRUE(at(std::uint64_t{1} << 36, 0.01).has_value());
  EXPECT_EQ(at(std::uint64_t{1} << 36, 1e-9).error().code, ErrorCode::kFilterTooLarge);
  for (const double p : {0.0, 1.0, -0.5, std::numeric_limits<double>::quiet_NaN(),
                         std::numeric_limits<double>::infinity()}) {
    EXPECT_EQ(at(1000, p).error().code, ErrorCode::kInvalidFalsePositiveRate) << p;
  }
}

// probes-v3.tsv and probes-v4.tsv: each digest's block and eight bits.
void check_probe_row(const blocked::LineScheme& scheme, const Digest& digest,
                     std::uint64_t bit_count, std::uint64_t block,
                     const std::vector<std::uint64_t>& bits) {
  ASSERT_EQ(bits.size(), 8u);
  ASSERT_EQ(bit_count % 512, 0u);
  ASSERT_EQ(scheme.block_count, bit_count / 512);
  // The portable step 1 and the reference's (OpenSSL for protocol 4) agree.
  const blocked::LineHash portable = blocked::line_hash(scheme, digest.bytes.data());
  const blocked::LineHash reference = scalar::blocked_line_hash(scheme, digest);
  EXPECT_EQ(portable.h, reference.h);
  EXPECT_EQ(portable.q, reference.q);
  EXPECT_EQ(blocked::block_of(portable.h, scheme.block_count), block);
  // The 128-bit product gives the same block (section 4c's identity).
  __extension__ using U128 = unsigned __int128;
  EXPECT_EQ(static_cast<std::uint64_t>((static_cast<U128>(portable.h) * scheme.block_count) >> 64),
            block);
  for (unsigned j = 0; j < 8; ++j) {
    EXPECT_EQ(blocked::bit_index(block, portable.q, j), bits[j]) << "word " << j;
  }
  // Insert sets exactly those eight bits; the query then says Maybe, and
  // clearing any one of them makes it Definitely Not. Filters up to 2^24
  // bits whole; larger ones through their one block (the same q in a
  // one-block filter sets the same bits of its block).
  const bool whole = bit_count <= (std::uint64_t{1} << 24);
  const blocked::LineScheme local{whole ? scheme.block_count : 1, scheme.protocol, scheme.key};
  const std::uint64_t base = whole ? 0 : block * 512;
  std::vector<std::uint64_t> words(local.block_count * 8, 0);
  scalar::blocked_insert_batch(local, words.data(), &digest, 1);
  std::size_t set = 0;
  for (const auto w : words) set += static_cast<std::size_t>(std::popcount(w));
  EXPECT_EQ(set, 8u);
  for (const auto bit : bits) {
    const std::uint64_t i = bit - base;
    EXPECT_NE(words[i / 64] & (std::uint64_t{1} << (i % 64)), 0u) << bit;
  }
  Answer answer{};
  scalar::blocked_query_batch(local, words.data(), &digest, 1, &answer);
  EXPECT_EQ(answer, Answer::kMaybe);
  for (const auto bit : bits) {
    const std::uint64_t i = bit - base;
    words[i / 64] ^= std::uint64_t{1} << (i % 64);
    scalar::blocked_query_batch(local, words.data(), &digest, 1, &answer);
    EXPECT_EQ(answer, Answer::kDefinitelyNot) << "bit " << bit << " cleared";
    EXPECT_FALSE(blocked::might_contain(local, words.data(), digest.bytes.data()));
    words[i / 64] ^= std::uint64_t{1} << (i % 64);
  }
}

blocked::LineScheme line_scheme(std::uint64_t bit_count, const std::optional<Key>& key) {
  blocked::LineScheme scheme;
  scheme.block_count = bit_count / 512;
  if (key) {
    scheme.protocol = blocked::kProtocolBlockedKeyed;
    scheme.key = probe::make_key_schedule(key->bytes().data());
  }
  return scheme;
}

TEST(BlockedProbes, MatchEveryProtocol3GoldenRow) {
  const auto rows = test::read_tsv("vectors/v3/probes-v3.tsv");
  ASSERT_GE(rows.size(), 50u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 4u);
    SCOPED_TRACE(row[0] + " m = " + row[1]);
    const std::uint64_t m = std::stoull(row[1]);
    check_probe_row(line_scheme(m, std::nullopt), test::digest_from_hex(row[0]), m,
                    std::stoull(row[2]), test::split_numbers(row[3]));
  }
}

TEST(BlockedProbes, MatchEveryProtocol4GoldenRow) {
  const auto rows = test::read_tsv("vectors/v3/probes-v4.tsv");
  ASSERT_GE(rows.size(), 100u);
  std::set<std::string> keys;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 5u);
    SCOPED_TRACE("key " + row[0] + " " + row[1] + " m = " + row[2]);
    keys.insert(row[0]);
    const std::uint64_t m = std::stoull(row[2]);
    check_probe_row(line_scheme(m, *Key::parse_hex(row[0])), test::digest_from_hex(row[1]), m,
                    std::stoull(row[3]), test::split_numbers(row[4]));
  }
  EXPECT_GE(keys.size(), 2u);
}

// Section 4c's claim: the two-product form equals the 128-bit product's high
// word for every B < 2^32, at the edges of h.
TEST(BlockedProbes, BlockIndexEqualsTheWideProductAtTheEdges) {
  __extension__ using U128 = unsigned __int128;
  const std::uint64_t all = ~std::uint64_t{0};
  const std::vector<std::uint64_t> block_counts = {
      1, 2, 3, 19'727, 197'252'105, (1ull << 31) - 1, 1ull << 31, (1ull << 32) - 1};
  const std::vector<std::uint64_t> hs = {0, 1, 0xffffffff, 0x100000000, all, all - 1,
                                         all / 2, all / 2 + 1, 0x8000000000000000, 0xdeadbeefcafef00d};
  for (const std::uint64_t blocks : block_counts) {
    for (const std::uint64_t h : hs) {
      const auto wide = static_cast<std::uint64_t>((static_cast<U128>(h) * blocks) >> 64);
      EXPECT_EQ(blocked::block_of(h, blocks), wide) << h << " " << blocks;
      EXPECT_LT(blocked::block_of(h, blocks), blocks);
    }
  }
}

// builds-v3.tsv: whole builds through the scalar reference: popcount,
// payload SHA-256, the estimate of section 6 against modeled-v3.tsv, and
// every false positive among 100,000 non-members.
TEST(BlockedBuild, MatchesEveryGoldenBuildThroughTheReference) {
  const auto rows = test::read_tsv("vectors/v3/builds-v3.tsv");
  ASSERT_GE(rows.size(), 6u);
  std::vector<Digest> non_members;
  for (std::uint64_t i = 0; i < 100'000; ++i) non_members.push_back(test::non_member_digest(i));
  for (const auto& row : rows) {
    ASSERT_GE(row.size(), 9u);
    SCOPED_TRACE("protocol " + row[0] + ", members " + row[2] + ", n = " + row[3]);
    const std::optional<Key> key =
        row[0] == "4" ? std::optional<Key>(*Key::parse_hex(row[1])) : std::nullopt;
    const BloomSpec spec{std::stoull(row[3]), test::parse_hex_float(row[4])};
    const auto layout = choose_blocked_layout(spec);
    ASSERT_TRUE(layout.has_value());
    ASSERT_EQ(layout->bit_count, std::stoull(row[5]));
    ASSERT_EQ(layout->hash_count, std::stoul(row[6]));
    const auto scheme = line_scheme(layout->bit_count, key);
    const auto members = test::member_digests(std::stoull(row[2]));
    std::vector<std::uint64_t> words(layout->bit_count / 64, 0);
    scalar::blocked_insert_batch(scheme, words.data(), members.data(), members.size());
    std::uint64_t popcount = 0;
    for (const auto w : words) popcount += static_cast<std::uint64_t>(std::popcount(w));
    EXPECT_EQ(popcount, std::stoull(row[7]));
    EXPECT_EQ(sha256(std::span(reinterpret_cast<const std::uint8_t*>(words.data()),
                               words.size() * 8))
                  .hex(),
              row[8]);
    std::vector<Answer> answers(non_members.size());
    scalar::blocked_query_batch(scheme, words.data(), non_members.data(), non_members.size(),
                                answers.data());
    std::vector<std::uint64_t> maybe;
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (answers[i] == Answer::kMaybe) maybe.push_back(i);
    }
    EXPECT_EQ(maybe, test::split_numbers(row.size() > 9 ? row[9] : ""));
    std::vector<Answer> member_answers(members.size());
    scalar::blocked_query_batch(scheme, words.data(), members.data(), members.size(),
                                member_answers.data());
    for (const auto a : member_answers) ASSERT_EQ(a, Answer::kMaybe) << "a false negative";
  }
}

// modeled-v3.tsv holds each build row's estimate: modeled3(members, m / 512).
TEST(BlockedBuild, EveryGoldenBuildsEstimateIsAModeledRow) {
  std::set<std::pair<std::uint64_t, std::uint64_t>> modeled;
  for (const auto& row : test::read_tsv("vectors/v3/modeled-v3.tsv")) {
    modeled.emplace(std::stoull(row[0]), std::stoull(row[1]));
  }
  for (const auto& row : test::read_tsv("vectors/v3/builds-v3.tsv")) {
    EXPECT_TRUE(modeled.contains({std::stoull(row[2]), std::stoull(row[5]) / 512}))
        << "members " << row[2] << ", m = " << row[5];
  }
}

}  // namespace
}  // namespace abf
