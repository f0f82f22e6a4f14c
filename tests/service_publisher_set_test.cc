// The service layer serving filter sets (docs/protocol.md section 13): the
// publisher loads a manifest as one unit, the service's answers equal the
// exact store's, the gauges sum over the shards, a broken set never serves,
// and readers keep answering while sets are swapped. Runs under
// ThreadSanitizer too (label tsan).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

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

constexpr std::uint32_t kShards = 3;

CatalogId ours() { return test::golden_catalog_id(); }
CatalogId theirs() {
  CatalogId id = test::golden_catalog_id();
  id.bytes[3] ^= 0x77;
  return id;
}

// The filter set of `store` at `version`, of catalog `id`.
FilterSet set_of(MemoryRepository& store, std::uint64_t version, const CatalogId& id,
                 std::uint32_t shards = kShards) {
  auto set = build_filter_set(store.digests_at_version(version), {2000, 0.05}, shards,
                              BuildOptions{.catalog_version = version, .catalog_id = id});
  EXPECT_TRUE(set.has_value()) << set.error().describe();
  return std::move(*set);
}

class PublisherSetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    universe_ = test::random_digests(3000, 91);
    store_.add(std::span(universe_).first(1500));           // version 1
    store_.remove(std::span(universe_).subspan(200, 100));  // version 2
    store_.add(std::span(universe_).subspan(1500, 400));    // version 3
  }

  fs::path save(const FilterSet& set, const std::string& name) {
    const fs::path path = dir_ / name;
    auto saved = save_filter_set(set, path);
    EXPECT_TRUE(saved.has_value()) << saved.error().describe();
    return path;
  }

  // Every answer, single and batch, equals the store's at the serving version.
  void expect_exact_answers(const ArtifactExistenceService& service, std::uint64_t version) {
    std::vector<Digest> queries = universe_;
    const auto strangers = test::random_digests(2000, 92);
    queries.insert(queries.end(), strangers.begin(), strangers.end());
    auto exists = std::make_unique<bool[]>(queries.size());
    auto counts = service.exists_batch(queries, {exists.get(), queries.size()});
    ASSERT_TRUE(counts.has_value()) << counts.error().describe();
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const bool truth = *store_.exists_at_version(queries[i], version);
      ASSERT_EQ(exists[i], truth) << i;
      if (i % 7 == 0) {
        auto single = service.exists(queries[i]);
        ASSERT_TRUE(single.has_value());
        ASSERT_EQ(single->exists, truth);
        ASSERT_EQ(single->catalog_version, version);
      }
    }
    EXPECT_GT(counts->negative, 0u);
  }

  test::TempDir dir_{"abf-publisher-set"};
  std::vector<Digest> universe_;
  MemoryRepository store_{ours()};
};

TEST_F(PublisherSetTest, PublishesASetFromItsManifestAndAnswersExactly) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, store_);
  const FilterSet set = set_of(store_, 3, ours());
  auto published = publisher.load_and_publish(save(set, "c.abfs"), LoadOptions{});
  ASSERT_TRUE(published.has_value()) << published.error().describe();
  const auto current = publisher.current();
  ASSERT_EQ(current->filter.shard_count(), kShards);
  EXPECT_EQ(current->catalog_version(), 3u);
  EXPECT_EQ(current->catalog_id(), ours());
  for (std::uint32_t i = 0; i < kShards; ++i) {
    EXPECT_EQ(serialize_snapshot(current->filter.shard(i)), serialize_snapshot(set.shard(i)));
  }
  for (bool use_filter : {true, false}) {
    const ArtifactExistenceService service(publisher, store_, &metrics, {.use_filter = use_filter});
    if (use_filter) {
      expect_exact_answers(service, 3);
    } else {
      auto answer = service.exists(universe_[0]);
      ASSERT_TRUE(answer.has_value());
      EXPECT_TRUE(answer->exists);
    }
  }
  // A plain snapshot still publishes, as a set of one shard.
  auto plain = build_filter(store_.digests_at_version(3), {2000, 0.05},
                            BuildOptions{.catalog_version = 3, .catalog_id = ours()});
  ASSERT_TRUE(save_snapshot(*plain, dir_ / "c.abf").has_value());
  auto again = publisher.load_and_publish(dir_ / "c.abf", LoadMode::kCopy);
  ASSERT_TRUE(again.has_value()) << again.error().describe();
  EXPECT_EQ(publisher.current()->filter.shard_count(), 1u);
  const ArtifactExistenceService service(publisher, store_, &metrics);
  expect_exact_answers(service, 3);
}

TEST_F(PublisherSetTest, GaugesSumOverTheShards) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  const FilterSet set = set_of(store_, 3, ours());
  ASSERT_TRUE(publisher.publish(set, "set").has_value());
  const MetricsSnapshot m = metrics.collect(publisher.current().get());
  std::uint64_t bits = 0, inserted = 0, ones = 0;
  double fpp = 0;
  for (const Filter& shard : set.shards()) {
    bits += shard.bit_count();
    inserted += shard.inserted_item_count();
    ones += shard.popcount();
    fpp += shard.estimate_false_positive_rate() / kShards;
  }
  EXPECT_EQ(m.shard_count, kShards);
  EXPECT_EQ(m.bit_count, bits);
  EXPECT_EQ(m.inserted_item_count, inserted);
  EXPECT_EQ(m.inserted_item_count, store_.digests_at_version(3).size());
  EXPECT_EQ(m.expected_item_count, 2000u);  // the set's n
  EXPECT_EQ(m.hash_count, set.shard(0).hash_count());
  EXPECT_DOUBLE_EQ(m.fill_ratio, static_cast<double>(ones) / static_cast<double>(bits));
  EXPECT_DOUBLE_EQ(m.estimated_fpp, fpp);
  EXPECT_DOUBLE_EQ(m.target_fpp, 0.05);
  const std::string text = to_prometheus(m);
  EXPECT_NE(text.find("\nartifact_bloom_shards 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nartifact_bloom_size_bytes " + std::to_string(bits / 8) + "\n"),
            std::string::npos);
  const auto json = nlohmann::json::parse(to_json(m));
  EXPECT_EQ(json["gauges"]["artifact_bloom.shard_count"].get<std::uint64_t>(), kShards);
}

TEST_F(PublisherSetTest, BrokenSetNeverServesAndIsCounted) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, store_);
  ASSERT_TRUE(publisher.load_and_publish(save(set_of(store_, 2, ours()), "old.abfs")).has_value());
  const fs::path next = save(set_of(store_, 3, ours()), "new.abfs");
  auto manifest = read_set_manifest(next);
  ASSERT_TRUE(manifest.has_value());
  // A corrupt shard.
  const fs::path shard = dir_ / manifest->shards[1].file;
  const std::string good = test::read_file(shard);
  std::string bad = good;
  bad[kSnapshotHeaderSize + 5] ^= 1;
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bad;
  auto refused = publisher.load_and_publish(next);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kSnapshotPayloadChecksum);
  EXPECT_NE(refused.error().message.find("shard 1 of 3"), std::string::npos);
  // A missing one.
  fs::remove(shard);
  auto missing = publisher.load_and_publish(next);
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().code, ErrorCode::kSetShardMissing);
  EXPECT_EQ(publisher.current()->catalog_version(), 2u);
  EXPECT_EQ(publisher.load_failure_count(), 2u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 2u);
  // Restored, it serves.
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << good;
  ASSERT_TRUE(publisher.load_and_publish(next).has_value());
  EXPECT_EQ(publisher.current()->catalog_version(), 3u);
}

TEST_F(PublisherSetTest, BoundPublisherAndServiceRefuseASetOfAnotherCatalog) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, store_);
  auto refused = publisher.load_and_publish(save(set_of(store_, 3, theirs()), "foreign.abfs"));
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  EXPECT_EQ(publisher.current(), nullptr);
  // An unbound publisher serves it, and the bound service refuses to answer with it.
  SnapshotPublisher unbound;
  ASSERT_TRUE(unbound.publish(set_of(store_, 3, theirs())).has_value());
  const ArtifactExistenceService service(unbound, store_);
  auto answer = service.exists(universe_[0]);
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kCatalogMismatch);
}

TEST_F(PublisherSetTest, BulkDedupThroughSqliteWithASetEqualsTheExactStore) {
  auto catalog = SqliteCatalog::create(dir_ / "catalog.db");
  ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
  ASSERT_TRUE(catalog->add(std::span(universe_).first(2000)).has_value());
  ASSERT_TRUE(catalog->remove(std::span(universe_).subspan(100, 50)).has_value());
  const std::uint64_t version = *catalog->latest_version();
  auto set = build_filter_set_from_catalog(*catalog, version, {2500, 0.02}, 4, std::nullopt);
  ASSERT_TRUE(set.has_value()) << set.error().describe();
  EXPECT_EQ(set->shard_count(), 4u);
  EXPECT_EQ(set->catalog_id(), *catalog->catalog_id());
  EXPECT_EQ(set->inserted_item_count(), 1950u);
  SnapshotPublisher publisher(nullptr, *catalog);
  ASSERT_TRUE(publisher.load_and_publish(save(*set, "cat.abfs")).has_value());

  std::vector<Digest> queries = universe_;
  std::mt19937_64 rng(5);
  std::ranges::shuffle(queries, rng);
  std::string bytes(queries.size() * Digest::kSize, '\0');
  std::memcpy(bytes.data(), queries.data(), bytes.size());
  std::vector<std::vector<Digest>> outputs;
  for (bool use_filter : {true, false}) {
    const ArtifactExistenceService service(publisher, *catalog, nullptr,
                                           {.use_filter = use_filter});
    auto reader = DigestReader::from_memory(bytes, InputFormat::kBinary);
    std::vector<Digest> absent;
    auto report = bulk_dedup(
        service, reader,
        [&](std::span<const Digest> part) -> Result<void> {
          absent.insert(absent.end(), part.begin(), part.end());
          return {};
        },
        500);
    ASSERT_TRUE(report.has_value()) << report.error().describe();
    EXPECT_EQ(report->counts.total - report->counts.present, 1050u);
    outputs.push_back(std::move(absent));
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  // The set's shard-count rule holds for a catalog build too.
  EXPECT_EQ(
      build_filter_set_from_catalog(*catalog, version, {2500, 0.02}, 0, std::nullopt).error().code,
      ErrorCode::kInvalidArgument);
  EXPECT_EQ(
      build_filter_set_from_catalog(*catalog, version, {1000, 0.02}, 4, std::nullopt).error().code,
      ErrorCode::kCapacityExceeded);
}

// Readers answer through the service while a loader swaps sets of
// alternating contents (and shard counts) in: every batch's answers are the
// store's at the version of the snapshot it pinned.
TEST_F(PublisherSetTest, ReadersAnswerExactlyWhileSetsSwap) {
  SnapshotPublisher publisher;
  const fs::path manifest = dir_ / "live.abfs";
  ASSERT_TRUE(save_filter_set(set_of(store_, 1, ours()), manifest).has_value());
  ASSERT_TRUE(publisher.load_and_publish(manifest).has_value());
  const ArtifactExistenceService service(publisher, store_);
  const std::vector<Digest> queries(universe_.begin(), universe_.begin() + 1200);
  std::vector<std::vector<bool>> truth(4);
  for (std::uint64_t v = 1; v <= 3; ++v) {
    for (const Digest& d : queries) truth[v].push_back(*store_.exists_at_version(d, v));
  }
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread loader([&] {
    for (int round = 0; round < 30; ++round) {
      // Versions only go up: 1, 2, 3, then 3 again with another shard count.
      const std::uint64_t version = std::min<std::uint64_t>(3, 1 + round / 3);
      if (!save_filter_set(set_of(store_, version, ours(), 1 + round % 4), manifest)) {
        failures.fetch_add(1);
      }
      if (!publisher.load_and_publish(manifest)) failures.fetch_add(1);
    }
    done.store(true);
  });
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      auto exists = std::make_unique<bool[]>(queries.size());
      while (!done.load()) {
        const auto snapshot = publisher.current();
        // Exact at the catalog's head, whatever the snapshot's version.
        auto head = service.head(*snapshot);
        if (!head) {
          failures.fetch_add(1);
          continue;
        }
        auto counts =
            service.exists_batch(queries, {exists.get(), queries.size()}, *snapshot, *head);
        if (!counts) {
          failures.fetch_add(1);
          continue;
        }
        const auto& expected = truth[head->catalog_version];
        for (std::size_t i = 0; i < queries.size(); ++i) {
          if (exists[i] != expected[i]) failures.fetch_add(1);
        }
      }
    });
  }
  loader.join();
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(publisher.current()->catalog_version(), 3u);
}

}  // namespace
}  // namespace abf::service
