// Many threads query shared filters while snapshots are rewritten, loaded,
// published and dropped. Run under ThreadSanitizer by the `tsan` preset
// (the name matches its label): any data race in Filter, its shared bits,
// the snapshot loader or the parallel query shows up there.
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/snapshot_publisher.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

// Kept small so the test stays quick under ThreadSanitizer's 5-15x slowdown.
constexpr std::size_t kMembers = 4000;
constexpr int kQueryThreads = 6;
constexpr int kLoads = 40;
// The loader keeps going until the readers have checked this many batches.
constexpr std::uint64_t kMinBatches = 400;

struct Contents {
  Filter filter;
  std::vector<Answer> expected;  // reference answers to `queries`
};

// Returns the answers the scalar reference gives for `queries`.
std::vector<Answer> reference_answers(const Filter& filter, const std::vector<Digest>& queries) {
  std::vector<Answer> answers(queries.size());
  for (std::size_t i = 0; i < queries.size(); ++i) {
    answers[i] = filter.might_contain(queries[i]) ? Answer::kMaybe : Answer::kDefinitelyNot;
  }
  return answers;
}

TEST(ConcurrencyStress, QueriesWhileSnapshotsAreLoadedAndDropped) {
  const test::TempDir dir("abf-stress-test");
  const fs::path path = dir / "current.abf";

  // Two filters over different digests, so answers tell them apart.
  // Queries: members of each version and digests of neither, interleaved.
  const auto first = test::random_digests(kMembers, 1);
  const auto second = test::random_digests(kMembers, 2);
  const auto neither = test::random_digests(kMembers, 3);
  std::vector<Digest> queries;
  for (std::size_t i = 0; i < kMembers; ++i) {
    queries.push_back(first[i]);
    queries.push_back(second[i]);
    queries.push_back(neither[i]);
  }
  const BloomSpec spec{.expected_item_count = kMembers, .target_fpp = 0.01};
  std::vector<Contents> contents;
  for (const auto* members : {&first, &second}) {
    auto filter = build_filter(*members, spec);
    ASSERT_TRUE(filter.has_value());
    contents.push_back({*filter, reference_answers(*filter, queries)});
  }
  // Catalog version v holds contents[v % 2]; the bits are shared, only the
  // header differs.
  const auto version_of = [&](std::uint64_t version) {
    FilterInfo info = contents[version % 2].filter.info();
    info.catalog_version = version;
    const Filter& base = contents[version % 2].filter;
    auto filter = Filter::from_words(
        info,
        std::shared_ptr<const std::uint64_t>(std::make_shared<Filter>(base), base.words().data()),
        base.words().size());
    return *filter;
  };
  ASSERT_TRUE(save_snapshot(version_of(2), path).has_value());

  // The serving snapshot: readers take a reference without a lock; the
  // loader publishes each new load and the old one is dropped when its last
  // reader lets go (a mapped one is unmapped then).
  service::SnapshotPublisher publisher;
  ASSERT_TRUE(publisher.load_and_publish(path, LoadMode::kCopy).has_value());
  // One filter every thread queries directly, all the time.
  const Filter shared = version_of(1);

  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::atomic<std::uint64_t> batches{0};

  // Rewrites the file atomically with ever newer versions, so that every
  // load is publishable (the publisher refuses to go back in version).
  std::thread writer([&] {
    for (std::uint64_t version = 3; !done.load(); ++version) {
      if (!save_snapshot(version_of(version), path)) failures.fetch_add(1);
    }
  });
  // Loads whatever the file holds now, mapped or copied, and publishes it.
  std::thread loader([&] {
    for (int i = 0; i < kLoads || batches.load() < kMinBatches; ++i) {
      auto published =
          publisher.load_and_publish(path, i % 2 == 0 ? LoadMode::kMap : LoadMode::kCopy);
      if (!published) {
        failures.fetch_add(1);
        ADD_FAILURE() << "load and publish failed: " << published.error().describe();
      }
    }
    done.store(true);
  });

  const auto check = [&](const FilterSet& filter, std::span<const Digest> batch, std::size_t offset,
                         Backend backend) {
    std::vector<Answer> answers(batch.size());
    if (!filter.query(batch, answers, backend)) {
      failures.fetch_add(1);
      return;
    }
    const auto& expected = contents[filter.catalog_version() % 2].expected;
    if (!std::equal(answers.begin(), answers.end(), expected.begin() + static_cast<long>(offset))) {
      failures.fetch_add(1);
    }
    batches.fetch_add(1, std::memory_order_relaxed);
  };

  std::vector<std::thread> readers;
  for (int t = 0; t < kQueryThreads; ++t) {
    readers.emplace_back([&, t] {
      const Backend backend = t % 2 == 0 ? Backend::kSimd : Backend::kScalar;
      std::size_t offset = static_cast<std::size_t>(t) * 97 % queries.size();
      while (!done.load()) {
        // A small batch from the published snapshot, held only for the call.
        const std::size_t n = std::min<std::size_t>(300, queries.size() - offset);
        const auto snapshot = publisher.current();
        check(snapshot->filter, std::span(queries).subspan(offset, n), offset, backend);
        // A copy that outlives the swap, then dies on this thread.
        const FilterSet copy = snapshot->filter;
        check(copy, std::span(queries).subspan(0, 64), 0, backend);
        // The whole batch on the shared filter: large enough that the query
        // itself fans out over the TBB arena from several threads at once.
        if (t == 0) check(shared, queries, 0, backend);
        offset = (offset + n) % queries.size();
      }
    });
  }

  loader.join();
  writer.join();
  for (auto& reader : readers) reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(batches.load(), kMinBatches);
}

// The sharded build itself from several threads at once: independent
// builders running the parallel insert concurrently in one TBB arena.
TEST(ConcurrencyStress, ConcurrentParallelBuildsAgree) {
  const auto digests = test::random_digests(30000, 4);
  const BloomSpec spec{.expected_item_count = 30000, .target_fpp = 0.01};
  auto reference = build_filter(digests, spec, 0, Backend::kScalar);
  ASSERT_TRUE(reference.has_value());
  std::atomic<int> mismatches{0};
  std::vector<std::thread> builders;
  for (int t = 0; t < 4; ++t) {
    builders.emplace_back([&] {
      auto filter = build_filter(digests, spec, 0, Backend::kSimd);
      if (!filter || !std::ranges::equal(filter->payload(), reference->payload())) {
        mismatches.fetch_add(1);
      }
    });
  }
  for (auto& builder : builders) builder.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace abf
