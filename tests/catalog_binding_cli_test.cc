// A snapshot bound to what its catalog version holds (issue 22), end to end
// through the `abf` binary (ABF_CLI): `abf catalog stats` reports the
// content fingerprint each version keeps, `abf catalog upgrade` computes it
// for a catalog made before it, and `abf dedup` refuses every snapshot of
// the reproductions 1 and 3 (0 wrong answers: nothing on stdout).
// `abf serve` refusing them is tests/serve/test_binding.py.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
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

class CatalogBindingCliTest : public ::testing::Test {
 protected:
  fs::path path(const std::string& name) const { return dir_ / name; }

  // Runs `abf <args>` in the test directory.
  CliRun abf(const std::string& args) { return test::run_cli(dir_.path(), args); }

  void write_hex(const std::string& name, const std::vector<Digest>& digests) {
    std::ofstream out(path(name));
    for (const Digest& digest : digests) out << digest.hex() << '\n';
  }

  // Runs SQL on a database with a plain connection.
  void exec_sql(const std::string& name, const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path(name).c_str(), &db), SQLITE_OK);
    char* message = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &message), SQLITE_OK)
        << (message ? message : "");
    sqlite3_free(message);
    sqlite3_close(db);
  }

  // Copies a closed catalog (its WAL included, if one was left) to `to`.
  void copy_catalog(const std::string& from, const std::string& to) {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      fs::remove(path(to + suffix));
      if (fs::exists(path(from + suffix))) fs::copy_file(path(from + suffix), path(to + suffix));
    }
  }

  std::vector<std::uint8_t> read_bytes(const std::string& name) {
    const std::string text = test::read_file(path(name));
    return {text.begin(), text.end()};
  }
  void write_bytes(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream(path(name), std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
  }

  // `abf dedup` of `input` with `snapshot` against c.db: refused (exit 1,
  // nothing on stdout, no output file), its stderr naming each of
  // `fragments`.
  void expect_dedup_refused(const std::string& snapshot, const std::string& input,
                            const std::vector<std::string>& fragments) {
    const CliRun run = abf("dedup -s " + snapshot + " --db c.db -i " + input);
    EXPECT_EQ(run.status, 1) << run.err;
    EXPECT_EQ(run.out, "");  // not one digest answered
    for (const std::string& fragment : fragments) {
      EXPECT_NE(run.err.find(fragment), std::string::npos) << fragment << "\n" << run.err;
    }
  }

  test::TempDir dir_{"abf-binding-cli"};
};

// Header fields of a formatVersion-2 snapshot (docs/protocol.md, section 7).
template <class T>
void put(std::vector<std::uint8_t>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}
template <class T>
T get(const std::vector<std::uint8_t>& bytes, std::size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

// Recomputes both checksums of a formatVersion-2 snapshot, as someone
// rewriting it on purpose would.
void reseal(std::vector<std::uint8_t>& bytes) {
  put<std::uint64_t>(bytes, 64, XXH3_64bits(bytes.data() + 128, bytes.size() - 128));
  std::vector<std::uint8_t> header(bytes.begin(), bytes.begin() + 128);
  std::memset(header.data() + 72, 0, 8);
  put<std::uint64_t>(bytes, 72, XXH3_64bits(header.data(), header.size()));
}

TEST_F(CatalogBindingCliTest, StatsReportsTheLatestVersionsFingerprint) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto members = test::member_digests(40);
  write_hex("m.txt", members);
  write_hex("gone.txt", {members[0], members[1]});
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  ASSERT_EQ(abf("catalog remove --db c.db -i gone.txt").status, 0);
  const std::string expected = ContentFingerprint::of(std::span(members).subspan(2)).hex();
  const CliRun json = abf("catalog stats --db c.db --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["fingerprint"].get<std::string>(), expected);
  EXPECT_EQ(nlohmann::json::parse(json.out)["schema_version"].get<int>(), 3);
  const CliRun text = abf("catalog stats --db c.db");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("fingerprint      " + expected), std::string::npos) << text.out;
}

TEST_F(CatalogBindingCliTest, UpgradeComputesTheFingerprintsOfASchemaTwoCatalog) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto members = test::member_digests(30);
  write_hex("m.txt", members);
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  exec_sql("c.db",
           "PRAGMA journal_mode = DELETE; BEGIN;"
           "ALTER TABLE versions DROP COLUMN fingerprint;"
           "ALTER TABLE versions DROP COLUMN item_count;"
           "UPDATE abf_schema SET version = 2; PRAGMA user_version = 2; COMMIT;");
  const std::string expected = ContentFingerprint::of(members).hex();
  // Read-only, it is walked: the same fingerprint, schema 2 still.
  const CliRun before = abf("catalog stats --db c.db --json");
  ASSERT_EQ(before.status, 0) << before.err;
  EXPECT_EQ(nlohmann::json::parse(before.out)["schema_version"].get<int>(), 2);
  EXPECT_EQ(nlohmann::json::parse(before.out)["fingerprint"].get<std::string>(), expected);
  const CliRun upgraded = abf("catalog upgrade --db c.db");
  ASSERT_EQ(upgraded.status, 0) << upgraded.err;
  EXPECT_NE(upgraded.err.find("upgraded from schema version 2 to 3"), std::string::npos)
      << upgraded.err;
  const CliRun after = abf("catalog stats --db c.db --json");
  EXPECT_EQ(nlohmann::json::parse(after.out)["schema_version"].get<int>(), 3);
  EXPECT_EQ(nlohmann::json::parse(after.out)["fingerprint"].get<std::string>(), expected);
  EXPECT_NE(abf("catalog upgrade --db c.db").err.find("already at schema version 3"),
            std::string::npos);
}

// Reproduction 1 of issue 22: the catalog backed up at version 1, X added
// (version 2), a snapshot built of version 2, the backup restored and a
// different Y added (another version 2). Same id, same version number,
// other contents: the snapshot (plain and as a set) is refused, naming both
// fingerprints; before, dedup printed all of Y as new.
TEST_F(CatalogBindingCliTest, SnapshotOfARestoredCatalogsOldVersionTwoIsRefused) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto base = test::random_digests(500, 1);
  const auto x = test::random_digests(1000, 2);
  const auto y = test::random_digests(1000, 3);
  write_hex("base.txt", base);
  write_hex("X.txt", x);
  write_hex("Y.txt", y);
  ASSERT_EQ(abf("catalog add --db c.db -i base.txt").status, 0);
  copy_catalog("c.db", "backup.db");
  ASSERT_EQ(abf("catalog add --db c.db -i X.txt").out, "2\n");
  ASSERT_EQ(abf("build --from-catalog c.db -n 5000 -p 0.01 -o snap_v2.abf").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 5000 -p 0.01 --shards 3 -o snap_v2.abfs").status, 0);
  // Before the restore it answers exactly: every X digest is present.
  const CliRun before = abf("dedup -s snap_v2.abf --db c.db -i X.txt");
  ASSERT_EQ(before.status, 0) << before.err;
  EXPECT_EQ(before.out, "");
  copy_catalog("backup.db", "c.db");
  ASSERT_EQ(abf("catalog add --db c.db -i Y.txt").out, "2\n");

  std::vector<Digest> with_x = base;
  with_x.insert(with_x.end(), x.begin(), x.end());
  std::vector<Digest> with_y = base;
  with_y.insert(with_y.end(), y.begin(), y.end());
  const std::string snapshot_fp = ContentFingerprint::of(with_x).hex();
  const std::string catalog_fp = ContentFingerprint::of(with_y).hex();
  for (const std::string snapshot : {"snap_v2.abf", "snap_v2.abfs"}) {
    SCOPED_TRACE(snapshot);
    expect_dedup_refused(snapshot, "Y.txt",
                         {"catalog_mismatch", snapshot, "c.db", "catalog version 2", snapshot_fp,
                          catalog_fp, "abf build --from-catalog"});
  }
  // The catalog's own version 2 answers exactly again once rebuilt.
  ASSERT_EQ(abf("build --from-catalog c.db -n 5000 -p 0.01 -o snap_v2.abf").status, 0);
  const CliRun after = abf("dedup -s snap_v2.abf --db c.db -i Y.txt");
  ASSERT_EQ(after.status, 0) << after.err;
  EXPECT_EQ(after.out, "");
}

class CatalogOf2000Test : public CatalogBindingCliTest {
 protected:
  void SetUp() override {
    const CliRun init = abf("catalog init --db c.db");
    ASSERT_EQ(init.status, 0) << init.err;
    id_ = init.out.substr(0, 32);
    members_ = test::member_digests(2000);
    write_hex("members.txt", members_);
    ASSERT_EQ(abf("catalog add --db c.db -i members.txt").status, 0);
    const CliRun built = abf("build --from-catalog c.db -n 2000 -p 0.01 -o good.abf");
    ASSERT_EQ(built.status, 0) << built.err;
    const CliRun good = abf("dedup -s good.abf --db c.db -i members.txt");
    ASSERT_EQ(good.status, 0) << good.err;
    ASSERT_EQ(good.out, "");
  }

  std::string id_;
  std::vector<Digest> members_;
};

// Reproduction 3a: a file build of 10 of the catalog's 2,000 digests, given
// the catalog's id and version, is refused (1,990 members would have been
// answered absent). A file build of exactly the catalog's digests is the
// same snapshot, and is accepted.
TEST_F(CatalogOf2000Test, FileBuildOfTenOfTheCatalogsDigestsIsRefused) {
  write_hex("ten.txt", std::vector<Digest>(members_.begin(), members_.begin() + 10));
  ASSERT_EQ(abf("build -n 2000 -p 0.01 --catalog-version 1 --catalog-id " + id_ +
                " -i ten.txt -o few.abf")
                .status,
            0);
  expect_dedup_refused("few.abf", "members.txt",
                       {"catalog_mismatch", "few.abf", "over 10 insertions", "over 2000 digests",
                        ContentFingerprint::of(std::span(members_).first(10)).hex(),
                        ContentFingerprint::of(members_).hex()});
  ASSERT_EQ(abf("build -n 2000 -p 0.01 --catalog-version 1 --catalog-id " + id_ +
                " -i members.txt -o all.abf")
                .status,
            0);
  const CliRun all = abf("dedup -s all.abf --db c.db -i members.txt");
  ASSERT_EQ(all.status, 0) << all.err;
  EXPECT_EQ(all.out, "");
}

// Reproduction 3b: the payload zeroed, both checksums recomputed (0 bits
// set for 2,000 insertions). Refused, by the load's fill check or the
// binding's.
TEST_F(CatalogOf2000Test, ZeroedPayloadWithChecksumsRecomputedIsRefused) {
  auto bytes = read_bytes("good.abf");
  std::fill(bytes.begin() + 128, bytes.end(), 0);
  reseal(bytes);
  write_bytes("zero.abf", bytes);
  expect_dedup_refused("zero.abf", "members.txt", {"zero.abf", "2000 insertions"});
}

// Reproduction 3c: k, n and p rewritten together so that the layout rule
// still holds for the same bit count (checksums recomputed): a larger k
// needs a smaller n, so insertedItemCount must come down with it (or the
// load refuses it, as inserted > expected). Either way refused: the count
// is no longer the catalog's 2,000.
TEST_F(CatalogOf2000Test, HashCountRewrittenWithNAndPIsRefused) {
  const auto good = read_bytes("good.abf");
  const auto bit_count = get<std::uint64_t>(good, 24);
  const auto hash_count = get<std::uint32_t>(good, 12);
  // The first (p, n) of the same m with a larger k (n below 2,000, m falling
  // with n).
  std::optional<std::pair<BloomSpec, Layout>> found;
  for (const double p : {0.005, 0.002, 0.001, 0.0005, 0.0001}) {
    for (std::uint64_t n = 1999; n >= 500 && !found; --n) {
      auto layout = choose_layout({.expected_item_count = n, .target_fpp = p});
      if (!layout || layout->bit_count < bit_count) break;
      if (layout->bit_count == bit_count && layout->hash_count > hash_count) {
        found = {{BloomSpec{.expected_item_count = n, .target_fpp = p}, *layout}};
      }
    }
    if (found) break;
  }
  ASSERT_TRUE(found.has_value()) << "no (n, p) of m = " << bit_count << " and k > " << hash_count;
  const std::uint64_t n = found->first.expected_item_count;
  for (const bool lower_count : {false, true}) {
    SCOPED_TRACE(lower_count ? "insertedItemCount = n" : "insertedItemCount kept");
    auto bytes = good;
    put<std::uint32_t>(bytes, 12, found->second.hash_count);
    put<std::uint64_t>(bytes, 32, n);
    put<double>(bytes, 48, found->first.target_fpp);
    if (lower_count) put<std::uint64_t>(bytes, 40, n);
    reseal(bytes);
    write_bytes("relaid.abf", bytes);
    if (!lower_count) {
      expect_dedup_refused("relaid.abf", "members.txt", {"relaid.abf", "inserted"});
      continue;
    }
    // It loads (inspect reads every section-7 rule), and most members
    // would be answered absent by it ...
    const CliRun inspect = abf("inspect relaid.abf");
    ASSERT_EQ(inspect.status, 0) << inspect.err;
    const CliRun query = abf("query -s relaid.abf -i members.txt --summary --json");
    ASSERT_EQ(query.status, 0) << query.err;
    EXPECT_GT(nlohmann::json::parse(query.out)["absent"].get<int>(), 500) << query.out;
    // ... so the binding refuses it.
    expect_dedup_refused("relaid.abf", "members.txt",
                         {"catalog_mismatch", "relaid.abf", "catalog version 1",
                          "over " + std::to_string(n) + " insertions", "over 2000 digests"});
  }
}

// Reproduction 3c's other form: n kept, p raised, so m and k fall; the
// payload cut to the new m (checksums recomputed). Header, fingerprint and
// count are the catalog's and the fill stays plausible, but most members
// now probe other bits: the binding's sample of the catalog's digests
// finds one answered absent.
TEST_F(CatalogOf2000Test, PayloadCutToASmallerLayoutIsRefused) {
  const auto good = read_bytes("good.abf");
  const auto bit_count = get<std::uint64_t>(good, 24);
  std::optional<std::vector<std::uint8_t>> cut;
  for (const double p : {0.011, 0.012, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05}) {
    auto layout = choose_layout({.expected_item_count = 2000, .target_fpp = p});
    ASSERT_TRUE(layout.has_value());
    if (layout->bit_count >= bit_count) continue;
    std::vector<std::uint8_t> bytes(good.begin(), good.begin() + 128 + layout->bit_count / 8);
    put<std::uint32_t>(bytes, 12, layout->hash_count);
    put<std::uint64_t>(bytes, 24, layout->bit_count);
    put<double>(bytes, 48, p);
    put<std::uint64_t>(bytes, 56, layout->bit_count / 8);
    reseal(bytes);
    auto loaded = parse_snapshot(bytes);
    if (loaded && check_fill(*loaded, FillCheck::kDistinctInsertions).has_value()) {
      cut = bytes;
      break;
    }
  }
  ASSERT_TRUE(cut.has_value()) << "no smaller layout keeps the fill plausible";
  write_bytes("cut.abf", *cut);
  const CliRun query = abf("query -s cut.abf -i members.txt --summary --json");
  ASSERT_EQ(query.status, 0) << query.err;
  EXPECT_GT(nlohmann::json::parse(query.out)["absent"].get<int>(), 500) << query.out;
  expect_dedup_refused("cut.abf", "members.txt",
                       {"catalog_mismatch", "cut.abf", "answers absent for", "catalog version 1"});
}

// A snapshot without a content fingerprint (written before fingerprints)
// cannot be checked, and is refused with how to rebuild it.
TEST_F(CatalogOf2000Test, SnapshotWithoutAFingerprintIsRefusedWithHowToRebuildIt) {
  auto bytes = read_bytes("good.abf");
  std::fill(bytes.begin() + 104, bytes.begin() + 128, 0);  // fingerprint, flags
  reseal(bytes);
  write_bytes("old.abf", bytes);
  const CliRun inspect = abf("inspect old.abf");
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  expect_dedup_refused("old.abf", "members.txt",
                       {"catalog_mismatch", "old.abf", "no content fingerprint",
                        "abf build --from-catalog DB --catalog-version 1"});
}

// A snapshot of a version the catalog does not have (the catalog restored
// from an older backup) is refused: nothing can vouch for what it holds.
TEST_F(CatalogOf2000Test, SnapshotNewerThanTheCatalogIsRefused) {
  ASSERT_EQ(abf("build -n 2000 -p 0.01 --catalog-version 2 --catalog-id " + id_ +
                " -i members.txt -o ahead.abf")
                .status,
            0);
  expect_dedup_refused("ahead.abf", "members.txt",
                       {"catalog_mismatch", "ahead.abf", "only reaches version 1"});
}

}  // namespace
}  // namespace abf::service
