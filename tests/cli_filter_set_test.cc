// Filter sets through the `abf` binary: build --shards, and query, inspect,
// merge and dedup taking a set wherever they take a snapshot, with the
// conventions of docs/cli.md (exit codes, standard streams, --json).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "cli_shell.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class CliSetTest : public ::testing::Test {
 protected:
  CliRun abf(const std::string& arguments) const { return test::run_cli(dir_.path(), arguments); }
  fs::path path(const std::string& name) const { return dir_ / name; }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
  }
  static std::string hex_lines(const std::vector<Digest>& digests) {
    std::string text;
    for (const Digest& d : digests) text += d.hex() + "\n";
    return text;
  }
  static void expect_failure(const CliRun& run, int status, const std::string& fragment) {
    EXPECT_EQ(run.status, status) << run.err;
    EXPECT_NE(run.err.find(fragment), std::string::npos) << run.err;
  }
  // The files of the folder, names only.
  std::set<std::string> files() const {
    std::set<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir_.path())) {
      names.insert(entry.path().filename().string());
    }
    return names;
  }

  test::TempDir dir_{"abf-cli-set"};
};

TEST_F(CliSetTest, BuildWritesAManifestAndShardsThatQueryAsEachShardAlone) {
  const auto members = test::random_digests(5000, 1);
  write("members.txt", hex_lines(members));
  const CliRun build =
      abf("build -n 8000 -p 0.01 --catalog-version 4 --shards 3 -i members.txt "
          "-o c.abfs");
  ASSERT_EQ(build.status, 0) << build.err;
  EXPECT_NE(build.out.find("wrote c.abfs (a filter-set manifest; shard files c.abfs."),
            std::string::npos)
      << build.out;
  EXPECT_NE(build.out.find("3 shards of m = "), std::string::npos) << build.out;
  EXPECT_EQ(files().size(), 4u + 1u);  // members.txt, the manifest, 3 shards
  auto set = load_filter_set(path("c.abfs"));
  ASSERT_TRUE(set.has_value()) << set.error().describe();
  ASSERT_EQ(set->shard_count(), 3u);
  EXPECT_EQ(set->catalog_version(), 4u);
  EXPECT_EQ(set->inserted_item_count(), 5000u);

  // Answers: each digest's shard's, on every backend; members maybe.
  auto candidates = test::random_digests(20000, 2);
  candidates.insert(candidates.end(), members.begin(), members.begin() + 1000);
  write("candidates.txt", hex_lines(candidates));
  std::string expected;
  for (const Digest& d : candidates) {
    const bool maybe = set->shard(shard_of(d, 3)).might_contain(d);
    expected += d.hex() + (maybe ? "\tmaybe\n" : "\tabsent\n");
  }
  for (const std::string backend : {"scalar", "simd", "auto"}) {
    const CliRun query = abf("query -s c.abfs -i candidates.txt --backend " + backend);
    ASSERT_EQ(query.status, 0) << query.err;
    EXPECT_TRUE(query.out == expected) << backend;
  }
  const CliRun summary = abf("query -s c.abfs -i members.txt --summary --json");
  ASSERT_EQ(summary.status, 0) << summary.err;
  EXPECT_EQ(nlohmann::json::parse(summary.out)["maybe"], 5000);

  // The same digests through --distinct, and through a binary input, give
  // the same shards.
  std::string binary;
  for (const Digest& d : members) binary.append(reinterpret_cast<const char*>(d.bytes.data()), 32);
  write("members.bin", binary);
  ASSERT_EQ(abf("build -n 8000 -p 0.01 --catalog-version 4 --shards 3 -f bin -i members.bin "
                "-o b.abfs")
                .status,
            0);
  ASSERT_EQ(abf("build -n 8000 -p 0.01 --catalog-version 4 --shards 3 --distinct "
                "-i members.txt -o d.abfs")
                .status,
            0);
  for (const char* other : {"b.abfs", "d.abfs"}) {
    auto again = load_filter_set(path(other));
    ASSERT_TRUE(again.has_value());
    for (std::uint32_t i = 0; i < 3; ++i) {
      EXPECT_EQ(serialize_snapshot(again->shard(i)), serialize_snapshot(set->shard(i))) << other;
    }
  }
}

TEST_F(CliSetTest, BuildJsonAndInspectDescribeTheSetAndEachShard) {
  write("members.txt", hex_lines(test::random_digests(3000, 3)));
  const CliRun build = abf("build -n 4000 -p 0.01 --shards 2 -i members.txt -o c.abfs --json");
  ASSERT_EQ(build.status, 0) << build.err;
  const auto json = nlohmann::json::parse(build.out);
  EXPECT_EQ(json["shard_count"], 2);
  EXPECT_EQ(json["expected_item_count"], 4000);
  EXPECT_EQ(json["inserted_item_count"], 3000);
  EXPECT_EQ(json["shard_expected_item_count"], shard_expected_item_count(4000, 2));
  ASSERT_EQ(json["shard_files"].size(), 2u);
  for (const auto& file : json["shard_files"]) {
    EXPECT_TRUE(fs::exists(path(file.get<std::string>()))) << file;
  }

  const CliRun text = abf("inspect c.abfs");
  ASSERT_EQ(text.status, 0) << text.err;
  for (const char* needle :
       {"filter set            c.abfs", "magic                 ABFS", "shard count           2",
        "expected items (n)    4,000", "shard 0 ", "shard 1 "}) {
    EXPECT_NE(text.out.find(needle), std::string::npos) << needle << "\n" << text.out;
  }
  const CliRun inspect = abf("inspect c.abfs --json");
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  const auto info = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(info["magic"], "ABFS");
  EXPECT_EQ(info["shard_count"], 2);
  ASSERT_EQ(info["shards"].size(), 2u);
  EXPECT_EQ(info["shards"][1]["file"], json["shard_files"][1]);
  EXPECT_EQ(info["shards"][0]["inserted_item_count"].get<std::uint64_t>() +
                info["shards"][1]["inserted_item_count"].get<std::uint64_t>(),
            3000u);
  for (const auto& command : {build.out, inspect.out}) {
    const auto parsed = nlohmann::json::parse(command);
    for (const auto& [key, value] : parsed.items()) {
      EXPECT_TRUE(std::ranges::all_of(key, [](char c) { return std::islower(c) || c == '_'; }))
          << key;
    }
  }
  // A plain snapshot inspects as before.
  ASSERT_EQ(abf("build -n 4000 -p 0.01 -i members.txt -o c.abf").status, 0);
  const auto plain = nlohmann::json::parse(abf("inspect c.abf --json").out);
  EXPECT_EQ(plain["magic"], "ABF1");
  EXPECT_FALSE(plain.contains("shards"));
}

TEST_F(CliSetTest, ShardsAutoAndItsChecks) {
  write("members.txt", hex_lines(test::random_digests(100, 4)));
  const CliRun one = abf("build -n 1000 -p 0.01 --shards auto -i members.txt -o a.abfs --json");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_EQ(nlohmann::json::parse(one.out)["shard_count"], 1);
  for (const char* bad : {"0", "65537", "two", "-1", "3x"}) {
    expect_failure(
        abf(std::string("build -n 1000 -p 0.01 -i members.txt -o x.abfs --shards ") + bad), 2,
        "--shards");
  }
  // Too few shards for n at p: a usage error (values out of range together)
  // that says how many.
  expect_failure(abf("build -n 3000000000 -p 0.01 -i members.txt -o x.abfs --shards 2"), 2,
                 "filter_too_large");
  // A set is never standard output.
  expect_failure(abf("build -n 1000 -p 0.01 -i members.txt -o - --shards 3"), 2,
                 "cannot go to standard output");
  EXPECT_FALSE(fs::exists(path("x.abfs")));
}

TEST_F(CliSetTest, SetsNeverComeFromStandardInput) {
  write("members.txt", hex_lines(test::random_digests(100, 5)));
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --shards 2 -i members.txt -o c.abfs").status, 0);
  for (const std::string command : {"$ABF query -s - -i members.txt < c.abfs",
                                    "$ABF inspect - < c.abfs", "$ABF merge - -o m.abf < c.abfs"}) {
    const CliRun run = test::run_shell(dir_.path(), command);
    EXPECT_EQ(run.status, 1) << command;
    EXPECT_NE(run.err.find("a filter set cannot come from standard input"), std::string::npos)
        << command << ": " << run.err;
  }
}

TEST_F(CliSetTest, RebuildingReplacesTheShardsAndLoadingErrorsNameTheShard) {
  write("members.txt", hex_lines(test::random_digests(2000, 6)));
  ASSERT_EQ(abf("build -n 3000 -p 0.01 --shards 3 -i members.txt -o c.abfs").status, 0);
  const auto first = files();
  ASSERT_EQ(
      abf("build -n 3000 -p 0.01 --shards 3 -i members.txt -o c.abfs --catalog-version 2").status,
      0);
  const auto second = files();
  EXPECT_EQ(second.size(), first.size());
  std::vector<std::string> common;
  std::ranges::set_intersection(first, second, std::back_inserter(common));
  EXPECT_EQ(common, (std::vector<std::string>{"c.abfs", "members.txt"}));

  auto manifest = read_set_manifest(path("c.abfs"));
  ASSERT_TRUE(manifest.has_value());
  fs::remove(path(manifest->shards[2].file));
  const CliRun query = abf("query -s c.abfs -i members.txt --summary");
  expect_failure(query, 1, "set_shard_missing");
  EXPECT_NE(query.err.find("shard 2 of 3 (" + manifest->shards[2].file + ")"), std::string::npos)
      << query.err;
  EXPECT_EQ(query.out, "");
  expect_failure(abf("inspect c.abfs"), 1, "set_shard_missing");
}

TEST_F(CliSetTest, KeyedSetAnswersOnlyWithItsKey) {
  test::write_private_file(path("k.key"), test::golden_key().hex + "\n");
  test::write_private_file(path("other.key"), test::other_key().hex + "\n");
  write("members.txt", hex_lines(test::random_digests(500, 7)));
  ASSERT_EQ(
      abf("build -n 1000 -p 0.01 --shards 2 --key-file k.key -i members.txt -o k.abfs").status, 0);
  expect_failure(abf("query -s k.abfs -i members.txt --summary"), 1, "key_required");
  expect_failure(abf("query -s k.abfs -i members.txt --summary --key-file other.key"), 1,
                 "key_mismatch");
  const CliRun ok = abf("query -s k.abfs -i members.txt --summary --key-file k.key");
  ASSERT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.out, "total\t500\nabsent\t0\nmaybe\t500\n");
  const CliRun inspect = abf("inspect k.abfs --json --key-file k.key");
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["key_fingerprint"],
            test::golden_key().fingerprint_hex);
}

TEST_F(CliSetTest, MergeJoinsSetsShardByShard) {
  const auto all = test::random_digests(6000, 8);
  write("a.txt", hex_lines(std::vector<Digest>(all.begin(), all.begin() + 2500)));
  write("b.txt", hex_lines(std::vector<Digest>(all.begin() + 2500, all.end())));
  write("all.txt", hex_lines(all));
  for (const char* part : {"a", "b", "all"}) {
    ASSERT_EQ(abf(std::string("build -n 8000 -p 0.01 --shards 5 -i ") + part + ".txt -o " + part +
                  ".abfs")
                  .status,
              0);
  }
  const CliRun merge = abf("merge a.abfs b.abfs -o m.abfs --json");
  ASSERT_EQ(merge.status, 0) << merge.err;
  const auto json = nlohmann::json::parse(merge.out);
  EXPECT_EQ(json["shard_count"], 5);
  EXPECT_EQ(json["inserted_item_count"], 6000);
  auto merged = load_filter_set(path("m.abfs"));
  auto whole = load_filter_set(path("all.abfs"));
  ASSERT_TRUE(merged.has_value() && whole.has_value());
  for (std::uint32_t i = 0; i < 5; ++i) {
    EXPECT_EQ(serialize_snapshot(merged->shard(i)), serialize_snapshot(whole->shard(i)));
  }
  // Other shard counts, a plain snapshot among sets, or a set to stdout.
  ASSERT_EQ(abf("build -n 8000 -p 0.01 --shards 4 -i a.txt -o four.abfs").status, 0);
  expect_failure(abf("merge a.abfs four.abfs -o x.abfs"), 1, "shard count differs");
  ASSERT_EQ(abf("build -n 8000 -p 0.01 -i a.txt -o plain.abf").status, 0);
  expect_failure(abf("merge a.abfs plain.abf -o x.abfs"), 1, "incompatible_filters");
  expect_failure(abf("merge a.abfs b.abfs -o -"), 2, "cannot go to standard output");
  // Snapshots still merge into a snapshot.
  ASSERT_EQ(abf("build -n 8000 -p 0.01 -i b.txt -o plain-b.abf").status, 0);
  ASSERT_EQ(abf("merge plain.abf plain-b.abf -o p2.abf").status, 0);
  EXPECT_EQ(*filter_file_kind(path("p2.abf")), FilterFileKind::kSnapshot);
}

TEST_F(CliSetTest, DedupWithASetFromTheCatalogEqualsTheExactStore) {
  const auto members = test::random_digests(3000, 9);
  write("members.txt", hex_lines(members));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i members.txt").status, 0);
  const CliRun build =
      abf("build --from-catalog c.db -n 4000 -p 0.01 --shards 3 -o cat.abfs --json");
  ASSERT_EQ(build.status, 0) << build.err;
  const auto json = nlohmann::json::parse(build.out);
  EXPECT_EQ(json["source"], "catalog");
  EXPECT_EQ(json["shard_count"], 3);
  EXPECT_EQ(json["inserted_item_count"], 3000);
  EXPECT_FALSE(json["catalog_id"].is_null());

  auto candidates = test::random_digests(4000, 10);
  candidates.insert(candidates.end(), members.begin(), members.begin() + 500);
  write("candidates.txt", hex_lines(candidates));
  const CliRun with_set = abf("dedup -s cat.abfs --db c.db -i candidates.txt --json -o new.txt");
  ASSERT_EQ(with_set.status, 0) << with_set.err;
  const std::string new_digests = test::read_file(path("new.txt"));
  const CliRun exact = abf("dedup -s cat.abfs --db c.db -i candidates.txt --exact-only");
  ASSERT_EQ(exact.status, 0) << exact.err;
  EXPECT_EQ(new_digests, exact.out);
  EXPECT_EQ(new_digests,
            hex_lines(std::vector<Digest>(candidates.begin(), candidates.begin() + 4000)));
  const auto stats = nlohmann::json::parse(with_set.out);
  EXPECT_EQ(stats["present"], 500);
  EXPECT_GT(stats["negative"].get<std::uint64_t>(), 3500u);

  // A set of no catalog is refused, as a snapshot would be.
  ASSERT_EQ(abf("build -n 4000 -p 0.01 --shards 3 -i members.txt -o none.abfs").status, 0);
  expect_failure(abf("dedup -s none.abfs --db c.db -i candidates.txt"), 1, "catalog_mismatch");
}

}  // namespace
}  // namespace abf
