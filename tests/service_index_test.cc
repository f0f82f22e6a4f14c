// Exact indexes of a catalog (abf/service/exact_index.hpp): the build from
// a catalog, the binding check (every refusal), and the indexed store's
// answers against the catalog's own at every version, with additions and
// removals after the index's version, inside and over the held bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/service.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

class ServiceIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto catalog = SqliteCatalog::create(dir_ / "c.db");
    ASSERT_TRUE(catalog) << catalog.error().describe();
    catalog_.emplace(std::move(*catalog));
  }

  Index build(std::uint64_t version, std::uint32_t block = 64) {
    const fs::path path = dir_ / ("v" + std::to_string(version) + ".abfx");
    auto built = build_index_from_catalog(*catalog_, version, path, block);
    EXPECT_TRUE(built) << built.error().describe();
    auto index = Index::load(path);
    EXPECT_TRUE(index) << index.error().describe();
    return std::move(*index);
  }

  // Every answer of `store` at `version` equals the catalog's, for the
  // digests ever added and as many never added.
  void expect_same_answers(ArtifactRepository& store, std::uint64_t version,
                           const std::vector<Digest>& queries, bool singles = true) {
    auto got = std::make_unique<bool[]>(queries.size());
    auto expected = std::make_unique<bool[]>(queries.size());
    ASSERT_TRUE(store.exists_at_version(queries, version, std::span(got.get(), queries.size())));
    ASSERT_TRUE(
        catalog_->exists_at_version(queries, version, std::span(expected.get(), queries.size())));
    std::size_t wrong = 0, present = 0;
    for (std::size_t i = 0; i < queries.size(); ++i) {
      wrong += got[i] != expected[i] ? 1 : 0;
      present += expected[i] ? 1 : 0;
      if (singles && i < 50) EXPECT_EQ(*store.exists_at_version(queries[i], version), expected[i]);
    }
    EXPECT_EQ(wrong, 0u) << "at version " << version;
    EXPECT_GT(present, 0u);  // a test of present answers too
  }

  test::TempDir dir_{"abf-service-index"};
  std::optional<SqliteCatalog> catalog_;
};

TEST_F(ServiceIndexTest, BuildHoldsTheVersionsDigestsWithItsCountAndFingerprint) {
  auto first = test::random_digests(3000, 1);
  auto second = test::random_digests(500, 2);
  ASSERT_TRUE(catalog_->add(first));                                // version 1
  ASSERT_TRUE(catalog_->add(second));                               // version 2
  ASSERT_TRUE(catalog_->remove(std::span(first).subspan(0, 100)));  // version 3
  for (std::uint64_t version : {0, 1, 2, 3}) {
    SCOPED_TRACE(version);
    const Index index = build(version);
    std::vector<Digest> expected;
    ASSERT_TRUE(catalog_->for_each_digest_at_version(version, [&](std::span<const Digest> part) {
      expected.insert(expected.end(), part.begin(), part.end());
      return Result<void>{};
    }));
    ASSERT_EQ(index.size(), expected.size());
    EXPECT_TRUE(std::equal(expected.begin(), expected.end(), index.digests().begin()));
    auto content = catalog_->content_at_version(version);
    EXPECT_EQ(index.content_fingerprint(), content->fingerprint);
    EXPECT_EQ(index.catalog_id(), *catalog_->catalog_id());
    EXPECT_EQ(index.catalog_version(), version);
    EXPECT_TRUE(check_index_binding(index, "i", *catalog_));
  }
}

TEST_F(ServiceIndexTest, BuildRefusesAVersionTheCatalogLacks) {
  auto built = build_index_from_catalog(*catalog_, 5, dir_ / "x.abfx");
  ASSERT_FALSE(built);
  EXPECT_EQ(built.error().code, ErrorCode::kInvalidArgument);
  EXPECT_FALSE(fs::exists(dir_ / "x.abfx"));
}

TEST_F(ServiceIndexTest, BindingRefusesAnotherCatalogsIndex) {
  ASSERT_TRUE(catalog_->add(test::random_digests(100, 3)));
  auto other = SqliteCatalog::create(dir_ / "other.db");
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->add(test::random_digests(100, 3)));  // the same digests, another id
  ASSERT_TRUE(build_index_from_catalog(*other, 1, dir_ / "other.abfx"));
  auto index = Index::load(dir_ / "other.abfx");
  ASSERT_TRUE(index);
  auto bound = check_index_binding(*index, "other.abfx", *catalog_);
  ASSERT_FALSE(bound);
  EXPECT_EQ(bound.error().code, ErrorCode::kCatalogMismatch);
  EXPECT_NE(bound.error().message.find("is of catalog " + other->catalog_id()->hex()),
            std::string::npos)
      << bound.error().message;
}

TEST_F(ServiceIndexTest, BindingRefusesEachMismatch) {
  auto digests = test::random_digests(200, 4);
  std::sort(digests.begin(), digests.end());
  ASSERT_TRUE(catalog_->add(digests));  // version 1
  IndexIdentity identity;
  identity.catalog_id = *catalog_->catalog_id();
  identity.catalog_version = 1;
  identity.content_fingerprint = ContentFingerprint::of(digests);
  auto load = [&](const IndexIdentity& id, std::span<const Digest> held) {
    auto bytes = serialize_index(id, held);
    EXPECT_TRUE(bytes);
    return *Index::parse(*bytes);
  };
  auto expect = [&](const Index& index, const std::string& says) {
    auto bound = check_index_binding(index, "x.abfx", *catalog_);
    ASSERT_FALSE(bound) << says;
    EXPECT_EQ(bound.error().code, ErrorCode::kCatalogMismatch);
    EXPECT_NE(bound.error().message.find(says), std::string::npos) << bound.error().message;
  };
  EXPECT_TRUE(check_index_binding(load(identity, digests), "x.abfx", *catalog_));

  IndexIdentity no_id = identity;
  no_id.catalog_id = {};
  expect(load(no_id, digests), "names no catalog");
  IndexIdentity future = identity;
  future.catalog_version = 9;
  expect(load(future, digests), "only reaches version 1");
  IndexIdentity no_fingerprint = identity;
  no_fingerprint.content_fingerprint.reset();
  expect(load(no_fingerprint, digests), "carries no content fingerprint");
  // One digest fewer, its fingerprint recomputed: the count and fingerprint differ.
  IndexIdentity fewer = identity;
  fewer.content_fingerprint = ContentFingerprint::of(std::span(digests).first(199));
  expect(load(fewer, std::span(digests).first(199)), "over 199 digests, the catalog's");
  // The catalog's fingerprint and count over other digests (a header
  // rewritten): only the digests themselves show it.
  auto others = test::random_digests(200, 5);
  std::sort(others.begin(), others.end());
  expect(load(identity, others), "digests add up to content fingerprint");
  // verify_digests = false (a caller that checked this Index object once)
  // skips only that last rule: every other one still refuses.
  EXPECT_TRUE(check_index_binding(load(identity, others), "x.abfx", *catalog_,
                                  /*verify_digests=*/false));
  for (const auto& [id, held] : {std::pair{no_id, std::span<const Digest>(digests)},
                                 std::pair{future, std::span<const Digest>(digests)},
                                 std::pair{fewer, std::span<const Digest>(digests).first(199)}}) {
    auto bound = check_index_binding(load(id, held), "x.abfx", *catalog_, false);
    ASSERT_FALSE(bound);
    EXPECT_EQ(bound.error().code, ErrorCode::kCatalogMismatch);
  }
}

TEST_F(ServiceIndexTest, IndexedStoreAnswersExactlyAtEveryLaterVersion) {
  auto base = test::random_digests(5000, 6);
  ASSERT_TRUE(catalog_->add(base));  // 1
  const Index index = build(1);
  auto later = test::random_digests(700, 7);
  ASSERT_TRUE(catalog_->add(later));                               // 2: added only
  ASSERT_TRUE(catalog_->remove(std::span(base).subspan(0, 300)));  // 3: removed from the index
  ASSERT_TRUE(catalog_->remove(std::span(later).subspan(0, 50)));  // 4: added since, removed
  ASSERT_TRUE(catalog_->add(std::span(base).subspan(0, 20)));      // 5: re-added
  std::vector<Digest> queries = base;
  queries.insert(queries.end(), later.begin(), later.end());
  auto never = test::random_digests(3000, 8);
  queries.insert(queries.end(), never.begin(), never.end());
  std::shuffle(queries.begin(), queries.end(), std::mt19937_64(9));
  for (std::uint64_t bound : {std::uint64_t{1} << 21, std::uint64_t{10}, std::uint64_t{0}}) {
    SCOPED_TRACE(bound);
    IndexedRepository indexed(*catalog_, index, bound);
    for (std::uint64_t version = 0; version <= 5; ++version) {
      if (version == 0) continue;  // nothing present: covered by the binding tests
      expect_same_answers(indexed, version, queries);
    }
    const auto counts = indexed.counts();
    EXPECT_GT(counts.index_lookups, 0u);
    EXPECT_GT(counts.store_lookups, 0u);
  }
  // At its own version, and after additions only, the index alone answers
  // what it holds.
  IndexedRepository indexed(*catalog_, index);
  expect_same_answers(indexed, 1, queries, false);
  EXPECT_EQ(indexed.counts().store_lookups, 0u);
  expect_same_answers(indexed, 2, queries, false);
  EXPECT_EQ(indexed.counts().store_lookups, later.size());  // only the added ones
}

TEST_F(ServiceIndexTest, IndexedStoreSendsOlderVersionsToTheStore) {
  auto base = test::random_digests(1000, 10);
  ASSERT_TRUE(catalog_->add(std::span(base).first(500)));    // 1
  ASSERT_TRUE(catalog_->add(std::span(base).subspan(500)));  // 2
  IndexedRepository indexed(*catalog_, build(2));
  expect_same_answers(indexed, 1, base);
  EXPECT_EQ(indexed.counts().index_lookups, 0u);
  auto answers = std::make_unique<bool[]>(base.size());
  EXPECT_FALSE(indexed.exists_at_version(base, 7, std::span(answers.get(), base.size())));
}

// Index sets (build_index_set_from_catalog): each shard the catalog's
// digests of its shard; bound like a single index (and refused like one);
// the indexed store over a set answers as the catalog does at every version.
TEST_F(ServiceIndexTest, AnIndexSetBindsAndAnswersAsTheSingleIndex) {
  auto base = test::random_digests(5000, 21);
  ASSERT_TRUE(catalog_->add(base));                                // 1
  auto later = test::random_digests(600, 22);
  ASSERT_TRUE(catalog_->add(later));                               // 2
  ASSERT_TRUE(catalog_->remove(std::span(base).subspan(0, 100)));  // 3
  std::vector<Digest> queries = base;
  queries.insert(queries.end(), later.begin(), later.end());
  auto never = test::random_digests(3000, 23);
  queries.insert(queries.end(), never.begin(), never.end());
  std::shuffle(queries.begin(), queries.end(), std::mt19937_64(24));
  for (std::uint32_t shards : {1u, 4u, 33u}) {
    SCOPED_TRACE(shards);
    const fs::path path = dir_ / ("set-" + std::to_string(shards) + ".abxs");
    auto built = build_index_set_from_catalog(*catalog_, 1, path, shards,
                                              {.block_digests = 16, .build_id = std::nullopt});
    ASSERT_TRUE(built) << built.error().describe();
    EXPECT_EQ(built->digest_count, 5000u);
    auto set = IndexSet::load(path);
    ASSERT_TRUE(set) << set.error().describe();
    ASSERT_EQ(set->shard_count(), shards);
    EXPECT_EQ(set->size(), 5000u);
    EXPECT_EQ(set->content_fingerprint(), catalog_->content_at_version(1)->fingerprint);
    EXPECT_TRUE(check_index_binding(*set, "set", *catalog_));
    IndexedRepository indexed(*catalog_, *set);
    for (std::uint64_t version = 1; version <= 3; ++version) {
      expect_same_answers(indexed, version, queries, version == 1);
    }
  }
  // Another catalog's set is refused, as its single index would be.
  auto other = SqliteCatalog::create(dir_ / "other.db");
  ASSERT_TRUE(other);
  ASSERT_TRUE(other->add(base));
  ASSERT_TRUE(build_index_set_from_catalog(*other, 1, dir_ / "other.abxs", 3));
  auto foreign = IndexSet::load(dir_ / "other.abxs");
  ASSERT_TRUE(foreign);
  auto bound = check_index_binding(*foreign, "other.abxs", *catalog_);
  ASSERT_FALSE(bound);
  EXPECT_EQ(bound.error().code, ErrorCode::kCatalogMismatch);
  // A version the catalog lacks writes nothing.
  auto missing = build_index_set_from_catalog(*catalog_, 9, dir_ / "nine.abxs", 3);
  ASSERT_FALSE(missing);
  EXPECT_FALSE(fs::exists(dir_ / "nine.abxs"));
}

// The whole dedup job with an index behind the filter equals the job
// without a filter, with the snapshot older, newer or as old as the index.
TEST_F(ServiceIndexTest, BulkDedupWithIndexEqualsExactOnly) {
  const auto members = test::random_digests(20000, 11);
  ASSERT_TRUE(catalog_->add(std::span(members).first(10000)));          // 1
  ASSERT_TRUE(catalog_->add(std::span(members).subspan(10000, 5000)));  // 2
  ASSERT_TRUE(catalog_->remove(std::span(members).subspan(100, 200)));  // 3
  ASSERT_TRUE(catalog_->add(std::span(members).subspan(15000)));        // 4
  // Candidates: half catalog members (some removed), half new, repeated.
  auto candidates = std::vector<Digest>(members.begin(), members.end());
  auto fresh = test::random_digests(20000, 12);
  candidates.insert(candidates.end(), fresh.begin(), fresh.end());
  std::shuffle(candidates.begin(), candidates.end(), std::mt19937_64(13));
  const std::string input(reinterpret_cast<const char*>(candidates.data()),
                          candidates.size() * Digest::kSize);
  auto run = [&](std::uint64_t snapshot_version, std::optional<std::uint64_t> index_version,
                 bool use_filter) {
    const BloomSpec spec{30000, 0.01};
    auto filter = build_filter_from_catalog(*catalog_, snapshot_version, spec);
    EXPECT_TRUE(filter) << filter.error().describe();
    std::optional<IndexedRepository> indexed;
    if (index_version) {
      Index index = build(*index_version);
      EXPECT_TRUE(check_index_binding(index, "i", *catalog_));
      indexed.emplace(*catalog_, std::move(index));
    }
    ArtifactRepository& store = indexed ? static_cast<ArtifactRepository&>(*indexed) : *catalog_;
    Metrics metrics;
    SnapshotPublisher publisher(&metrics, store);
    EXPECT_TRUE(publisher.publish(FilterSet(std::move(*filter)), "s"));
    ServiceOptions options;
    options.use_filter = use_filter;
    const ArtifactExistenceService service(publisher, store, &metrics, options);
    auto reader = DigestReader::from_memory(input, InputFormat::kBinary);
    std::vector<Digest> absent;
    auto report = bulk_dedup(
        service, reader,
        [&](std::span<const Digest> part) {
          absent.insert(absent.end(), part.begin(), part.end());
          return Result<void>{};
        },
        4096);
    EXPECT_TRUE(report) << report.error().describe();
    // Without removals after the index's version, the index answers the
    // members itself; with them (version 3 removed some), it passes every
    // digest it holds to the catalog.
    if (indexed && *index_version >= 3) EXPECT_GT(indexed->counts().index_lookups, 10000u);
    return absent;
  };
  const auto exact = run(4, std::nullopt, false);
  EXPECT_GT(exact.size(), fresh.size());  // the removed ones are new again
  EXPECT_LT(exact.size(), candidates.size());
  for (std::uint64_t snapshot : {1, 2, 4}) {
    for (std::uint64_t index : {1, 2, 3, 4}) {
      SCOPED_TRACE(testing::Message() << "snapshot " << snapshot << ", index " << index);
      EXPECT_EQ(run(snapshot, index, true), exact);
    }
  }
  EXPECT_EQ(run(4, 4, false), exact);  // the index alone, no filter
}

}  // namespace
}  // namespace abf::service
