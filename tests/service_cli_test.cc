// The catalog and dedup commands end to end through the `abf` binary
// (ABF_CLI): output equals the catalog's answer; bad databases and inputs give
// a clear error, a non-zero exit, and change nothing; a snapshot of another
// catalog, or of none, is refused (issue 12).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "cli_shell.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class ServiceCliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("abf-service-cli"); }
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

  // `abf catalog init --db <name>`; returns the catalog id it printed.
  std::string init_catalog(const std::string& name) {
    const CliRun run = abf("catalog init --db " + name);
    EXPECT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(run.out.size(), 33u) << run.out;
    return run.out.substr(0, 32);
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
  EXPECT_EQ(json["latest_version"].get<std::uint64_t>(), 2u);
  EXPECT_EQ(json["live_artifacts"].get<std::uint64_t>(), 48u);
  EXPECT_EQ(json["removed_rows"].get<std::uint64_t>(), 1u + 1u);
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
  const std::string id = init_catalog("c.db");
  const auto members = test::member_digests(1000);
  write_hex("first.txt", std::vector<Digest>(members.begin(), members.begin() + 600));
  write_hex("second.txt", std::vector<Digest>(members.begin() + 600, members.end()));
  ASSERT_EQ(abf("catalog add --db c.db --input first.txt").status, 0);   // version 1
  ASSERT_EQ(abf("catalog add --db c.db --input second.txt").status, 0);  // version 2

  // The latest version by default, the named one otherwise; the header
  // carries the version and the catalog's id. Each equals a plain build of
  // that version's digests with that id.
  write_hex("all.txt", members);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --catalog-version 2 --catalog-id " + id +
                " --input all.txt -o want2.abf")
                .status,
            0);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --catalog-version 1 --catalog-id " + id +
                " --input first.txt -o want1.abf")
                .status,
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
  // --input and --from-catalog exclude each other; a catalog names its own id.
  EXPECT_EQ(abf("build --from-catalog c.db --input all.txt -n 1000 -p 0.01 -o x.abf").status, 2);
  EXPECT_EQ(
      abf("build --from-catalog c.db --catalog-id " + id + " -n 1000 -p 0.01 -o x.abf").status, 2);
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
    const auto fp = stats["false_positives"].get<std::uint64_t>();
    const auto lookups = stats["exact_lookups"].get<std::uint64_t>();
    EXPECT_EQ(total, 3000u);
    EXPECT_EQ(stats["new"].get<std::uint64_t>(), expected.size());
    EXPECT_EQ(stats["catalog_version"].get<std::uint64_t>(), 2u);
    EXPECT_EQ(stats["exact_lookups_avoided"].get<std::uint64_t>(), total - lookups);
    if (std::string(mode).empty()) {
      EXPECT_EQ(negative + maybe, total);
      EXPECT_EQ(lookups, maybe);
      EXPECT_EQ(maybe, 598u + fp);  // 600 members asked, 2 of them removed: those are fps
      EXPECT_GE(fp, 2u);
      EXPECT_GT(negative, 2000u);
      EXPECT_DOUBLE_EQ(stats["negative_bypass_ratio"].get<double>(),
                       static_cast<double>(negative) / static_cast<double>(total));
      EXPECT_DOUBLE_EQ(stats["observed_false_positive_rate"].get<double>(),
                       static_cast<double>(fp) / static_cast<double>(negative + fp));
      EXPECT_DOUBLE_EQ(stats["false_discovery_ratio"].get<double>(),
                       static_cast<double>(fp) / static_cast<double>(maybe));
    } else {
      EXPECT_EQ(lookups, total);
      EXPECT_EQ(negative, 0u);
    }
    EXPECT_NE(run.err.find("negative_bypass_ratio"), std::string::npos) << run.err;
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
  auto catalog = SqliteCatalog::open(path("c.db"));
  ASSERT_TRUE(catalog.has_value());
  auto filter = build_filter(
      test::member_digests(10), {.expected_item_count = 10, .target_fpp = 0.01},
      BuildOptions{.catalog_version = 9, .catalog_id = *catalog->catalog_id(), .key = {}});
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
  EXPECT_EQ(nlohmann::json::parse(stats.out)["latest_version"].get<std::uint64_t>(), 1u);
}

// ---- Catalog identity: issue 12 -------------------------------------------

// The one line a refused dedup prints, with no output written.
void expect_refused(const CliRun& run, const std::vector<std::string>& fragments) {
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  for (const auto& fragment : fragments) {
    EXPECT_NE(run.err.find(fragment), std::string::npos) << fragment << " in " << run.err;
  }
  EXPECT_EQ(run.out, "");
}

class CatalogIdentityCliTest : public ServiceCliTest {
 protected:
  // The reporter's setup: a catalog of 1,000 digests at version 1, and 1,000
  // other digests in b.txt.
  void SetUp() override {
    ServiceCliTest::SetUp();
    id_ = init_catalog("c.db");
    members_ = test::member_digests(1000);
    others_ = test::random_digests(1000, 12);
    write_hex("a.txt", members_);
    write_hex("b.txt", others_);
    const CliRun added = abf("catalog add --db c.db --input a.txt");
    ASSERT_EQ(added.status, 0) << added.err;
    ASSERT_EQ(added.out, "1\n");
  }
  std::string id_;
  std::vector<Digest> members_;
  std::vector<Digest> others_;
};

// Issue 12 as reported: a snapshot built from another file of digests, of
// no catalog, used to print all 1,000 catalog members as new (exit 0).
TEST_F(CatalogIdentityCliTest, DedupRefusesTheReportersSnapshotOfNoCatalog) {
  const CliRun built = abf("build -n 5000 -p 0.01 --catalog-version 1 -i b.txt -o foreign.abf");
  ASSERT_EQ(built.status, 0) << built.err;
  const std::string zero(32, '0');
  expect_refused(abf("dedup -s foreign.abf --db c.db -i a.txt"),
                 {"catalog_mismatch", "foreign.abf", id_, zero});
  expect_refused(abf("dedup -s foreign.abf --db c.db -i a.txt -o new.txt --stats-json s.json"),
                 {"catalog_mismatch", id_, zero});
  EXPECT_FALSE(fs::exists(path("new.txt")));
  EXPECT_FALSE(fs::exists(path("s.json")));
  // --exact-only does not use the filter, but answers at the snapshot's
  // version, which means nothing for another catalog: refused too.
  expect_refused(abf("dedup -s foreign.abf --db c.db -i a.txt --exact-only"),
                 {"catalog_mismatch", id_, zero});
}

TEST_F(CatalogIdentityCliTest, DedupRefusesASnapshotOfAnotherCatalog) {
  // Named by --catalog-id, and built from another catalog database.
  const std::string other = init_catalog("other.db");
  ASSERT_NE(other, id_);
  ASSERT_EQ(abf("catalog add --db other.db --input b.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog other.db -n 5000 -p 0.01 -o other.abf").status, 0);
  ASSERT_EQ(abf("build -n 5000 -p 0.01 --catalog-version 1 --catalog-id " + other +
                " -i b.txt -o named.abf")
                .status,
            0);
  for (const char* snapshot : {"other.abf", "named.abf"}) {
    SCOPED_TRACE(snapshot);
    expect_refused(abf(std::string("dedup -s ") + snapshot + " --db c.db -i a.txt -o new.txt"),
                   {"catalog_mismatch", snapshot, id_, other});
    EXPECT_FALSE(fs::exists(path("new.txt")));
  }
}

// The fix for the reporter: the catalog's own snapshot dedups exactly.
TEST_F(CatalogIdentityCliTest, DedupWithTheCatalogsOwnSnapshotIsExact) {
  const CliRun built = abf("build --from-catalog c.db -n 5000 -p 0.01 -o own.abf");
  ASSERT_EQ(built.status, 0) << built.err;
  const CliRun known = abf("dedup -s own.abf --db c.db -i a.txt");
  ASSERT_EQ(known.status, 0) << known.err;
  EXPECT_EQ(known.out, "");
  const CliRun fresh = abf("dedup -s own.abf --db c.db -i b.txt -o new.txt");
  ASSERT_EQ(fresh.status, 0) << fresh.err;
  EXPECT_EQ(test::read_file(path("new.txt")), test::read_file(path("b.txt")));
  // The same digests with --catalog-id: the same snapshot, and accepted.
  ASSERT_EQ(abf("build -n 5000 -p 0.01 --catalog-version 1 --catalog-id " + id_ +
                " -i a.txt -o named.abf")
                .status,
            0);
  EXPECT_EQ(test::read_file(path("named.abf")), test::read_file(path("own.abf")));
  EXPECT_EQ(abf("dedup -s named.abf --db c.db -i a.txt").out, "");
}

TEST_F(CatalogIdentityCliTest, InitPrintsTheIdThatStatsAndSnapshotsCarry) {
  auto catalog = SqliteCatalog::open(path("c.db"));
  ASSERT_TRUE(catalog.has_value());
  EXPECT_EQ(catalog->catalog_id()->hex(), id_);
  const CliRun stats = abf("catalog stats --db c.db --json");
  ASSERT_EQ(stats.status, 0) << stats.err;
  const auto json = nlohmann::json::parse(stats.out);
  EXPECT_EQ(json["catalog_id"].get<std::string>(), id_);
  EXPECT_EQ(json["schema_version"].get<int>(), kCatalogSchemaVersion);
  const CliRun text = abf("catalog stats --db c.db");
  EXPECT_NE(text.out.find("catalog id       " + id_), std::string::npos) << text.out;
  ASSERT_EQ(abf("build --from-catalog c.db -n 5000 -p 0.01 -o own.abf").status, 0);
  const CliRun inspect = abf("inspect --json own.abf");
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_EQ(nlohmann::json::parse(inspect.out)["catalog_id"].get<std::string>(), id_);
}

TEST_F(ServiceCliTest, SchemaOneCatalogIsRefusedUntilUpgraded) {
  test::create_schema_one_catalog(path("old.db"), 100);
  const std::string before = test::read_file(path("old.db"));
  write_hex("members.txt", test::member_digests(100));
  // Read-only, it has no id yet: stats says so, builds and dedups refuse.
  const CliRun stats = abf("catalog stats --db old.db --json");
  ASSERT_EQ(stats.status, 0) << stats.err;
  EXPECT_TRUE(nlohmann::json::parse(stats.out)["catalog_id"].is_null()) << stats.out;
  EXPECT_EQ(nlohmann::json::parse(stats.out)["schema_version"].get<int>(), 1);
  const CliRun build = abf("build --from-catalog old.db -n 100 -p 0.01 -o old.abf");
  EXPECT_EQ(build.status, 1);
  EXPECT_NE(build.err.find("catalog upgrade"), std::string::npos) << build.err;
  EXPECT_FALSE(fs::exists(path("old.abf")));
  ASSERT_EQ(abf("build -n 100 -p 0.01 --catalog-version 1 -i members.txt -o plain.abf").status, 0);
  expect_refused(abf("dedup -s plain.abf --db old.db -i members.txt"),
                 {"catalog_mismatch", "catalog upgrade"});
  EXPECT_EQ(test::read_file(path("old.db")), before);
  // `catalog upgrade` gives it an id; then it works as a new catalog.
  const CliRun upgraded = abf("catalog upgrade --db old.db");
  ASSERT_EQ(upgraded.status, 0) << upgraded.err;
  ASSERT_EQ(upgraded.out.size(), 33u) << upgraded.out;
  const std::string id = upgraded.out.substr(0, 32);
  EXPECT_NE(upgraded.err.find("upgraded"), std::string::npos) << upgraded.err;
  const CliRun again = abf("catalog upgrade --db old.db");
  EXPECT_EQ(again.out, upgraded.out);
  EXPECT_NE(again.err.find("already"), std::string::npos) << again.err;
  ASSERT_EQ(abf("build --from-catalog old.db -n 100 -p 0.01 -o old.abf").status, 0);
  const CliRun dedup = abf("dedup -s old.abf --db old.db -i members.txt");
  ASSERT_EQ(dedup.status, 0) << dedup.err;
  EXPECT_EQ(dedup.out, "");
  EXPECT_EQ(nlohmann::json::parse(abf("inspect --json old.abf").out)["catalog_id"], id);
}

TEST_F(CatalogIdentityCliTest, KeyedSnapshotDedupsOnlyWithItsKey) {
  const test::VectorKey key = test::golden_key();
  test::write_private_file(path("k.key"), key.hex + "\n");
  test::write_private_file(path("other.key"), test::other_key().hex + "\n");
  const CliRun built = abf("build --from-catalog c.db -n 5000 -p 0.01 --key-file k.key -o k.abf");
  ASSERT_EQ(built.status, 0) << built.err;
  const CliRun fresh = abf("dedup -s k.abf --db c.db -i b.txt --key-file k.key");
  ASSERT_EQ(fresh.status, 0) << fresh.err;
  EXPECT_EQ(fresh.out, test::read_file(path("b.txt")));
  EXPECT_EQ(abf("dedup -s k.abf --db c.db -i a.txt --key-file k.key").out, "");
  expect_refused(abf("dedup -s k.abf --db c.db -i a.txt -o new.txt"), {"key_required"});
  expect_refused(abf("dedup -s k.abf --db c.db -i a.txt -o new.txt --key-file other.key"),
                 {"key_mismatch"});
  EXPECT_FALSE(fs::exists(path("new.txt")));
  for (const CliRun& run : {built, fresh}) {
    EXPECT_EQ((run.out + run.err).find(key.hex), std::string::npos);
  }
}

// ---- Duplicates, staged output and lost stdout (issues 13 and 14) ---------

class DedupRepeatsTest : public ServiceCliTest {
 protected:
  void SetUp() override {
    ServiceCliTest::SetUp();
    members_ = test::member_digests(100);
    write_hex("members.txt", members_);
    ASSERT_EQ(abf("catalog init --db c.db").status, 0);
    ASSERT_EQ(abf("catalog add --db c.db -i members.txt").status, 0);
    ASSERT_EQ(abf("build --from-catalog c.db -n 100 -p 0.01 -o c.abf").status, 0);
  }
  std::vector<Digest> members_;
};

// dedup writes each new digest once, at its first occurrence, in input
// order, and counts the rest as repeats: total = new + repeats + present.
TEST_F(DedupRepeatsTest, EachNewDigestIsWrittenOnceInInputOrder) {
  const auto fresh = test::random_digests(50, 61);
  std::vector<Digest> candidates;
  std::vector<std::string> expected;
  std::set<Digest> written;
  for (std::size_t i = 0; i < 400; ++i) {
    const Digest digest =
        i % 4 == 0 ? members_[i % members_.size()] : fresh[(i * i) % fresh.size()];
    candidates.push_back(digest);
    if (i % 4 != 0 && written.insert(digest).second) expected.push_back(digest.hex());
  }
  write_hex("candidates.txt", candidates);
  for (const char* mode : {"", " --exact-only"}) {
    const CliRun run =
        abf(std::string("dedup -s c.abf --db c.db -i candidates.txt --json -o new.txt") + mode);
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(lines(test::read_file(path("new.txt"))), expected) << mode;
    const auto stats = nlohmann::json::parse(run.out);
    EXPECT_EQ(stats["total"], 400u);
    EXPECT_EQ(stats["present"], 100u);
    EXPECT_EQ(stats["new"], expected.size());
    EXPECT_EQ(stats["repeats"], 300u - expected.size());
  }
  // The counts go to stderr when stdout has the digests.
  const CliRun to_stdout = abf("dedup -s c.abf --db c.db -i candidates.txt --json");
  ASSERT_EQ(to_stdout.status, 0) << to_stdout.err;
  EXPECT_EQ(lines(to_stdout.out), expected);
  EXPECT_EQ(nlohmann::json::parse(to_stdout.err)["repeats"], 300u - expected.size());
}

// The new digests for stdout are staged: a bad line after 65,536 new
// digests (which used to reach stdout first) leaves stdout empty.
TEST_F(DedupRepeatsTest, FailedDedupWritesNothingToStandardOutput) {
  std::string text;
  for (const Digest& d : test::random_digests(70'000, 62)) text += d.hex() + "\n";
  std::ofstream(path("bad.txt")) << text << "bad line\n";
  const CliRun run = abf("dedup -s c.abf --db c.db -i bad.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("line 70001"), std::string::npos) << run.err;
  EXPECT_EQ(run.out.size(), 0u);
  std::ofstream(path("good.txt")) << text;
  const CliRun good = abf("dedup -s c.abf --db c.db -i good.txt");
  ASSERT_EQ(good.status, 0) << good.err;
  EXPECT_EQ(good.out, text);
}

TEST_F(DedupRepeatsTest, SnapshotFromStandardInput) {
  write_hex("candidates.txt", test::random_digests(20, 63));
  const CliRun from_file = abf("dedup -s c.abf --db c.db -i candidates.txt");
  const CliRun piped = test::run_shell(dir_, "$ABF dedup -s - --db c.db -i candidates.txt < c.abf");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out, from_file.out);
  // A snapshot of another catalog is refused from stdin too.
  ASSERT_EQ(abf("catalog init --db other.db").status, 0);
  const CliRun foreign =
      test::run_shell(dir_, "$ABF dedup -s - --db other.db -i candidates.txt < c.abf");
  EXPECT_EQ(foreign.status, 1);
  EXPECT_NE(foreign.err.find("catalog_mismatch"), std::string::npos) << foreign.err;
  EXPECT_EQ(test::run_shell(dir_, "$ABF dedup -s - --db c.db < c.abf").status, 2);
}

TEST_F(DedupRepeatsTest, BuildFromCatalogReportsNoRepeats) {
  const CliRun run = abf("build --from-catalog c.db -n 100 -p 0.01 -o x.abf --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["source"], "catalog");
  EXPECT_EQ(json["repeats"], 0u);
  EXPECT_EQ(json["repeats_checked"], true);
  EXPECT_EQ(json["inserted_item_count"], 100u);
  EXPECT_NE(abf("build --from-catalog c.db -n 100 -p 0.01 -o x.abf").out.find("no repeats"),
            std::string::npos);
}

// A failed write of stdout is exit 1: catalog stats, and catalog add, whose
// change is committed by then (the error says so).
TEST_F(DedupRepeatsTest, LostStandardOutputIsAFailure) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  write_hex("fresh.txt", test::random_digests(5, 65));
  for (const std::string command :
       {"catalog stats --db c.db", "catalog stats --db c.db --json", "catalog init --db new.db",
        "catalog upgrade --db c.db", "dedup -s c.abf --db c.db -i fresh.txt",
        "dedup -s c.abf --db c.db -i members.txt -o n.txt --json",
        "build --from-catalog c.db -n 100 -p 0.01 -o y.abf"}) {
    const CliRun run = test::run_shell(dir_, "$ABF " + command + " > /dev/full");
    EXPECT_EQ(run.status, 1) << command << ": " << run.err;
    EXPECT_NE(run.err.find("No space left on device"), std::string::npos)
        << command << ": " << run.err;
  }
  write_hex("more.txt", test::random_digests(5, 64));
  const CliRun add = test::run_shell(dir_, "$ABF catalog add --db c.db -i more.txt > /dev/full");
  EXPECT_EQ(add.status, 1);
  EXPECT_NE(add.err.find("catalog version 2 of c.db was committed, but printing it failed"),
            std::string::npos)
      << add.err;
  const auto stats = nlohmann::json::parse(abf("catalog stats --db c.db --json").out);
  EXPECT_EQ(stats["latest_version"], 2u);
}

}  // namespace
}  // namespace abf::service
