// The three ways parallel shards can merge their bits (core/src/parallel.hpp),
// the partitioned build (core/src/partition.hpp), the parallel query, and
// what a second thread gets from the machine itself (compute, bandwidth), at one thread and at
// every core, across filter sizes in L2, LLC and DRAM. docs/parallel.md quotes these numbers.
//
//   abf_bench --benchmark_filter='Parallel' --benchmark_min_time=0.5s
#include <benchmark/benchmark.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <thread>
#include <vector>

#include "abf/filter.hpp"
#include "kernels.hpp"
#include "parallel.hpp"
#include "partition.hpp"
#include "probe_simd.h"

namespace {

using abf::Digest;

// Filter sizes in bits: 512 KiB (half of one core's L2), 16 MiB (half the
// LLC), 128 MiB (DRAM).
constexpr std::int64_t kL2Bits = std::int64_t{1} << 22;
constexpr std::int64_t kLlcBits = std::int64_t{1} << 27;
constexpr std::int64_t kDramBits = std::int64_t{1} << 30;
constexpr std::uint32_t kHashCount = 7;               // the optimum for p = 1%
constexpr std::size_t kBatch = std::size_t{1} << 21;  // 2 Mi digests, 64 MiB

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

const std::vector<Digest>& digests() {
  static const std::vector<Digest> all = [] {
    std::vector<Digest> out(kBatch);
    std::uint64_t state = 42;
    for (auto& digest : out) {
      for (std::size_t i = 0; i < Digest::kSize; i += 8) {
        const std::uint64_t word = splitmix64(state);
        std::memcpy(digest.bytes.data() + i, &word, 8);
      }
    }
    return out;
  }();
  return all;
}

std::int64_t hardware_threads() {
  return static_cast<std::int64_t>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs `body` inside an arena of `threads` threads, as `--threads N` would.
template <class Body>
void in_arena(int threads, Body&& body) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                            static_cast<std::size_t>(threads));
  tbb::task_arena arena(threads);
  arena.execute(body);
}

// Args: bits, threads, strategy (-1: the SIMD engine serially; 0..3 the
// MergeStrategy values, 4 = auto).
void BM_ParallelBuild(benchmark::State& state) {
  const auto bits = static_cast<std::uint64_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const auto strategy = state.range(2);
  auto words = abf::allocate_words(bits / 64);
  const auto& input = digests();
  in_arena(threads, [&] {
    for (auto _ : state) {
      if (strategy < 0) {
        abf::simd::insert_batch(abf::probe::unkeyed_scheme(bits, kHashCount), words.get(),
                                input.data(), input.size());
      } else {
        abf::detail::ParallelOptions options;
        options.strategy = static_cast<abf::detail::MergeStrategy>(strategy);
        options.force_split = true;
        abf::detail::parallel_insert(options, abf::simd::insert_batch,
                                     abf::probe::unkeyed_scheme(bits, kHashCount), words.get(),
                                     input.data(), input.size());
      }
      benchmark::ClobberMemory();
    }
  });
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * input.size()));
  static const char* const kNames[] = {"atomic_or", "shard_bitsets", "word_range", "serial",
                                       "auto"};
  state.SetLabel(strategy < 0 ? "serial_simd" : kNames[strategy]);
}

// The partitioned build (core/src/partition.hpp) in its steady state: the
// buckets are allocated once, each iteration scatters the batch over one
// slot per thread and applies every bucket. Args: bits, threads, range_bits,
// budget in MiB (0: the default, half the filter).
void BM_PartitionedBuild(benchmark::State& state) {
  const auto bits = static_cast<std::uint64_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const abf::detail::PartitionTuning tuning{static_cast<unsigned>(state.range(2)),
                                            static_cast<std::size_t>(state.range(3)) << 20};
  auto words = abf::allocate_words(bits / 64);
  const auto& input = digests();
  in_arena(threads, [&] {
    abf::detail::PartitionedBuild build(abf::probe::unkeyed_scheme(bits, kHashCount),
                                        static_cast<std::size_t>(threads), tuning);
    for (auto _ : state) {
      build.add(words.get(), input.data(), input.size());
      build.flush(words.get());
      benchmark::ClobberMemory();
    }
  });
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * input.size()));
}

// Args: bits, threads. The filter holds bits / 10 digests (about half full),
// the queries are the other digests: mostly absent, as in service.
void BM_ParallelQuery(benchmark::State& state) {
  const auto bits = static_cast<std::uint64_t>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  auto words = abf::allocate_words(bits / 64);
  const auto& input = digests();
  const std::size_t members = std::min<std::size_t>(input.size() / 2, bits / 10);
  abf::simd::insert_batch(abf::probe::unkeyed_scheme(bits, kHashCount), words.get(), input.data(),
                          members);
  const abf::probe::FilterView view =
      abf::probe::make_view(words.get(), abf::probe::unkeyed_scheme(bits, kHashCount));
  std::vector<abf::Answer> answers(input.size());
  in_arena(threads, [&] {
    for (auto _ : state) {
      abf::detail::parallel_query(abf::simd::query_batch, view, input.data(), input.size(),
                                  answers.data());
      benchmark::ClobberMemory();
    }
  });
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * input.size()));
}

// What the machine itself gives a second thread, as references for the
// scaling of the builds and queries above. Each thread runs its own copy of
// the work (no sharing), `threads` at once:
//   ProbeStartsScaling: the SIMD engine's vector reduction over 1024 digests
//     that stay in L1, so pure vector compute;
//   StreamReadScaling: a sequential sum over a private 256 MiB buffer, so
//     DRAM bandwidth.
// items/s over all threads; perfect scaling doubles it at 2 threads.
template <class Work>
void run_on_threads(int threads, const Work& work) {
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work, t);
  work(0);
  for (auto& helper : helpers) helper.join();
}

void BM_ProbeStartsScaling(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr std::size_t kDigests = 1024;
  constexpr int kRounds = 20000;
  const std::vector<Digest> input(digests().begin(), digests().begin() + kDigests);
  std::vector<std::uint64_t> sinks(static_cast<std::size_t>(threads) * 8);
  for (auto _ : state) {
    run_on_threads(threads, [&](int t) {
      std::vector<std::uint64_t> first(kDigests), step(kDigests);
      for (int round = 0; round < kRounds; ++round) {
        abf::simd::probe_starts(abf::probe::unkeyed_scheme(kDramBits, 1), input.data(), kDigests,
                                first.data(), step.data());
        sinks[static_cast<std::size_t>(t) * 8] += first[static_cast<std::size_t>(round) % kDigests];
      }
    });
  }
  benchmark::DoNotOptimize(sinks.data());
  state.SetItemsProcessed(
      static_cast<std::int64_t>(state.iterations() * threads * kRounds * kDigests));
}

void BM_StreamReadScaling(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr std::size_t kWords = std::size_t{32} << 20;  // 256 MiB a thread
  std::vector<std::shared_ptr<std::uint64_t>> buffers;
  for (int t = 0; t < threads; ++t) {
    buffers.push_back(abf::allocate_words(kWords));
    std::iota(buffers.back().get(), buffers.back().get() + kWords, std::uint64_t{1});
  }
  std::vector<std::uint64_t> sums(static_cast<std::size_t>(threads) * 8);
  for (auto _ : state) {
    run_on_threads(threads, [&](int t) {
      const std::uint64_t* words = buffers[static_cast<std::size_t>(t)].get();
      sums[static_cast<std::size_t>(t) * 8] =
          std::accumulate(words, words + kWords, std::uint64_t{0});
    });
  }
  benchmark::DoNotOptimize(sums.data());
  state.SetBytesProcessed(
      static_cast<std::int64_t>(state.iterations() * threads * kWords * sizeof(std::uint64_t)));
}

void build_args(benchmark::internal::Benchmark* b) {
  for (const auto bits : {kL2Bits, kLlcBits, kDramBits}) {
    b->Args({bits, 1, -1});
    for (std::int64_t threads = 1; threads <= hardware_threads(); threads *= 2) {
      for (const std::int64_t strategy : {0, 1, 2, 4}) b->Args({bits, threads, strategy});
    }
  }
}

void partition_args(benchmark::internal::Benchmark* b) {
  for (const auto bits : {kLlcBits, kDramBits}) {
    for (std::int64_t threads = 1; threads <= hardware_threads(); threads *= 2) {
      for (const std::int64_t range_bits : {18, 20, 22}) b->Args({bits, threads, range_bits, 0});
      b->Args({bits, threads, 20, 16});
    }
  }
}

void query_args(benchmark::internal::Benchmark* b) {
  for (const auto bits : {kL2Bits, kLlcBits, kDramBits}) {
    for (std::int64_t threads = 1; threads <= hardware_threads(); threads *= 2) {
      b->Args({bits, threads});
    }
  }
}

BENCHMARK(BM_ParallelBuild)
    ->Apply(build_args)
    ->ArgNames({"bits", "threads", "strategy"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PartitionedBuild)
    ->Apply(partition_args)
    ->ArgNames({"bits", "threads", "range_bits", "budget_mib"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ProbeStartsScaling)
    ->DenseRange(1, 2)
    ->ArgName("threads")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamReadScaling)
    ->DenseRange(1, 2)
    ->ArgName("threads")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ParallelQuery)
    ->Apply(query_args)
    ->ArgNames({"bits", "threads"})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace
