// check_snapshot_binding (issue 22): a snapshot answers for a catalog only
// when it holds what the catalog holds at its version. The bound publisher
// refuses the others (counted; the serving snapshot stays), the service
// refuses them when an unbound publisher serves them, and the refusal names
// both fingerprints and counts.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
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

constexpr BloomSpec kSpec{.expected_item_count = 4000, .target_fpp = 0.01};

Filter build_of(const std::vector<Digest>& digests, std::uint64_t version, const CatalogId& id) {
  auto filter = build_filter(digests, kSpec,
                             BuildOptions{.catalog_version = version, .catalog_id = id, .key = {}});
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

void expect_contains(const std::string& message, const std::vector<std::string>& fragments) {
  for (const std::string& fragment : fragments) {
    EXPECT_NE(message.find(fragment), std::string::npos) << fragment << "\n" << message;
  }
}

// Recomputes the header checksum of a formatVersion-2 snapshot.
void reseal_header(std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint8_t> header(bytes.begin(), bytes.begin() + 128);
  std::memset(header.data() + 72, 0, 8);
  const std::uint64_t checksum = XXH3_64bits(header.data(), header.size());
  std::memcpy(bytes.data() + 72, &checksum, 8);
}

// Two catalogs with one id: `original` advanced by X to version 2,
// `restored` (its version-1 backup) advanced by Y to another version 2.
class BindingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (MemoryRepository* store : {&original_, &restored_}) ASSERT_EQ(store->add(base_), 1u);
    ASSERT_EQ(original_.add(x_), 2u);
    ASSERT_EQ(restored_.add(y_), 2u);
  }

  const CatalogId id_ = test::golden_catalog_id();
  const std::vector<Digest> base_ = test::random_digests(500, 1);
  const std::vector<Digest> x_ = test::random_digests(1000, 2);
  const std::vector<Digest> y_ = test::random_digests(1000, 3);
  MemoryRepository original_{id_};
  MemoryRepository restored_{id_};
};

TEST_F(BindingTest, SnapshotOfTheSameIdAndVersionWithOtherContentsIsRefused) {
  const Filter old_v2 = build_of(original_.digests_at_version(2), 2, id_);
  ASSERT_TRUE(old_v2.content_fingerprint().has_value());
  auto refused = check_snapshot_binding(old_v2, "snap_v2.abf", restored_);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  expect_contains(refused.error().message,
                  {"snap_v2.abf", "catalog version 2", "memory catalog " + id_.hex(),
                   original_.content_at_version(2)->fingerprint.hex(),
                   restored_.content_at_version(2)->fingerprint.hex(), "over 1500 insertions",
                   "over 1500 digests", "abf build --from-catalog"});
  // The same build is the original's version 2, and its version 1 is both's.
  EXPECT_TRUE(check_snapshot_binding(old_v2, "snap_v2.abf", original_).has_value());
  const Filter v1 = build_of(base_, 1, id_);
  EXPECT_TRUE(check_snapshot_binding(v1, "v1.abf", original_).has_value());
  EXPECT_TRUE(check_snapshot_binding(v1, "v1.abf", restored_).has_value());
}

TEST_F(BindingTest, ContentsAreCheckedWhateverTheOrderOrSharding) {
  std::vector<Digest> reversed = restored_.digests_at_version(2);
  std::ranges::reverse(reversed);
  EXPECT_TRUE(check_snapshot_binding(build_of(reversed, 2, id_), "r.abf", restored_).has_value());
  auto set = build_filter_set(reversed, kSpec, 3,
                              BuildOptions{.catalog_version = 2, .catalog_id = id_, .key = {}});
  ASSERT_TRUE(set.has_value()) << set.error().describe();
  EXPECT_TRUE(check_snapshot_binding(*set, "r.abfs", restored_).has_value());
  auto other_set = build_filter_set(original_.digests_at_version(2), kSpec, 3,
                                    BuildOptions{.catalog_version = 2, .catalog_id = id_, .key = {}});
  ASSERT_TRUE(other_set.has_value());
  auto refused = check_snapshot_binding(*other_set, "o.abfs", restored_);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  // A repeat inserted: the count and fingerprint both say so.
  std::vector<Digest> repeated = restored_.digests_at_version(2);
  repeated.push_back(repeated.front());
  refused = check_snapshot_binding(build_of(repeated, 2, id_), "rep.abf", restored_);
  ASSERT_FALSE(refused.has_value());
  expect_contains(refused.error().message, {"over 1501 insertions", "over 1500 digests"});
}

TEST_F(BindingTest, VersionTheCatalogLacksIsRefused) {
  const Filter ahead = build_of(restored_.digests_at_version(2), 3, id_);
  auto refused = check_snapshot_binding(ahead, "ahead.abf", restored_);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  expect_contains(refused.error().message, {"ahead.abf", "catalog version 3", "only reaches version 2"});
}

TEST_F(BindingTest, SnapshotWithoutAFingerprintIsRefusedWithHowToRebuildIt) {
  const test::TempDir dir("abf-binding");
  // The version-2 header with its fingerprint bytes and flags cleared, as a
  // file written before fingerprints has them.
  auto bytes = serialize_snapshot(build_of(restored_.digests_at_version(2), 2, id_));
  std::memset(bytes.data() + 104, 0, 24);
  reseal_header(bytes);
  auto loaded = parse_snapshot(bytes);
  ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
  ASSERT_FALSE(loaded->content_fingerprint().has_value());
  auto refused = check_snapshot_binding(*loaded, "old.abf", restored_);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  expect_contains(refused.error().message,
                  {"old.abf", "no content fingerprint",
                   "abf build --from-catalog DB --catalog-version 2"});
}

// The bits of the old version 2 under a header that claims the new one's
// fingerprint (the same count, a plausible fill): only the bits can tell,
// and a sample of the catalog's digests answered absent does.
TEST_F(BindingTest, HeaderClaimingTheContentsOverOtherBitsIsRefused) {
  auto bytes = serialize_snapshot(build_of(original_.digests_at_version(2), 2, id_));
  const auto claimed = restored_.content_at_version(2)->fingerprint.bytes();
  std::memcpy(bytes.data() + 104, claimed.data(), claimed.size());
  reseal_header(bytes);
  auto forged = parse_snapshot(bytes);
  ASSERT_TRUE(forged.has_value()) << forged.error().describe();
  ASSERT_EQ(forged->content_fingerprint(), restored_.content_at_version(2)->fingerprint);
  ASSERT_TRUE(check_fill(*forged, FillCheck::kDistinctInsertions).has_value());
  auto refused = check_snapshot_binding(*forged, "forged.abf", restored_);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  expect_contains(refused.error().message,
                  {"forged.abf", "answers absent for", "catalog version 2", "abf build"});
}

TEST_F(BindingTest, BoundPublisherRefusesAndKeepsServingTheOldSnapshot) {
  Metrics metrics;
  SnapshotPublisher publisher(&metrics, restored_);
  ASSERT_EQ(publisher.catalog(), &restored_);
  ASSERT_TRUE(publisher.publish(build_of(base_, 1, id_), "v1.abf").has_value());
  const auto serving = publisher.current();
  EXPECT_EQ(serving->checked_against, &restored_);
  auto refused = publisher.publish(build_of(original_.digests_at_version(2), 2, id_), "old.abf");
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kCatalogMismatch);
  EXPECT_EQ(publisher.current(), serving);
  EXPECT_EQ(publisher.load_failure_count(), 1u);
  EXPECT_EQ(metrics.get(Counter::kSnapshotLoadFailure), 1u);
  ASSERT_TRUE(publisher.publish(build_of(restored_.digests_at_version(2), 2, id_)).has_value());
  EXPECT_EQ(publisher.current()->catalog_version(), 2u);
  // A store that names no catalog leaves the publisher unbound.
  MemoryRepository anonymous;
  SnapshotPublisher unbound(nullptr, anonymous);
  EXPECT_EQ(unbound.catalog(), nullptr);
  EXPECT_FALSE(unbound.catalog_id().has_value());
}

// The service refuses what an unbound publisher serves, for every kind of
// call, and answers nothing from it: reproduction 1 at the library level.
TEST_F(BindingTest, ServiceRefusesAnUncheckedSnapshotOfOtherContents) {
  SnapshotPublisher unbound;
  ASSERT_TRUE(unbound.publish(build_of(original_.digests_at_version(2), 2, id_), "old.abf"));
  EXPECT_EQ(unbound.current()->checked_against, nullptr);
  const ArtifactExistenceService service(unbound, restored_);
  auto single = service.exists(y_[0]);
  ASSERT_FALSE(single.has_value());
  EXPECT_EQ(single.error().code, ErrorCode::kCatalogMismatch);
  auto exists = std::make_unique<bool[]>(y_.size());
  auto batch = service.exists_batch(y_, {exists.get(), y_.size()});
  ASSERT_FALSE(batch.has_value());
  EXPECT_EQ(batch.error().code, ErrorCode::kCatalogMismatch);
  std::string bytes(y_.size() * Digest::kSize, '\0');
  std::memcpy(bytes.data(), y_.data(), bytes.size());
  auto reader = DigestReader::from_memory(bytes, InputFormat::kBinary);
  std::size_t emitted = 0;
  auto report = bulk_dedup(service, reader, [&](std::span<const Digest> part) -> Result<void> {
    emitted += part.size();
    return {};
  });
  ASSERT_FALSE(report.has_value());
  EXPECT_EQ(report.error().code, ErrorCode::kCatalogMismatch);
  EXPECT_EQ(emitted, 0u);
  // The right contents, unchecked by a publisher, are checked and answer.
  ASSERT_TRUE(unbound.publish(build_of(restored_.digests_at_version(2), 2, id_), "new.abf"));
  auto answer = service.exists(y_[0]);
  ASSERT_TRUE(answer.has_value()) << answer.error().describe();
  EXPECT_TRUE(answer->exists);
}

}  // namespace
}  // namespace abf::service
