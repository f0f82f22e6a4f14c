// The parallel build and query (core/src/parallel.cpp) against the scalar
// reference: the bitset and the answers may not depend on the thread count,
// the shard size, the merge strategy or the input order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "kernels.hpp"
#include "parallel.hpp"
#include "probe_simd.h"
#include "test_support.hpp"
#include "thread_support.hpp"

namespace abf {
namespace {

using detail::MergeStrategy;
using detail::ParallelOptions;

using test::kGeometries;
using test::max_threads;
using test::scalar_bits;
using test::with_threads;

std::vector<std::uint64_t> parallel_bits(const ParallelOptions& options,
                                         const probe::Scheme& scheme,
                                         const std::vector<Digest>& digests,
                                         detail::InsertFn engine = scalar::insert_batch) {
  std::vector<std::uint64_t> words(scheme.bit_count / 64, 0);
  detail::parallel_insert(options, engine, scheme, words.data(), digests.data(), digests.size());
  return words;
}
std::vector<std::uint64_t> parallel_bits(const ParallelOptions& options, std::uint64_t bit_count,
                                         std::uint32_t hash_count,
                                         const std::vector<Digest>& digests) {
  return parallel_bits(options, probe::unkeyed_scheme(bit_count, hash_count), digests);
}

std::string describe(MergeStrategy strategy) {
  switch (strategy) {
    case MergeStrategy::kAtomicOr:
      return "atomic_or";
    case MergeStrategy::kShardBitsets:
      return "shard_bitsets";
    case MergeStrategy::kWordRange:
      return "word_range";
    case MergeStrategy::kSerial:
      return "serial";
    case MergeStrategy::kAuto:
      return "auto";
  }
  return "?";
}

constexpr MergeStrategy kStrategies[] = {MergeStrategy::kAtomicOr, MergeStrategy::kShardBitsets,
                                         MergeStrategy::kWordRange, MergeStrategy::kSerial,
                                         MergeStrategy::kAuto};

TEST(ParallelInsert, EqualsScalarForEveryStrategyThreadCountAndShardSize) {
  const auto digests = test::random_digests(5000, 11);
  for (const auto& [m, k] : kGeometries) {
    const auto expected = scalar_bits(m, k, digests);
    for (int threads = 1; threads <= max_threads(); ++threads) {
      with_threads(threads, [&] {
        for (const auto strategy : kStrategies) {
          for (const std::size_t grain : {1, 7, 64, 1000, 4999, 5000, 100000}) {
            const ParallelOptions options{strategy, grain, /*force_split=*/true};
            EXPECT_EQ(parallel_bits(options, m, k, digests), expected)
                << describe(strategy) << " m=" << m << " k=" << k << " threads=" << threads
                << " grain=" << grain;
          }
        }
      });
    }
  }
}

// Keyed (protocol 2) schemes: the strategies that hash for themselves
// (atomic OR, word ranges) use the portable SipHash, the others the engine
// kernel's; all equal OpenSSL's reference build.
TEST(ParallelInsert, KeyedSchemesEqualScalarForEveryStrategyAndThreadCount) {
  const auto digests = test::random_digests(5000, 17);
  for (const auto& [m, k] : kGeometries) {
    const probe::Scheme scheme = test::keyed_scheme(m, k);
    const auto expected = scalar_bits(scheme, digests);
    if (m >= 9600) {  // smaller bitsets are full either way
      ASSERT_NE(expected, scalar_bits(m, k, digests)) << "the key must move the bits";
    }
    for (int threads = 1; threads <= max_threads(); ++threads) {
      with_threads(threads, [&] {
        for (const auto strategy : kStrategies) {
          for (const std::size_t grain : {1, 64, 4999}) {
            const ParallelOptions options{strategy, grain, /*force_split=*/true};
            for (const auto engine : {scalar::insert_batch, simd::insert_batch}) {
              EXPECT_EQ(parallel_bits(options, scheme, digests, engine), expected)
                  << describe(strategy) << " m=" << m << " k=" << k << " threads=" << threads
                  << " grain=" << grain;
            }
          }
        }
      });
    }
  }
}

TEST(ParallelInsert, EqualsScalarForBatchSizesAroundTheEdges) {
  const auto all = test::random_digests(20000, 12);
  for (const std::size_t count : {0, 1, 2, 7, 8, 9, 63, 64, 65, 8191, 8192, 8193, 20000}) {
    const std::vector<Digest> digests(all.begin(), all.begin() + static_cast<long>(count));
    const auto expected = scalar_bits(191872, 7, digests);
    with_threads(max_threads(), [&] {
      for (const auto strategy : kStrategies) {
        for (const bool force : {false, true}) {
          const ParallelOptions options{strategy, 0, force};
          EXPECT_EQ(parallel_bits(options, 191872, 7, digests), expected)
              << describe(strategy) << " count=" << count << " force=" << force;
        }
      }
    });
  }
}

TEST(ParallelInsert, IsIndependentOfInputOrder) {
  auto digests = test::random_digests(30000, 13);
  const auto expected = scalar_bits(1437824, 10, digests);
  std::mt19937_64 random(14);
  for (int round = 0; round < 3; ++round) {
    std::shuffle(digests.begin(), digests.end(), random);
    with_threads(max_threads(), [&] {
      for (const auto strategy : kStrategies) {
        const ParallelOptions options{strategy, 777, true};
        EXPECT_EQ(parallel_bits(options, 1437824, 10, digests), expected) << describe(strategy);
      }
    });
  }
}

// k = 32 makes the word-range strategy cut the batch in sub-batches
// (16 MiB of indices each): the seams must not lose or repeat anything.
TEST(ParallelInsert, WordRangeSubBatchesJoinSeamlessly) {
  const auto digests = test::random_digests(140000, 15);
  const auto expected = scalar_bits(std::uint64_t{1} << 22, 32, digests);
  with_threads(max_threads(), [&] {
    const ParallelOptions options{MergeStrategy::kWordRange, 0, true};
    EXPECT_EQ(parallel_bits(options, std::uint64_t{1} << 22, 32, digests), expected);
  });
}

// The public path: FilterBuilder::add in chunks of uneven sizes, on every
// backend that runs here, at every thread count, equals the scalar build.
TEST(ParallelInsert, FilterBuilderEqualsScalarBuildAtEveryThreadCount) {
  const auto digests = test::random_digests(60000, 16);
  const BloomSpec spec{.expected_item_count = 60000, .target_fpp = 0.001};
  auto reference = build_filter(digests, spec, 7, Backend::kScalar);
  ASSERT_TRUE(reference.has_value()) << reference.error().describe();
  std::mt19937_64 random(17);
  for (int threads = 1; threads <= max_threads(); ++threads) {
    for (const Backend backend : {Backend::kAuto, Backend::kSimd}) {
      with_threads(threads, [&] {
        auto builder = FilterBuilder::create(spec, 7);
        ASSERT_TRUE(builder.has_value());
        std::size_t done = 0;
        while (done < digests.size()) {
          const std::size_t n = std::min<std::size_t>(digests.size() - done, 1 + random() % 30000);
          auto added = builder->add(std::span(digests).subspan(done, n), backend);
          ASSERT_TRUE(added.has_value()) << added.error().describe();
          done += n;
        }
        auto finished = std::move(*builder).finish();
        ASSERT_TRUE(finished.has_value()) << finished.error().describe();
        const Filter& filter = *finished;
        EXPECT_TRUE(std::ranges::equal(filter.payload(), reference->payload()))
            << "threads=" << threads << " backend=" << to_string(backend);
        EXPECT_EQ(filter.inserted_item_count(), digests.size());
      });
    }
  }
}

// The golden builds, built on every core: the payload's SHA-256 and the
// popcount are the vectors'.
TEST(ParallelInsert, GoldenBuildsOnEveryCore) {
  for (const auto& row : test::read_tsv("vectors/builds.tsv")) {
    ASSERT_GE(row.size(), 7u);
    const std::uint64_t members = std::stoull(row[0]);
    const BloomSpec spec{.expected_item_count = std::stoull(row[1]),
                         .target_fpp = test::parse_hex_float(row[2])};
    const auto digests = test::member_digests(members);
    for (const auto strategy : kStrategies) {
      with_threads(max_threads(), [&] {
        auto layout = choose_layout(spec);
        ASSERT_TRUE(layout.has_value());
        ASSERT_EQ(layout->bit_count, std::stoull(row[3]));
        const ParallelOptions options{strategy, 97, true};
        const auto words = parallel_bits(options, layout->bit_count, layout->hash_count, digests);
        const auto* bytes = reinterpret_cast<const std::uint8_t*>(words.data());
        EXPECT_EQ(sha256(std::span(bytes, words.size() * 8)).hex(), row[6])
            << describe(strategy) << " members=" << members;
      });
    }
  }
}

// The size rule of choose_strategy: private bitsets only when they are
// affordable and amortized, never for a streamed chunk into a big filter.
TEST(ParallelInsert, ChoosesStrategyBySize) {
  constexpr std::uint64_t kMiB = std::uint64_t{8} << 20;  // bits per MiB
  // 2 Mi digests into 16 MiB with 2 threads: 14.7 M probes >= 4 x 2 Mi words.
  EXPECT_EQ(detail::choose_strategy(16 * kMiB, 7, 2 << 20, 2), MergeStrategy::kShardBitsets);
  // A 64 Ki-digest chunk (abf build) into the same filter: too few probes;
  // two threads sharing one bitset lose to one thread, eight win.
  EXPECT_EQ(detail::choose_strategy(16 * kMiB, 7, 64 << 10, 2), MergeStrategy::kSerial);
  EXPECT_EQ(detail::choose_strategy(16 * kMiB, 7, 64 << 10, 8), MergeStrategy::kWordRange);
  EXPECT_EQ(detail::choose_strategy(128 * kMiB, 7, 64 << 10, 8), MergeStrategy::kAtomicOr);
  // Private bitsets over the 256 MiB budget: 3 x 128 MiB.
  EXPECT_EQ(detail::choose_strategy(128 * kMiB, 7, std::size_t{1} << 30, 4),
            MergeStrategy::kAtomicOr);
  // One thread owns the shared bitset; no private copy is needed.
  EXPECT_EQ(detail::choose_strategy(128 * kMiB, 7, 1, 1), MergeStrategy::kShardBitsets);
}

TEST(ParallelQuery, AnswersEqualScalarInInputOrder) {
  const auto members = test::random_digests(20000, 18);
  const BloomSpec spec{.expected_item_count = 20000, .target_fpp = 0.05};
  auto filter = build_filter(members, spec, 0, Backend::kScalar);
  ASSERT_TRUE(filter.has_value());
  // Half members, half others, interleaved: answers alternate, so any
  // reordering shows.
  auto others = test::random_digests(20000, 19);
  std::vector<Digest> queries;
  for (std::size_t i = 0; i < members.size(); ++i) {
    queries.push_back(members[i]);
    queries.push_back(others[i]);
  }
  std::vector<Answer> expected(queries.size());
  scalar::query_batch(filter->view(), queries.data(), queries.size(), expected.data());
  for (int threads = 1; threads <= max_threads(); ++threads) {
    with_threads(threads, [&] {
      for (const auto engine :
           {detail::QueryFn{scalar::query_batch}, detail::QueryFn{simd::query_batch}}) {
        for (const std::size_t grain : {1, 3, 64, 1000, 40000}) {
          std::vector<Answer> answers(queries.size(), Answer{2});
          const ParallelOptions options{MergeStrategy::kAtomicOr, grain, true};
          detail::parallel_query(options, engine, filter->view(), queries.data(), queries.size(),
                                 answers.data());
          EXPECT_EQ(answers, expected) << "threads=" << threads << " grain=" << grain;
        }
      }
      for (const Backend backend : {Backend::kAuto, Backend::kScalar, Backend::kSimd}) {
        std::vector<Answer> answers(queries.size(), Answer{2});
        ASSERT_TRUE(filter->query(queries, answers, backend).has_value());
        EXPECT_EQ(answers, expected) << "threads=" << threads << " " << to_string(backend);
      }
    });
  }
}

}  // namespace
}  // namespace abf
