// SqliteCatalog: version semantics against the in-memory reference store,
// transactions, open errors, catalog ids and the upgrade from schema 1, and
// building a filter from a catalog version.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
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
  void SetUp() override { dir_ = test::make_temp_dir("abf-catalog-test"); }
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

CatalogOpenOptions read_only() {
  CatalogOpenOptions options;
  options.read_only = true;
  return options;
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
  // Nothing left beside it but SQLite's own WAL files: no temporary file,
  // no private folder.
  for (const auto& entry : fs::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    EXPECT_TRUE(name == "catalog.db" || name == "catalog.db-wal" || name == "catalog.db-shm")
        << name;
  }
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
  // WAL: a writer's transaction blocks neither a reader nor another
  // writer's open, only its change.
  CatalogOpenOptions read_only = options;
  read_only.read_only = true;
  {
    auto reader = SqliteCatalog::open(path("catalog.db"), read_only);
    ASSERT_TRUE(reader.has_value()) << reader.error().describe();
    EXPECT_EQ(*reader->latest_version(), 0u);
  }
  auto catalog = SqliteCatalog::open(path("catalog.db"), options);
  ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
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

// ---- Catalog identity ----------------------------------------------------

TEST_F(CatalogTest, NewCatalogGetsARandomIdThatStays) {
  std::optional<CatalogId> first_id;
  {
    auto first = create("first.db");
    first_id = first.catalog_id();
    ASSERT_TRUE(first_id.has_value());
    EXPECT_FALSE(first_id->is_zero());
    auto stats = first.stats();
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->catalog_id, first_id);
    const auto binding = first.catalog_binding();
    ASSERT_TRUE(binding.has_value());
    EXPECT_EQ(binding->id, *first_id);
    EXPECT_NE(binding->name.find("first.db"), std::string::npos) << binding->name;
  }
  auto second = create("second.db");
  ASSERT_TRUE(second.catalog_id().has_value());
  EXPECT_NE(*second.catalog_id(), *first_id);
  // Reopened, for writing or reading, it is the same id.
  auto writer = SqliteCatalog::open(path("first.db"));
  ASSERT_TRUE(writer.has_value()) << writer.error().describe();
  EXPECT_EQ(writer->catalog_id(), first_id);
  auto reader = SqliteCatalog::open(path("first.db"), read_only());
  ASSERT_TRUE(reader.has_value()) << reader.error().describe();
  EXPECT_EQ(reader->catalog_id(), first_id);
}

// Every row of `versions` and `artifacts`, as text, in key order.
std::string dump_rows(const fs::path& db_path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string rows;
  for (const char* sql :
       {"SELECT version, operation, created_unix, added, removed FROM versions ORDER BY version",
        "SELECT hex(digest), added_version, removed_version FROM artifacts "
        "ORDER BY digest, added_version"}) {
    sqlite3_stmt* stmt = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK);
    while (sqlite3_step(stmt) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
        const auto* text = sqlite3_column_text(stmt, c);
        rows += text != nullptr ? reinterpret_cast<const char*>(text) : "NULL";
        rows += '\t';
      }
      rows += '\n';
    }
    sqlite3_finalize(stmt);
  }
  sqlite3_close(db);
  return rows;
}

TEST_F(CatalogTest, SchemaOneCatalogOpenedReadOnlyWorksWithoutAnId) {
  test::create_schema_one_catalog(path("old.db"), 50);
  const std::string before = test::read_file(path("old.db"));
  {
    auto catalog = SqliteCatalog::open(path("old.db"), read_only());
    ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
    EXPECT_FALSE(catalog->catalog_id().has_value());
    EXPECT_EQ(*catalog->latest_version(), 1u);
    EXPECT_EQ(*catalog->count_at_version(1), 50u);
    EXPECT_TRUE(*catalog->exists_at_version(test::member_digest(7), 1));
    auto stats = catalog->stats();
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->schema_version, 1);
    EXPECT_FALSE(stats->catalog_id.has_value());
    // Still bound: to no id, which no snapshot matches.
    const auto binding = catalog->catalog_binding();
    ASSERT_TRUE(binding.has_value());
    EXPECT_TRUE(binding->id.is_zero());
    // A snapshot built from it would belong to no catalog: refused.
    auto filter =
        build_filter_from_catalog(*catalog, 1, {.expected_item_count = 50, .target_fpp = 0.01});
    ASSERT_FALSE(filter.has_value());
    EXPECT_EQ(filter.error().code, ErrorCode::kCatalog);
    EXPECT_NE(filter.error().message.find("no catalog id"), std::string::npos)
        << filter.error().message;
  }
  EXPECT_EQ(test::read_file(path("old.db")), before);  // not a byte changed
}

TEST_F(CatalogTest, SchemaOneCatalogIsUpgradedByTheFirstWriter) {
  test::create_schema_one_catalog(path("old.db"), 50);
  const std::string rows_before = dump_rows(path("old.db"));
  ASSERT_NE(rows_before.find("\tadd\t"), std::string::npos);
  std::optional<CatalogId> id;
  {
    auto catalog = SqliteCatalog::open(path("old.db"));
    ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
    id = catalog->catalog_id();
    ASSERT_TRUE(id.has_value());
    EXPECT_FALSE(id->is_zero());
    auto stats = catalog->stats();
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->schema_version, kCatalogSchemaVersion);
    EXPECT_EQ(stats->latest_version, 1u);
    EXPECT_EQ(stats->live_artifacts, 50u);
  }
  // Versions and rows untouched; the schema says 2, in the table and header.
  EXPECT_EQ(dump_rows(path("old.db")), rows_before);
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(path("old.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    for (const char* sql : {"SELECT version FROM abf_schema", "PRAGMA user_version"}) {
      sqlite3_stmt* stmt = nullptr;
      ASSERT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK);
      ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
      EXPECT_EQ(sqlite3_column_int64(stmt, 0), kCatalogSchemaVersion) << sql;
      sqlite3_finalize(stmt);
    }
    sqlite3_close(db);
  }
  // The id stays, for readers and writers alike; the catalog works on.
  auto reader = SqliteCatalog::open(path("old.db"), read_only());
  ASSERT_TRUE(reader.has_value()) << reader.error().describe();
  EXPECT_EQ(reader->catalog_id(), id);
  auto writer = SqliteCatalog::open(path("old.db"));
  ASSERT_TRUE(writer.has_value());
  EXPECT_EQ(writer->catalog_id(), id);
  const auto more = test::random_digests(5, 77);
  EXPECT_EQ(writer->add(more)->version, 2u);
  EXPECT_TRUE(*writer->exists_at_version(test::member_digest(3), 2));
  auto filter =
      build_filter_from_catalog(*writer, 2, {.expected_item_count = 100, .target_fpp = 0.01});
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  EXPECT_EQ(filter->catalog_id(), *id);
}

TEST_F(CatalogTest, DamagedCatalogIdIsAClearError) {
  { auto catalog = create(); }
  exec_sql(path("catalog.db"), "DELETE FROM abf_catalog;");
  expect_catalog_error(SqliteCatalog::open(path("catalog.db")), "catalog id");
  exec_sql(path("catalog.db"), "INSERT INTO abf_catalog VALUES (zeroblob(16));");
  expect_catalog_error(SqliteCatalog::open(path("catalog.db")), "all zero");
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
  EXPECT_EQ(filter->catalog_id(), *catalog.catalog_id());
  EXPECT_EQ(filter->hash_protocol_version(), 1u);
  EXPECT_EQ(filter->inserted_item_count(), 500u);
  // The same bytes as building from the digest list directly, with the
  // catalog's id.
  auto direct = build_filter(
      first, spec,
      BuildOptions{.catalog_version = 1, .catalog_id = *catalog.catalog_id(), .key = {}});
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

TEST_F(CatalogTest, BuildsAKeyedFilterOfAVersion) {
  auto catalog = create();
  const auto members = test::member_digests(300);
  ASSERT_TRUE(catalog.add(members).has_value());
  const BloomSpec spec{.expected_item_count = 300, .target_fpp = 0.01};
  const test::VectorKey key = test::golden_key();
  auto keyed = build_filter_from_catalog(catalog, 1, spec, key.key);
  ASSERT_TRUE(keyed.has_value()) << keyed.error().describe();
  EXPECT_EQ(keyed->hash_protocol_version(), 2u);
  EXPECT_EQ(keyed->scheme().key_fingerprint().hex(), key.fingerprint_hex);
  EXPECT_EQ(keyed->catalog_id(), *catalog.catalog_id());
  auto direct = build_filter(
      members, spec,
      BuildOptions{.catalog_version = 1, .catalog_id = *catalog.catalog_id(), .key = key.key});
  ASSERT_TRUE(direct.has_value());
  EXPECT_EQ(serialize_snapshot(*keyed), serialize_snapshot(*direct));
  // Unkeyed, the bits go elsewhere.
  auto unkeyed = build_filter_from_catalog(catalog, 1, spec, std::nullopt);
  ASSERT_TRUE(unkeyed.has_value());
  EXPECT_FALSE(std::ranges::equal(unkeyed->payload(), keyed->payload()));
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
  EXPECT_EQ(after->catalog_id(), before->catalog_id());
  EXPECT_EQ(after->inserted_item_count(), 200u);
  // The old filter is untouched: still Maybe for everything it held.
  EXPECT_TRUE(std::ranges::equal(before->words(), words_before));
  for (const Digest& digest : digests) EXPECT_TRUE(before->might_contain(digest));
}

}  // namespace
}  // namespace abf::service
