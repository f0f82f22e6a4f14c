// SqliteCatalog: version semantics against the in-memory reference store,
// transactions, open errors, and building a filter from a catalog version.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

class CatalogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "abf-catalog-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path path(const char* name) const { return dir_ / name; }

  SqliteCatalog create(const char* name = "catalog.db") {
    auto catalog = SqliteCatalog::create(path(name));
    EXPECT_TRUE(catalog.has_value()) << catalog.error().describe();
    return std::move(*catalog);
  }

  fs::path dir_;
};

// Runs SQL on a database with a plain connection (to set up bad databases).
void exec_sql(const fs::path& db_path, const char* sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &message), SQLITE_OK)
      << (message ? message : "");
  sqlite3_free(message);
  sqlite3_close(db);
}

void expect_catalog_error(const Result<SqliteCatalog>& opened, std::string_view fragment) {
  ASSERT_FALSE(opened.has_value());
  EXPECT_EQ(opened.error().code, ErrorCode::kCatalog);
  EXPECT_NE(opened.error().message.find(fragment), std::string::npos) << opened.error().message;
}

TEST_F(CatalogTest, NewCatalogIsEmptyAtVersionZero) {
  auto catalog = create();
  EXPECT_EQ(*catalog.latest_version(), 0u);
  EXPECT_EQ(*catalog.count_at_version(0), 0u);
  auto stats = catalog.stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->schema_version, kCatalogSchemaVersion);
  EXPECT_EQ(stats->version_count, 1u);
  EXPECT_EQ(stats->live_artifacts, 0u);
  // No temporary file left beside it.
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) files += entry.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1u);
}

TEST_F(CatalogTest, CreateNeverOverwrites) {
  { std::ofstream(path("catalog.db")) << "precious"; }
  expect_catalog_error(SqliteCatalog::create(path("catalog.db")), "already exists");
  EXPECT_EQ(test::read_file(path("catalog.db")), "precious");
}

TEST_F(CatalogTest, EveryChangeIsOneNewVersion) {
  auto catalog = create();
  const auto digests = test::random_digests(100, 1);
  auto first = catalog.add(digests);
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  EXPECT_EQ(first->version, 1u);
  EXPECT_EQ(first->requested, 100u);
  EXPECT_EQ(first->changed, 100u);
  // Adding again changes nothing but is still a version; duplicates in one
  // input count once.
  std::vector<Digest> twice(digests.begin(), digests.begin() + 10);
  twice.insert(twice.end(), digests.begin(), digests.begin() + 10);
  auto again = catalog.add(twice);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->version, 2u);
  EXPECT_EQ(again->changed, 0u);
  EXPECT_EQ(again->unchanged, 20u);
  auto removed = catalog.remove(std::span(digests).first(30));
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->version, 3u);
  EXPECT_EQ(removed->changed, 30u);
  auto removed_again = catalog.remove(std::span(digests).first(30));
  EXPECT_EQ(removed_again->changed, 0u);
  EXPECT_EQ(removed_again->unchanged, 30u);
  EXPECT_EQ(*catalog.latest_version(), 4u);
  EXPECT_EQ(*catalog.count_at_version(1), 100u);
  EXPECT_EQ(*catalog.count_at_version(3), 70u);
  EXPECT_FALSE(catalog.count_at_version(5).has_value());
}

TEST_F(CatalogTest, AddedAtVersionIsFoundFromThatVersionOnUntilRemoved) {
  auto catalog = create();
  const auto filler = test::random_digests(41, 2);
  for (const Digest& digest : filler) ASSERT_TRUE(catalog.add(std::span(&digest, 1)).has_value());
  ASSERT_EQ(*catalog.latest_version(), 41u);
  const Digest late = test::non_member_digest(7);
  ASSERT_EQ(catalog.add(std::span(&late, 1))->version, 42u);
  EXPECT_FALSE(*catalog.exists_at_version(late, 41));
  EXPECT_TRUE(*catalog.exists_at_version(late, 42));
  ASSERT_EQ(catalog.remove(std::span(&late, 1))->version, 43u);
  EXPECT_TRUE(*catalog.exists_at_version(late, 42));
  EXPECT_FALSE(*catalog.exists_at_version(late, 43));
  ASSERT_EQ(catalog.add(std::span(&late, 1))->version, 44u);
  EXPECT_FALSE(*catalog.exists_at_version(late, 43));
  EXPECT_TRUE(*catalog.exists_at_version(late, 44));
  EXPECT_TRUE(*catalog.exists_at_version(late, 42));
}

// Random histories of adds and removes: every lookup, single and batch, and
// every version's digest list equal the in-memory reference.
TEST_F(CatalogTest, RandomHistoriesMatchTheReferenceStore) {
  std::mt19937_64 rng(20240611);
  const auto universe = test::random_digests(400, 3);
  auto catalog = create();
  MemoryRepository reference;
  for (int step = 0; step < 12; ++step) {
    std::vector<Digest> pick;
    const std::size_t count = rng() % 120;
    for (std::size_t i = 0; i < count; ++i) pick.push_back(universe[rng() % universe.size()]);
    const bool adding = step < 3 || rng() % 3 != 0;
    auto change = adding ? catalog.add(pick) : catalog.remove(pick);
    ASSERT_TRUE(change.has_value()) << change.error().describe();
    const std::uint64_t version = adding ? reference.add(pick) : reference.remove(pick);
    ASSERT_EQ(change->version, version);
  }
  const std::uint64_t latest = *catalog.latest_version();
  std::vector<Digest> queries = universe;
  const auto strangers = test::random_digests(100, 4);
  queries.insert(queries.end(), strangers.begin(), strangers.end());
  for (std::uint64_t version = 0; version <= latest; ++version) {
    auto want_bools = std::make_unique<bool[]>(queries.size());
    auto got_bools = std::make_unique<bool[]>(queries.size());
    ASSERT_TRUE(reference.exists_at_version(queries, version, {want_bools.get(), queries.size()}));
    ASSERT_TRUE(catalog.exists_at_version(queries, version, {got_bools.get(), queries.size()}));
    for (std::size_t i = 0; i < queries.size(); ++i) {
      ASSERT_EQ(got_bools[i], want_bools[i]) << "digest " << i << " at version " << version;
      if (i % 7 == 0) {
        ASSERT_EQ(*catalog.exists_at_version(queries[i], version), want_bools[i]);
      }
    }
    std::vector<Digest> walked;
    ASSERT_TRUE(catalog.for_each_digest_at_version(
        version,
        [&](std::span<const Digest> chunk) -> Result<void> {
          EXPECT_LE(chunk.size(), 50u);
          walked.insert(walked.end(), chunk.begin(), chunk.end());
          return {};
        },
        50));
    EXPECT_EQ(walked, reference.digests_at_version(version)) << "version " << version;
    EXPECT_EQ(*catalog.count_at_version(version), walked.size());
  }
}

TEST_F(CatalogTest, BatchAnswerSpanMustBeLongEnough) {
  auto catalog = create();
  const auto digests = test::random_digests(3, 5);
  bool answers[2];
  auto result = catalog.exists_at_version(digests, 0, answers);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
}

TEST_F(CatalogTest, MalformedInputRollsTheWholeChangeBack) {
  auto catalog = create();
  const auto digests = test::random_digests(5, 6);
  ASSERT_TRUE(catalog.add(digests).has_value());
  std::string text =
      digests[0].hex() + "\n" + test::non_member_digest(1).hex() + "\nnot-a-digest\n";
  auto reader = DigestReader::from_memory(text, InputFormat::kHex, "input.txt");
  auto added = catalog.add(reader);
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kInvalidDigest);
  EXPECT_NE(added.error().message.find("line 3"), std::string::npos) << added.error().message;
  EXPECT_EQ(*catalog.latest_version(), 1u);
  EXPECT_FALSE(*catalog.exists_at_version(test::non_member_digest(1), 1));
  auto reader2 = DigestReader::from_memory(text, InputFormat::kHex, "input.txt");
  EXPECT_FALSE(catalog.remove(reader2).has_value());
  EXPECT_EQ(*catalog.latest_version(), 1u);
  EXPECT_TRUE(*catalog.exists_at_version(digests[0], 1));
  // The catalog still works after the rollbacks.
  EXPECT_EQ(catalog.add(std::span(&digests[0], 1))->version, 2u);
}

TEST_F(CatalogTest, ReadOnlyCatalogRefusesChanges) {
  { auto catalog = create(); }
  CatalogOpenOptions options;
  options.read_only = true;
  auto catalog = SqliteCatalog::open(path("catalog.db"), options);
  ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
  const auto digests = test::random_digests(2, 7);
  auto added = catalog->add(digests);
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kCatalog);
  EXPECT_EQ(*catalog->latest_version(), 0u);
}

TEST_F(CatalogTest, OpenMissingFileIsAClearError) {
  expect_catalog_error(SqliteCatalog::open(path("missing.db")), "no such file");
  EXPECT_FALSE(fs::exists(path("missing.db")));  // never created by open
  expect_catalog_error(SqliteCatalog::open(dir_), "is a directory");
}

TEST_F(CatalogTest, OpenNonDatabaseIsAClearError) {
  { std::ofstream(path("junk.db")) << std::string(5000, 'x'); }
  expect_catalog_error(SqliteCatalog::open(path("junk.db")), "not a SQLite database");
  EXPECT_EQ(test::read_file(path("junk.db")), std::string(5000, 'x'));
}

TEST_F(CatalogTest, OpenForeignSqliteDatabaseIsAClearError) {
  exec_sql(path("other.db"), "CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1);");
  const std::string before = test::read_file(path("other.db"));
  expect_catalog_error(SqliteCatalog::open(path("other.db")), "not an abf catalog");
  EXPECT_EQ(test::read_file(path("other.db")), before);
  // Right application id, but no schema table.
  exec_sql(path("other.db"), "PRAGMA application_id = 1094862403;");
  expect_catalog_error(SqliteCatalog::open(path("other.db")), "not an abf catalog");
}

TEST_F(CatalogTest, OpenOtherSchemaVersionIsAClearError) {
  { auto catalog = create(); }
  exec_sql(path("catalog.db"), "UPDATE abf_schema SET version = 99;");
  expect_catalog_error(SqliteCatalog::open(path("catalog.db")), "schema version 99");
}

TEST_F(CatalogTest, LockedDatabaseIsAClearErrorAndChangesNothing) {
  { auto catalog = create(); }
  sqlite3* holder = nullptr;
  ASSERT_EQ(sqlite3_open(path("catalog.db").c_str(), &holder), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN EXCLUSIVE", nullptr, nullptr, nullptr), SQLITE_OK);
  CatalogOpenOptions options;
  options.busy_timeout_ms = 50;
  expect_catalog_error(SqliteCatalog::open(path("catalog.db"), options), "locked");
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);

  // Opened first, then another writer takes the lock: a change is refused.
  auto catalog = SqliteCatalog::open(path("catalog.db"), options);
  ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
  ASSERT_EQ(sqlite3_exec(holder, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr), SQLITE_OK);
  const auto digests = test::random_digests(3, 8);
  auto added = catalog->add(digests);
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kCatalog);
  EXPECT_NE(added.error().message.find("locked"), std::string::npos) << added.error().message;
  sqlite3_exec(holder, "ROLLBACK", nullptr, nullptr, nullptr);
  sqlite3_close(holder);
  EXPECT_EQ(*catalog->latest_version(), 0u);
  EXPECT_EQ(catalog->add(digests)->version, 1u);
}

TEST_F(CatalogTest, BuildsTheFilterOfAVersion) {
  auto catalog = create();
  const auto first = test::member_digests(500);
  ASSERT_TRUE(catalog.add(first).has_value());
  const auto more = test::random_digests(200, 9);
  ASSERT_TRUE(catalog.add(more).has_value());
  const BloomSpec spec{.expected_item_count = 1000, .target_fpp = 0.01};
  auto filter = build_filter_from_catalog(catalog, 1, spec);
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  EXPECT_EQ(filter->catalog_version(), 1u);
  EXPECT_EQ(filter->inserted_item_count(), 500u);
  // The same bytes as building from the digest list directly.
  auto direct = build_filter(first, spec, 1);
  ASSERT_TRUE(direct.has_value());
  EXPECT_TRUE(std::ranges::equal(filter->payload(), direct->payload()));
  EXPECT_EQ(encode_snapshot_header(*filter), encode_snapshot_header(*direct));

  auto latest = build_filter_from_catalog(catalog, 2, spec);
  ASSERT_TRUE(latest.has_value());
  for (const Digest& digest : first) EXPECT_TRUE(latest->might_contain(digest));
  for (const Digest& digest : more) EXPECT_TRUE(latest->might_contain(digest));

  auto too_small =
      build_filter_from_catalog(catalog, 2, {.expected_item_count = 600, .target_fpp = 0.01});
  ASSERT_FALSE(too_small.has_value());
  EXPECT_EQ(too_small.error().code, ErrorCode::kCapacityExceeded);
  auto bad_spec =
      build_filter_from_catalog(catalog, 2, {.expected_item_count = 600, .target_fpp = 1.5});
  ASSERT_FALSE(bad_spec.has_value());
  EXPECT_EQ(bad_spec.error().code, ErrorCode::kInvalidFalsePositiveRate);
  auto future = build_filter_from_catalog(catalog, 3, spec);
  ASSERT_FALSE(future.has_value());
  EXPECT_EQ(future.error().code, ErrorCode::kInvalidArgument);
}

// Removal rebuilds the filter from the catalog; no bit is ever cleared in
// place. The rebuilt filter equals a fresh build of what remains.
TEST_F(CatalogTest, RemovalRebuildsTheFilter) {
  auto catalog = create();
  const auto digests = test::member_digests(300);
  ASSERT_TRUE(catalog.add(digests).has_value());
  const BloomSpec spec{.expected_item_count = 300, .target_fpp = 0.01};
  auto before = build_filter_from_catalog(catalog, 1, spec);
  ASSERT_TRUE(before.has_value());
  const std::vector<std::uint64_t> words_before(before->words().begin(), before->words().end());
  ASSERT_TRUE(catalog.remove(std::span(digests).first(100)).has_value());
  auto after = build_filter_from_catalog(catalog, 2, spec);
  ASSERT_TRUE(after.has_value());
  std::vector<Digest> remaining(digests.begin() + 100, digests.end());
  std::ranges::sort(remaining);
  auto fresh = build_filter(remaining, spec, 2);
  ASSERT_TRUE(std::ranges::equal(after->payload(), fresh->payload()));
  EXPECT_EQ(after->inserted_item_count(), 200u);
  // The old filter is untouched: still Maybe for everything it held.
  EXPECT_TRUE(std::ranges::equal(before->words(), words_before));
  for (const Digest& digest : digests) EXPECT_TRUE(before->might_contain(digest));
}

}  // namespace
}  // namespace abf::service
