// Single-thread probe engines side by side: the scalar reference and the
// Highway engine, on filters sized for L2, the LLC and DRAM (n = 100,000 /
// 10,000,000 / 100,000,000 at p = 0.01, cuco's defaults.hpp sweep), plus the
// machine's random-load ceiling over a buffer of the filter's size.
//
//   abf_bench --benchmark_filter='Probe|RandomLoad'
//   ABF_BENCH_DRAM=1 abf_bench --benchmark_filter='Probe|RandomLoad'
//
// The dram cases build a 100M-digest filter (~120 MB, ~10 s); without
// ABF_BENCH_DRAM=1 they are registered but skipped, so a default run stays short.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "abf/backend.hpp"
#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "kernels.hpp"
#include "probe_simd.h"
#include "scenario_filter.hpp"
#include "workload.hpp"

namespace {

using abf::Answer;
using abf::Digest;

using abf::workload::kBatch;
using abf::workload::kScenarios;
using abf::workload::kTargetFpp;

using abf::bench::scenario_filter;
using abf::bench::skip_dram;

using QueryFn = void (*)(const abf::probe::FilterView&, const Digest*, std::size_t,
                         Answer*) noexcept;
using InsertFn = void (*)(const abf::probe::Scheme&, std::uint64_t*, const Digest*,
                          std::size_t) noexcept;

// Args: scenario, backend (0 scalar, 1 simd), present (0 absent, 1 present).
void BM_ProbeQuery(benchmark::State& state) {
  const auto scenario = static_cast<std::size_t>(state.range(0));
  if (skip_dram(state, scenario)) return;
  const bool simd = state.range(1) == 1;
  const bool present = state.range(2) == 1;
  const abf::bench::ScenarioFilter& f = scenario_filter(scenario);
  const auto& digests = present ? f.present : f.absent;
  const QueryFn query = simd ? abf::simd::query_batch : abf::scalar::query_batch;
  const abf::probe::FilterView view = abf::probe::make_view(
      f.words.get(), abf::probe::unkeyed_scheme(f.layout.bit_count, f.layout.hash_count));
  std::vector<Answer> answers(digests.size());
  for (auto _ : state) {
    query(view, digests.data(), digests.size(), answers.data());
    benchmark::DoNotOptimize(answers.data());
    benchmark::ClobberMemory();
  }
  const auto maybe = std::count(answers.begin(), answers.end(), Answer::kMaybe);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(digests.size()));
  // For absent digests every Maybe is a false positive: the measured rate,
  // resolved to about 1 / sqrt(maybe) relative (100/p probes give ~10%).
  state.counters["fp_rate"] = static_cast<double>(maybe) / static_cast<double>(digests.size());
  state.counters["k"] = f.layout.hash_count;
  state.SetLabel(std::string(kScenarios[scenario].name) + (simd ? " simd " : " scalar ") +
                 (simd ? abf::simd::target_name() : std::string("-")));
}

// Args: scenario, backend. Inserts kBatch (at most n) members into a zeroed
// bitset of the scenario's size: the per-digest cost of a build.
void BM_ProbeBuild(benchmark::State& state) {
  const auto scenario = static_cast<std::size_t>(state.range(0));
  if (skip_dram(state, scenario)) return;
  const bool simd = state.range(1) == 1;
  const abf::bench::ScenarioFilter& f = scenario_filter(scenario);
  const InsertFn insert = simd ? abf::simd::insert_batch : abf::scalar::insert_batch;
  const std::size_t word_count = f.layout.bit_count / 64;
  auto words = abf::allocate_words(word_count);
  for (auto _ : state) {
    state.PauseTiming();
    std::memset(words.get(), 0, word_count * 8);
    state.ResumeTiming();
    insert(abf::probe::unkeyed_scheme(f.layout.bit_count, f.layout.hash_count), words.get(),
           f.present.data(), f.present.size());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(f.present.size()));
  state.SetLabel(std::string(kScenarios[scenario].name) + (simd ? " simd " : " scalar ") +
                 (simd ? abf::simd::target_name() : std::string("-")));
}

// The ceiling: independent random 64-bit loads over a buffer of the filter's
// size, allocated the same way (allocate_words: same alignment and page size).
// Load i reads word floor(frac(i * phi) * words) (a Weyl sequence: even
// spread, no stride a prefetcher could follow, one add and one multiply).
void BM_RandomLoad(benchmark::State& state) {
  const auto scenario = static_cast<std::size_t>(state.range(0));
  if (skip_dram(state, scenario)) return;
  const auto layout = *abf::choose_layout({kScenarios[scenario].n, kTargetFpp});
  const std::size_t word_count = layout.bit_count / 64;
  auto words = abf::allocate_words(word_count);
  for (std::size_t i = 0; i < word_count; ++i) words.get()[i] = abf::workload::splitmix64(i);
  const std::uint64_t* base = words.get();
  constexpr std::uint64_t kLoads = 4 * kBatch;
  for (auto _ : state) {
    __extension__ using U128 = unsigned __int128;
    constexpr std::uint64_t kPhi = 0x9e3779b97f4a7c15ull;
    std::uint64_t sum = 0;
    std::uint64_t fraction = 0;
    for (std::uint64_t i = 0; i < kLoads; ++i) {
      fraction += kPhi;
      sum += base[static_cast<std::uint64_t>((static_cast<U128>(fraction) * word_count) >> 64)];
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kLoads));
  state.SetLabel(kScenarios[scenario].name);
}

void scenario_args(benchmark::internal::Benchmark* b, int backends, bool with_present) {
  for (std::int64_t s = 0; s < 3; ++s) {
    for (std::int64_t backend = 0; backend < backends; ++backend) {
      if (with_present) {
        b->Args({s, backend, 0});
        b->Args({s, backend, 1});
      } else {
        b->Args({s, backend});
      }
    }
  }
}

BENCHMARK(BM_ProbeQuery)
    ->ArgNames({"scenario", "simd", "present"})
    ->Apply([](auto* b) { scenario_args(b, 2, true); }) -> Unit(benchmark::kMillisecond);
BENCHMARK(BM_ProbeBuild)
    ->ArgNames({"scenario", "simd"})
    ->Apply([](auto* b) { scenario_args(b, 2, false); }) -> Unit(benchmark::kMillisecond);
BENCHMARK(BM_RandomLoad)->ArgNames({"scenario"})->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

}  // namespace
