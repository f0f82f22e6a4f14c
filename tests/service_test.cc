// ArtifactExistenceService: every answer equals the exact store's, with the
// filter in front or not; the version rule; metrics and their ratios.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <sstream>
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

Filter build_at(MemoryRepository& store, std::uint64_t version, std::uint64_t capacity,
                double fpp) {
  auto filter = build_filter(store.digests_at_version(version),
                             {.expected_item_count = capacity, .target_fpp = fpp}, version);
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

// Queries: members, removed digests and strangers, shuffled.
std::vector<Digest> mixed_queries(const std::vector<Digest>& universe, std::size_t strangers,
                                  std::uint64_t seed) {
  std::vector<Digest> queries = universe;
  const auto others = test::random_digests(strangers, seed);
  queries.insert(queries.end(), others.begin(), others.end());
  std::mt19937_64 rng(seed);
  std::ranges::shuffle(queries, rng);
  return queries;
}

// A filter of `store` at `version`, of catalog `id`.
Filter build_of_catalog(MemoryRepository& store, std::uint64_t version, const CatalogId& id) {
  auto filter = build_filter(
      store.digests_at_version(version), {.expected_item_count = 1000, .target_fpp = 0.01},
      BuildOptions{.catalog_version = version, .catalog_id = id, .key = std::nullopt});
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

CatalogId other_catalog_id() {
  CatalogId id = test::golden_catalog_id();
  id.bytes[15] ^= 0x5a;
  return id;
}

// Random catalogs (adds and removes), random queries: the service's answers,
// single and batch, with and without the filter, equal the store's.
TEST(ServiceTest, AnswersEqualTheExactStoreWithAndWithoutTheFilter) {
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    std::mt19937_64 rng(seed);
    const auto universe = test::random_digests(2000 + seed * 500, seed * 7);
    MemoryRepository store;
    for (int step = 0; step < 5; ++step) {
      std::vector<Digest> pick;
      for (std::size_t i = 0, n = rng() % 1500; i < n; ++i)
        pick.push_back(universe[rng() % universe.size()]);
      if (step == 0 || rng() % 3 != 0) {
        store.add(pick);
      } else {
        store.remove(pick);
      }
    }
    const std::uint64_t version = *store.latest_version();
    // A small, crowded filter (fpp 0.2) so there are plenty of false positives.
    Metrics metrics;
    SnapshotPublisher publisher(&metrics);
    ASSERT_TRUE(publisher.publish(build_at(store, version, 4000, 0.2)).has_value());
    const ArtifactExistenceService filtered(publisher, store, &metrics);
    const ArtifactExistenceService exact(publisher, store, nullptr, {.use_filter = false});

    const auto queries = mixed_queries(universe, 3000, seed * 11);
    auto want = std::make_unique<bool[]>(queries.size());
    ASSERT_TRUE(store.exists_at_version(queries, version, {want.get(), queries.size()}));
    for (const ArtifactExistenceService* service : {&filtered, &exact}) {
      auto got = std::make_unique<bool[]>(queries.size());
      auto counts = service->exists_batch(queries, {got.get(), queries.size()});
      ASSERT_TRUE(counts.has_value()) << counts.error().describe();
      for (std::size_t i = 0; i < queries.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << "batch, digest " << i << ", seed " << seed;
        auto single = service->exists(queries[i]);
        ASSERT_TRUE(single.has_value());
        ASSERT_EQ(single->exists, want[i]) << "single, digest " << i << ", seed " << seed;
        ASSERT_EQ(single->catalog_version, version);
        if (single->filter_negative) {
          ASSERT_FALSE(want[i]);
        }
      }
    }
    // The filter did its job: plenty of negatives, some false positives.
    const auto m = metrics.collect(publisher.current().get());
    EXPECT_GT(m[Counter::kNegative], queries.size() / 2);
    EXPECT_GT(m[Counter::kFalsePositive], 0u);
  }
}

// find_missing gives exists_batch's verdicts as the missing indices, with
// the same counts: with the filter, without it, asking the store about
// every digest, and at a head past the snapshot (its added digests held or
// not), on random catalogs and on an empty batch.
TEST(ServiceTest, FindMissingIsExistsBatchAsMissingIndices) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    const auto universe = test::random_digests(3000, seed * 13);
    MemoryRepository store;
    store.add(std::span(universe).first(1500));
    store.remove(std::span(universe).subspan(1000, 200));
    Metrics metrics;
    SnapshotPublisher publisher(&metrics);
    ASSERT_TRUE(publisher.publish(build_at(store, *store.latest_version(), 3000, 0.2)).has_value());
    // Added after the snapshot: the filter's `absent` for these is wrong.
    store.add(std::span(universe).subspan(1500, 500));
    const std::uint64_t head_version = *store.latest_version();
    const ArtifactExistenceService filtered(publisher, store, &metrics);
    const ArtifactExistenceService exact(publisher, store, nullptr, {.use_filter = false});
    const ArtifactExistenceService every(publisher, store, nullptr, {.ask_store_up_to = 1u << 20});
    const ArtifactExistenceService uncached(publisher, store, nullptr, {.head_cache_digests = 0});
    const auto queries = mixed_queries(universe, 2000, seed * 17);
    const auto snapshot = publisher.current();
    for (const ArtifactExistenceService* service : {&filtered, &exact, &every, &uncached}) {
      auto head = service->head(*snapshot);
      ASSERT_TRUE(head.has_value()) << head.error().describe();
      ASSERT_EQ(head->catalog_version, head_version);
      auto want = std::make_unique<bool[]>(queries.size());
      ASSERT_TRUE(store.exists_at_version(queries, head->catalog_version,
                                          {want.get(), queries.size()}));
      std::vector<std::uint32_t> want_missing;
      for (std::size_t i = 0; i < queries.size(); ++i) {
        if (!want[i]) want_missing.push_back(static_cast<std::uint32_t>(i));
      }
      for (const std::size_t count : {queries.size(), std::size_t{1}, std::size_t{0}}) {
        const auto part = std::span(queries).first(count);
        auto exists = std::make_unique<bool[]>(std::max<std::size_t>(count, 1));
        auto by_bool = service->exists_batch(part, {exists.get(), count}, *snapshot, *head);
        ASSERT_TRUE(by_bool.has_value()) << by_bool.error().describe();
        std::vector<std::uint32_t> missing = {7};  // appended to, never cleared
        auto by_index = service->find_missing(part, *snapshot, *head, missing);
        ASSERT_TRUE(by_index.has_value()) << by_index.error().describe();
        ASSERT_EQ(missing.front(), 7u);
        missing.erase(missing.begin());
        std::vector<std::uint32_t> expected;
        for (const std::uint32_t i : want_missing) {
          if (i < count) expected.push_back(i);
        }
        ASSERT_EQ(missing, expected) << "seed " << seed << ", " << count << " digests";
        for (std::size_t i = 0; i < count; ++i) ASSERT_EQ(exists[i], want[i]) << "digest " << i;
        const auto& a = *by_bool;
        const auto& b = *by_index;
        EXPECT_EQ(a.total, b.total);
        EXPECT_EQ(a.negative, b.negative);
        EXPECT_EQ(a.maybe, b.maybe);
        EXPECT_EQ(a.false_positive, b.false_positive);
        EXPECT_EQ(a.head_lookups, b.head_lookups);
        EXPECT_EQ(a.head_present, b.head_present);
        EXPECT_EQ(a.exact_lookups, b.exact_lookups);
        EXPECT_EQ(a.present, b.present);
        EXPECT_EQ(b.present + missing.size(), count);
      }
    }
    // The lag mattered: some digests were present only at the head.
    auto head = filtered.head(*snapshot);
    ASSERT_TRUE(head.has_value());
    std::vector<std::uint32_t> missing;
    auto counts = filtered.find_missing(queries, *snapshot, *head, missing);
    ASSERT_TRUE(counts.has_value());
    EXPECT_GT(counts->head_present, 0u);
    EXPECT_GT(counts->false_positive, 0u);
  }
}

// The same through the SQLite catalog, with bulk_dedup.
TEST(ServiceTest, DedupThroughSqliteEqualsTheExactStore) {
  const test::TempDir temp("abf-service-test");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  {
    auto catalog = SqliteCatalog::create(dir / "catalog.db");
    ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
    MemoryRepository reference;
    const auto universe = test::random_digests(3000, 21);
    const auto first = std::span(universe).first(2000);
    ASSERT_TRUE(catalog->add(first).has_value());
    reference.add(first);
    const auto gone = std::span(universe).subspan(1500, 300);
    ASSERT_TRUE(catalog->remove(gone).has_value());
    reference.remove(gone);
    const std::uint64_t version = *catalog->latest_version();
    auto filter = build_filter_from_catalog(*catalog, version,
                                            {.expected_item_count = 2000, .target_fpp = 0.05});
    ASSERT_TRUE(filter.has_value());
    SnapshotPublisher publisher;
    ASSERT_TRUE(publisher.publish(std::move(*filter)).has_value());

    const auto queries = mixed_queries(universe, 2000, 22);
    std::string bytes(queries.size() * Digest::kSize, '\0');
    std::memcpy(bytes.data(), queries.data(), bytes.size());
    std::vector<Digest> expected;
    for (const Digest& digest : queries) {
      if (!*reference.exists_at_version(digest, version)) expected.push_back(digest);
    }
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
          333);
      ASSERT_TRUE(report.has_value()) << report.error().describe();
      EXPECT_EQ(absent, expected) << "use_filter " << use_filter;
      EXPECT_EQ(report->catalog_version, version);
      const BatchCounts& c = report->counts;
      EXPECT_EQ(c.total, queries.size());
      EXPECT_EQ(c.total - c.present, expected.size());
      EXPECT_EQ(c.negative + c.maybe, use_filter ? c.total : 0u);
      EXPECT_EQ(c.exact_lookups, use_filter ? c.maybe : c.total);
      if (use_filter) {
        EXPECT_EQ(c.maybe, c.present + c.false_positive);
        EXPECT_GT(c.negative, 0u);
      } else {
        EXPECT_EQ(c.maybe, 0u);
        EXPECT_EQ(c.false_positive, 0u);
      }
    }
  }
}

// Added at 43, snapshot of 42: a query at 43 never gets `absent` from the
// old filter. The rule: the filter is used only for its own version; any
// other version goes to the exact store.
TEST(ServiceTest, AnOlderSnapshotNeverAnswersAbsentForANewerVersion) {
  MemoryRepository store;
  const auto filler = test::random_digests(41, 31);
  for (const Digest& digest : filler) store.add(std::span(&digest, 1));
  const auto base = test::random_digests(200, 32);
  ASSERT_EQ(store.add(base), 42u);
  const Digest late = test::non_member_digest(43);
  ASSERT_EQ(store.add(std::span(&late, 1)), 43u);

  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  ASSERT_TRUE(publisher.publish(build_at(store, 42, 1000, 0.001)).has_value());
  ASSERT_FALSE(publisher.current()->filter.might_contain(late));  // the trap is armed
  const ArtifactExistenceService service(publisher, store, &metrics);

  EXPECT_TRUE(*store.exists_at_version(late, 43));
  auto at43 = service.exists_at_version(late, 43);
  ASSERT_TRUE(at43.has_value());
  EXPECT_TRUE(at43->exists);
  EXPECT_FALSE(at43->filter_negative);
  EXPECT_EQ(at43->catalog_version, 43u);
  EXPECT_TRUE(at43->head_lookup);  // the filter's absent, checked against what 43 added
  EXPECT_EQ(metrics.get(Counter::kHeadLookup), 1u);
  EXPECT_EQ(metrics.get(Counter::kHeadPresent), 1u);
  // exists() answers at the catalog's head, 43, the same way.
  auto at_head = service.exists(late);
  ASSERT_TRUE(at_head.has_value());
  EXPECT_TRUE(at_head->exists);
  EXPECT_EQ(at_head->catalog_version, 43u);
  // At the snapshot's own version, `late` is rightly absent, by the filter.
  auto at42 = service.exists_at_version(late, 42);
  ASSERT_TRUE(at42.has_value());
  EXPECT_FALSE(at42->exists);
  EXPECT_TRUE(at42->filter_negative);
  EXPECT_EQ(at42->catalog_version, 42u);
  // And so does a service that answers at the snapshot's version.
  const ArtifactExistenceService frozen(publisher, store, nullptr, {.answer_at_head = false});
  auto frozen_answer = frozen.exists(late);
  ASSERT_TRUE(frozen_answer.has_value());
  EXPECT_FALSE(frozen_answer->exists);
  EXPECT_EQ(frozen_answer->catalog_version, 42u);
  // Beyond the head the store alone answers.
  EXPECT_TRUE(service.exists_at_version(late, 44).has_value());
  EXPECT_EQ(metrics.get(Counter::kFilterBypass), 1u);

  // Removed at 44: a snapshot of 44 no longer holds it, and a query at 43
  // (older than the snapshot) still finds it through the store.
  ASSERT_EQ(store.remove(std::span(&late, 1)), 44u);
  ASSERT_TRUE(publisher.publish(build_at(store, 44, 1000, 0.001)).has_value());
  EXPECT_TRUE(service.exists_at_version(late, 43)->exists);
  EXPECT_FALSE(service.exists(late)->exists);
  // The publisher refuses to go back to 42.
  EXPECT_FALSE(publisher.publish(build_at(store, 42, 1000, 0.001)).has_value());
  EXPECT_EQ(publisher.current()->catalog_version(), 44u);
}

// The reporter's case of issue 12 at the library level: a service whose
// store names its catalog never answers with a snapshot of another one, for
// the filter or for its version.
TEST(ServiceTest, BoundServiceRefusesASnapshotOfAnotherCatalog) {
  MemoryRepository store(test::golden_catalog_id());
  const auto members = test::random_digests(300, 51);
  ASSERT_EQ(store.add(members), 1u);
  SnapshotPublisher publisher;  // unbound: the service alone must refuse
  ASSERT_TRUE(publisher.publish(build_of_catalog(store, 1, other_catalog_id()), "foreign.abf"));
  for (const bool use_filter : {true, false}) {
    SCOPED_TRACE(use_filter ? "filter" : "exact only");
    const ArtifactExistenceService service(publisher, store, nullptr, {.use_filter = use_filter});
    ASSERT_TRUE(service.catalog_binding().has_value());
    const auto expect_refused = [](const Error& error) {
      EXPECT_EQ(error.code, ErrorCode::kCatalogMismatch);
      EXPECT_NE(error.message.find(test::golden_catalog_id().hex()), std::string::npos)
          << error.message;
      EXPECT_NE(error.message.find(other_catalog_id().hex()), std::string::npos) << error.message;
      EXPECT_NE(error.message.find("foreign.abf"), std::string::npos) << error.message;
    };
    auto single = service.exists(members[0]);
    ASSERT_FALSE(single.has_value());
    expect_refused(single.error());
    auto text = service.exists(members[0].hex());
    ASSERT_FALSE(text.has_value());
    expect_refused(text.error());
    auto batch_answers = std::make_unique<bool[]>(members.size());
    auto batch = service.exists_batch(members, {batch_answers.get(), members.size()});
    ASSERT_FALSE(batch.has_value());
    expect_refused(batch.error());
    if (use_filter) {
      auto at_version = service.exists_at_version(members[0], 1);
      ASSERT_FALSE(at_version.has_value());
      expect_refused(at_version.error());
    }
    // A version the snapshot is not for uses no snapshot: the store answers.
    auto other_version = service.exists_at_version(members[0], 2);
    ASSERT_TRUE(other_version.has_value());
    EXPECT_TRUE(other_version->exists);
  }
  // Its own catalog's snapshot answers as the store does.
  ASSERT_TRUE(publisher.publish(build_of_catalog(store, 1, test::golden_catalog_id())));
  const ArtifactExistenceService service(publisher, store);
  EXPECT_TRUE(service.exists(members[0])->exists);
  EXPECT_FALSE(service.exists(test::non_member_digest(1))->exists);
}

TEST(ServiceTest, BoundServiceRefusesASnapshotOfNoCatalog) {
  MemoryRepository store(test::golden_catalog_id());
  const auto members = test::random_digests(100, 52);
  store.add(members);
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(build_of_catalog(store, 1, CatalogId{})));
  const ArtifactExistenceService service(publisher, store);
  auto answer = service.exists(members[0]);
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kCatalogMismatch);
  EXPECT_NE(answer.error().message.find(CatalogId{}.hex()), std::string::npos)
      << answer.error().message;
  EXPECT_NE(answer.error().message.find(test::golden_catalog_id().hex()), std::string::npos)
      << answer.error().message;
}

TEST(ServiceTest, UnboundStoreChecksNoCatalog) {
  MemoryRepository store;  // names no catalog
  EXPECT_FALSE(store.catalog_binding().has_value());
  const auto members = test::random_digests(100, 53);
  store.add(members);
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(build_of_catalog(store, 1, other_catalog_id())));
  const ArtifactExistenceService service(publisher, store);
  EXPECT_FALSE(service.catalog_binding().has_value());
  EXPECT_TRUE(service.exists(members[0])->exists);
}

// bulk_dedup refuses a foreign snapshot before reading any input, so
// nothing is ever emitted: no partial output.
TEST(ServiceTest, BulkDedupRefusesAForeignSnapshotBeforeEmittingAnything) {
  const test::TempDir temp("abf-service-test");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  {
    auto catalog = SqliteCatalog::create(dir / "catalog.db");
    ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
    const auto members = test::member_digests(1000);
    ASSERT_TRUE(catalog->add(members).has_value());
    // The reporter's snapshot: built from a file of other digests, version 1,
    // no catalog id; then one of another catalog.
    const auto others = test::random_digests(1000, 54);
    for (const CatalogId& id : {CatalogId{}, other_catalog_id()}) {
      SCOPED_TRACE(id.hex());
      auto foreign = build_filter(others, {.expected_item_count = 5000, .target_fpp = 0.01},
                                  BuildOptions{.catalog_version = 1, .catalog_id = id, .key = {}});
      ASSERT_TRUE(foreign.has_value());
      SnapshotPublisher publisher;
      ASSERT_TRUE(publisher.publish(std::move(*foreign), "foreign.abf"));
      const ArtifactExistenceService service(publisher, *catalog);
      std::string bytes(members.size() * Digest::kSize, '\0');
      std::memcpy(bytes.data(), members.data(), bytes.size());
      auto reader = DigestReader::from_memory(bytes, InputFormat::kBinary);
      std::size_t emitted = 0;
      auto report = bulk_dedup(service, reader, [&](std::span<const Digest> part) -> Result<void> {
        emitted += part.size();
        return {};
      });
      ASSERT_FALSE(report.has_value());
      EXPECT_EQ(report.error().code, ErrorCode::kCatalogMismatch);
      EXPECT_NE(report.error().message.find(catalog->catalog_id()->hex()), std::string::npos)
          << report.error().message;
      EXPECT_NE(report.error().message.find(id.hex()), std::string::npos) << report.error().message;
      EXPECT_EQ(emitted, 0u);
      EXPECT_EQ(reader.bytes_read(), 0u);
    }
    // The catalog's own snapshot dedups exactly: every member is present.
    auto own =
        build_filter_from_catalog(*catalog, 1, {.expected_item_count = 5000, .target_fpp = 0.01});
    ASSERT_TRUE(own.has_value());
    SnapshotPublisher publisher;
    ASSERT_TRUE(publisher.publish(std::move(*own)));
    const ArtifactExistenceService service(publisher, *catalog);
    std::string bytes(members.size() * Digest::kSize, '\0');
    std::memcpy(bytes.data(), members.data(), bytes.size());
    auto reader = DigestReader::from_memory(bytes, InputFormat::kBinary);
    std::size_t emitted = 0;
    auto report = bulk_dedup(service, reader, [&](std::span<const Digest> part) -> Result<void> {
      emitted += part.size();
      return {};
    });
    ASSERT_TRUE(report.has_value()) << report.error().describe();
    EXPECT_EQ(emitted, 0u);
    EXPECT_EQ(report->counts.present, members.size());
  }
}

TEST(ServiceTest, MalformedDigestIsAnErrorNeverAbsent) {
  MemoryRepository store;
  SnapshotPublisher publisher;
  const auto members = test::random_digests(10, 41);
  store.add(members);
  ASSERT_TRUE(publisher.publish(build_at(store, 1, 100, 0.01)).has_value());
  Metrics metrics;
  const ArtifactExistenceService service(publisher, store, &metrics);
  for (const std::string_view bad : {"", "abc", "sha512:00", "zz" /* non-hex */}) {
    auto answer = service.exists(bad);
    ASSERT_FALSE(answer.has_value()) << bad;
    EXPECT_EQ(answer.error().code, ErrorCode::kInvalidDigest);
  }
  std::string wrong_length = members[0].hex() + "0";
  EXPECT_FALSE(service.exists(wrong_length).has_value());
  EXPECT_EQ(metrics.get(Counter::kInvalidDigest), 5u);
  EXPECT_EQ(metrics.get(Counter::kQuery), 0u);
  // Both text forms of a member work, either case.
  std::string upper = members[0].hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_TRUE(service.exists("sha256:" + members[0].hex())->exists);
  EXPECT_TRUE(service.exists(upper)->exists);
}

TEST(ServiceTest, NoSnapshotMeansNoAnswerForTheSnapshotVersion) {
  MemoryRepository store;
  SnapshotPublisher publisher;
  const ArtifactExistenceService service(publisher, store);
  const Digest digest = test::member_digest(1);
  auto answer = service.exists(digest);
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kInvalidArgument);
  bool exists[1];
  EXPECT_FALSE(service.exists_batch(std::span(&digest, 1), exists).has_value());
  // An explicit version goes to the store.
  store.add(std::span(&digest, 1));
  EXPECT_TRUE(service.exists_at_version(digest, 1)->exists);
}

// Known traffic, known counts; ratios equal their formulas; both exports
// carry the section 9 names.
TEST(ServiceTest, MetricsCountWhatHappenedAndRatiosFollowTheirFormulas) {
  MemoryRepository store;
  const auto members = test::member_digests(1000);
  store.add(members);
  Metrics metrics;
  SnapshotPublisher publisher(&metrics);
  ASSERT_TRUE(publisher.publish(build_at(store, 1, 1000, 0.05)).has_value());
  const FilterSet& filter = publisher.current()->filter;
  const ArtifactExistenceService service(publisher, store, &metrics);

  std::vector<Digest> strangers;
  for (std::uint64_t i = 0; i < 4000; ++i) strangers.push_back(test::non_member_digest(i));
  std::uint64_t expected_fp = 0;
  for (const Digest& digest : strangers) expected_fp += filter.might_contain(digest) ? 1 : 0;
  ASSERT_GT(expected_fp, 0u);

  // Singles for half the traffic, one batch for the rest.
  for (std::size_t i = 0; i < 500; ++i) ASSERT_TRUE(service.exists(members[i])->exists);
  for (std::size_t i = 0; i < 2000; ++i) ASSERT_FALSE(service.exists(strangers[i])->exists);
  std::vector<Digest> batch(members.begin() + 500, members.end());
  batch.insert(batch.end(), strangers.begin() + 2000, strangers.end());
  auto answers = std::make_unique<bool[]>(batch.size());
  auto counts = service.exists_batch(batch, {answers.get(), batch.size()});
  ASSERT_TRUE(counts.has_value());
  ASSERT_TRUE(service.exists_at_version(members[0], 0).has_value());  // one bypass

  const auto m = metrics.collect(publisher.current().get());
  const std::uint64_t total = 5000 + 1;
  const std::uint64_t maybe = 1000 + expected_fp;
  const std::uint64_t negative = 4000 - expected_fp;
  EXPECT_EQ(m[Counter::kQuery], total);
  EXPECT_EQ(m[Counter::kMaybe], maybe);
  EXPECT_EQ(m[Counter::kNegative], negative);
  EXPECT_EQ(m[Counter::kFalsePositive], expected_fp);
  EXPECT_EQ(m[Counter::kExactLookup], maybe + 1);
  EXPECT_EQ(m[Counter::kFilterBypass], 1u);
  EXPECT_EQ(m[Counter::kSnapshotPublish], 1u);
  EXPECT_DOUBLE_EQ(m.negative_bypass_ratio(), static_cast<double>(negative) / total);
  EXPECT_DOUBLE_EQ(m.observed_false_positive_rate(),
                   static_cast<double>(expected_fp) / static_cast<double>(negative + expected_fp));
  EXPECT_DOUBLE_EQ(m.false_discovery_ratio(), static_cast<double>(expected_fp) / maybe);
  EXPECT_EQ(counts->negative + counts->maybe, batch.size());
  EXPECT_EQ(counts->exact_lookups, counts->maybe);

  EXPECT_TRUE(m.has_snapshot);
  EXPECT_EQ(m.bit_count, filter.bit_count());
  EXPECT_EQ(m.hash_count, filter.hash_count());
  EXPECT_EQ(m.expected_item_count, 1000u);
  EXPECT_EQ(m.inserted_item_count, 1000u);
  EXPECT_EQ(m.catalog_version, 1u);
  EXPECT_DOUBLE_EQ(m.fill_ratio, filter.fill_ratio());
  EXPECT_DOUBLE_EQ(m.estimated_fpp, filter.estimate_false_positive_rate());
  EXPECT_GE(m.age_seconds, 0.0);

  // Prometheus names (counters _total, no gauge _count, ratios _ratio);
  // the dotted names of section 9 stay the JSON keys below.
  const std::string text = to_prometheus(m);
  for (const char* name :
       {"artifact_bloom_size_bytes ", "artifact_bloom_hash_functions ", "artifact_bloom_expected_items ",
        "artifact_bloom_inserted_items ", "artifact_bloom_fill_ratio ",
        "artifact_bloom_estimated_false_positive_ratio ",
        "artifact_bloom_target_false_positive_ratio ", "artifact_bloom_negative_total ",
        "artifact_bloom_maybe_total ", "artifact_bloom_false_positive_total ",
        "artifact_bloom_catalog_version ", "artifact_bloom_snapshot_age_seconds ",
        "artifact_bloom_snapshot_load_failure_total ", "artifact_bloom_query_total ",
        "artifact_bloom_negative_bypass_ratio ", "artifact_bloom_observed_false_positive_ratio ",
        "artifact_bloom_false_discovery_ratio "}) {
    EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << name;
  }
  EXPECT_NE(text.find("# TYPE artifact_bloom_negative_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("\nartifact_bloom_negative_total " + std::to_string(negative) + "\n"),
            std::string::npos);
  EXPECT_EQ(text.find("artifact_bloom."), std::string::npos);  // no dots in names

  const auto json = nlohmann::json::parse(to_json(m));
  EXPECT_EQ(json["counters"]["artifact_bloom.negative.count"].get<std::uint64_t>(), negative);
  EXPECT_EQ(json["counters"]["artifact_bloom.false_positive.count"].get<std::uint64_t>(),
            expected_fp);
  EXPECT_EQ(json["gauges"]["artifact_bloom.bit_count"].get<std::uint64_t>(), filter.bit_count());
  EXPECT_NE(text.find("\nartifact_bloom_size_bytes " + std::to_string(filter.bit_count() / 8) + "\n"),
            std::string::npos);
  EXPECT_DOUBLE_EQ(json["derived"]["falseDiscoveryRatio"].get<double>(), m.false_discovery_ratio());
  EXPECT_DOUBLE_EQ(json["derived"]["negativeBypassRatio"].get<double>(), m.negative_bypass_ratio());
  EXPECT_DOUBLE_EQ(json["derived"]["observedFalsePositiveRate"].get<double>(),
                   m.observed_false_positive_rate());
}

// The exposition follows Prometheus' naming rules (as `promtool check
// metrics` lints them) for every metric: a valid name, HELP and TYPE before
// the one sample, counters ending in _total, no other metric ending in
// _total, _count, _sum or _bucket, and every counter of the JSON (dotted)
// there under its own name.
TEST(ServiceTest, PrometheusNamesFollowTheNamingConventions) {
  MetricsSnapshot m;
  for (std::size_t i = 0; i < kCounterCount; ++i) m.counters[i] = i + 1;
  const std::string text = to_prometheus(m);
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> names;
  while (std::getline(lines, line)) {
    ASSERT_TRUE(line.starts_with("# HELP ")) << line;
    const std::string name = line.substr(7, line.find(' ', 7) - 7);
    std::string type_line;
    std::string sample;
    ASSERT_TRUE(std::getline(lines, type_line) && std::getline(lines, sample)) << name;
    const bool counter = type_line == "# TYPE " + name + " counter";
    EXPECT_TRUE(counter || type_line == "# TYPE " + name + " gauge") << type_line;
    EXPECT_TRUE(sample.starts_with(name + " ")) << sample;
    EXPECT_TRUE(std::regex_match(name, std::regex("[a-zA-Z_:][a-zA-Z0-9_:]*"))) << name;
    EXPECT_EQ(counter, name.ends_with("_total")) << name;
    for (const char* reserved : {"_count", "_sum", "_bucket"}) {
      EXPECT_FALSE(name.ends_with(reserved)) << name;
    }
    // Base units only: promtool refuses a name with "bits" (use bytes),
    // "milliseconds" (use seconds) and the like as one of its words.
    for (const char* unit : {"_bits", "_kilobytes", "_megabytes", "_milliseconds",
                             "_microseconds", "_nanoseconds", "_minutes", "_hours", "_days"}) {
      EXPECT_EQ((name + "_").find(std::string(unit) + "_"), std::string::npos) << name;
    }
    EXPECT_TRUE(name.starts_with("artifact_bloom_")) << name;
    names.push_back(name);
  }
  EXPECT_EQ(names.size(), kCounterCount + 13);
  const auto json = nlohmann::json::parse(to_json(m));
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    const std::string dotted(counter_name(static_cast<Counter>(i)));
    ASSERT_TRUE(dotted.ends_with(".count")) << dotted;
    EXPECT_EQ(json["counters"][dotted].get<std::uint64_t>(), i + 1) << dotted;
    // artifact_bloom.snapshot.load_failure.count: artifact_bloom_snapshot_load_failure_total
    std::string name = dotted.substr(0, dotted.size() - 6) + "_total";
    std::replace(name.begin(), name.end(), '.', '_');
    EXPECT_NE(text.find("\n" + name + " " + std::to_string(i + 1) + "\n"), std::string::npos)
        << name;
  }
}

// The many-source text (a server's tenants) is each source's own text with
// its labels on every sample: HELP and TYPE once a family, the families in
// the single text's order, one sample per source in the order given.
TEST(ServiceTest, PrometheusOfSeveralSourcesLabelsEachSampleOfItsOwnText) {
  MetricsSnapshot a, b;
  for (std::size_t i = 0; i < kCounterCount; ++i) {
    a.counters[i] = i + 1;
    b.counters[i] = 1000 * (i + 7);
  }
  a.has_snapshot = true;
  a.bit_count = 9592960;
  a.hash_count = 7;
  a.fill_ratio = 0.49;
  b.catalog_version = 12;
  b.estimated_fpp = 0.0125;
  const std::vector<LabelledMetrics> sources = {{"tenant=\"a\"", &a},
                                                {"tenant=\"b\\\"\",x=\"1\"", &b}};
  // The reference: each single text, split into families, relabelled.
  const auto lines_of = [](const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  };
  const auto text_a = lines_of(to_prometheus(a));
  const auto text_b = lines_of(to_prometheus(b));
  ASSERT_EQ(text_a.size(), text_b.size());
  ASSERT_EQ(text_a.size() % 3, 0u);
  std::string expected;
  for (std::size_t i = 0; i < text_a.size(); i += 3) {
    ASSERT_EQ(text_a[i], text_b[i]);
    ASSERT_EQ(text_a[i + 1], text_b[i + 1]);
    expected += text_a[i] + "\n" + text_a[i + 1] + "\n";
    for (const auto& [lines, labels] :
         {std::pair{&text_a, sources[0].labels}, std::pair{&text_b, sources[1].labels}}) {
      const std::string& sample = (*lines)[i + 2];
      const auto space = sample.find(' ');
      expected += sample.substr(0, space) + "{" + std::string(labels) + "}" + sample.substr(space) +
                  "\n";
    }
  }
  EXPECT_EQ(to_prometheus(std::span<const LabelledMetrics>(sources)), expected);
  // No labels: the single text; no sources: nothing.
  const LabelledMetrics bare{{}, &a};
  EXPECT_EQ(to_prometheus(std::span<const LabelledMetrics>(&bare, 1)), to_prometheus(a));
  EXPECT_EQ(to_prometheus(std::span<const LabelledMetrics>()), "");
}

TEST(ServiceTest, RatiosWithNothingCountedAreZero) {
  const MetricsSnapshot empty;
  EXPECT_EQ(empty.negative_bypass_ratio(), 0.0);
  EXPECT_EQ(empty.observed_false_positive_rate(), 0.0);
  EXPECT_EQ(empty.false_discovery_ratio(), 0.0);
  EXPECT_FALSE(nlohmann::json::parse(to_json(empty))["hasSnapshot"].get<bool>());
}

TEST(ServiceTest, CountersAreExactUnderConcurrency) {
  Metrics metrics;
  constexpr int kThreads = 8;
  constexpr std::uint64_t kAdds = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (std::uint64_t i = 0; i < kAdds; ++i) {
        metrics.add(Counter::kQuery);
        metrics.add(Counter::kNegative, 2);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(metrics.get(Counter::kQuery), kThreads * kAdds);
  EXPECT_EQ(metrics.get(Counter::kNegative), 2 * kThreads * kAdds);
}

}  // namespace
}  // namespace abf::service
