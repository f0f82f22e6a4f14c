// What each catalog version holds (schema 3): the item count and content
// fingerprint every add and remove keeps, against a full walk of the
// version and the in-memory reference, on random histories; the upgrade
// from schemas 1 and 2, which computes them for every version; read-only
// opens of older schemas, which walk instead; damaged rows.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
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

// Runs SQL on a database with a plain connection.
void exec_sql(const fs::path& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK)
      << (message ? message : "") << "\n"
      << sql;
  sqlite3_free(message);
  sqlite3_close(db);
}

// Every row of `sql`, as tab-separated text (blobs in hex).
std::string dump(const fs::path& db_path, const char* sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string rows;
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr), SQLITE_OK) << sql;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) {
      const auto* text = sqlite3_column_text(stmt, c);
      rows += text != nullptr ? reinterpret_cast<const char*>(text) : "NULL";
      rows += '\t';
    }
    rows += '\n';
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return rows;
}

constexpr const char* kArtifactRows =
    "SELECT hex(digest), added_version, removed_version FROM artifacts "
    "ORDER BY digest, added_version";
constexpr const char* kVersionRows =
    "SELECT version, operation, created_unix, added, removed FROM versions ORDER BY version";

CatalogOpenOptions read_only() {
  CatalogOpenOptions options;
  options.read_only = true;
  return options;
}

// What a version holds, computed the slow way: every digest the catalog
// lists for it, summed.
CatalogContent walked(SqliteCatalog& catalog, std::uint64_t version) {
  CatalogContent content;
  auto ok = catalog.for_each_digest_at_version(version, [&](std::span<const Digest> chunk) {
    content.item_count += chunk.size();
    content.fingerprint += ContentFingerprint::of(chunk);
    return Result<void>{};
  });
  EXPECT_TRUE(ok.has_value()) << ok.error().describe();
  return content;
}

// A random history applied to both stores: adds (with digests already
// present and duplicates within one input) and removes (with absent
// digests), drawn from a small pool so digests are removed and added again.
void random_history(SqliteCatalog& catalog, MemoryRepository& reference, std::uint64_t seed,
                    int changes) {
  const auto pool = test::random_digests(300, seed);
  std::mt19937_64 rng(seed);
  for (int change = 0; change < changes; ++change) {
    std::vector<Digest> input;
    const std::size_t size = rng() % 60;
    for (std::size_t i = 0; i < size; ++i) input.push_back(pool[rng() % pool.size()]);
    if (rng() % 3 == 0) {
      auto removed = catalog.remove(input);
      ASSERT_TRUE(removed.has_value()) << removed.error().describe();
      ASSERT_EQ(removed->version, reference.remove(input));
    } else {
      auto added = catalog.add(input);
      ASSERT_TRUE(added.has_value()) << added.error().describe();
      ASSERT_EQ(added->version, reference.add(input));
    }
  }
}

// Every version's content, as the catalog answers it, equals a full walk of
// that version and the reference's; returns them.
std::vector<CatalogContent> expect_contents(SqliteCatalog& catalog, MemoryRepository& reference) {
  std::vector<CatalogContent> contents;
  const std::uint64_t latest = *catalog.latest_version();
  EXPECT_EQ(latest, *reference.latest_version());
  for (std::uint64_t v = 0; v <= latest; ++v) {
    auto content = catalog.content_at_version(v);
    EXPECT_TRUE(content.has_value()) << content.error().describe();
    if (!content) return contents;
    const CatalogContent slow = walked(catalog, v);
    EXPECT_EQ(content->item_count, slow.item_count) << "version " << v;
    EXPECT_EQ(content->fingerprint, slow.fingerprint) << "version " << v;
    EXPECT_EQ(*content, *reference.content_at_version(v)) << "version " << v;
    const auto listed = reference.digests_at_version(v);
    EXPECT_EQ(content->fingerprint, ContentFingerprint::of(listed)) << "version " << v;
    contents.push_back(*content);
  }
  return contents;
}

// A schema-3 catalog turned back into the schema-2 form (no content
// columns), with the same versions and artifacts.
void downgrade_to_schema_two(const fs::path& path) {
  exec_sql(path,
           "PRAGMA journal_mode = DELETE;"
           "BEGIN;"
           "ALTER TABLE versions DROP COLUMN fingerprint;"
           "ALTER TABLE versions DROP COLUMN item_count;"
           "UPDATE abf_schema SET version = 2;"
           "PRAGMA user_version = 2;"
           "COMMIT;");
}

class CatalogContentTest : public ::testing::Test {
 protected:
  fs::path path(const char* name) const { return dir_ / name; }
  test::TempDir dir_{"abf-catalog-content"};
};

TEST_F(CatalogContentTest, NewCatalogHoldsTheEmptySetAtVersionZero) {
  auto catalog = SqliteCatalog::create(path("c.db"));
  ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
  EXPECT_EQ(catalog->schema_version(), kCatalogSchemaVersion);
  auto content = catalog->content_at_version(0);
  ASSERT_TRUE(content.has_value()) << content.error().describe();
  EXPECT_EQ(content->item_count, 0u);
  EXPECT_EQ(content->fingerprint, ContentFingerprint{});
  auto stats = catalog->stats();
  ASSERT_TRUE(stats.has_value());
  EXPECT_EQ(stats->latest_fingerprint, ContentFingerprint{});
}

TEST_F(CatalogContentTest, VersionBeyondTheLatestDoesNotExist) {
  auto catalog = SqliteCatalog::create(path("c.db"));
  ASSERT_TRUE(catalog.has_value());
  ASSERT_TRUE(catalog->add(test::member_digests(3)).has_value());
  auto content = catalog->content_at_version(2);
  ASSERT_FALSE(content.has_value());
  EXPECT_EQ(content.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(content.error().message.find("version 2 does not exist (latest is 1)"),
            std::string::npos)
      << content.error().message;
  MemoryRepository memory;
  EXPECT_EQ(memory.content_at_version(1).error().code, ErrorCode::kInvalidArgument);
}

TEST_F(CatalogContentTest, KeptContentEqualsAFullWalkOnRandomHistories) {
  for (std::uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE(seed);
    const std::string name = "c" + std::to_string(seed) + ".db";
    auto catalog = SqliteCatalog::create(path(name.c_str()));
    ASSERT_TRUE(catalog.has_value());
    MemoryRepository reference;
    random_history(*catalog, reference, seed, 40);
    const auto contents = expect_contents(*catalog, reference);
    ASSERT_EQ(contents.size(), 41u);
    // The history is not trivial: something was removed, the set changed.
    EXPECT_NE(contents.back().fingerprint, contents[1].fingerprint);
    auto stats = catalog->stats();
    ASSERT_TRUE(stats.has_value());
    EXPECT_EQ(stats->latest_fingerprint, contents.back().fingerprint);
    EXPECT_EQ(stats->live_artifacts, contents.back().item_count);
    // Read-only connections read the same kept values.
    auto reader = SqliteCatalog::open(path(name.c_str()), read_only());
    ASSERT_TRUE(reader.has_value());
    for (std::uint64_t v = 0; v < contents.size(); ++v) {
      EXPECT_EQ(*reader->content_at_version(v), contents[v]) << v;
    }
  }
}

TEST_F(CatalogContentTest, SameSetInAnotherOrderHasTheSameContent) {
  const auto digests = test::random_digests(500, 9);
  auto one = SqliteCatalog::create(path("one.db"));
  auto two = SqliteCatalog::create(path("two.db"));
  ASSERT_TRUE(one.has_value() && two.has_value());
  ASSERT_TRUE(one->add(digests).has_value());
  // The other: in three parts, one added twice and a stranger removed.
  ASSERT_TRUE(two->add(std::span(digests).subspan(300)).has_value());
  ASSERT_TRUE(two->add(std::span(digests).first(300)).has_value());
  ASSERT_TRUE(two->add(std::span(digests).first(100)).has_value());
  const Digest stranger = test::non_member_digest(1);
  ASSERT_TRUE(two->add(std::span(&stranger, 1)).has_value());
  ASSERT_TRUE(two->remove(std::span(&stranger, 1)).has_value());
  EXPECT_EQ(*one->content_at_version(1), *two->content_at_version(5));
  EXPECT_EQ(one->content_at_version(1)->item_count, 500u);
  EXPECT_EQ(one->content_at_version(1)->fingerprint, ContentFingerprint::of(digests));
  // Version 4 held the stranger too: another content.
  EXPECT_NE(two->content_at_version(4)->fingerprint, two->content_at_version(5)->fingerprint);
}

TEST_F(CatalogContentTest, FailedChangeLeavesTheContentsAsTheyWere) {
  auto catalog = SqliteCatalog::create(path("c.db"));
  ASSERT_TRUE(catalog.has_value());
  ASSERT_TRUE(catalog->add(test::member_digests(10)).has_value());
  const CatalogContent before = *catalog->content_at_version(1);
  const std::string input = test::member_digest(50).hex() + "\nnot-a-digest\n";
  auto reader = DigestReader::from_memory(input, InputFormat::kHex, "<bad>");
  ASSERT_FALSE(catalog->add(reader).has_value());
  EXPECT_EQ(*catalog->latest_version(), 1u);
  EXPECT_EQ(*catalog->content_at_version(1), before);
  // The next change starts from version 1's content.
  const Digest next = test::member_digest(50);
  ASSERT_EQ(catalog->add(std::span(&next, 1))->version, 2u);
  CatalogContent expected = before;
  ++expected.item_count;
  expected.fingerprint += ContentFingerprint::of(next);
  EXPECT_EQ(*catalog->content_at_version(2), expected);
}

TEST_F(CatalogContentTest, SchemaTwoIsWalkedReadOnlyAndUpgradedByTheFirstWriter) {
  MemoryRepository reference;
  {
    auto catalog = SqliteCatalog::create(path("c.db"));
    ASSERT_TRUE(catalog.has_value());
    random_history(*catalog, reference, 21, 30);
  }
  downgrade_to_schema_two(path("c.db"));
  const std::string artifacts_before = dump(path("c.db"), kArtifactRows);
  const std::string versions_before = dump(path("c.db"), kVersionRows);
  CatalogId id;
  {  // Read-only: left as it is, contents walked.
    const std::string bytes_before = test::read_file(path("c.db"));
    auto reader = SqliteCatalog::open(path("c.db"), read_only());
    ASSERT_TRUE(reader.has_value()) << reader.error().describe();
    EXPECT_EQ(reader->schema_version(), 2);
    ASSERT_TRUE(reader->catalog_id().has_value());
    id = *reader->catalog_id();
    expect_contents(*reader, reference);
    EXPECT_EQ(reader->stats()->latest_fingerprint, reference.content_at_version(30)->fingerprint);
    EXPECT_EQ(test::read_file(path("c.db")), bytes_before);
  }
  {  // The first writer upgrades it: every version's content computed.
    auto writer = SqliteCatalog::open(path("c.db"));
    ASSERT_TRUE(writer.has_value()) << writer.error().describe();
    EXPECT_EQ(writer->schema_version(), kCatalogSchemaVersion);
    EXPECT_EQ(writer->catalog_id(), id);
    expect_contents(*writer, reference);
  }
  EXPECT_EQ(dump(path("c.db"), "SELECT version FROM abf_schema"), "3\t\n");
  EXPECT_EQ(dump(path("c.db"), "PRAGMA user_version"), "3\t\n");
  EXPECT_EQ(dump(path("c.db"), kArtifactRows), artifacts_before);
  EXPECT_EQ(dump(path("c.db"), kVersionRows), versions_before);
  // The kept values, read from the rows by a new reader, and the catalog
  // works on from them.
  auto reader = SqliteCatalog::open(path("c.db"), read_only());
  ASSERT_TRUE(reader.has_value());
  EXPECT_EQ(reader->schema_version(), kCatalogSchemaVersion);
  expect_contents(*reader, reference);
  auto writer = SqliteCatalog::open(path("c.db"));
  ASSERT_TRUE(writer.has_value());
  const auto more = test::random_digests(7, 99);
  ASSERT_EQ(writer->add(more)->version, reference.add(more));
  ASSERT_EQ(writer->remove(std::span(more).first(2))->version,
            reference.remove(std::span(more).first(2)));
  expect_contents(*writer, reference);
}

TEST_F(CatalogContentTest, SchemaOneIsUpgradedToThreeInOneStep) {
  test::create_schema_one_catalog(path("old.db"), 50);
  {
    auto reader = SqliteCatalog::open(path("old.db"), read_only());
    ASSERT_TRUE(reader.has_value());
    EXPECT_EQ(reader->schema_version(), 1);
    auto content = reader->content_at_version(1);
    ASSERT_TRUE(content.has_value()) << content.error().describe();
    EXPECT_EQ(content->item_count, 50u);
    EXPECT_EQ(content->fingerprint, ContentFingerprint::of(test::member_digests(50)));
  }
  auto writer = SqliteCatalog::open(path("old.db"));
  ASSERT_TRUE(writer.has_value()) << writer.error().describe();
  EXPECT_EQ(writer->schema_version(), kCatalogSchemaVersion);
  ASSERT_TRUE(writer->catalog_id().has_value());
  EXPECT_EQ(*writer->content_at_version(0), CatalogContent{});
  auto content = writer->content_at_version(1);
  ASSERT_TRUE(content.has_value());
  EXPECT_EQ(content->item_count, 50u);
  EXPECT_EQ(content->fingerprint, ContentFingerprint::of(test::member_digests(50)));
  EXPECT_EQ(
      dump(path("old.db"),
           "SELECT item_count, hex(fingerprint) FROM versions WHERE "
           "version = 1"),
      "50\t" +
          [] {
            std::string hex = ContentFingerprint::of(test::member_digests(50)).hex();
            for (char& c : hex) c = static_cast<char>(std::toupper(c));
            return hex;
          }() +
          "\t\n");
}

TEST_F(CatalogContentTest, DamagedContentRowIsAClearError) {
  {
    auto catalog = SqliteCatalog::create(path("c.db"));
    ASSERT_TRUE(catalog.has_value());
    ASSERT_TRUE(catalog->add(test::member_digests(5)).has_value());
  }
  // The CHECK keeps a wrong-sized fingerprint out; a NULL-typed item count
  // is what a damaged file might hold: both are refused by the constraints.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path("c.db").c_str(), &db), SQLITE_OK);
  EXPECT_NE(sqlite3_exec(db, "UPDATE versions SET fingerprint = X'00' WHERE version = 1", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "PRAGMA ignore_check_constraints = ON;"
                         "UPDATE versions SET fingerprint = X'0011' WHERE version = 1",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto catalog = SqliteCatalog::open(path("c.db"), read_only());
  ASSERT_TRUE(catalog.has_value());
  auto content = catalog->content_at_version(1);
  ASSERT_FALSE(content.has_value());
  EXPECT_EQ(content.error().code, ErrorCode::kCatalog);
  EXPECT_NE(content.error().message.find("damaged: version 1"), std::string::npos)
      << content.error().message;
  // A writer starting from it refuses too, and changes nothing.
  auto writer = SqliteCatalog::open(path("c.db"));
  ASSERT_TRUE(writer.has_value());
  const Digest one = test::member_digest(9);
  auto added = writer->add(std::span(&one, 1));
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kCatalog);
  EXPECT_EQ(*writer->latest_version(), 1u);
}

TEST_F(CatalogContentTest, MemoryRepositoryKeepsContentPerVersion) {
  MemoryRepository memory;
  const auto digests = test::random_digests(20, 5);
  EXPECT_EQ(memory.add(digests), 1u);
  EXPECT_EQ(memory.remove(std::span(digests).first(5)), 2u);
  EXPECT_EQ(memory.add(std::span(digests).first(2)), 3u);
  EXPECT_EQ(*memory.content_at_version(0), CatalogContent{});
  EXPECT_EQ(memory.content_at_version(1)->item_count, 20u);
  EXPECT_EQ(memory.content_at_version(1)->fingerprint, ContentFingerprint::of(digests));
  EXPECT_EQ(memory.content_at_version(2)->item_count, 15u);
  EXPECT_EQ(memory.content_at_version(2)->fingerprint,
            ContentFingerprint::of(std::span(digests).subspan(5)));
  EXPECT_EQ(memory.content_at_version(3)->item_count, 17u);
  EXPECT_EQ(memory.content_at_version(3)->fingerprint,
            ContentFingerprint::of(memory.digests_at_version(3)));
}

TEST_F(CatalogContentTest, SampleHoldsOnlyDigestsOfTheVersion) {
  auto catalog = SqliteCatalog::create(path("c.db"));
  ASSERT_TRUE(catalog.has_value());
  MemoryRepository reference;
  random_history(*catalog, reference, 31, 30);
  for (std::uint64_t v = 0; v <= 30; ++v) {
    const auto present = reference.digests_at_version(v);
    for (SqliteCatalog* store : {&*catalog}) {
      auto sample = store->sample_at_version(v, 16);
      ASSERT_TRUE(sample.has_value()) << sample.error().describe();
      // All of them when there are no more than 16; else up to 16 distinct.
      if (present.size() <= 16) {
        EXPECT_EQ(*sample, present) << v;
      } else {
        EXPECT_GE(sample->size(), 1u);
        EXPECT_LE(sample->size(), 16u);
      }
      for (const Digest& digest : *sample) {
        EXPECT_TRUE(std::ranges::binary_search(present, digest)) << v << " " << digest.hex();
      }
    }
    auto from_memory = reference.sample_at_version(v, 16);
    ASSERT_TRUE(from_memory.has_value());
    EXPECT_EQ(from_memory->size(), std::min<std::size_t>(16, present.size()));
    for (const Digest& digest : *from_memory) {
      EXPECT_TRUE(std::ranges::binary_search(present, digest));
    }
  }
  EXPECT_EQ(catalog->sample_at_version(31, 4).error().code, ErrorCode::kInvalidArgument);
  // A large version: a sample of distinct digests, not always the same ones.
  const auto many = test::random_digests(5000, 77);
  ASSERT_TRUE(catalog->add(many).has_value());
  auto first = catalog->sample_at_version(31, 64);
  auto second = catalog->sample_at_version(31, 64);
  ASSERT_TRUE(first.has_value() && second.has_value());
  EXPECT_GE(first->size(), 60u);
  EXPECT_NE(*first, *second);
}

}  // namespace
}  // namespace abf::service
