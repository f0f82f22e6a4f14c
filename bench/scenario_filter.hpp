// The filled filters the probe benchmarks ask (probe_bench.cc and
// partitioned_query_bench.cc): one per scenario of bench/workload.hpp,
// all n members inserted by the SIMD engine, built once per process, with
// the member and non-member batches asked of it.
#pragma once

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "probe_simd.h"
#include "workload.hpp"

namespace abf::bench {

inline void fill_digests(std::uint64_t seed, std::uint64_t first, std::size_t count,
                         Digest* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = workload::digest_at(seed, first + i);
}

struct ScenarioFilter {
  Layout layout;
  std::shared_ptr<std::uint64_t> words;
  std::vector<Digest> present;  // the first min(n, kBatch) members
  std::vector<Digest> absent;   // as many non-members

  probe::FilterView view() const {
    return probe::make_view(words.get(),
                            probe::unkeyed_scheme(layout.bit_count, layout.hash_count));
  }
};

// The scenario's filter, built on first use and kept (the dram one holds
// ~120 MB and takes ~10 s to build).
inline const ScenarioFilter& scenario_filter(std::size_t scenario) {
  static std::map<std::size_t, ScenarioFilter> cache;
  auto found = cache.find(scenario);
  if (found != cache.end()) return found->second;
  ScenarioFilter f;
  const std::uint64_t n = workload::kScenarios[scenario].n;
  f.layout = *choose_layout({n, workload::kTargetFpp});
  f.words = allocate_words(f.layout.bit_count / 64);
  std::vector<Digest> chunk(std::size_t{1} << 20);
  for (std::uint64_t begin = 0; begin < n; begin += chunk.size()) {
    const std::size_t count =
        static_cast<std::size_t>(std::min<std::uint64_t>(chunk.size(), n - begin));
    fill_digests(workload::kMemberSeed, begin, count, chunk.data());
    simd::insert_batch(probe::unkeyed_scheme(f.layout.bit_count, f.layout.hash_count),
                       f.words.get(), chunk.data(), count);
  }
  const std::size_t batch = static_cast<std::size_t>(std::min(n, workload::kBatch));
  f.present.resize(batch);
  fill_digests(workload::kMemberSeed, 0, batch, f.present.data());
  f.absent.resize(batch);
  fill_digests(workload::kAbsentSeed, 0, batch, f.absent.data());
  return cache.emplace(scenario, std::move(f)).first->second;
}

// True, after SkipWithError, for a dram case unless ABF_BENCH_DRAM=1: a
// default run stays short.
inline bool skip_dram(benchmark::State& state, std::size_t scenario) {
  if (workload::kScenarios[scenario].n < 100'000'000) return false;
  const char* enabled = std::getenv("ABF_BENCH_DRAM");
  if (enabled != nullptr && std::string(enabled) == "1") return false;
  state.SkipWithError("dram case skipped: set ABF_BENCH_DRAM=1 (builds a 100M-digest filter)");
  return true;
}

}  // namespace abf::bench
