// SnapshotPublisher: verified loads, the version rule, failure counting, and
// readers that keep answering while snapshots are swapped hundreds of times.
// Runs under ThreadSanitizer too (label tsan).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/metrics.hpp"
#include "abf/service/service.hpp"
#include "abf/service/snapshot_publisher.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

constexpr std::size_t kMembersPerVersion = 24;

// The members of catalog version v (distinct per version).
std::vector<Digest> members_of(std::uint64_t version) {
  return test::random_digests(kMembersPerVersion, 1000 + version);
}

Filter filter_of(std::uint64_t version) {
  auto filter = build_filter(members_of(version), {.expected_item_count = 64, .target_fpp = 0.01},
                             version, Backend::kScalar);
  EXPECT_TRUE(filter.has_value());
  return std::move(*filter);
}

// The same, of catalog `id` (and keyed with `key`, if given).
Filter filter_of(std::uint64_t version, const CatalogId& id,
                 const std::optional<Key>& key = std::nullopt) {
  auto filter = build_filter(members_of(version), {.expected_item_count = 64, .target_fpp = 0.01},
                             BuildOptions{.catalog_version = version, .catalog_id = id, .key = key},
                             Backend::kScalar);
  EXPECT_TRUE(filter.has_value());
  return std::move(*filter);
}

// Two distinct catalog ids, read from the golden file and derived from it.
CatalogId ours() { return test::golden_catalog_id(); }
CatalogId theirs() {
  CatalogId id = test::golden_catalog_id();
  id.bytes[0] ^= 0xff;
  return id;
}

// The catalog ours() as these tests bind to it, named "catalog ours.db":
// version v (up to kLatestVersion) holds exactly members_of(v), so
// filter_of(v, ours()) holds what its version holds.
class OursCatalog final : public ArtifactRepository {
 public:
  static constexpr std::uint64_t kLatestVersion = 100;

  Result<bool> exists_at_version(const Digest& digest, std::uint64_t version) override {
    const auto members = members_of(version);
    return std::ranges::find(members, digest) != members.end();
  }
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t version,
                                 std::span<bool> exists) override {
    for (std::size_t i = 0; i < digests.size(); ++i)
      exists[i] = *exists_at_version(digests[i], version);
    return {};
  }
  Result<std::uint64_t> latest_version() override { return kLatestVersion; }
  Result<CatalogContent> content_at_version(std::uint64_t version) override {
    if (version > kLatestVersion) return fail(ErrorCode::kInvalidArgument, "no such version");
    return CatalogContent{kMembersPerVersion, ContentFingerprint::of(members_of(version))};
  }
  // Each version replaces the last: kMembersPerVersion added and removed.
  Result<VersionChanges> changes_between(std::uint64_t after, std::uint64_t upto) override {
    if (after > upto || upto > kLatestVersion) return fail(ErrorCode::kInvalidArgument, "range");
    return VersionChanges{.versions = upto - after,
                          .added = (upto - after) * kMembersPerVersion,
                          .removed = (upto - after) * kMembersPerVersion};
  }
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const DigestSink& sink, std::size_t) override {
    if (after > upto || upto > kLatestVersion) return fail(ErrorCode::kInvalidArgument, "range");
    for (std::uint64_t v = after + 1; v <= upto; ++v) {
      if (auto ok = sink(members_of(v)); !ok) return ok;
    }
    return {};
  }
  Result<std::vector<Digest>> sample_at_version(std::uint64_t version, std::size_t) override {
    if (version > kLatestVersion) return fail(ErrorCode::kInvalidArgument, "no such version");
    return members_of(version);
  }
  std::optional<CatalogBinding> catalog_binding() const override {
    return CatalogBinding{ours(), "catalog ours.db"};
  }
};

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("abf-publisher-test"); }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path save(const Filter& filter, const std::string& name) {
    const fs::path path = dir_ / name;
    EXPECT_TRUE(save_snapshot(filter, path).has_value());
    return path;
  }
  fs::path save(std::uint64_t version) {
    // (Built up step by step: GCC 12 warns -Wrestrict on "v" + to_string(...).)
    std::string name = "v";
    name += std::to_string(version);
    name += ".abf";
    const fs::path path = dir_ / name;
    EXPECT_TRUE(save_snapshot(filter_of(version), path).has_value());
    return path;
  }
  // A copy of a valid snapshot with one payload byte flipped.
  fs::path corrupt(std::uint64_t version) {
    std::string name = "corrupt";
    name += std::to_string(version);
    name += ".abf";
    const fs::path path = dir_ / name;
    auto bytes = serialize_snapshot(filter_of(version));
    bytes[kSnapshotHeaderSize + 3] ^= 0x10;
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()),
               static_cast<std::streamsize>(bytes.size()));
    return path;
  }
  fs::path dir_;
  OursCatalog ours_catalog_;
};

TEST_F(PublisherTest, NothingServesBeforeTheFirstPublish) {
  SnapshotPublisher publisher;
  EXPECT_EQ(publisher.current(), nullptr);
  EXPECT_EQ(publisher.publish_count(), 0u);
}

TEST_F(PublisherTest, PublishesVerifiedSnapshotsInOrder) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  auto first = publisher.load_and_publish(save(42));
  ASSERT_TRUE(first.has_value()) << first.error().describe();
  EXPECT_EQ(publisher.current(), *first);
  EXPECT_EQ((*first)->catalog_version(), 42u);
  EXPECT_EQ((*first)->generation, 1u);
  const auto held = publisher.current();
  auto second = publisher.load_and_publish(save(43));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(publisher.current()->catalog_version(), 43u);
  EXPECT_EQ((*second)->generation, 2u);
  // A reader holding 42 still has 42, whole.
  EXPECT_EQ(held->catalog_version(), 42u);
  for (const Digest& digest : members_of(42)) EXPECT_TRUE(held->filter.might_contain(digest));
  // The same version again (a rebuild) is accepted.
  EXPECT_TRUE(publisher.publish(filter_of(43)).has_value());
  EXPECT_EQ(publisher.publish_count(), 3u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotPublish), 3u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 0u);
}

TEST_F(PublisherTest, RefusesAnOlderCatalogVersion) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  ASSERT_TRUE(publisher.publish(filter_of(43)).has_value());
  auto older = publisher.load_and_publish(save(42));
  ASSERT_FALSE(older.has_value());
  EXPECT_EQ(older.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(older.error().message.find("older"), std::string::npos) << older.error().message;
  EXPECT_EQ(publisher.current()->catalog_version(), 43u);
  EXPECT_EQ(publisher.load_failure_count(), 1u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 1u);
}

TEST_F(PublisherTest, FailedLoadsKeepTheOldSnapshotServing) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  ASSERT_TRUE(publisher.load_and_publish(save(7)).has_value());
  const auto serving = publisher.current();

  auto corrupt_load = publisher.load_and_publish(corrupt(8));
  ASSERT_FALSE(corrupt_load.has_value());
  EXPECT_EQ(corrupt_load.error().code, ErrorCode::kSnapshotPayloadChecksum);
  auto missing = publisher.load_and_publish(dir_ / "missing.abf");
  ASSERT_FALSE(missing.has_value());
  { std::ofstream(dir_ / "empty.abf"); }
  auto empty = publisher.load_and_publish(dir_ / "empty.abf");
  ASSERT_FALSE(empty.has_value());
  EXPECT_EQ(empty.error().code, ErrorCode::kSnapshotTruncated);

  EXPECT_EQ(publisher.current(), serving);
  EXPECT_EQ(publisher.load_failure_count(), 3u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 3u);
  EXPECT_EQ(publisher.publish_count(), 1u);
}

TEST_F(PublisherTest, BoundPublisherRefusesASnapshotOfAnotherCatalog) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, ours_catalog_);
  ASSERT_EQ(publisher.catalog_id(), ours());
  ASSERT_TRUE(publisher.load_and_publish(save(filter_of(7, ours()), "ours.abf")).has_value());
  const auto serving = publisher.current();

  for (const bool from_file : {true, false}) {
    SCOPED_TRACE(from_file ? "load_and_publish" : "publish");
    auto refused = from_file
                       ? publisher.load_and_publish(save(filter_of(8, theirs()), "theirs.abf"))
                       : publisher.publish(filter_of(8, theirs()), "theirs in memory");
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
    // Both ids, and both names, in hex.
    const std::string& message = refused.error().message;
    EXPECT_NE(message.find(ours().hex()), std::string::npos) << message;
    EXPECT_NE(message.find(theirs().hex()), std::string::npos) << message;
    EXPECT_NE(message.find("ours.db"), std::string::npos) << message;
    EXPECT_NE(message.find("theirs"), std::string::npos) << message;
    EXPECT_EQ(publisher.current(), serving);  // the old snapshot keeps serving
  }
  EXPECT_EQ(publisher.load_failure_count(), 2u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 2u);
  EXPECT_EQ(publisher.publish_count(), 1u);
  // A newer snapshot of its own catalog is published as before.
  ASSERT_TRUE(publisher.publish(filter_of(8, ours())).has_value());
  EXPECT_EQ(publisher.current()->catalog_version(), 8u);
}

TEST_F(PublisherTest, BoundPublisherRefusesASnapshotOfNoCatalog) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, ours_catalog_);
  // Built from files without a catalog id, or any formatVersion-1 file.
  for (const fs::path& path : {save(7), test::data_path("vectors/member-1000.abf")}) {
    SCOPED_TRACE(path.string());
    auto refused = publisher.load_and_publish(path);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
    EXPECT_NE(refused.error().message.find(ours().hex()), std::string::npos)
        << refused.error().message;
    EXPECT_NE(refused.error().message.find(CatalogId{}.hex()), std::string::npos)
        << refused.error().message;
  }
  EXPECT_EQ(publisher.current(), nullptr);
  EXPECT_EQ(publisher.load_failure_count(), 2u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 2u);
}

TEST_F(PublisherTest, UnboundPublisherPublishesAnyCatalog) {
  SnapshotPublisher publisher;
  EXPECT_FALSE(publisher.catalog_id().has_value());
  EXPECT_TRUE(publisher.publish(filter_of(1, ours())).has_value());
  EXPECT_TRUE(publisher.publish(filter_of(2, theirs())).has_value());
  EXPECT_TRUE(publisher.publish(filter_of(3)).has_value());
  EXPECT_EQ(publisher.load_failure_count(), 0u);
}

TEST_F(PublisherTest, KeyedSnapshotLoadsOnlyWithItsKey) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, ours_catalog_);
  const test::VectorKey key = test::golden_key();
  const fs::path keyed = save(filter_of(5, ours(), key.key), "keyed.abf");
  auto without = publisher.load_and_publish(keyed);
  ASSERT_FALSE(without.has_value());
  EXPECT_EQ(without.error().code, ErrorCode::kKeyRequired);
  LoadOptions other;
  other.key = test::other_key().key;
  auto wrong = publisher.load_and_publish(keyed, other);
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kKeyMismatch);
  EXPECT_EQ(publisher.load_failure_count(), 2u);
  EXPECT_EQ(publisher.current(), nullptr);
  LoadOptions right;
  right.key = key.key;
  auto loaded = publisher.load_and_publish(keyed, right);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  EXPECT_EQ((*loaded)->filter.hash_protocol_version(), 2u);
  for (const Digest& digest : members_of(5)) EXPECT_TRUE((*loaded)->filter.might_contain(digest));
  // The key never appears in an error.
  for (const auto& error : {without.error(), wrong.error()}) {
    EXPECT_EQ(error.message.find(key.hex), std::string::npos) << error.message;
    EXPECT_EQ(error.message.find(test::other_key().hex), std::string::npos) << error.message;
  }
}

// Many readers answer while a publisher swaps snapshots hundreds of times,
// with corrupt files in between. Each reader checks that the snapshot it holds
// is one consistent whole (its bits hold its own version's members, and it
// stays the same snapshot while held) and that versions never go backwards.
TEST_F(PublisherTest, ReadersSeeOneConsistentSnapshotWhileSwapping) {
  constexpr std::uint64_t kSwaps = 300;
  constexpr int kReaders = 4;
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  // Prepared up front so the swap loop is fast.
  std::vector<Filter> filters;
  std::vector<std::vector<Digest>> members;
  for (std::uint64_t v = 0; v <= kSwaps; ++v) {
    filters.push_back(filter_of(v));
    members.push_back(members_of(v));
  }
  const fs::path bad = corrupt(5);
  ASSERT_TRUE(publisher.publish(filters[0]).has_value());

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> reads{0};
  std::atomic<std::uint64_t> problems{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&] {
      std::uint64_t last_version = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        const auto snapshot = publisher.current();
        const std::uint64_t version = snapshot->catalog_version();
        if (version < last_version) problems.fetch_add(1);
        last_version = version;
        for (const Digest& digest : members[version]) {
          if (!snapshot->filter.might_contain(digest)) problems.fetch_add(1);
        }
        if (snapshot->catalog_version() != version) problems.fetch_add(1);
        reads.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  std::uint64_t refused = 0;
  for (std::uint64_t v = 1; v <= kSwaps; ++v) {
    ASSERT_TRUE(publisher.publish(filters[v]).has_value());
    if (v % 50 == 0) {
      EXPECT_FALSE(publisher.load_and_publish(bad).has_value());
      ++refused;
      EXPECT_EQ(publisher.current()->catalog_version(), v);
    }
    if (v % 10 == 0) std::this_thread::yield();
  }
  // Let every reader finish at least a few reads of the final snapshot.
  const std::uint64_t reads_at_end = reads.load();
  while (reads.load() < reads_at_end + 4 * kReaders) std::this_thread::yield();
  stop.store(true);
  for (auto& reader : readers) reader.join();

  EXPECT_EQ(problems.load(), 0u);
  EXPECT_GT(reads.load(), 0u);
  EXPECT_EQ(publisher.current()->catalog_version(), kSwaps);
  EXPECT_EQ(publisher.publish_count(), kSwaps + 1);
  EXPECT_EQ(publisher.load_failure_count(), refused);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), refused);
}

// Two publishers racing each other are serialized; the version rule holds.
TEST_F(PublisherTest, ConcurrentPublishersNeverGoBackwards) {
  SnapshotPublisher publisher;
  std::vector<Filter> filters;
  for (std::uint64_t v = 0; v < 64; ++v) filters.push_back(filter_of(v));
  std::atomic<std::uint64_t> accepted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      for (std::uint64_t v = static_cast<std::uint64_t>(t); v < 64; v += 2) {
        if (publisher.publish(filters[v]).has_value()) accepted.fetch_add(1);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(publisher.publish_count(), accepted.load());
  EXPECT_EQ(publisher.publish_count() + publisher.load_failure_count(), 64u);
  EXPECT_GE(publisher.current()->catalog_version(), 62u);
}

// The service's query path (snapshot reference, filter, store, sharded
// metrics) on many threads while snapshots are swapped: every answer equals
// the store's, and the counters add up.
TEST_F(PublisherTest, ServiceAnswersCorrectlyWhileSnapshotsSwap) {
  constexpr std::uint64_t kVersions = 120;
  constexpr int kReaders = 4;
  MemoryRepository store;
  std::vector<Filter> filters;
  std::vector<Digest> everything;
  for (std::uint64_t v = 1; v <= kVersions; ++v) {
    const auto members = members_of(v);
    EXPECT_EQ(store.add(members), v);
    everything.insert(everything.end(), members.begin(), members.end());
    auto filter =
        build_filter(store.digests_at_version(v),
                     {.expected_item_count = kVersions * kMembersPerVersion, .target_fpp = 0.01}, v,
                     Backend::kScalar);
    ASSERT_TRUE(filter.has_value());
    filters.push_back(std::move(*filter));
  }
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  ASSERT_TRUE(publisher.publish(filters[0]).has_value());
  const ArtifactExistenceService service(publisher, store, &metrics);

  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> answered{0};
  std::atomic<std::uint64_t> wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      std::size_t i = static_cast<std::size_t>(r) * 97;
      while (!stop.load(std::memory_order_relaxed)) {
        const Digest& digest = everything[i++ % everything.size()];
        auto answer = service.exists(digest);
        if (!answer.has_value() ||
            answer->exists != *store.exists_at_version(digest, answer->catalog_version)) {
          wrong.fetch_add(1);
        }
        answered.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (std::uint64_t v = 2; v <= kVersions; ++v) {
    ASSERT_TRUE(publisher.publish(filters[v - 1]).has_value());
    std::this_thread::yield();
  }
  const std::uint64_t at_end = answered.load();
  while (answered.load() < at_end + 8 * kReaders) std::this_thread::yield();
  stop.store(true);
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(wrong.load(), 0u);
  const auto m = metrics.collect(publisher.current().get());
  EXPECT_EQ(m[Counter::kQuery], answered.load());
  // Answers are at the store's head (120): a filter absent for a digest
  // added after the snapshot's version is a head lookup.
  EXPECT_EQ(m[Counter::kNegative] + m[Counter::kMaybe] + m[Counter::kHeadLookup],
            answered.load());
  EXPECT_EQ(m[Counter::kExactLookup], m[Counter::kMaybe] + m[Counter::kHeadLookup]);
  EXPECT_EQ(m.catalog_version, kVersions);
}

}  // namespace
}  // namespace abf::service
