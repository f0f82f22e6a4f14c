// The catalog and dedup commands end to end through the `abf` binary
// (ABF_CLI): output equals the catalog's answer; bad databases and inputs give
// a clear error, a non-zero exit, and change nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class ServiceCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "abf-service-cli-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path path(const std::string& name) const { return dir_ / name; }

  // Runs `abf <args>` in the test directory.
  CliRun abf(const std::string& args) { return test::run_cli(dir_, args); }

  void write_hex(const std::string& name, const std::vector<Digest>& digests) {
    std::ofstream out(path(name));
    for (const Digest& digest : digests) out << digest.hex() << '\n';
  }

  fs::path dir_;
};

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

TEST_F(ServiceCliTest, CatalogCommandsKeepVersions) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto first = test::member_digests(50);
  write_hex("first.txt", first);
  auto added = abf("catalog add --db c.db --input first.txt");
  ASSERT_EQ(added.status, 0) << added.err;
  EXPECT_EQ(added.out, "1\n");
  write_hex("gone.txt", {first[0], first[1]});
  auto removed = abf("catalog remove --db c.db --input gone.txt");
  ASSERT_EQ(removed.status, 0) << removed.err;
  EXPECT_EQ(removed.out, "2\n");
  auto stats = abf("catalog stats --db c.db --json");
  ASSERT_EQ(stats.status, 0) << stats.err;
  const auto json = nlohmann::json::parse(stats.out);
  EXPECT_EQ(json["latestVersion"].get<std::uint64_t>(), 2u);
  EXPECT_EQ(json["liveArtifacts"].get<std::uint64_t>(), 48u);
  EXPECT_EQ(json["removedRows"].get<std::uint64_t>(), 1u + 1u);
  // Binary input too.
  const auto more = test::random_digests(5, 3);
  {
    std::ofstream out(path("more.bin"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(more.data()),
              static_cast<std::streamsize>(more.size() * 32));
  }
  auto binary = abf("catalog add --db c.db --input-format bin --input more.bin");
  ASSERT_EQ(binary.status, 0) << binary.err;
  EXPECT_EQ(binary.out, "3\n");
  // init never overwrites.
  auto again = abf("catalog init --db c.db");
  EXPECT_EQ(again.status, 1);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
}

TEST_F(ServiceCliTest, BuildFromCatalogEqualsABuildOfTheDigestsAtThatVersion) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto members = test::member_digests(1000);
  write_hex("first.txt", std::vector<Digest>(members.begin(), members.begin() + 600));
  write_hex("second.txt", std::vector<Digest>(members.begin() + 600, members.end()));
  ASSERT_EQ(abf("catalog add --db c.db --input first.txt").status, 0);   // version 1
  ASSERT_EQ(abf("catalog add --db c.db --input second.txt").status, 0);  // version 2

  // The latest version by default, the named one otherwise; the header
  // carries the version. Each equals a plain build of that version's digests.
  write_hex("all.txt", members);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --catalog-version 2 --input all.txt -o want2.abf").status,
            0);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --catalog-version 1 --input first.txt -o want1.abf").status,
            0);
  const CliRun latest = abf("build --from-catalog c.db -n 1000 -p 0.01 -o got2.abf");
  ASSERT_EQ(latest.status, 0) << latest.err;
  const CliRun first =
      abf("build --from-catalog c.db --catalog-version 1 -n 1000 -p 0.01 -o got1.abf");
  ASSERT_EQ(first.status, 0) << first.err;
  EXPECT_EQ(test::read_file(path("got2.abf")), test::read_file(path("want2.abf")));
  EXPECT_EQ(test::read_file(path("got1.abf")), test::read_file(path("want1.abf")));

  // Too small a capacity, a version the catalog does not have, a missing
  // database: clear errors, no output.
  const CliRun small = abf("build --from-catalog c.db -n 999 -p 0.01 -o small.abf");
  EXPECT_NE(small.status, 0);
  EXPECT_NE(small.err.find("capacity_exceeded"), std::string::npos) << small.err;
  const CliRun future =
      abf("build --from-catalog c.db --catalog-version 9 -n 1000 -p 0.01 -o f.abf");
  EXPECT_NE(future.status, 0);
  const CliRun missing = abf("build --from-catalog nope.db -n 1000 -p 0.01 -o m.abf");
  EXPECT_NE(missing.status, 0);
  EXPECT_NE(missing.err.find("catalog_error"), std::string::npos) << missing.err;
  for (const char* name : {"small.abf", "f.abf", "m.abf"}) EXPECT_FALSE(fs::exists(path(name)));
  // --input and --from-catalog exclude each other.
  EXPECT_EQ(abf("build --from-catalog c.db --input all.txt -n 1000 -p 0.01 -o x.abf").status, 2);
}

TEST_F(ServiceCliTest, DedupPrintsExactlyTheDigestsNotInTheCatalog) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto members = test::member_digests(2000);
  write_hex("members.txt", members);
  ASSERT_EQ(abf("catalog add --db c.db --input members.txt").status, 0);
  write_hex("gone.txt", {members[5], members[6]});
  ASSERT_EQ(abf("catalog remove --db c.db --input gone.txt").status, 0);  // version 2
  {
    auto catalog = SqliteCatalog::open(path("c.db"));
    ASSERT_TRUE(catalog.has_value());
    auto filter =
        build_filter_from_catalog(*catalog, 2, {.expected_item_count = 2000, .target_fpp = 0.01});
    ASSERT_TRUE(filter.has_value());
    ASSERT_TRUE(save_snapshot(*filter, path("c.abf")).has_value());
  }
  // Candidates: every fifth a member (two of them removed), the rest new.
  std::vector<Digest> candidates;
  std::vector<std::string> expected;
  std::set<Digest> present(members.begin(), members.end());
  present.erase(members[5]);
  present.erase(members[6]);
  for (std::uint64_t i = 0; i < 3000; ++i) {
    const Digest digest = i % 5 == 0 ? members[i / 5] : test::non_member_digest(i);
    candidates.push_back(digest);
    if (!present.contains(digest)) expected.push_back(digest.hex());
  }
  {
    std::ofstream out(path("candidates.txt"));
    for (std::size_t i = 0; i < candidates.size(); ++i) {
      // Mixed accepted forms: OCI prefix and upper case.
      std::string hex = candidates[i].hex();
      if (i % 3 == 1) {
        for (char& c : hex) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      }
      out << (i % 2 == 0 ? "sha256:" : "") << hex << '\n';
    }
  }
  for (const char* mode : {"", " --exact-only"}) {
    auto run = abf(std::string("dedup --snapshot c.abf --db c.db --input candidates.txt "
                               "--stats-json stats.json") +
                   mode);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(lines(run.out), expected) << mode;
    const auto stats = nlohmann::json::parse(test::read_file(path("stats.json")));
    const auto total = stats["total"].get<std::uint64_t>();
    const auto negative = stats["negative"].get<std::uint64_t>();
    const auto maybe = stats["maybe"].get<std::uint64_t>();
    const auto fp = stats["falsePositives"].get<std::uint64_t>();
    const auto lookups = stats["exactLookups"].get<std::uint64_t>();
    EXPECT_EQ(total, 3000u);
    EXPECT_EQ(stats["new"].get<std::uint64_t>(), expected.size());
    EXPECT_EQ(stats["catalogVersion"].get<std::uint64_t>(), 2u);
    EXPECT_EQ(stats["exactLookupsAvoided"].get<std::uint64_t>(), total - lookups);
    if (std::string(mode).empty()) {
      EXPECT_EQ(negative + maybe, total);
      EXPECT_EQ(lookups, maybe);
      EXPECT_EQ(maybe, 598u + fp);  // 600 members asked, 2 of them removed: those are fps
      EXPECT_GE(fp, 2u);
      EXPECT_GT(negative, 2000u);
      EXPECT_DOUBLE_EQ(stats["negativeBypassRatio"].get<double>(),
                       static_cast<double>(negative) / static_cast<double>(total));
      EXPECT_DOUBLE_EQ(stats["observedFalsePositiveRate"].get<double>(),
                       static_cast<double>(fp) / static_cast<double>(negative + fp));
      EXPECT_DOUBLE_EQ(stats["falseDiscoveryRatio"].get<double>(),
                       static_cast<double>(fp) / static_cast<double>(maybe));
    } else {
      EXPECT_EQ(lookups, total);
      EXPECT_EQ(negative, 0u);
    }
    EXPECT_NE(run.err.find("negativeBypassRatio"), std::string::npos) << run.err;
  }
  // --output writes the same lines to a file.
  auto to_file = abf("dedup -s c.abf --db c.db -i candidates.txt -o new.txt");
  ASSERT_EQ(to_file.status, 0) << to_file.err;
  EXPECT_EQ(lines(test::read_file(path("new.txt"))), expected);
}

class DedupFailureTest : public ServiceCliTest {
 protected:
  void SetUp() override {
    ServiceCliTest::SetUp();
    ASSERT_EQ(abf("catalog init --db c.db").status, 0);
    write_hex("members.txt", test::member_digests(100));
    ASSERT_EQ(abf("catalog add --db c.db --input members.txt").status, 0);
    auto catalog = SqliteCatalog::open(path("c.db"));
    ASSERT_TRUE(catalog.has_value());
    auto filter =
        build_filter_from_catalog(*catalog, 1, {.expected_item_count = 100, .target_fpp = 0.01});
    ASSERT_TRUE(filter.has_value());
    ASSERT_TRUE(save_snapshot(*filter, path("c.abf")).has_value());
    write_hex("good.txt", test::random_digests(10, 1));
    db_before_ = test::read_file(path("c.db"));
  }

  // The command failed with one clear line, wrote no output file and no
  // stats, and left the catalog as it was.
  void expect_clean_failure(const CliRun& run, std::string_view fragment) {
    EXPECT_EQ(run.status, 1) << run.err;
    EXPECT_NE(run.err.find(fragment), std::string::npos) << run.err;
    EXPECT_FALSE(fs::exists(path("new.txt")));
    EXPECT_FALSE(fs::exists(path("stats.json")));
    EXPECT_EQ(test::read_file(path("c.db")), db_before_);
  }

  std::string db_before_;
};

TEST_F(DedupFailureTest, MissingDatabase) {
  expect_clean_failure(
      abf("dedup -s c.abf --db nope.db -i good.txt -o new.txt --stats-json stats.json"),
      "no such file");
  EXPECT_FALSE(fs::exists(path("nope.db")));
}

TEST_F(DedupFailureTest, NotADatabase) {
  { std::ofstream(path("junk.db")) << "this is not sqlite\n"; }
  expect_clean_failure(
      abf("dedup -s c.abf --db junk.db -i good.txt -o new.txt --stats-json stats.json"),
      "not a SQLite database");
  EXPECT_EQ(test::read_file(path("junk.db")), "this is not sqlite\n");
}

TEST_F(DedupFailureTest, NotACatalog) {
  // A valid snapshot is not a catalog either.
  expect_clean_failure(
      abf("dedup -s c.abf --db c.abf -i good.txt -o new.txt --stats-json stats.json"), "catalog");
}

TEST_F(DedupFailureTest, MalformedInputNamesItsLine) {
  {
    std::ofstream out(path("bad.txt"));
    out << test::member_digest(1).hex() << "\n" << test::non_member_digest(1).hex() << "\nxyz\n";
  }
  expect_clean_failure(
      abf("dedup -s c.abf --db c.db -i bad.txt -o new.txt --stats-json stats.json"), "line 3");
}

TEST_F(DedupFailureTest, BinaryInputOfPartialRecord) {
  { std::ofstream(path("bad.bin"), std::ios::binary) << std::string(32 * 3 + 5, 'a'); }
  expect_clean_failure(
      abf("dedup -s c.abf --db c.db -f bin -i bad.bin -o new.txt --stats-json stats.json"),
      "invalid_digest");
}

TEST_F(DedupFailureTest, CorruptSnapshot) {
  auto bytes = test::read_file(path("c.abf"));
  bytes[200] = static_cast<char>(bytes[200] ^ 1);
  { std::ofstream(path("bad.abf"), std::ios::binary) << bytes; }
  expect_clean_failure(
      abf("dedup -s bad.abf --db c.db -i good.txt -o new.txt --stats-json stats.json"), "checksum");
}

TEST_F(DedupFailureTest, SnapshotNewerThanTheCatalog) {
  auto filter =
      build_filter(test::member_digests(10), {.expected_item_count = 10, .target_fpp = 0.01}, 9);
  ASSERT_TRUE(save_snapshot(*filter, path("v9.abf")).has_value());
  expect_clean_failure(
      abf("dedup -s v9.abf --db c.db -i good.txt -o new.txt --stats-json stats.json"),
      "only reaches version 1");
}

TEST_F(DedupFailureTest, CatalogAddWithMalformedInputChangesNothing) {
  {
    std::ofstream out(path("bad.txt"));
    out << test::non_member_digest(1).hex() << "\nsha512:abcd\n";
  }
  auto run = abf("catalog add --db c.db --input bad.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("line 2"), std::string::npos) << run.err;
  EXPECT_EQ(run.out, "");
  EXPECT_EQ(test::read_file(path("c.db")), db_before_);
  auto stats = abf("catalog stats --db c.db --json");
  ASSERT_EQ(stats.status, 0);
  EXPECT_EQ(nlohmann::json::parse(stats.out)["latestVersion"].get<std::uint64_t>(), 1u);
}

}  // namespace
}  // namespace abf::service
