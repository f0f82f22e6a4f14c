// Filter sets of one-line shards (protocols 3 and 4, docs/protocol.md
// section 13): every shard takes the set's protocol, its own layout for n_i
// by the one-line rule, and exactly the bits a one-filter scalar build of its
// share makes; the set's batch query on every host backend answers as each
// digest's shard answers alone; a one-shard set is vectors/v3's golden
// build; saved, loaded and merged sets keep every bit; and the limits are
// the one-line protocols' (n_i up to 2^36, m up to 2^40), not the classic
// 2^30.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/layout.hpp"
#include "abf/snapshot.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

struct Case {
  std::uint32_t protocol;
  std::optional<Key> key;
};

std::vector<Case> cases() {
  return {Case{blocked::kProtocolBlocked, std::nullopt},
          Case{blocked::kProtocolBlockedKeyed, test::golden_key().key}};
}

BuildOptions options_of(const Case& c) {
  BuildOptions options;
  options.protocol = c.protocol;
  options.key = c.key;
  return options;
}

// Members, then digests built to be adversarial for the split and the
// blocks: all-zero and all-one bytes, equal block words with different shard
// words, and the reverse.
std::vector<Digest> inputs(std::uint64_t members) {
  std::vector<Digest> digests = test::member_digests(members);
  Digest zero{};
  Digest ones{};
  for (auto& byte : ones.bytes) byte = 0xff;
  digests.push_back(zero);
  digests.push_back(ones);
  for (std::uint64_t i = 0; i < 64; ++i) {
    Digest same_block = zero;
    same_block.bytes[31] = static_cast<std::uint8_t>(i);  // shard bytes only
    digests.push_back(same_block);
    digests.push_back(test::digest_with_words(i << 58, ~i));
  }
  return digests;
}

std::vector<Digest> queries() {
  std::vector<Digest> digests;
  for (std::uint64_t i = 0; i < 50'000; ++i) digests.push_back(test::non_member_digest(i));
  const auto in = inputs(5000);
  digests.insert(digests.end(), in.begin(), in.end());
  return digests;
}

// Every answer of the set, on every host backend, is its shard's scalar
// reference answer; and every shard's bits are a scalar one-filter build of
// the digests of `added` routed to it.
void check_against_reference(const FilterSet& set, std::span<const Digest> added,
                             const BloomSpec& shard_spec, const BuildOptions& options) {
  const std::uint32_t shards = set.shard_count();
  std::vector<std::vector<Digest>> share(shards);
  for (const Digest& d : added) share[shard_of(d, shards)].push_back(d);
  for (std::uint32_t s = 0; s < shards; ++s) {
    SCOPED_TRACE("shard " + std::to_string(s));
    const Filter& shard = set.shard(s);
    EXPECT_EQ(shard.hash_protocol_version(), options.protocol);
    EXPECT_EQ(shard.expected_item_count(), shard_spec.expected_item_count);
    const auto layout = choose_layout(shard_spec, options.protocol);
    ASSERT_TRUE(layout);
    EXPECT_EQ(shard.bit_count(), layout->bit_count);
    EXPECT_EQ(shard.hash_count(), 8u);
    auto alone = build_filter(share[s], shard_spec, options, Backend::kScalar);
    ASSERT_TRUE(alone) << alone.error().message;
    EXPECT_EQ(shard.payload().size(), alone->payload().size());
    EXPECT_TRUE(std::ranges::equal(shard.payload(), alone->payload()));
    EXPECT_EQ(shard.inserted_item_count(), share[s].size());
  }
  const auto asked = queries();
  std::vector<Answer> reference(asked.size());
  for (std::size_t i = 0; i < asked.size(); ++i) {
    reference[i] = set.shard(set.shard_index(asked[i])).might_contain(asked[i]) ? Answer::kMaybe
                                                                                : Answer::kDefinitelyNot;
    ASSERT_EQ(set.might_contain(asked[i]), reference[i] == Answer::kMaybe);
  }
  for (const Backend backend : {Backend::kScalar, Backend::kSimd, Backend::kAuto}) {
    std::vector<Answer> answers(asked.size());
    ASSERT_TRUE(set.query(asked, answers, backend));
    EXPECT_EQ(answers, reference) << backend.name();
  }
  for (const Digest& d : added) ASSERT_TRUE(set.might_contain(d));
}

TEST(BlockedSet, AOneShardSetIsTheGoldenBuild) {
  for (const auto& row : test::read_tsv("vectors/v3/builds-v3.tsv")) {
    if (std::stoull(row[2]) > 5000) continue;  // the small rows are enough here
    SCOPED_TRACE(row[0] + " " + row[2]);
    BuildOptions options;
    options.protocol = static_cast<std::uint32_t>(std::stoul(row[0]));
    if (row[0] == "4") options.key = *Key::parse_hex(row[1]);
    const BloomSpec spec{std::stoull(row[3]), test::parse_hex_float(row[4])};
    auto set = build_filter_set(test::member_digests(std::stoull(row[2])), spec, 1, options);
    ASSERT_TRUE(set) << set.error().message;
    EXPECT_EQ(set->hash_protocol_version(), options.protocol);
    EXPECT_EQ(set->shard_bit_count(), std::stoull(row[5]));
    EXPECT_EQ(set->popcount(), std::stoull(row[7]));
    EXPECT_EQ(sha256(set->shard(0).payload()).hex(), row[8]);
    // The golden false positives among the first 20,000 non-members.
    std::vector<Digest> absent;
    for (std::uint64_t i = 0; i < 20'000; ++i) absent.push_back(test::non_member_digest(i));
    std::vector<Answer> answers(absent.size());
    ASSERT_TRUE(set->query(absent, answers));
    std::vector<std::uint64_t> maybe;
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (answers[i] == Answer::kMaybe) maybe.push_back(i);
    }
    std::vector<std::uint64_t> golden;
    for (const auto i : test::split_numbers(row.size() > 9 ? row[9] : "")) {
      if (i < 20'000) golden.push_back(i);
    }
    EXPECT_EQ(maybe, golden);
  }
}

TEST(BlockedSet, EveryShardIsItsShareBuiltAloneAndEveryAnswerItsShards) {
  const auto added = inputs(5000);
  for (const Case& c : cases()) {
    for (const std::uint32_t shards : {2u, 3u, 7u, 64u}) {
      SCOPED_TRACE("protocol " + std::to_string(c.protocol) + ", " + std::to_string(shards) +
                   " shards");
      const BloomSpec spec{added.size(), 0.01};
      const BuildOptions options = options_of(c);
      // Chunked unevenly, so staging fills and flushes mid-build.
      auto builder = FilterSetBuilder::create(spec, shards, options);
      ASSERT_TRUE(builder) << builder.error().message;
      std::size_t at = 0;
      for (std::size_t step = 1; at < added.size(); step = step * 3 + 1) {
        const std::size_t take = std::min(step, added.size() - at);
        ASSERT_TRUE(builder->add(std::span(added).subspan(at, take), Backend::kSimd));
        at += take;
      }
      auto set = std::move(*builder).finish();
      ASSERT_TRUE(set) << set.error().message;
      EXPECT_EQ(set->hash_protocol_version(), c.protocol);
      EXPECT_EQ(set->inserted_item_count(), added.size());
      const BloomSpec shard_spec{shard_expected_item_count(spec.expected_item_count, shards), 0.01};
      check_against_reference(*set, added, shard_spec, options);
      // The same set from one scalar build.
      auto scalar = build_filter_set(added, spec, shards, options, Backend::kScalar);
      ASSERT_TRUE(scalar);
      for (std::uint32_t s = 0; s < shards; ++s) {
        ASSERT_TRUE(std::ranges::equal(scalar->shard(s).payload(), set->shard(s).payload()));
      }
    }
  }
}

TEST(BlockedSet, SavedLoadedAndMergedSetsKeepEveryBit) {
  const auto added = inputs(3000);
  const test::TempDir dir("abf-blocked-set");
  for (const Case& c : cases()) {
    SCOPED_TRACE("protocol " + std::to_string(c.protocol));
    const BloomSpec spec{added.size(), 0.01};
    const BuildOptions options = options_of(c);
    auto whole = build_filter_set(added, spec, 5, options);
    ASSERT_TRUE(whole) << whole.error().message;
    const auto path = dir / ("s" + std::to_string(c.protocol) + ".abfs");
    ASSERT_TRUE(save_filter_set(*whole, path));
    auto manifest = read_set_manifest(path);
    ASSERT_TRUE(manifest);
    EXPECT_EQ(manifest->hash_protocol_version, c.protocol);
    EXPECT_EQ(manifest->shard_hash_count, 8u);
    LoadOptions load;
    load.key = c.key;
    auto loaded = load_filter_set(path, load);
    ASSERT_TRUE(loaded) << loaded.error().message;
    ASSERT_EQ(loaded->shard_count(), 5u);
    for (std::uint32_t s = 0; s < 5; ++s) {
      EXPECT_TRUE(std::ranges::equal(loaded->shard(s).payload(), whole->shard(s).payload()));
    }
    EXPECT_EQ(loaded->content_fingerprint(), whole->content_fingerprint());
    if (c.key) {
      auto keyless = load_filter_set(path);
      ASSERT_FALSE(keyless);
      EXPECT_EQ(keyless.error().code, ErrorCode::kKeyRequired);
    }
    // Two disjoint halves merged are the whole.
    const std::size_t half = added.size() / 2;
    auto first = build_filter_set(std::span(added).first(half), spec, 5, options);
    auto second = build_filter_set(std::span(added).subspan(half), spec, 5, options);
    ASSERT_TRUE(first && second);
    const std::vector<FilterSet> parts{*first, *second};
    auto merged = merge_filter_sets(parts);
    ASSERT_TRUE(merged) << merged.error().message;
    EXPECT_EQ(merged->hash_protocol_version(), c.protocol);
    for (std::uint32_t s = 0; s < 5; ++s) {
      EXPECT_TRUE(std::ranges::equal(merged->shard(s).payload(), whole->shard(s).payload()));
    }
    EXPECT_EQ(merged->content_fingerprint(), whole->content_fingerprint());
  }
}

TEST(BlockedSet, ShardsOfDifferentProtocolsMakeNoSet) {
  const auto added = inputs(1000);
  const BloomSpec spec{added.size(), 0.01};
  auto one_line = build_filter_set(added, spec, 2, options_of(cases()[0]));
  auto classic = build_filter_set(added, spec, 2);
  ASSERT_TRUE(one_line && classic);
  EXPECT_EQ(classic->hash_protocol_version(), 1u);
  auto mixed = FilterSet::from_shards({one_line->shard(0), classic->shard(1)}, spec.expected_item_count);
  ASSERT_FALSE(mixed);
  EXPECT_EQ(mixed.error().code, ErrorCode::kIncompatibleFilters);
  const std::vector<FilterSet> parts{*one_line, *classic};
  auto merged = merge_filter_sets(parts);
  ASSERT_FALSE(merged);
  EXPECT_EQ(merged.error().code, ErrorCode::kIncompatibleFilters);
}

TEST(BlockedSet, TheLimitsAreTheOneLineProtocols) {
  // 3e8 digests at p = 0.01: three classic shards, one one-line filter.
  const BloomSpec big{300'000'000, 0.01};
  auto classic = choose_shard_count(big, 1);
  auto one_line = choose_shard_count(big, blocked::kProtocolBlocked);
  ASSERT_TRUE(classic && one_line);
  EXPECT_EQ(*classic, 3u);
  EXPECT_EQ(*one_line, 1u);
  // 2^40 digests at p = 0.01 need 2^40 * ~10 bits: the fewest shards each
  // fit the one-line limits.
  const BloomSpec huge{std::uint64_t{1} << 40, 0.01};
  auto fewest = choose_shard_count(huge, blocked::kProtocolBlocked);
  ASSERT_TRUE(fewest) << fewest.error().message;
  const std::uint64_t n_i = shard_expected_item_count(huge.expected_item_count, *fewest);
  EXPECT_LE(n_i, blocked::kMaxExpectedItemCount);
  EXPECT_TRUE(choose_layout({n_i, 0.01}, blocked::kProtocolBlocked));
  if (*fewest > 1) {
    const std::uint64_t fewer = shard_expected_item_count(huge.expected_item_count, *fewest - 1);
    EXPECT_FALSE(fewer <= blocked::kMaxExpectedItemCount &&
                 choose_layout({fewer, 0.01}, blocked::kProtocolBlocked).has_value());
  }
  // Shards above 2^36 digests are refused with the one-line limit named.
  BuildOptions options;
  options.protocol = blocked::kProtocolBlocked;
  auto too_many = FilterSetBuilder::create({std::uint64_t{1} << 40, 0.01}, 2, options);
  ASSERT_FALSE(too_many);
  EXPECT_EQ(too_many.error().code, ErrorCode::kFilterTooLarge);
  EXPECT_NE(too_many.error().message.find("2^36"), std::string::npos) << too_many.error().message;
  // Classic shards of 2^31 digests are refused with the classic limit named.
  auto classic_large = FilterSetBuilder::create({std::uint64_t{1} << 32, 0.01}, 2);
  ASSERT_FALSE(classic_large);
  EXPECT_NE(classic_large.error().message.find("2^30"), std::string::npos);
}

}  // namespace
}  // namespace abf
