// `abf build --layout blocked` as a user runs it: the 1,000-member build
// writes vectors/v3's golden payload (protocol 3, and 4 with --key-file),
// queries answer as builds-v3.tsv says, --from-catalog builds a blocked
// snapshot of the catalog, --shards makes sets of one-line shards (query,
// inspect, merge, dedup with and without --index), `abf bench --protocol`
// takes lists, and an unknown layout or protocol is a usage error.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

std::string members_text(std::uint64_t count) {
  std::string text;
  for (const Digest& d : test::member_digests(count)) text += d.hex() + "\n";
  return text;
}

void write(const std::filesystem::path& path, const std::string& text) {
  test::write_private_file(path, text);
}

TEST(CliBlocked, BuildWritesTheGoldenPayloadAndQueriesAnswerAsItsBuild) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(1000));
  std::string absent;
  for (std::uint64_t i = 0; i < 20'000; ++i) absent += test::non_member_digest(i).hex() + "\n";
  write(dir / "n.txt", absent);
  write(dir / "k.key", "000102030405060708090a0b0c0d0e0f\n");
  struct Case {
    std::string extra;
    std::string golden;
    std::string protocol;
  };
  for (const Case& c : {Case{"", "vectors/v3/member-1000-v3.abf", "3"},
                        Case{" --key-file k.key", "vectors/v3/member-1000-v4.abf", "4"}}) {
    SCOPED_TRACE(c.golden);
    const auto built = test::run_cli(dir.path(), "build -n 1000 -p 0.01 --layout blocked -i m.txt -o b.abf" +
                                                     c.extra);
    ASSERT_EQ(built.status, 0) << built.err;
    EXPECT_NE(built.out.find("hash protocol " + c.protocol), std::string::npos) << built.out;
    const std::string mine = test::read_file(dir / "b.abf");
    const std::string golden = test::read_file(test::data_path(c.golden));
    ASSERT_EQ(mine.size(), golden.size());
    EXPECT_EQ(mine.substr(128), golden.substr(128)) << "payload";
    // Absent digests: exactly the golden build's false positives below 20,000.
    std::size_t expected_maybe = 0;
    for (const auto& row : test::read_tsv("vectors/v3/builds-v3.tsv")) {
      if (row[0] == c.protocol && row[2] == "1000" && row[3] == "1000") {
        for (const auto i : test::split_numbers(row.size() > 9 ? row[9] : "")) expected_maybe += i < 20'000;
      }
    }
    ASSERT_GT(expected_maybe, 0u);
    const auto queried = test::run_cli(dir.path(), "query -s b.abf -i n.txt --summary" + c.extra);
    ASSERT_EQ(queried.status, 0) << queried.err;
    EXPECT_NE(queried.out.find("maybe\t" + std::to_string(expected_maybe)), std::string::npos)
        << queried.out;
    const auto members = test::run_cli(dir.path(), "query -s b.abf -i m.txt --summary" + c.extra);
    EXPECT_NE(members.out.find("absent\t0"), std::string::npos) << members.out;
  }
}

TEST(CliBlocked, FromCatalogBuildsABlockedSnapshotOfTheCatalog) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(1000));
  ASSERT_EQ(test::run_cli(dir.path(), "catalog init --db c.db").status, 0);
  ASSERT_EQ(test::run_cli(dir.path(), "catalog add --db c.db -i m.txt").status, 0);
  const auto built =
      test::run_cli(dir.path(), "build --from-catalog c.db -n 1000 -p 0.01 --layout blocked -o c.abf");
  ASSERT_EQ(built.status, 0) << built.err;
  EXPECT_NE(built.out.find("hash protocol 3"), std::string::npos) << built.out;
  EXPECT_EQ(test::read_file(dir / "c.abf").substr(128),
            test::read_file(test::data_path("vectors/v3/member-1000-v3.abf")).substr(128));
}

// `build --layout blocked --shards S`: a set whose every shard is protocol 3
// (4 with --key-file), each shard the one-filter scalar build of its share
// (the library's, at n_i), every `abf query` answer the one of the digest's
// shard alone; one shard is the golden build.
TEST(CliBlocked, ShardsMakeASetOfOneLineShardsThatAnswersAsEachShardAlone) {
  test::TempDir dir("abf-cli-blocked");
  const auto members = test::member_digests(1000);
  write(dir / "m.txt", members_text(1000));
  std::vector<Digest> candidates;
  for (std::uint64_t i = 0; i < 20'000; ++i) candidates.push_back(test::non_member_digest(i));
  candidates.insert(candidates.end(), members.begin(), members.end());
  std::string candidates_text;
  for (const Digest& d : candidates) candidates_text += d.hex() + "\n";
  write(dir / "c.txt", candidates_text);
  write(dir / "k.key", "000102030405060708090a0b0c0d0e0f\n");
  for (const std::string extra : {"", " --key-file k.key"}) {
    const std::uint32_t protocol = extra.empty() ? 3 : 4;
    SCOPED_TRACE("protocol " + std::to_string(protocol));
    LoadOptions load;
    BuildOptions options;
    options.protocol = protocol;
    if (!extra.empty()) {
      load.key = *Key::parse_hex("000102030405060708090a0b0c0d0e0f");
      options.key = load.key;
    }
    for (const std::uint32_t shards : {1u, 3u, 8u}) {
      SCOPED_TRACE(std::to_string(shards) + " shards");
      const auto built = test::run_cli(
          dir.path(), "build -n 1000 -p 0.01 --layout blocked --shards " + std::to_string(shards) +
                          " -i m.txt -o s.abfs --json" + extra);
      ASSERT_EQ(built.status, 0) << built.err;
      const auto json = nlohmann::json::parse(built.out);
      EXPECT_EQ(json["hash_protocol_version"], protocol);
      EXPECT_EQ(json["shard_count"], shards);
      auto set = load_filter_set(dir / "s.abfs", load);
      ASSERT_TRUE(set) << set.error().message;
      ASSERT_EQ(set->shard_count(), shards);
      const BloomSpec shard_spec{shard_expected_item_count(1000, shards), 0.01};
      std::vector<std::vector<Digest>> share(shards);
      for (const Digest& d : members) share[shard_of(d, shards)].push_back(d);
      for (std::uint32_t s = 0; s < shards; ++s) {
        EXPECT_EQ(set->shard(s).hash_protocol_version(), protocol);
        auto alone = build_filter(share[s], shard_spec, options, Backend::kScalar);
        ASSERT_TRUE(alone) << alone.error().message;
        EXPECT_EQ(set->shard(s).info().scheme, alone->info().scheme);
        EXPECT_TRUE(std::ranges::equal(set->shard(s).payload(), alone->payload())) << s;
      }
      if (shards == 1) {  // the golden build of vectors/v3
        const std::string golden = test::read_file(test::data_path(
            protocol == 3 ? "vectors/v3/member-1000-v3.abf" : "vectors/v3/member-1000-v4.abf"));
        const auto bytes = serialize_snapshot(set->shard(0));
        const std::string shard(bytes.begin(), bytes.end());
        ASSERT_EQ(shard.size(), golden.size());
        EXPECT_EQ(shard.substr(128), golden.substr(128)) << "payload";
      }
      std::string expected;
      for (const Digest& d : candidates) {
        const bool maybe = set->shard(shard_of(d, shards)).might_contain(d);
        expected += d.hex() + (maybe ? "\tmaybe\n" : "\tabsent\n");
      }
      for (const std::string backend : {"scalar", "simd", "auto"}) {
        const auto queried =
            test::run_cli(dir.path(), "query -s s.abfs -i c.txt --backend " + backend + extra);
        ASSERT_EQ(queried.status, 0) << queried.err;
        EXPECT_TRUE(queried.out == expected) << backend;
      }
      const auto inspected = test::run_cli(dir.path(), "inspect s.abfs --json" + extra);
      ASSERT_EQ(inspected.status, 0) << inspected.err;
      EXPECT_EQ(nlohmann::json::parse(inspected.out)["hash_protocol_version"], protocol);
    }
  }
  // --shards auto: one one-line filter holds what three classic ones do.
  const auto automatic = test::run_cli(
      dir.path(), "build -n 1000 -p 0.01 --layout blocked --shards auto -i m.txt -o a.abfs --json");
  ASSERT_EQ(automatic.status, 0) << automatic.err;
  EXPECT_EQ(nlohmann::json::parse(automatic.out)["shard_count"], 1);
}

// merge joins one-line sets shard by shard into the set one build makes, and
// refuses a classic set beside a one-line one.
TEST(CliBlocked, MergeJoinsOneLineSetsAndRefusesMixedLayouts) {
  test::TempDir dir("abf-cli-blocked");
  const auto all = test::member_digests(3000);
  std::string first;
  std::string second;
  for (std::size_t i = 0; i < all.size(); ++i) (i < 1200 ? first : second) += all[i].hex() + "\n";
  write(dir / "a.txt", first);
  write(dir / "b.txt", second);
  write(dir / "all.txt", first + second);
  for (const char* part : {"a", "b", "all"}) {
    ASSERT_EQ(test::run_cli(dir.path(), std::string("build -n 4000 -p 0.01 --layout blocked "
                                                    "--shards 4 -i ") +
                                            part + ".txt -o " + part + ".abfs")
                  .status,
              0);
  }
  const auto merged = test::run_cli(dir.path(), "merge a.abfs b.abfs -o m.abfs --json");
  ASSERT_EQ(merged.status, 0) << merged.err;
  EXPECT_EQ(nlohmann::json::parse(merged.out)["hash_protocol_version"], 3);
  auto m = load_filter_set(dir / "m.abfs");
  auto whole = load_filter_set(dir / "all.abfs");
  ASSERT_TRUE(m && whole);
  for (std::uint32_t s = 0; s < 4; ++s) {
    EXPECT_EQ(serialize_snapshot(m->shard(s)), serialize_snapshot(whole->shard(s)));
  }
  ASSERT_EQ(test::run_cli(dir.path(), "build -n 4000 -p 0.01 --shards 4 -i b.txt -o classic.abfs")
                .status,
            0);
  const auto mixed = test::run_cli(dir.path(), "merge a.abfs classic.abfs -o x.abfs");
  EXPECT_EQ(mixed.status, 1) << mixed.err;
  EXPECT_NE(mixed.err.find("incompatible_filters"), std::string::npos) << mixed.err;
}

// A one-line set built --from-catalog carries the catalog's id and version;
// dedup through it, with and without --index, prints exactly what the exact
// store alone prints.
TEST(CliBlocked, DedupThroughAOneLineSetOfTheCatalogEqualsTheExactStore) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(3000));
  ASSERT_EQ(test::run_cli(dir.path(), "catalog init --db c.db").status, 0);
  ASSERT_EQ(test::run_cli(dir.path(), "catalog add --db c.db -i m.txt").status, 0);
  const auto built = test::run_cli(
      dir.path(), "build --from-catalog c.db -n 4000 -p 0.01 --layout blocked --shards 3 -o s.abfs --json");
  ASSERT_EQ(built.status, 0) << built.err;
  const auto json = nlohmann::json::parse(built.out);
  EXPECT_EQ(json["hash_protocol_version"], 3);
  EXPECT_EQ(json["shard_count"], 3);
  EXPECT_EQ(json["inserted_item_count"], 3000);
  EXPECT_FALSE(json["catalog_id"].is_null());
  // Each shard is the library's scalar build of its share, with the catalog's labels.
  auto set = load_filter_set(dir / "s.abfs");
  ASSERT_TRUE(set);
  const auto members = test::member_digests(3000);
  BuildOptions options;
  options.protocol = 3;
  options.catalog_version = set->catalog_version();
  options.catalog_id = set->catalog_id();
  std::vector<std::vector<Digest>> share(3);
  for (const Digest& d : members) share[shard_of(d, 3)].push_back(d);
  for (std::uint32_t s = 0; s < 3; ++s) {
    auto alone = build_filter(share[s], {shard_expected_item_count(4000, 3), 0.01}, options,
                              Backend::kScalar);
    ASSERT_TRUE(alone);
    EXPECT_TRUE(std::ranges::equal(set->shard(s).payload(), alone->payload())) << s;
  }
  std::string candidates;
  std::string absent;
  for (std::uint64_t i = 0; i < 5000; ++i) {
    candidates += test::non_member_digest(i).hex() + "\n";
    absent += test::non_member_digest(i).hex() + "\n";
  }
  for (std::size_t i = 0; i < 500; ++i) candidates += members[i * 5].hex() + "\n";
  write(dir / "cand.txt", candidates);
  ASSERT_EQ(test::run_cli(dir.path(), "index --db c.db -o i.abfx").status, 0);
  const auto exact = test::run_cli(dir.path(), "dedup --db c.db -s s.abfs -i cand.txt --exact-only");
  ASSERT_EQ(exact.status, 0) << exact.err;
  EXPECT_EQ(exact.out, absent);
  for (const std::string index : {"", " --index i.abfx"}) {
    SCOPED_TRACE(index);
    const auto deduped =
        test::run_cli(dir.path(), "dedup --db c.db -s s.abfs -i cand.txt -o new.txt --json" + index);
    ASSERT_EQ(deduped.status, 0) << deduped.err;
    EXPECT_EQ(test::read_file(dir / "new.txt"), absent);
    const auto stats = nlohmann::json::parse(deduped.out);
    EXPECT_EQ(stats["present"], 500);
    // The filter answered: only its false positives (and the members) went on.
    EXPECT_GT(stats["negative"].get<std::uint64_t>(), 4800u);
  }
}

TEST(CliBlocked, WhatTheBlockedLayoutDoesNotDoIsAUsageError) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(10));
  const auto bad = test::run_cli(dir.path(), "build -n 10 -p 0.01 --layout diagonal -i m.txt -o x.abf");
  EXPECT_EQ(bad.status, 2) << bad.err;
  const auto low = test::run_cli(dir.path(), "build -n 10 -p 0.00001 --layout blocked -i m.txt -o l.abf");
  EXPECT_EQ(low.status, 0) << low.err;
  EXPECT_NE(low.err.find("classic layout"), std::string::npos) << low.err;
  const auto protocol = test::run_cli(dir.path(), "bench --protocol 1,5 --scenario l2");
  EXPECT_EQ(protocol.status, 2) << protocol.err;
}

}  // namespace
}  // namespace abf
