// Answering at the catalog's head (docs/protocol.md section 8): a snapshot older
// than its catalog answers exactly at the catalog's newest version, its
// `absent` answers checked against the digests added since (held in memory,
// or asked of the store over the bound); the stores' range queries.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "abf/blocked.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/metrics.hpp"
#include "abf/service/service.hpp"
#include "abf/service/snapshot_publisher.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

Filter build_at(MemoryRepository& store, std::uint64_t version, std::uint64_t capacity = 20000) {
  auto filter = build_filter(store.digests_at_version(version),
                             {.expected_item_count = capacity, .target_fpp = 0.01}, version);
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

std::vector<Digest> collect_added(ArtifactRepository& store, std::uint64_t after,
                                  std::uint64_t upto, std::size_t chunk = 0) {
  std::vector<Digest> out;
  auto ok = store.for_each_digest_added(
      after, upto,
      [&](std::span<const Digest> part) -> Result<void> {
        if (chunk != 0) {
          EXPECT_LE(part.size(), chunk);
        }
        out.insert(out.end(), part.begin(), part.end());
        return {};
      },
      chunk);
  EXPECT_TRUE(ok.has_value()) << ok.error().describe();
  std::ranges::sort(out);
  return out;
}

// The digests present at `upto` that were absent at `after`: what a filter of
// `after` must never answer `absent` for at `upto`.
std::vector<Digest> appeared(MemoryRepository& store, std::uint64_t after, std::uint64_t upto) {
  const auto then = store.digests_at_version(after);
  const auto now = store.digests_at_version(upto);
  std::vector<Digest> out;
  std::ranges::set_difference(now, then, std::back_inserter(out));
  return out;
}

// A random history of adds and removes over `universe`.
void random_changes(MemoryRepository& store, const std::vector<Digest>& universe, int steps,
                    std::mt19937_64& rng) {
  for (int step = 0; step < steps; ++step) {
    std::vector<Digest> pick;
    for (std::size_t i = 0, n = 1 + rng() % 400; i < n; ++i)
      pick.push_back(universe[rng() % universe.size()]);
    if (rng() % 3 != 0) {
      store.add(pick);
    } else {
      store.remove(pick);
    }
  }
}

// Every way of asking (single, batch, bulk dedup) against the store at the
// head, for services holding everything, a little, and nothing.
TEST(ServiceHeadTest, AnOlderSnapshotAnswersExactlyAtTheHead) {
  for (std::uint64_t seed = 1; seed <= 3; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    const auto universe = test::random_digests(4000, seed * 11);
    MemoryRepository store;
    random_changes(store, universe, 4, rng);
    const std::uint64_t v = *store.latest_version();
    SnapshotPublisher publisher;
    ASSERT_TRUE(publisher.publish(build_at(store, v)).has_value());
    random_changes(store, universe, 6, rng);
    const std::uint64_t head = *store.latest_version();
    ASSERT_FALSE(appeared(store, v, head).empty());  // the trap is armed

    for (const std::uint64_t bound :
         {kDefaultHeadCacheDigests, std::uint64_t{50}, std::uint64_t{0}}) {
      SCOPED_TRACE("bound " + std::to_string(bound));
      Metrics metrics;
      const ArtifactExistenceService service(publisher, store, &metrics,
                                             {.head_cache_digests = bound});
      auto at = service.head(*publisher.current());
      ASSERT_TRUE(at.has_value()) << at.error().describe();
      EXPECT_EQ(at->catalog_version, head);
      EXPECT_EQ(at->lag.snapshot_version, v);
      EXPECT_EQ(at->lag.versions_behind, head - v);
      EXPECT_EQ(at->lag.digests_added, (*store.changes_between(v, head)).added);
      EXPECT_EQ(at->over_bound, at->lag.digests_added > bound);

      std::vector<Digest> queries = universe;
      std::ranges::shuffle(queries, rng);
      std::vector<bool> truth(queries.size());
      for (std::size_t i = 0; i < queries.size(); ++i) {
        truth[i] = *store.exists_at_version(queries[i], head);
      }
      // Single queries.
      for (std::size_t i = 0; i < queries.size(); i += 7) {
        auto answer = service.exists(queries[i]);
        ASSERT_TRUE(answer.has_value());
        ASSERT_EQ(answer->exists, truth[i]) << queries[i].hex();
        EXPECT_EQ(answer->catalog_version, head);
      }
      // One batch.
      auto exists = std::make_unique<bool[]>(queries.size());
      auto counts = service.exists_batch(queries, {exists.get(), queries.size()});
      ASSERT_TRUE(counts.has_value());
      for (std::size_t i = 0; i < queries.size(); ++i) {
        ASSERT_EQ(exists[i], truth[i]) << queries[i].hex();
      }
      EXPECT_EQ(counts->total, queries.size());
      EXPECT_EQ(counts->negative + counts->maybe + counts->head_lookups, counts->total);
      EXPECT_EQ(counts->exact_lookups, counts->maybe + counts->head_lookups);
      EXPECT_GT(counts->head_present, 0u);  // what the snapshot alone got wrong
      if (bound == 0) {
        EXPECT_EQ(counts->negative, 0u);  // every filter absent went to the store
      }
      // The bulk dedup job: one head for the whole job.
      auto reader =
          DigestReader::from_memory(std::string_view(reinterpret_cast<const char*>(queries.data()),
                                                     queries.size() * sizeof(Digest)),
                                    InputFormat::kBinary, "queries");
      std::vector<Digest> absent;
      auto report = bulk_dedup(
          service, reader,
          [&](std::span<const Digest> part) -> Result<void> {
            absent.insert(absent.end(), part.begin(), part.end());
            return {};
          },
          333);
      ASSERT_TRUE(report.has_value());
      EXPECT_EQ(report->catalog_version, head);
      EXPECT_EQ(report->lag.versions_behind, head - v);
      std::vector<Digest> expected_absent;
      for (std::size_t i = 0; i < queries.size(); ++i) {
        if (!truth[i]) expected_absent.push_back(queries[i]);
      }
      EXPECT_EQ(absent, expected_absent);
      // Counted: the batch's head lookups, then the job's (the same again).
      EXPECT_GE(metrics.get(Counter::kHeadLookup), 2 * counts->head_lookups);
      EXPECT_EQ(report->counts.head_present, counts->head_present);
    }
  }
}

// The held digests grow with the head, one range read at a time, and the
// answers stay exact at every step; a snapshot of the head needs none.
TEST(ServiceHeadTest, HeldDigestsFollowAGrowingHead) {
  MemoryRepository store;
  const auto base = test::random_digests(1000, 3);
  store.add(base);
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(build_at(store, 1)).has_value());
  const ArtifactExistenceService service(publisher, store);
  auto at1 = service.head(*publisher.current());
  ASSERT_TRUE(at1.has_value());
  EXPECT_EQ(at1->catalog_version, 1u);
  EXPECT_EQ(at1->added, nullptr);
  EXPECT_FALSE(at1->over_bound);
  std::vector<Digest> added;
  for (std::uint64_t step = 0; step < 20; ++step) {
    const auto batch = test::random_digests(50, 100 + step);
    store.add(batch);
    added.insert(added.end(), batch.begin(), batch.end());
    auto at = service.head(*publisher.current());
    ASSERT_TRUE(at.has_value());
    EXPECT_EQ(at->catalog_version, step + 2);
    EXPECT_EQ(at->lag.digests_added, added.size());
    ASSERT_NE(at->added, nullptr);
    for (const Digest& digest : added) ASSERT_TRUE(at->must_ask(digest));
    std::uint64_t asked_strangers = 0;
    for (const Digest& digest : test::random_digests(500, 7)) {
      asked_strangers += at->must_ask(digest) ? 1 : 0;
    }
    EXPECT_EQ(asked_strangers, 0u);
    for (const Digest& digest : added) ASSERT_TRUE(service.exists(digest)->exists);
  }
  // A removal after the snapshot needs no special case: the store is asked
  // at the head for everything the filter may hold.
  store.remove(std::span(&base[0], 1));
  store.remove(std::span(&added[0], 1));
  EXPECT_FALSE(service.exists(base[0])->exists);
  EXPECT_FALSE(service.exists(added[0])->exists);
  EXPECT_TRUE(service.exists(base[1])->exists);
  // A snapshot of the head: nothing to check.
  ASSERT_TRUE(publisher.publish(build_at(store, *store.latest_version())).has_value());
  auto fresh = service.head(*publisher.current());
  ASSERT_TRUE(fresh.has_value());
  EXPECT_EQ(fresh->lag.versions_behind, 0u);
  EXPECT_FALSE(fresh->must_ask(added[1]));
  EXPECT_TRUE(service.exists(added[1])->exists);
}

// Over the bound nothing is held and every filter absent is asked: exact,
// never answered from the filter alone. Growing past the bound later does
// the same.
TEST(ServiceHeadTest, OverTheBoundEveryAbsentIsAskedOfTheStore) {
  MemoryRepository store;
  store.add(test::random_digests(500, 21));
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(build_at(store, 1)).has_value());
  Metrics metrics;
  const ArtifactExistenceService service(publisher, store, &metrics, {.head_cache_digests = 30});
  const auto first = test::random_digests(20, 22);
  store.add(first);
  auto under = service.head(*publisher.current());
  ASSERT_TRUE(under.has_value());
  EXPECT_FALSE(under->over_bound);
  const auto second = test::random_digests(20, 23);
  store.add(second);  // 40 added: over 30
  auto over = service.head(*publisher.current());
  ASSERT_TRUE(over.has_value());
  EXPECT_TRUE(over->over_bound);
  EXPECT_EQ(over->added, nullptr);
  EXPECT_EQ(over->lag.digests_added, 40u);
  const auto strangers = test::random_digests(300, 24);
  EXPECT_TRUE(over->must_ask(strangers[0]));
  std::vector<Digest> queries = strangers;
  queries.insert(queries.end(), first.begin(), first.end());
  queries.insert(queries.end(), second.begin(), second.end());
  auto exists = std::make_unique<bool[]>(queries.size());
  auto counts = service.exists_batch(queries, {exists.get(), queries.size()});
  ASSERT_TRUE(counts.has_value());
  for (std::size_t i = 0; i < queries.size(); ++i) EXPECT_EQ(exists[i], i >= strangers.size());
  EXPECT_EQ(counts->negative, 0u);
  EXPECT_EQ(counts->head_present, 40u);
  EXPECT_EQ(counts->head_lookups + counts->maybe, queries.size());
  EXPECT_EQ(metrics.get(Counter::kHeadLookup), counts->head_lookups);
}

TEST(ServiceHeadTest, ACatalogOlderThanTheSnapshotIsAnError) {
  MemoryRepository newer;
  for (int i = 0; i < 5; ++i) newer.add(test::random_digests(10, 30 + i));
  MemoryRepository older;
  older.add(test::random_digests(10, 30));
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(build_at(newer, 5), "v5.abf").has_value());
  const ArtifactExistenceService service(publisher, older);
  auto answer = service.exists(test::random_digests(1, 30)[0]);
  ASSERT_FALSE(answer.has_value());
  EXPECT_EQ(answer.error().code, ErrorCode::kCatalog);
  EXPECT_NE(answer.error().message.find("v5.abf"), std::string::npos) << answer.error().message;
  EXPECT_FALSE(service.lag().has_value());
}

// Clients query while digests are added: once an add has returned, no query
// that starts after it may answer any of its digests absent.
TEST(ServiceHeadTest, NoAddedDigestIsEverMissingOnceItsAddReturned) {
  MemoryRepository store;
  store.add(test::random_digests(1000, 41));
  SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.publish(build_at(store, 1)).has_value());
  const ArtifactExistenceService service(publisher, store, nullptr, {.head_cache_digests = 400});
  constexpr std::size_t kAdds = 60;
  constexpr std::size_t kPerAdd = 10;  // 600 added: the bound is crossed midway
  const auto fresh = test::random_digests(kAdds * kPerAdd, 42);
  std::atomic<std::size_t> returned{0};
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> wrong{0}, asked{0}, rounds{0};
  constexpr int kClients = 3;
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    clients.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      while (!done.load()) {
        const std::size_t upto = returned.load() * kPerAdd;
        if (upto == 0) continue;
        std::vector<Digest> batch;
        for (int i = 0; i < 16; ++i) batch.push_back(fresh[rng() % upto]);
        bool exists[16];
        auto counts = service.exists_batch(batch, exists);
        if (!counts) {
          wrong.fetch_add(1000000);
          return;
        }
        for (bool e : exists) wrong.fetch_add(e ? 0 : 1);
        auto single = service.exists(batch[0]);
        if (!single || !single->exists) wrong.fetch_add(1);
        asked.fetch_add(17);
        rounds.fetch_add(1);
      }
    });
  }
  for (std::size_t k = 0; k < kAdds; ++k) {
    store.add(std::span(fresh.data() + k * kPerAdd, kPerAdd));
    returned.store(k + 1);
    // Queries between every two adds, whatever the machine's speed: a round
    // more than the clients (each had at most one in flight) started after
    // this add returned.
    const std::uint64_t mark = rounds.load();
    if (!test::wait_until([&] { return rounds.load() > mark + kClients || wrong.load() != 0; })) {
      ADD_FAILURE() << "no query finished in 60 s after add " << k;
      break;
    }
  }
  done.store(true);
  for (auto& client : clients) client.join();
  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_GT(asked.load(), 0u);
}

// The stores' range queries agree with each other and with the histories
// that made them; the SQLite one reads its index.
TEST(ServiceHeadTest, StoresListTheDigestsAddedInAVersionRange) {
  const test::TempDir temp("abf-head-test");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  {
    auto catalog = SqliteCatalog::create(dir / "c.db");
    ASSERT_TRUE(catalog.has_value()) << catalog.error().describe();
    MemoryRepository memory;
    std::mt19937_64 rng(5);
    const auto universe = test::random_digests(3000, 51);
    for (int step = 0; step < 12; ++step) {
      std::vector<Digest> pick;
      for (std::size_t i = 0, n = 1 + rng() % 500; i < n; ++i)
        pick.push_back(universe[rng() % universe.size()]);
      if (step % 4 == 3) {
        ASSERT_TRUE(catalog->remove(pick).has_value());
        memory.remove(pick);
      } else {
        ASSERT_TRUE(catalog->add(pick).has_value());
        memory.add(pick);
      }
    }
    for (std::uint64_t after = 0; after <= 12; after += 3) {
      for (std::uint64_t upto = after; upto <= 12; upto += 2) {
        const auto from_sqlite = collect_added(*catalog, after, upto, 100);
        EXPECT_EQ(from_sqlite, collect_added(memory, after, upto));
        auto sqlite_changes = catalog->changes_between(after, upto);
        auto memory_changes = memory.changes_between(after, upto);
        ASSERT_TRUE(sqlite_changes.has_value());
        ASSERT_TRUE(memory_changes.has_value());
        EXPECT_EQ(sqlite_changes->versions, upto - after);
        EXPECT_EQ(sqlite_changes->added, from_sqlite.size());
        EXPECT_EQ(sqlite_changes->added, memory_changes->added);
        EXPECT_EQ(sqlite_changes->removed, memory_changes->removed);
        // Everything that appeared is listed.
        std::vector<Digest> missed;
        std::ranges::set_difference(appeared(memory, after, upto), from_sqlite,
                                    std::back_inserter(missed));
        EXPECT_TRUE(missed.empty());
      }
    }
    for (ArtifactRepository* store :
         {static_cast<ArtifactRepository*>(&*catalog), static_cast<ArtifactRepository*>(&memory)}) {
      EXPECT_EQ(store->changes_between(3, 13).error().code, ErrorCode::kInvalidArgument);
      EXPECT_EQ(store->changes_between(5, 4).error().code, ErrorCode::kInvalidArgument);
      auto beyond = store->for_each_digest_added(
          0, 13, [](std::span<const Digest>) -> Result<void> { return {}; });
      EXPECT_EQ(beyond.error().code, ErrorCode::kInvalidArgument);
    }
    // The range is a search of the index, not a walk of the table.
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2((dir / "c.db").c_str(), &db, SQLITE_OPEN_READONLY, nullptr),
              SQLITE_OK);
    std::string plan;
    sqlite3_exec(
        db,
        "EXPLAIN QUERY PLAN SELECT digest FROM artifacts WHERE added_version > 1 AND "
        "added_version <= 2",
        [](void* out, int columns, char** values, char**) {
          *static_cast<std::string*>(out) += values[columns - 1];
          return 0;
        },
        &plan, nullptr);
    sqlite3_close(db);
    EXPECT_NE(plan.find("artifacts_by_added_version"), std::string::npos) << plan;
  }
}

// The reproduction through the SQLite catalog: catalog add makes
// version 2 after the snapshot of version 1; dedup lists none of version 2's
// digests as new, and says how far the snapshot lags.
TEST(ServiceHeadTest, DedupWithASnapshotOfTheVersionBeforeListsNoAddedDigestAsNew) {
  const test::TempDir temp("abf-head-test");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  {
    auto catalog = SqliteCatalog::create(dir / "c.db");
    ASSERT_TRUE(catalog.has_value());
    const auto v1 = test::random_digests(1000, 61);
    const auto v2 = test::random_digests(1000, 62);
    ASSERT_EQ(catalog->add(v1)->version, 1u);
    auto filter =
        build_filter_from_catalog(*catalog, 1, {.expected_item_count = 5000, .target_fpp = 0.01});
    ASSERT_TRUE(filter.has_value());
    ASSERT_EQ(catalog->add(v2)->version, 2u);
    SnapshotPublisher publisher(nullptr, *catalog);
    ASSERT_TRUE(publisher.publish(std::move(*filter), "v1.abf").has_value());
    const ArtifactExistenceService service(publisher, *catalog);
    std::vector<Digest> input = v1;
    input.insert(input.end(), v2.begin(), v2.end());
    const auto strangers = test::random_digests(500, 63);
    input.insert(input.end(), strangers.begin(), strangers.end());
    auto reader =
        DigestReader::from_memory(std::string_view(reinterpret_cast<const char*>(input.data()),
                                                   input.size() * sizeof(Digest)),
                                  InputFormat::kBinary, "input");
    std::vector<Digest> news;
    auto report = bulk_dedup(service, reader, [&](std::span<const Digest> part) -> Result<void> {
      news.insert(news.end(), part.begin(), part.end());
      return {};
    });
    ASSERT_TRUE(report.has_value()) << report.error().describe();
    EXPECT_EQ(news, strangers);  // no digest of version 2 listed as new
    EXPECT_EQ(report->catalog_version, 2u);
    EXPECT_EQ(report->lag.snapshot_version, 1u);
    EXPECT_EQ(report->lag.versions_behind, 1u);
    EXPECT_EQ(report->lag.digests_added, 1000u);
    EXPECT_EQ(report->counts.head_present, 1000u);
    auto lag = service.lag();
    ASSERT_TRUE(lag.has_value());
    EXPECT_EQ(lag->digests_added, 1000u);
  }
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// `abf serve --follow`'s incremental rebuild: the filter of version v with
// the digests added since set is, byte for byte, the fresh build of the
// head (unkeyed and keyed); after a removal, or beyond the capacity, it is
// refused (a full build is needed).
TEST(ServiceHeadTest, AdvancedFilterIsBitIdenticalToAFreshBuildOfTheHead) {
  const test::TempDir temp("abf-head-test");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  {
    auto catalog = SqliteCatalog::create(dir / "c.db");
    ASSERT_TRUE(catalog.has_value());
    const BloomSpec spec{.expected_item_count = 5000, .target_fpp = 0.01};
    ASSERT_TRUE(catalog->add(test::random_digests(1500, 71)).has_value());
    ASSERT_TRUE(catalog->remove(test::random_digests(100, 71)).has_value());  // version 2
    for (const std::optional<Key>& key :
         {std::optional<Key>{}, std::optional<Key>{test::golden_key().key}}) {
      SCOPED_TRACE(key ? "keyed" : "unkeyed");
      const std::uint64_t v = *catalog->latest_version();
      auto base = build_filter_from_catalog(*catalog, v, spec, key);
      ASSERT_TRUE(base.has_value()) << base.error().describe();
      for (int step = 0; step < 3; ++step) {
        ASSERT_TRUE(
            catalog->add(test::random_digests(300 + step, 72 + step + (key ? 10 : 0))).has_value());
      }
      // Some already present: they are no new addition.
      ASSERT_TRUE(catalog->add(test::random_digests(200, 71)).has_value());
      const std::uint64_t head = *catalog->latest_version();
      auto advanced = advance_filter(*base, *catalog, head, key);
      ASSERT_TRUE(advanced.has_value()) << advanced.error().describe();
      auto fresh = build_filter_from_catalog(*catalog, head, spec, key);
      ASSERT_TRUE(fresh.has_value());
      EXPECT_EQ(advanced->catalog_version(), head);
      EXPECT_EQ(advanced->inserted_item_count(), fresh->inserted_item_count());
      ASSERT_TRUE(save_snapshot(*advanced, dir / "advanced.abf").has_value());
      ASSERT_TRUE(save_snapshot(*fresh, dir / "fresh.abf").has_value());
      const std::string bytes = file_bytes(dir / "fresh.abf");
      ASSERT_GT(bytes.size(), 128u);
      EXPECT_TRUE(bytes == file_bytes(dir / "advanced.abf"));
      if (key) {
        auto keyless = advance_filter(*base, *catalog, head, std::nullopt);
        ASSERT_FALSE(keyless.has_value());
        EXPECT_EQ(keyless.error().code, ErrorCode::kKeyRequired);
      }
    }
    // Beyond the capacity: refused, never a filter past its design.
    const std::uint64_t full = *catalog->count_at_version(*catalog->latest_version());
    auto small = build_filter_from_catalog(*catalog, *catalog->latest_version(),
                                           {.expected_item_count = full + 50, .target_fpp = 0.01});
    ASSERT_TRUE(small.has_value()) << small.error().describe();
    ASSERT_TRUE(catalog->add(test::random_digests(100, 90)).has_value());
    auto over = advance_filter(*small, *catalog, *catalog->latest_version(), std::nullopt);
    ASSERT_FALSE(over.has_value());
    EXPECT_EQ(over.error().code, ErrorCode::kCapacityExceeded);
    // After a removal: refused (a filter cannot forget).
    auto before = build_filter_from_catalog(*catalog, *catalog->latest_version(),
                                            {.expected_item_count = 9000, .target_fpp = 0.01});
    ASSERT_TRUE(before.has_value());
    ASSERT_TRUE(catalog->remove(test::random_digests(10, 90)).has_value());
    auto removed = advance_filter(*before, *catalog, *catalog->latest_version(), std::nullopt);
    ASSERT_FALSE(removed.has_value());
    EXPECT_EQ(removed.error().code, ErrorCode::kInvalidArgument);
  }
}

// The incremental rebuild keeps the filter's protocol, whatever the key
// says: a blocked filter (protocol 3, or 4 with its key) advanced to the
// head is still blocked, under the same protocol, and byte for byte the
// fresh blocked build of the head; a key given to protocol 3, or none to
// protocol 4, is refused as for the classic protocols.
TEST(ServiceHeadTest, AdvancedBlockedFilterKeepsItsProtocol) {
  const test::TempDir temp("abf-head-test");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  {
    auto catalog = SqliteCatalog::create(dir / "c.db");
    ASSERT_TRUE(catalog.has_value());
    const BloomSpec spec{.expected_item_count = 6000, .target_fpp = 0.01};
    ASSERT_TRUE(catalog->add(test::random_digests(1200, 171)).has_value());
    const Key key = test::golden_key().key;
    for (const std::uint32_t protocol :
         {blocked::kProtocolBlocked, blocked::kProtocolBlockedKeyed}) {
      const bool keyed = protocol == blocked::kProtocolBlockedKeyed;
      SCOPED_TRACE("protocol " + std::to_string(protocol));
      const std::optional<Key> use = keyed ? std::optional<Key>{key} : std::nullopt;
      const std::uint64_t v = *catalog->latest_version();
      auto base = build_filter_from_catalog(*catalog, v, spec, use, protocol);
      ASSERT_TRUE(base.has_value()) << base.error().describe();
      ASSERT_EQ(base->hash_protocol_version(), protocol);
      for (int step = 0; step < 2; ++step) {
        const std::uint64_t seed = 180 + step + (keyed ? 10 : 0);
        ASSERT_TRUE(catalog->add(test::random_digests(400 + step, seed)).has_value());
      }
      const std::uint64_t head = *catalog->latest_version();
      ASSERT_GT(head, v);
      auto advanced = advance_filter(*base, *catalog, head, use);
      ASSERT_TRUE(advanced.has_value()) << advanced.error().describe();
      EXPECT_EQ(advanced->hash_protocol_version(), protocol);
      EXPECT_EQ(advanced->catalog_version(), head);
      auto fresh = build_filter_from_catalog(*catalog, head, spec, use, protocol);
      ASSERT_TRUE(fresh.has_value()) << fresh.error().describe();
      EXPECT_EQ(advanced->inserted_item_count(), fresh->inserted_item_count());
      ASSERT_TRUE(save_snapshot(*advanced, dir / "advanced.abf").has_value());
      ASSERT_TRUE(save_snapshot(*fresh, dir / "fresh.abf").has_value());
      const std::string bytes = file_bytes(dir / "fresh.abf");
      ASSERT_GT(bytes.size(), 128u);
      EXPECT_TRUE(bytes == file_bytes(dir / "advanced.abf"));
      // The wrong key material for the protocol: refused, never a filter
      // of another protocol.
      auto wrong =
          advance_filter(*base, *catalog, head, keyed ? std::nullopt : std::optional<Key>{key});
      ASSERT_FALSE(wrong.has_value());
      EXPECT_EQ(wrong.error().code, keyed ? ErrorCode::kKeyRequired : ErrorCode::kKeyMismatch);
    }
  }
}

}  // namespace
}  // namespace abf::service
