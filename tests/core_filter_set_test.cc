// Filter sets (docs/protocol.md section 13): the split, the builder (each shard
// bit for bit the filter of its digests alone), the partitioned batch query
// (each answer its shard's), the manifest, saving and loading with every
// error naming the shard, a reader racing a writer, and merge.
#include <gtest/gtest.h>

#include <csignal>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "filter_set_internal.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

// A digest whose bytes 24..32 are the big-endian `tail` (the rest random).
Digest digest_with_tail(std::uint64_t tail, std::uint64_t seed) {
  Digest d = test::random_digests(1, seed).front();
  for (int i = 0; i < 8; ++i) d.bytes[24 + i] = static_cast<std::uint8_t>(tail >> (56 - 8 * i));
  return d;
}

// The digests of `all` that shard `index` of `shard_count` holds, in order.
std::vector<Digest> digests_of_shard(const std::vector<Digest>& all, std::uint32_t shard_count,
                                     std::uint32_t index) {
  std::vector<Digest> out;
  for (const Digest& d : all) {
    if (shard_of(d, shard_count) == index) out.push_back(d);
  }
  return out;
}

// Builds a set by adding `digests` in chunks of the sizes given (cycled).
FilterSet build_in_chunks(const std::vector<Digest>& digests, const BloomSpec& spec,
                          std::uint32_t shards, const BuildOptions& options,
                          std::vector<std::size_t> chunks, Backend backend = Backend::kAuto) {
  auto builder = FilterSetBuilder::create(spec, shards, options);
  EXPECT_TRUE(builder.has_value()) << builder.error().describe();
  std::size_t next = 0;
  for (std::size_t offset = 0; offset < digests.size();) {
    const std::size_t size = std::min(chunks[next++ % chunks.size()], digests.size() - offset);
    auto added = builder->add(std::span(digests).subspan(offset, size), backend);
    EXPECT_TRUE(added.has_value()) << added.error().describe();
    offset += size;
  }
  EXPECT_EQ(builder->inserted_item_count(), digests.size());
  auto set = std::move(*builder).finish();
  EXPECT_TRUE(set.has_value()) << set.error().describe();
  return std::move(*set);
}

BuildOptions options_of(std::uint64_t version, bool keyed) {
  BuildOptions options;
  options.catalog_version = version;
  options.catalog_id = test::golden_catalog_id();
  if (keyed) options.key = test::golden_key().key;
  return options;
}

// Every shard bit for bit (header and payload) the filter of its digests
// built alone.
void expect_shards_built_alone(const FilterSet& set, const std::vector<Digest>& digests,
                               const BloomSpec& spec, const BuildOptions& options) {
  const std::uint32_t shards = set.shard_count();
  const BloomSpec shard_spec{shard_expected_item_count(spec.expected_item_count, shards),
                             spec.target_fpp};
  for (std::uint32_t i = 0; i < shards; ++i) {
    auto alone =
        build_filter(digests_of_shard(digests, shards, i), shard_spec, options, Backend::kScalar);
    ASSERT_TRUE(alone.has_value()) << alone.error().describe();
    EXPECT_EQ(serialize_snapshot(set.shard(i)), serialize_snapshot(*alone)) << "shard " << i;
  }
}

void expect_same_set(const FilterSet& a, const FilterSet& b) {
  ASSERT_EQ(a.shard_count(), b.shard_count());
  EXPECT_EQ(a.expected_item_count(), b.expected_item_count());
  EXPECT_EQ(a.inserted_item_count(), b.inserted_item_count());
  for (std::uint32_t i = 0; i < a.shard_count(); ++i) {
    EXPECT_EQ(serialize_snapshot(a.shard(i)), serialize_snapshot(b.shard(i))) << "shard " << i;
  }
}

// --- The split --------------------------------------------------------------------

TEST(FilterSetSplit, ShardIsTheLastWordModuloTheShardCount) {
  const Digest d = digest_with_tail(0x0123456789abcdefULL, 1);
  for (std::uint32_t s : {1u, 2u, 3u, 7u, 1000u, 65535u, 65536u}) {
    EXPECT_EQ(shard_of(d, s), 0x0123456789abcdefULL % s) << s;
  }
  // Bytes 0..24 take no part.
  Digest other = d;
  for (int i = 0; i < 24; ++i) other.bytes[i] ^= 0xff;
  EXPECT_EQ(shard_of(other, 7), shard_of(d, 7));
}

TEST(FilterSetSplit, RouterEqualsTheProtocolFunction) {
  const auto digests = test::random_digests(20000, 7);
  std::vector<Digest> edges;
  for (std::uint64_t tail : {0ULL, 1ULL, ~0ULL, ~0ULL - 1, 1ULL << 63, 65535ULL, 65536ULL}) {
    edges.push_back(digest_with_tail(tail, tail));
  }
  const std::vector<const std::vector<Digest>*> sets{&digests, &edges};
  for (std::uint32_t s : {1u, 2u, 3u, 5u, 7u, 64u, 1000u, 4099u, 65535u, 65536u}) {
    const detail::ShardRouter route(s);
    for (const auto* set : sets) {
      for (const Digest& d : *set) {
        ASSERT_EQ(route(d), probe::shard_of(d.bytes.data(), s)) << s << " " << d.hex();
      }
    }
  }
}

TEST(FilterSetSplit, ShardCapacityFormula) {
  EXPECT_EQ(shard_expected_item_count(1000, 1), 1000u);
  // q = 1e8, r = 1e4: q + 8r + 64.
  EXPECT_EQ(shard_expected_item_count(300'000'000, 3), 100'080'064u);
  // q = 334, r = 19 (19^2 = 361 >= 334 > 18^2).
  EXPECT_EQ(shard_expected_item_count(1000, 3), 334u + 152u + 64u);
  // Never more than n.
  EXPECT_EQ(shard_expected_item_count(10, 7), 10u);
  // q = 1000, r = 32 (32^2 = 1024 >= 1000 > 31^2); exact squares: q = 10^4, r = 100.
  EXPECT_EQ(shard_expected_item_count(2000, 2), 1000u + 256u + 64u);
  EXPECT_EQ(shard_expected_item_count(20000, 2), 10000u + 800u + 64u);
  // Non-increasing in S.
  std::uint64_t previous = shard_expected_item_count(123'456'789, 1);
  for (std::uint32_t s = 2; s < 3000; ++s) {
    const std::uint64_t now = shard_expected_item_count(123'456'789, s);
    ASSERT_LE(now, previous) << s;
    previous = now;
  }
}

TEST(FilterSetSplit, AutoShardsAreTheFewestThatFit) {
  auto one = choose_shard_count({1'000'000, 0.01});
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(*one, 1u);
  auto three = choose_shard_count({300'000'000, 0.01});
  ASSERT_TRUE(three.has_value()) << three.error().describe();
  EXPECT_EQ(*three, 3u);
  for (const BloomSpec spec : {BloomSpec{300'000'000, 0.01}, BloomSpec{5'000'000'000, 0.001},
                               BloomSpec{2'000'000'000, 0.5}}) {
    auto s = choose_shard_count(spec);
    ASSERT_TRUE(s.has_value()) << s.error().describe();
    const auto fits = [&](std::uint32_t shards) {
      const std::uint64_t n_i = shard_expected_item_count(spec.expected_item_count, shards);
      return n_i <= (1u << 30) && choose_layout({n_i, spec.target_fpp}).has_value();
    };
    EXPECT_TRUE(fits(*s));
    EXPECT_FALSE(fits(*s - 1)) << *s;
  }
  EXPECT_EQ(choose_shard_count({0, 0.01}).error().code, ErrorCode::kInvalidExpectedItemCount);
  EXPECT_EQ(choose_shard_count({kMaxSetExpectedItemCount + 1, 0.01}).error().code,
            ErrorCode::kInvalidExpectedItemCount);
  EXPECT_EQ(choose_shard_count({100, 0.0}).error().code, ErrorCode::kInvalidFalsePositiveRate);
  EXPECT_EQ(choose_shard_count({100, 1.0}).error().code, ErrorCode::kInvalidFalsePositiveRate);
  EXPECT_EQ(choose_shard_count({kMaxSetExpectedItemCount, 1e-30}).error().code,
            ErrorCode::kFilterTooLarge);
}

// --- Building ---------------------------------------------------------------------

class FilterSetRoundTrip : public ::testing::TestWithParam<std::tuple<std::uint32_t, bool>> {};

TEST_P(FilterSetRoundTrip, EveryShardIsItsDigestsBuiltAloneAndSurvivesSaveAndLoad) {
  const auto [shards, keyed] = GetParam();
  const auto digests = test::random_digests(20000, 11 + shards);
  const BloomSpec spec{30000, 0.01};
  const BuildOptions options = options_of(42, keyed);
  const FilterSet set = build_in_chunks(digests, spec, shards, options, {1, 777, 4096, 3});
  ASSERT_EQ(set.shard_count(), shards);
  EXPECT_EQ(set.expected_item_count(), 30000u);
  EXPECT_EQ(set.inserted_item_count(), 20000u);
  EXPECT_EQ(set.catalog_version(), 42u);
  EXPECT_EQ(set.catalog_id(), test::golden_catalog_id());
  EXPECT_EQ(set.hash_protocol_version(), keyed ? 2u : 1u);
  expect_shards_built_alone(set, digests, spec, options);
  // One chunk or many, any backend: the same bits.
  expect_same_set(set, build_in_chunks(digests, spec, shards, options, {20000}, Backend::kSimd));
  expect_same_set(set, build_in_chunks(digests, spec, shards, options, {5000}, Backend::kScalar));

  test::TempDir dir("abf-set");
  const fs::path manifest = dir / "c.abfs";
  ASSERT_TRUE(save_filter_set(set, manifest).has_value());
  auto kind = filter_file_kind(manifest);
  ASSERT_TRUE(kind.has_value());
  EXPECT_EQ(*kind, FilterFileKind::kManifest);
  LoadOptions load;
  if (keyed) load.key = test::golden_key().key;
  for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    load.mode = mode;
    auto loaded = load_filter_set(manifest, load);
    ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
    expect_same_set(*loaded, set);
  }
  // The manifest and S shard files, named as documented.
  auto read = read_set_manifest(manifest);
  ASSERT_TRUE(read.has_value()) << read.error().describe();
  EXPECT_EQ(read->shard_count(), shards);
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    ++files;
    const std::string name = entry.path().filename().string();
    if (name == "c.abfs") continue;
    ASSERT_EQ(name.size(), std::string("c.abfs.0123456789abcdef.00000.abf").size()) << name;
    EXPECT_TRUE(name.starts_with("c.abfs.")) << name;
    EXPECT_TRUE(name.ends_with(".abf")) << name;
  }
  EXPECT_EQ(files, shards + 1);
}

INSTANTIATE_TEST_SUITE_P(Shards, FilterSetRoundTrip,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 7u), ::testing::Bool()));

TEST(FilterSetBuild, AutoShardCountRoundTrips) {
  // p = 0.5 keeps the bitsets small (1.44 bits a digest) while n needs more
  // than one filter: 2 shards of about 90 MiB.
  const BloomSpec spec{1'000'000'000, 0.5};
  auto shards = choose_shard_count(spec);
  ASSERT_TRUE(shards.has_value());
  ASSERT_GT(*shards, 1u);
  const auto digests = test::random_digests(50000, 99);
  const BuildOptions options = options_of(7, false);
  const FilterSet set = build_in_chunks(digests, spec, *shards, options, {10000});
  EXPECT_EQ(set.shard_count(), *shards);
  expect_shards_built_alone(set, digests, spec, options);
  test::TempDir dir("abf-set-auto");
  ASSERT_TRUE(save_filter_set(set, dir / "big.abfs").has_value());
  auto loaded = load_filter_set(dir / "big.abfs");
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  expect_same_set(*loaded, set);
}

TEST(FilterSetBuild, OneShardIsAPlainFilter) {
  const auto digests = test::random_digests(3000, 5);
  const BloomSpec spec{5000, 0.001};
  auto set = build_filter_set(digests, spec, 1, options_of(3, false));
  ASSERT_TRUE(set.has_value());
  auto plain = build_filter(digests, spec, options_of(3, false));
  ASSERT_TRUE(plain.has_value());
  EXPECT_EQ(serialize_snapshot(set->shard(0)), serialize_snapshot(*plain));
  EXPECT_EQ(set->expected_item_count(), 5000u);
  // A Filter is a one-shard set, and a plain snapshot loads as one.
  const FilterSet converted = *plain;
  EXPECT_EQ(converted.shard_count(), 1u);
  EXPECT_EQ(converted.estimate_false_positive_rate(), plain->estimate_false_positive_rate());
  test::TempDir dir("abf-set-one");
  ASSERT_TRUE(save_snapshot(*plain, dir / "c.abf").has_value());
  auto kind = filter_file_kind(dir / "c.abf");
  ASSERT_TRUE(kind.has_value());
  EXPECT_EQ(*kind, FilterFileKind::kSnapshot);
  auto loaded = load_filter_set(dir / "c.abf");
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  expect_same_set(*loaded, converted);
  // Saved as a set: a manifest and one shard.
  ASSERT_TRUE(save_filter_set(converted, dir / "one.abfs").has_value());
  auto again = load_filter_set(dir / "one.abfs");
  ASSERT_TRUE(again.has_value()) << again.error().describe();
  expect_same_set(*again, converted);
}

TEST(FilterSetBuild, CapacityIsCheckedForTheSetAndEachShardBeforeAnythingIsInserted) {
  const BloomSpec spec{1000, 0.01};
  auto builder = FilterSetBuilder::create(spec, 3);
  ASSERT_TRUE(builder.has_value());
  const std::uint64_t per_shard = builder->shard_expected_item_count();
  EXPECT_EQ(per_shard, shard_expected_item_count(1000, 3));
  // Every digest in shard 0: past n_i before n.
  std::vector<Digest> skewed;
  for (std::uint64_t i = 0; i <= per_shard; ++i) skewed.push_back(digest_with_tail(3 * i, i));
  auto over = builder->add(skewed);
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code, ErrorCode::kCapacityExceeded);
  EXPECT_NE(over.error().message.find("shard 0 of 3"), std::string::npos) << over.error().message;
  EXPECT_EQ(builder->inserted_item_count(), 0u);
  // Exactly n_i fits.
  skewed.pop_back();
  ASSERT_TRUE(builder->add(skewed).has_value());
  EXPECT_FALSE(builder->add(std::span(skewed).first(1)).has_value());
  // The set's n.
  const auto spread = test::random_digests(1000 - per_shard + 1, 3);
  auto past = builder->add(spread);
  ASSERT_FALSE(past.has_value());
  EXPECT_EQ(past.error().code, ErrorCode::kCapacityExceeded);
  EXPECT_EQ(builder->inserted_item_count(), per_shard);
  auto set = std::move(*builder).finish();
  ASSERT_TRUE(set.has_value()) << set.error().describe();
  EXPECT_EQ(set->shard(0).inserted_item_count(), per_shard);
  EXPECT_EQ(set->shard(1).inserted_item_count(), 0u);
  for (const Digest& d : skewed) EXPECT_TRUE(set->might_contain(d));
}

TEST(FilterSetBuild, SpecErrorsComeFirstAndNameTheShards) {
  EXPECT_EQ(FilterSetBuilder::create({1000, 0.01}, 0).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(FilterSetBuilder::create({1000, 0.01}, 65537).error().code,
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(FilterSetBuilder::create({0, 0.01}, 3).error().code,
            ErrorCode::kInvalidExpectedItemCount);
  EXPECT_EQ(FilterSetBuilder::create({1000, 1.5}, 3).error().code,
            ErrorCode::kInvalidFalsePositiveRate);
  auto too_large = FilterSetBuilder::create({3'000'000'000, 0.01}, 2);
  ASSERT_FALSE(too_large.has_value());
  EXPECT_EQ(too_large.error().code, ErrorCode::kFilterTooLarge);
  EXPECT_NE(too_large.error().message.find("use at least"), std::string::npos)
      << too_large.error().message;
  // One shard: exactly a FilterBuilder's errors.
  EXPECT_EQ(FilterSetBuilder::create({(1u << 30) + 1, 0.01}, 1).error().message,
            FilterBuilder::create({(1u << 30) + 1, 0.01}).error().message);
}

TEST(FilterSetBuild, SkewedChunksAndManyShardsStillBuildEachShardAlone) {
  // 65,536 shards: 256-digest regions; a chunk with 1,000 digests of shard
  // 0 is staged in pieces of one region.
  const std::uint32_t shards = 65536;
  const BloomSpec spec{std::uint64_t{shards} * 1000, 0.5};
  auto builder = FilterSetBuilder::create(spec, shards);
  ASSERT_TRUE(builder.has_value()) << builder.error().describe();
  std::vector<Digest> digests;
  for (std::uint64_t i = 0; i < 1000; ++i) digests.push_back(digest_with_tail(i * shards, i));
  for (std::uint64_t i = 0; i < 300; ++i) digests.push_back(digest_with_tail(i * shards + 5, i));
  const auto spread = test::random_digests(20000, 4);
  digests.insert(digests.end(), spread.begin(), spread.end());
  ASSERT_TRUE(builder->add(digests).has_value());
  auto set = std::move(*builder).finish();
  ASSERT_TRUE(set.has_value()) << set.error().describe();
  const BloomSpec shard_spec{set->shard_expected_item_count(), 0.5};
  for (std::uint32_t i : {0u, 5u, 17u, 65535u}) {
    auto alone = build_filter(digests_of_shard(digests, shards, i), shard_spec);
    ASSERT_TRUE(alone.has_value());
    EXPECT_EQ(serialize_snapshot(set->shard(i)), serialize_snapshot(*alone)) << "shard " << i;
  }
  EXPECT_EQ(set->shard(0).inserted_item_count(),
            1000u + digests_of_shard(spread, shards, 0).size());
  for (const Digest& d : digests) ASSERT_TRUE(set->might_contain(d));
  std::vector<Answer> answers(digests.size());
  ASSERT_TRUE(set->query(digests, answers).has_value());
  EXPECT_TRUE(std::ranges::all_of(answers, [](Answer a) { return a == Answer::kMaybe; }));
}

TEST(FilterBuilderFlush, FlushingBetweenChunksKeepsTheBits) {
  // At least 32 MiB: the partitioned build, whose buckets flush() applies.
  const BloomSpec spec{30'000'000, 0.01};
  const auto digests = test::random_digests(400000, 21);
  auto plain = build_filter(digests, spec, 0, Backend::kSimd);
  ASSERT_TRUE(plain.has_value());
  ASSERT_GE(plain->bit_count() / 8, std::uint64_t{32} << 20);
  auto builder = FilterBuilder::create(spec);
  ASSERT_TRUE(builder.has_value());
  for (std::size_t offset = 0; offset < digests.size(); offset += 100000) {
    ASSERT_TRUE(builder->add(std::span(digests).subspan(offset, 100000), Backend::kSimd));
    ASSERT_TRUE(builder->flush().has_value());
  }
  auto flushed = std::move(*builder).finish();
  ASSERT_TRUE(flushed.has_value());
  EXPECT_TRUE(std::ranges::equal(flushed->payload(), plain->payload()));
}

// --- Query ------------------------------------------------------------------------

class FilterSetQuery : public ::testing::TestWithParam<std::tuple<std::uint32_t, bool>> {};

TEST_P(FilterSetQuery, EveryAnswerIsItsShardsAnswer) {
  const auto [shards, keyed] = GetParam();
  const auto members = test::random_digests(30000, 31);
  const BloomSpec spec{40000, 0.05};
  const FilterSet set = build_in_chunks(members, spec, shards, options_of(1, keyed), {8192});
  // Members, absent digests, and sizes around the partition's edges.
  std::vector<Digest> queries = test::random_digests(320000, 32);
  for (std::size_t i = 0; i < members.size(); i += 3) queries[i * 7] = members[i];
  for (Backend backend : {Backend::kScalar, Backend::kSimd}) {
    for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{17}, std::size_t{16384},
                             std::size_t{40000}, queries.size() - 5}) {
      const std::span<const Digest> batch = std::span(queries).subspan(5, size);
      std::vector<Answer> answers(size + 3, Answer::kMaybe);
      ASSERT_TRUE(set.query(batch, std::span(answers).subspan(1), backend).has_value());
      std::size_t maybe = 0;
      for (std::size_t i = 0; i < size; ++i) {
        const Filter& shard = set.shard(shard_of(batch[i], shards));
        const bool expected = shard.might_contain(batch[i]);
        ASSERT_EQ(answers[i + 1] == Answer::kMaybe, expected)
            << "digest " << i << " of " << size << ", " << backend.name();
        maybe += expected ? 1 : 0;
      }
      EXPECT_EQ(answers[0], Answer::kMaybe);  // untouched around the span
      if (size > 1000) {
        EXPECT_GT(maybe, 0u);
      }
    }
    // Each shard's part queried alone, as one batch, agrees too.
    for (std::uint32_t i = 0; i < shards; ++i) {
      const auto part = digests_of_shard(queries, shards, i);
      std::vector<Answer> alone(part.size());
      ASSERT_TRUE(set.shard(i).query(part, alone, backend).has_value());
      std::vector<Answer> together(part.size());
      ASSERT_TRUE(set.query(part, together, backend).has_value());
      EXPECT_EQ(alone, together) << "shard " << i;
    }
  }
  std::vector<Answer> small(2);
  EXPECT_EQ(set.query(queries, small).error().code, ErrorCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Shards, FilterSetQuery,
                         ::testing::Combine(::testing::Values(1u, 2u, 3u, 7u, 300u),
                                            ::testing::Bool()));

TEST(FilterSetQuery, StatisticsAreOverTheWholeSet) {
  const auto members = test::random_digests(9000, 41);
  auto set = build_filter_set(members, {10000, 0.01}, 3);
  ASSERT_TRUE(set.has_value());
  std::uint64_t bits = 0, ones = 0;
  double fpp = 0;
  for (const Filter& shard : set->shards()) {
    bits += shard.bit_count();
    ones += shard.popcount();
    fpp += shard.estimate_false_positive_rate() / 3;
  }
  EXPECT_EQ(set->bit_count(), bits);
  EXPECT_EQ(set->popcount(), ones);
  EXPECT_DOUBLE_EQ(set->fill_ratio(), static_cast<double>(ones) / static_cast<double>(bits));
  EXPECT_DOUBLE_EQ(set->estimate_false_positive_rate(), fpp);
  EXPECT_EQ(set->hash_count(), set->shard(2).hash_count());
}

// --- Files ------------------------------------------------------------------------

class FilterSetFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    members_ = test::random_digests(6000, 51);
    set_ = build(members_, options_of(42, false));
    ASSERT_TRUE(save_filter_set(set_, manifest()).has_value());
    auto read = read_set_manifest(manifest());
    ASSERT_TRUE(read.has_value());
    manifest_ = *read;
  }

  FilterSet build(const std::vector<Digest>& digests, const BuildOptions& options) {
    auto set = build_filter_set(digests, spec_, 3, options);
    EXPECT_TRUE(set.has_value()) << set.error().describe();
    return std::move(*set);
  }

  fs::path manifest() const { return dir_ / "c.abfs"; }
  fs::path shard_file(std::uint32_t i) const { return dir_ / manifest_.shards[i].file; }

  // Loading fails with `code`, naming `fragment` (and the shard, if given).
  void expect_load_error(ErrorCode code, const std::string& fragment,
                         const LoadOptions& options = {}) {
    auto loaded = load_filter_set(manifest(), options);
    ASSERT_FALSE(loaded.has_value());
    EXPECT_EQ(loaded.error().code, code) << loaded.error().describe();
    EXPECT_NE(loaded.error().message.find(fragment), std::string::npos) << loaded.error().message;
  }

  void write_manifest(const SetManifest& m) {
    const auto bytes = encode_set_manifest(m);
    std::ofstream(manifest(), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
  }

  test::TempDir dir_{"abf-set-files"};
  const BloomSpec spec_{9000, 0.01};
  std::vector<Digest> members_;
  FilterSet set_ = FilterSet(*build_filter(std::vector<Digest>{}, {1, 0.5}));
  SetManifest manifest_;
};

TEST_F(FilterSetFiles, MissingShardIsNamed) {
  fs::remove(shard_file(1));
  expect_load_error(ErrorCode::kSetShardMissing, "shard 1 of 3 (" + manifest_.shards[1].file);
}

TEST_F(FilterSetFiles, CorruptShardAnswersItsSnapshotErrorNamingTheShard) {
  std::fstream file(shard_file(2), std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(kSnapshotHeaderSize + 10);
  file.put('\x5a');
  file.close();
  expect_load_error(ErrorCode::kSnapshotPayloadChecksum, "shard 2 of 3");
  fs::resize_file(shard_file(2), 200);
  expect_load_error(ErrorCode::kSnapshotPayloadTruncated, "shard 2 of 3");
}

TEST_F(FilterSetFiles, ShardOfAnotherCatalogVersionOrKeyIsRefused) {
  const auto replace_shard_1 = [&](const BuildOptions& options) {
    const FilterSet other = build(members_, options);
    ASSERT_TRUE(save_snapshot(other.shard(1), shard_file(1)).has_value());
  };
  BuildOptions other_catalog = options_of(42, false);
  other_catalog.catalog_id = *CatalogId::parse_hex("00112233445566778899aabbccddeeff");
  replace_shard_1(other_catalog);
  expect_load_error(ErrorCode::kSetShardMismatch, "shard 1 of 3");
  expect_load_error(ErrorCode::kSetShardMismatch, "catalogId");
  replace_shard_1(options_of(43, false));
  expect_load_error(ErrorCode::kSetShardMismatch, "catalogVersion is 43");
  // A keyed shard in an unkeyed set: opening it needs a key the set has not.
  replace_shard_1(options_of(42, true));
  expect_load_error(ErrorCode::kKeyRequired, "shard 1 of 3");
  // Same catalog, version and key, other digests: the counts or checksums.
  const auto others = test::random_digests(6000, 52);
  const FilterSet other = build(others, options_of(42, false));
  ASSERT_TRUE(save_snapshot(other.shard(1), shard_file(1)).has_value());
  expect_load_error(ErrorCode::kSetShardMismatch, "shard 1 of 3");
  // And with the original back, it loads.
  ASSERT_TRUE(save_snapshot(set_.shard(1), shard_file(1)).has_value());
  ASSERT_TRUE(load_filter_set(manifest()).has_value());
}

TEST_F(FilterSetFiles, ShardWithOtherBitsButSameCountsFailsTheChecksum) {
  std::vector<Digest> swapped = digests_of_shard(members_, 3, 0);
  const BloomSpec shard_spec{set_.shard_expected_item_count(), spec_.target_fpp};
  // As many digests in shard 0, different ones.
  auto fresh = test::random_digests(40000, 53);
  std::vector<Digest> replacement;
  for (const Digest& d : fresh) {
    if (shard_of(d, 3) == 0 && replacement.size() < swapped.size()) replacement.push_back(d);
  }
  auto filter = build_filter(replacement, shard_spec, options_of(42, false));
  ASSERT_TRUE(filter.has_value());
  ASSERT_TRUE(save_snapshot(*filter, shard_file(0)).has_value());
  expect_load_error(ErrorCode::kSetShardMismatch, "payloadChecksum");
}

TEST_F(FilterSetFiles, ManifestCorruptOrTruncated) {
  const std::string bytes = test::read_file(manifest());
  const auto put = [&](const std::string& contents) {
    std::ofstream(manifest(), std::ios::binary | std::ios::trunc) << contents;
  };
  std::string body_flip = bytes;
  body_flip[kSetManifestHeaderSize + 3] ^= 1;
  put(body_flip);
  expect_load_error(ErrorCode::kSetManifestChecksum, "body checksum");
  std::string header_flip = bytes;
  header_flip[20] ^= 1;
  put(header_flip);
  expect_load_error(ErrorCode::kSetManifestChecksum, "header checksum");
  put(bytes.substr(0, bytes.size() - 1));
  expect_load_error(ErrorCode::kSetManifestTruncated, "promises");
  put(bytes.substr(0, 100));
  expect_load_error(ErrorCode::kSetManifestTruncated, "shorter than the 128-byte");
  put(bytes + "x");
  expect_load_error(ErrorCode::kSetManifestInvalid, "more than the manifest header promises");
  std::string version = bytes;
  version[4] = 3;
  put(version);
  expect_load_error(ErrorCode::kSetManifestUnsupportedFormat, "format version 3");
  // Not a manifest at all: read as a snapshot.
  put(std::string(200, 'z'));
  auto loaded = load_filter_set(manifest());
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, ErrorCode::kSnapshotBadMagic);
  EXPECT_EQ(read_set_manifest(manifest()).error().code, ErrorCode::kSetManifestInvalid);
}

TEST_F(FilterSetFiles, ManifestFieldsBreakingARuleAreNamed) {
  const auto expect_invalid = [&](SetManifest m, const std::string& fragment) {
    write_manifest(m);
    expect_load_error(ErrorCode::kSetManifestInvalid, fragment);
  };
  SetManifest m = manifest_;
  m.shard_expected_item_count += 1;
  expect_invalid(m, "is not the split of n");
  m = manifest_;
  m.shard_hash_count += 1;
  expect_invalid(m, "are not the layout");
  m = manifest_;
  m.inserted_item_count += 1;
  expect_invalid(m, "sum to");
  m = manifest_;
  m.shards[1].file = "../escape.abf";
  expect_invalid(m, "holds a '/'");
  m = manifest_;
  m.shards[0].file = "same.abf";
  m.shards[2].file = "same.abf";
  expect_invalid(m, "as an earlier shard does");
  // Two entries swapped, each still matching its own file: the names that
  // save gave carry the index, so the swap is refused (it would route
  // digests to the other shard's filter, whose `absent` is wrong for them).
  m = manifest_;
  std::swap(m.shards[0], m.shards[1]);
  expect_invalid(m, "is that of shard 1 of this save, not of shard 0");
  // Names not of that form carry no index and are not read.
  m = manifest_;
  std::filesystem::rename(dir_ / m.shards[0].file, dir_ / "first.abf");
  m.shards[0].file = "first.abf";
  write_manifest(m);
  EXPECT_TRUE(load_filter_set(manifest()).has_value());
  std::filesystem::rename(dir_ / "first.abf", dir_ / manifest_.shards[0].file);
  m = manifest_;
  m.hash_protocol_version = 9;  // no such protocol
  write_manifest(m);
  expect_load_error(ErrorCode::kSnapshotUnsupportedHashProtocol, "hash protocol version 9");
  m = manifest_;
  m.key_fingerprint.bytes[0] = 1;
  expect_invalid(m, "carries a key fingerprint");
  m = manifest_;
  m.target_fpp = 1.0;
  expect_invalid(m, "target false-positive rate");
  m = manifest_;
  m.shards.clear();
  expect_invalid(m, "shard count 0");
  // A consistent manifest whose fields are not the shards': the shard says.
  m = manifest_;
  m.catalog_version = 41;
  write_manifest(m);
  expect_load_error(ErrorCode::kSetShardMismatch, "shard 0 of 3");
  // Encoding what was parsed gives the same bytes.
  write_manifest(manifest_);
  auto again = read_set_manifest(manifest());
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(encode_set_manifest(*again), encode_set_manifest(manifest_));
  ASSERT_TRUE(load_filter_set(manifest()).has_value());
}

// The bytes of `v2` (a version-2 manifest) as the version-1 manifest of
// the same set: no flags, no body fingerprint, checksums recomputed.
std::string as_version_1(const std::string& v2) {
  std::string v1 = v2.substr(0, kSetManifestHeaderSize) + v2.substr(kSetManifestHeaderSize + 16);
  const auto store = [&](std::size_t offset, auto value) {
    std::memcpy(v1.data() + offset, &value, sizeof value);
  };
  store(4, std::uint32_t{1});
  store(68, std::uint32_t{0});
  const std::uint64_t body = v1.size() - kSetManifestHeaderSize;
  store(104, body);
  store(112, std::uint64_t{XXH3_64bits(v1.data() + kSetManifestHeaderSize, body)});
  store(72, std::uint64_t{0});
  store(72, std::uint64_t{XXH3_64bits(v1.data(), kSetManifestHeaderSize)});
  return v1;
}

TEST_F(FilterSetFiles, TheManifestCarriesTheSumOfTheShardsFingerprints) {
  ASSERT_TRUE(set_.content_fingerprint().has_value());
  EXPECT_EQ(set_.content_fingerprint(), ContentFingerprint::of(members_));
  EXPECT_EQ(manifest_.format_version, 2u);
  EXPECT_EQ(manifest_.content_fingerprint(), set_.content_fingerprint());
  auto loaded = load_filter_set(manifest());
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  EXPECT_EQ(loaded->content_fingerprint(), set_.content_fingerprint());
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(loaded->shard(i).content_fingerprint(),
              ContentFingerprint::of(digests_of_shard(members_, 3, i)));
  }
}

TEST_F(FilterSetFiles, AManifestFingerprintThatIsNotTheShardsSumIsRefused) {
  SetManifest m = manifest_;
  m.content_fingerprint_bytes += ContentFingerprint::of(test::member_digest(1));
  write_manifest(m);
  expect_load_error(ErrorCode::kSetShardMismatch, "contentFingerprint");
  m = manifest_;
  m.content_flags = 0;
  m.content_fingerprint_bytes = {};
  write_manifest(m);
  expect_load_error(ErrorCode::kSetShardMismatch, "the manifest says none");
  // The flag rules of the manifest itself.
  write_manifest(manifest_);
  std::string bytes = test::read_file(manifest());
  const auto put = [&](std::string contents) {
    std::uint64_t checksum = XXH3_64bits(contents.data() + kSetManifestHeaderSize,
                                         contents.size() - kSetManifestHeaderSize);
    std::memcpy(contents.data() + 112, &checksum, 8);
    std::memset(contents.data() + 72, 0, 8);
    checksum = XXH3_64bits(contents.data(), kSetManifestHeaderSize);
    std::memcpy(contents.data() + 72, &checksum, 8);
    std::ofstream(manifest(), std::ios::binary | std::ios::trunc) << contents;
  };
  std::string flags = bytes;
  flags[68] = 3;
  put(flags);
  expect_load_error(ErrorCode::kSetManifestInvalid, "content flags");
  std::string unflagged = bytes;
  unflagged[68] = 0;
  put(unflagged);
  expect_load_error(ErrorCode::kSetManifestInvalid, "content fingerprint");
  // Version 1 (no fingerprint of its own) still loads; the set's
  // fingerprint is then the sum of its shards'.
  put(as_version_1(bytes));
  auto v1 = read_set_manifest(manifest());
  ASSERT_TRUE(v1.has_value()) << v1.error().describe();
  EXPECT_EQ(v1->format_version, 1u);
  EXPECT_FALSE(v1->content_fingerprint().has_value());
  auto loaded = load_filter_set(manifest());
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  EXPECT_EQ(loaded->content_fingerprint(), set_.content_fingerprint());
}

// The plausibility rule holds for every shard: a shard's payload zeroed
// with its checksums recomputed (and the manifest entry to match) is
// refused, naming the shard.
TEST_F(FilterSetFiles, AShardWithAnImplausibleFillIsRefused) {
  std::string shard = test::read_file(shard_file(1));
  std::fill(shard.begin() + kSnapshotHeaderSize, shard.end(), '\0');
  std::uint64_t checksum =
      XXH3_64bits(shard.data() + kSnapshotHeaderSize, shard.size() - kSnapshotHeaderSize);
  std::memcpy(shard.data() + 64, &checksum, 8);
  std::memset(shard.data() + 72, 0, 8);
  const std::uint64_t header = XXH3_64bits(shard.data(), kSnapshotHeaderSize);
  std::memcpy(shard.data() + 72, &header, 8);
  fs::remove(shard_file(1));
  std::ofstream(shard_file(1), std::ios::binary) << shard;
  SetManifest m = manifest_;
  m.shards[1].payload_checksum = checksum;
  m.shards[1].header_checksum = header;
  write_manifest(m);
  expect_load_error(ErrorCode::kSnapshotImplausibleFill, "shard 1 of 3");
  EXPECT_TRUE(check_fill(set_, FillCheck::kDistinctInsertions).has_value());
}

TEST_F(FilterSetFiles, KeyedSetNeedsItsKeyBeforeAnyShardIsRead) {
  const FilterSet keyed = build(members_, options_of(42, true));
  ASSERT_TRUE(save_filter_set(keyed, manifest()).has_value());
  expect_load_error(ErrorCode::kKeyRequired, "c.abfs");
  LoadOptions other;
  other.key = test::other_key().key;
  expect_load_error(ErrorCode::kKeyMismatch, "c.abfs", other);
  LoadOptions right;
  right.key = test::golden_key().key;
  auto loaded = load_filter_set(manifest(), right);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  expect_same_set(*loaded, keyed);
  // One shard of another key.
  manifest_ = *read_set_manifest(manifest());
  BuildOptions other_key = options_of(42, false);
  other_key.key = test::other_key().key;
  ASSERT_TRUE(save_snapshot(build(members_, other_key).shard(1), shard_file(1)).has_value());
  expect_load_error(ErrorCode::kKeyMismatch, "shard 1 of 3", right);
}

TEST_F(FilterSetFiles, ReplacingASetRemovesTheOldShardsAndNothingElse) {
  std::ofstream(dir_ / "c.abfs.notes.txt") << "mine";
  std::ofstream(dir_ / "c.abfs.0123456789abcdef.00000.abf") << "an orphan of no manifest";
  const auto old_files = manifest_.shards;
  const FilterSet next = build(test::random_digests(5000, 54), options_of(43, false));
  ASSERT_TRUE(save_filter_set(next, manifest()).has_value());
  for (const auto& entry : old_files) EXPECT_FALSE(fs::exists(dir_ / entry.file)) << entry.file;
  EXPECT_TRUE(fs::exists(dir_ / "c.abfs.notes.txt"));
  EXPECT_TRUE(fs::exists(dir_ / "c.abfs.0123456789abcdef.00000.abf"));
  auto loaded = load_filter_set(manifest());
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  EXPECT_EQ(loaded->catalog_version(), 43u);
  // A manifest naming files that are not shard names never removes them.
  SetManifest crafted = *read_set_manifest(manifest());
  std::ofstream(dir_ / "precious.db") << "data";
  crafted.shards[0].file = "precious.db";
  write_manifest(crafted);
  ASSERT_TRUE(save_filter_set(next, manifest()).has_value());
  EXPECT_TRUE(fs::exists(dir_ / "precious.db"));
}

TEST_F(FilterSetFiles, SaveRefusesStandardOutputAndNonFiles) {
  EXPECT_EQ(save_filter_set(set_, "-").error().code, ErrorCode::kInvalidArgument);
  fs::create_directory(dir_ / "folder");
  EXPECT_EQ(save_filter_set(set_, dir_ / "folder").error().code, ErrorCode::kIo);
  EXPECT_EQ(save_filter_set(set_, dir_ / std::string(229, 'x')).error().code,
            ErrorCode::kInvalidArgument);
  // Through a symbolic link: the shards go beside the link's target.
  fs::create_directory(dir_ / "real");
  fs::create_symlink(dir_ / "real" / "t.abfs", dir_ / "link.abfs");
  std::ofstream(dir_ / "real" / "t.abfs") << "old";
  ASSERT_TRUE(save_filter_set(set_, dir_ / "link.abfs").has_value());
  EXPECT_TRUE(fs::is_symlink(dir_ / "link.abfs"));
  auto loaded = load_filter_set(dir_ / "link.abfs");
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  expect_same_set(*loaded, set_);
  auto read = read_set_manifest(dir_ / "real" / "t.abfs");
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(fs::exists(dir_ / "real" / read->shards[0].file));
}

TEST_F(FilterSetFiles, FailedSaveLeavesTheOldSet) {
  const FilterSet next = build(test::random_digests(5000, 55), options_of(43, false));
  // Every write past 512 bytes fails (EFBIG, SIGXFSZ ignored), root's too:
  // the save fails in its first shard, after the old set was in place.
  struct rlimit before {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = before;
  small.rlim_cur = 512;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  auto saved = save_filter_set(next, manifest());
  ::setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, old_handler);
  ASSERT_FALSE(saved.has_value());
  EXPECT_EQ(saved.error().code, ErrorCode::kIo);
  auto loaded = load_filter_set(manifest());
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->catalog_version(), 42u);
}

// A reader loading while a writer replaces the set sees the old set or the
// new one, whole: every shard of one build, answering as that build does.
TEST(FilterSetConcurrency, ReaderSeesTheOldSetOrTheNewNeverAMix) {
  test::TempDir dir("abf-set-race");
  const fs::path manifest = dir / "c.abfs";
  // Shards of ~1 MiB, so a load takes long enough for saves to land inside it.
  const BloomSpec spec{1'000'000, 0.01};
  const std::vector<std::vector<Digest>> contents{test::random_digests(3000, 61),
                                                  test::random_digests(3000, 62)};
  const std::uint64_t restarts_before = detail::filter_set_load_restarts();
  const auto make = [&](std::uint64_t version) {
    auto set = build_filter_set(contents[version % 2], spec, 3, options_of(version, false));
    return std::move(*set);
  };
  ASSERT_TRUE(save_filter_set(make(0), manifest).has_value());
  std::atomic<bool> done{false};
  std::atomic<int> saves{0};
  const auto restarts = [&] { return detail::filter_set_load_restarts() - restarts_before; };
  std::atomic<int> loads{0};
  // Until some load has met a replaced set and started over (the window is
  // a few percent of a save here) and more than 10 loads were made beside
  // the saves, at least 50 saves; at most 1,500 or 30 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::thread writer([&] {
    for (std::uint64_t version = 1;
         (saves.load() < 50 || restarts() == 0 || loads.load() <= 10) && saves.load() < 1500 &&
         std::chrono::steady_clock::now() < deadline;
         ++version) {
      auto saved = save_filter_set(make(version), manifest);
      EXPECT_TRUE(saved.has_value()) << saved.error().describe();
      saves.fetch_add(1);
    }
    done.store(true);
  });
  int replaced = 0;
  while (!done.load()) {
    auto loaded = load_filter_set(manifest);
    if (!loaded) {
      // Only a set replaced again and again while one load ran.
      EXPECT_EQ(loaded.error().code, ErrorCode::kSetShardMissing) << loaded.error().describe();
      EXPECT_NE(loaded.error().message.find("replaced"), std::string::npos);
      ++replaced;
      continue;
    }
    ++loads;
    const std::uint64_t version = loaded->catalog_version();
    for (const Filter& shard : loaded->shards()) ASSERT_EQ(shard.catalog_version(), version);
    for (const Digest& d : contents[version % 2]) ASSERT_TRUE(loaded->might_contain(d));
    ASSERT_EQ(loaded->inserted_item_count(), 3000u);
  }
  writer.join();
  RecordProperty("loads", loads.load());
  RecordProperty("saves", saves.load());
  RecordProperty("restarts", static_cast<int>(restarts()));
  EXPECT_GT(loads.load(), 10);
  EXPECT_GE(saves.load(), 50);
  EXPECT_GT(restarts(), 0u) << "no load met a replaced set in " << saves.load() << " saves";
  EXPECT_LE(replaced, loads.load() / 10 + 1);
  // Only the last set's files are left.
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 4u);
}

// --- Merge ------------------------------------------------------------------------

TEST(FilterSetMerge, PartsMergeShardByShardIntoTheWhole) {
  const auto digests = test::random_digests(12000, 71);
  const BloomSpec spec{15000, 0.01};
  const BuildOptions options = options_of(9, false);
  std::vector<FilterSet> parts;
  for (std::size_t p = 0; p < 3; ++p) {
    std::vector<Digest> part;
    for (std::size_t i = p; i < digests.size(); i += 3) part.push_back(digests[i]);
    auto set = build_filter_set(part, spec, 7, options);
    ASSERT_TRUE(set.has_value());
    parts.push_back(*set);
  }
  auto merged = merge_filter_sets(parts);
  ASSERT_TRUE(merged.has_value()) << merged.error().describe();
  auto whole = build_filter_set(digests, spec, 7, options);
  ASSERT_TRUE(whole.has_value());
  expect_same_set(*merged, *whole);

  MergeOptions labels;
  labels.labels = {"a.abfs", "b.abfs", "c.abfs"};
  auto other_version = build_filter_set(digests, spec, 7, options_of(10, false));
  std::vector<FilterSet> mixed{parts[0], parts[1], *other_version};
  auto refused = merge_filter_sets(mixed, labels);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kIncompatibleFilters);
  EXPECT_NE(refused.error().message.find("c.abfs shard 0"), std::string::npos)
      << refused.error().message;
  auto other_count = build_filter_set(digests, spec, 3, options);
  std::vector<FilterSet> counts{parts[0], *other_count};
  EXPECT_NE(merge_filter_sets(counts).error().message.find("shard count differs"),
            std::string::npos);
  auto other_n = build_filter_set(digests, {15001, 0.01}, 7, options);
  std::vector<FilterSet> ns{parts[0], *other_n};
  EXPECT_EQ(merge_filter_sets(ns).error().code, ErrorCode::kIncompatibleFilters);
  std::vector<FilterSet> full{*whole, *whole};
  EXPECT_EQ(merge_filter_sets(full).error().code, ErrorCode::kCapacityExceeded);
}

TEST(FilterSetFromShards, RefusesShardsThatDoNotFormASet) {
  const auto digests = test::random_digests(1000, 81);
  auto set = build_filter_set(digests, {3000, 0.01}, 3, options_of(1, false));
  ASSERT_TRUE(set.has_value());
  std::vector<Filter> shards(set->shards().begin(), set->shards().end());
  EXPECT_TRUE(FilterSet::from_shards(shards, 3000).has_value());
  EXPECT_EQ(FilterSet::from_shards(shards, 3001).error().code, ErrorCode::kIncompatibleFilters);
  EXPECT_EQ(FilterSet::from_shards({}, 3000).error().code, ErrorCode::kInvalidArgument);
  auto other = build_filter_set(digests, {3000, 0.01}, 3, options_of(2, false));
  shards[2] = other->shard(2);
  auto mixed = FilterSet::from_shards(shards, 3000);
  ASSERT_FALSE(mixed.has_value());
  EXPECT_NE(mixed.error().message.find("shard 2 of 3 has catalogVersion 2"), std::string::npos)
      << mixed.error().message;
}

}  // namespace
}  // namespace abf
