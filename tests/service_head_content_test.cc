// Issue 33 at the service layer: what SqliteCatalog::head_record says of a
// catalog older than schema 3 (no content, and how to upgrade), read from
// the file at every call, so a long-lived reader notices an upgrade and an
// older backup restored under it; and ServiceOptions::ask_store_up_to,
// which makes a small batch ask the store about every digest whatever the
// filter answers (abf serve's keyed tenants: uniform cost, same answers).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/metrics.hpp"
#include "abf/service/service.hpp"
#include "abf/service/snapshot_publisher.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

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

// A schema-3 catalog turned back into the schema-2 form (the way
// service_catalog_content_test makes one).
void downgrade_to_schema_two(const fs::path& path) {
  exec_sql(path,
           "PRAGMA journal_mode = DELETE; BEGIN;"
           "ALTER TABLE versions DROP COLUMN fingerprint;"
           "ALTER TABLE versions DROP COLUMN item_count;"
           "UPDATE abf_schema SET version = 2; PRAGMA user_version = 2; COMMIT;");
}

class HeadContentTest : public ::testing::Test {
 protected:
  fs::path path(const char* name) const { return dir_ / name; }
  test::TempDir dir_{"abf-head-content"};
};

TEST_F(HeadContentTest, ASchemaTwoHeadHasNoContentUntilAWriterUpgradesIt) {
  const fs::path db = path("c.db");
  {
    auto made = SqliteCatalog::create(db);
    ASSERT_TRUE(made.has_value()) << made.error().describe();
    ASSERT_TRUE(made->add(test::member_digests(40)).has_value());
  }
  downgrade_to_schema_two(db);
  auto reader = SqliteCatalog::open(db, {.read_only = true});
  ASSERT_TRUE(reader.has_value()) << reader.error().describe();
  EXPECT_EQ(reader->schema_version(), 2);
  auto before = reader->head_record();
  ASSERT_TRUE(before.has_value()) << before.error().describe();
  EXPECT_EQ(before->version, 1u);
  EXPECT_FALSE(before->content.has_value());
  EXPECT_NE(before->no_content_reason.find("schema version 2"), std::string::npos)
      << before->no_content_reason;
  EXPECT_NE(before->no_content_reason.find("abf catalog upgrade --db " + db.string()),
            std::string::npos)
      << before->no_content_reason;
  // A writer upgrades the file (opening it for writing) and adds a version:
  // the reader, opened at schema 2, reads the recorded content from now on.
  {
    auto writer = SqliteCatalog::open(db);
    ASSERT_TRUE(writer.has_value()) << writer.error().describe();
    ASSERT_TRUE(writer->add(test::random_digests(7, 3)).has_value());
  }
  auto after = reader->head_record();
  ASSERT_TRUE(after.has_value()) << after.error().describe();
  EXPECT_EQ(after->version, 2u);
  ASSERT_TRUE(after->content.has_value());
  EXPECT_TRUE(after->no_content_reason.empty());
  auto walked = reader->content_at_version(2);
  ASSERT_TRUE(walked.has_value()) << walked.error().describe();
  EXPECT_EQ(*after->content, *walked);
  EXPECT_EQ(after->content->item_count, 47u);
}

TEST_F(HeadContentTest, AnOlderFileRestoredUnderAReaderHasNoContent) {
  const fs::path db = path("c.db");
  {
    auto made = SqliteCatalog::create(db);
    ASSERT_TRUE(made.has_value()) << made.error().describe();
    ASSERT_TRUE(made->add(test::member_digests(10)).has_value());
  }
  auto reader = SqliteCatalog::open(db, {.read_only = true});
  ASSERT_TRUE(reader.has_value()) << reader.error().describe();
  auto recorded = reader->head_record();
  ASSERT_TRUE(recorded.has_value() && recorded->content.has_value());
  // The file under the reader is schema 2 now (what restoring a schema-2
  // backup into it leaves): no content, a reason, not a SQL error. (In
  // WAL mode still: the journal mode cannot change under the reader.)
  exec_sql(db,
           "BEGIN; ALTER TABLE versions DROP COLUMN fingerprint;"
           "ALTER TABLE versions DROP COLUMN item_count;"
           "UPDATE abf_schema SET version = 2; PRAGMA user_version = 2; COMMIT;");
  auto restored = reader->head_record();
  ASSERT_TRUE(restored.has_value()) << restored.error().describe();
  EXPECT_FALSE(restored->content.has_value());
  EXPECT_NE(restored->no_content_reason.find("abf catalog upgrade"), std::string::npos);
}

// A store that counts the digests it is asked about.
class CountingRepository final : public ArtifactRepository {
 public:
  explicit CountingRepository(MemoryRepository& inner) : inner_(inner) {}
  Result<bool> exists_at_version(const Digest& digest, std::uint64_t version) override {
    ++asked;
    return inner_.exists_at_version(digest, version);
  }
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t version,
                                 std::span<bool> exists) override {
    asked += digests.size();
    return inner_.exists_at_version(digests, version, exists);
  }
  Result<std::uint64_t> latest_version() override { return inner_.latest_version(); }
  Result<CatalogContent> content_at_version(std::uint64_t version) override {
    return inner_.content_at_version(version);
  }
  Result<VersionChanges> changes_between(std::uint64_t after, std::uint64_t upto) override {
    return inner_.changes_between(after, upto);
  }
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const DigestSink& sink, std::size_t chunk) override {
    return inner_.for_each_digest_added(after, upto, sink, chunk);
  }
  Result<std::vector<Digest>> sample_at_version(std::uint64_t version,
                                                std::size_t count) override {
    return inner_.sample_at_version(version, count);
  }
  std::size_t asked = 0;

 private:
  MemoryRepository& inner_;
};

TEST(AskStoreUpTo, ASingleDigestIsAskedWhateverTheFilterSaysAndAnsweredTheSame) {
  MemoryRepository memory;
  const auto members = test::member_digests(500);
  memory.add(members);
  auto filter = build_filter(members, {.expected_item_count = 1000, .target_fpp = 0.01}, 1);
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(std::move(*filter)).has_value());
  CountingRepository counting(memory);
  Metrics plain_metrics, uniform_metrics;
  const ArtifactExistenceService plain(publisher, counting, &plain_metrics);
  const ArtifactExistenceService uniform(publisher, counting, &uniform_metrics,
                                         {.ask_store_up_to = 1});
  // Missing digests, most of which the filter answers absent, and members.
  auto queries = test::random_digests(300, 11);
  queries.insert(queries.end(), members.begin(), members.begin() + 50);
  std::size_t filter_absent = 0;
  for (const Digest& digest : queries) {
    bool got_plain = true, got_uniform = true;
    counting.asked = 0;
    auto a = plain.exists_batch(std::span(&digest, 1), std::span(&got_plain, 1));
    ASSERT_TRUE(a.has_value()) << a.error().describe();
    const std::size_t asked_plain = counting.asked;
    counting.asked = 0;
    auto b = uniform.exists_batch(std::span(&digest, 1), std::span(&got_uniform, 1));
    ASSERT_TRUE(b.has_value()) << b.error().describe();
    EXPECT_EQ(counting.asked, 1u) << digest.hex();  // always one lookup
    EXPECT_EQ(got_uniform, got_plain) << digest.hex();
    EXPECT_EQ(asked_plain, a->maybe);  // the plain service asks only about a maybe
    EXPECT_EQ(b->negative, a->negative);  // the filter's answer is counted as it was
    EXPECT_EQ(b->exact_lookups, 1u);
    filter_absent += a->negative;
  }
  EXPECT_GT(filter_absent, 250u);  // the test asked about filter negatives
  // A batch of two is past the bound: only the filter's maybes are asked.
  bool two[2];
  counting.asked = 0;
  auto batch = uniform.exists_batch(std::span(queries.data(), 2), two);
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(counting.asked, batch->maybe);
  EXPECT_EQ(uniform_metrics.get(Counter::kExactLookup), queries.size() + batch->maybe);
}

// The attack on the bound: one missing digest repeated in one batch. Each
// copy a lookup would make N copies of a digest the filter answers maybe
// cost N lookups and N copies of one it answers absent none, which one
// request can time. With the bound set, a digest is looked up once per
// batch, and N copies of one digest are a batch of one digest: one lookup
// either way. Without it (unkeyed tenants, the CLI), counts are unchanged.
TEST(AskStoreUpTo, RepeatsOfADigestInOneBatchCostOneLookup) {
  MemoryRepository memory;
  const auto members = test::member_digests(500);
  memory.add(members);
  auto filter = build_filter(members, {.expected_item_count = 1000, .target_fpp = 0.01}, 1);
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  // A missing digest the filter answers maybe (a false positive), and one it
  // answers absent.
  std::optional<Digest> maybe, absent;
  for (const Digest& d : test::random_digests(400'000, 23)) {
    const bool hit = filter->might_contain(d);
    if (hit && !maybe) maybe = d;
    if (!hit && !absent) absent = d;
    if (maybe && absent) break;
  }
  ASSERT_TRUE(maybe.has_value()) << "no false positive among 400,000 random digests";
  ASSERT_TRUE(absent.has_value());
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(std::move(*filter)).has_value());
  CountingRepository counting(memory);
  const ArtifactExistenceService plain(publisher, counting, nullptr);
  const ArtifactExistenceService uniform(publisher, counting, nullptr, {.ask_store_up_to = 1});
  constexpr std::size_t kCopies = 1000;
  for (const Digest& probe : {*maybe, *absent}) {
    SCOPED_TRACE(probe == *maybe ? "filter maybe" : "filter absent");
    const std::vector<Digest> copies(kCopies, probe);
    const auto got = std::make_unique<bool[]>(kCopies);
    const std::span<bool> answers(got.get(), kCopies);
    std::fill(answers.begin(), answers.end(), true);
    counting.asked = 0;
    auto counts = uniform.exists_batch(copies, answers);
    ASSERT_TRUE(counts.has_value()) << counts.error().describe();
    EXPECT_EQ(counting.asked, 1u);
    EXPECT_EQ(counts->exact_lookups, 1u);
    EXPECT_EQ(std::count(answers.begin(), answers.end(), true), 0);  // every copy missing
    // Beside a member, repeated: each distinct digest the filter answers
    // maybe looked up once (the member, and the probe if maybe).
    std::vector<Digest> pairs;
    for (std::size_t i = 0; i < kCopies / 2; ++i) {
      pairs.push_back(probe);
      pairs.push_back(members[0]);
    }
    std::fill(answers.begin(), answers.end(), true);
    counting.asked = 0;
    ASSERT_TRUE(uniform.exists_batch(pairs, answers).has_value());
    EXPECT_EQ(counting.asked, probe == *maybe ? 2u : 1u);
    for (std::size_t i = 0; i < kCopies; ++i) EXPECT_EQ(answers[i], i % 2 == 1) << i;
    // The plain service asks about each maybe copy, as before.
    counting.asked = 0;
    auto before = plain.exists_batch(copies, answers);
    ASSERT_TRUE(before.has_value());
    EXPECT_EQ(counting.asked, probe == *maybe ? kCopies : 0u);
    EXPECT_EQ(before->exact_lookups, counting.asked);
  }
}

}  // namespace
}  // namespace abf::service
