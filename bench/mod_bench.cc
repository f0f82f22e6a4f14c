// Exact `x mod m` for the probe protocol's first index and step, five ways,
// over 64 Ki random 64-bit words (in L1/L2, so the arithmetic is measured,
// not memory). docs/performance.md quotes these numbers to justify the SIMD
// engine's own reduction over libdivide.
//
//   abf_bench --benchmark_filter=ModReduce
#include "hwy_targets.h"  // first: the same HWY_TARGETS as the engine

#include <benchmark/benchmark.h>

#include <cstdint>
#include <string>
#include <vector>

#include "abf/probe.hpp"
#include "hwy/targets.h"
#include "probe_simd.h"

// libdivide's AVX-512 vector division, compiled for AVX-512 in this file
// only (the benchmark runs it only where the CPU has it).
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq,avx512vl,avx512bw")
// GCC 12 flags _mm512_undefined_epi32() inside its own intrinsics (false positive).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#define LIBDIVIDE_AVX512
#include <immintrin.h>
#include <libdivide.h>

namespace {

__attribute__((target("avx512f,avx512dq,avx512vl,avx512bw"))) void libdivide_avx512_mod(
    const libdivide::libdivide_u64_branchfree_t& divider, std::uint64_t m, const std::uint64_t* x,
    std::size_t count, std::uint64_t* out) {
  const __m512i vm = _mm512_set1_epi64(static_cast<long long>(m));
  for (std::size_t i = 0; i + 8 <= count; i += 8) {
    const __m512i v = _mm512_loadu_si512(x + i);
    const __m512i q = libdivide::libdivide_u64_branchfree_do_vector(v, &divider);
    _mm512_storeu_si512(out + i, _mm512_sub_epi64(v, _mm512_mullo_epi64(q, vm)));
  }
}

}  // namespace
#pragma GCC diagnostic pop
#pragma GCC pop_options

// bench/mod_avx2_bench.cc: libdivide's AVX2 form (one vector ISA per file).
void libdivide_avx2_mod(std::uint64_t m, const std::uint64_t* x, std::size_t count,
                        std::uint64_t* out);

namespace {

constexpr std::size_t kCount = std::size_t{1} << 16;
// m = 9,592,960: the layout of n = 1,000,000 at p = 0.01.
constexpr std::uint64_t kBitCount = 9592960;

const std::vector<std::uint64_t>& inputs() {
  static const std::vector<std::uint64_t> x = [] {
    std::vector<std::uint64_t> v(kCount);
    std::uint64_t s = 12345;
    for (auto& w : v) {
      std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w = z ^ (z >> 31);
    }
    return v;
  }();
  return x;
}

// Arg: 0 `%` (div r64), 1 probe::Reducer, 2 libdivide u64 branchfree scalar,
// 3 libdivide u64 branchfree AVX-512 (+ vpmullq), 4 the SIMD engine's
// reduction on its dispatched target, 5 libdivide AVX2 (64-bit mullo
// emulated), 6 the SIMD engine's reduction forced to AVX2.
void BM_ModReduce(benchmark::State& state) {
  const auto& x = inputs();
  std::vector<std::uint64_t> out(kCount);
  std::uint64_t m = kBitCount;
  benchmark::DoNotOptimize(m);  // a run-time divisor, as in the engine
  const abf::probe::Reducer reducer(m);
  const auto divider = libdivide::libdivide_u64_branchfree_gen(m);
  const int variant = static_cast<int>(state.range(0));
  if (variant == 3 && !__builtin_cpu_supports("avx512dq")) {
    state.SkipWithError("no AVX-512DQ on this CPU");
    return;
  }
  if (variant >= 5 && !__builtin_cpu_supports("avx2")) {
    state.SkipWithError("no AVX2 on this CPU");
    return;
  }
  if (variant == 6) hwy::SetSupportedTargetsForTest(HWY_AVX2);
  for (auto _ : state) {
    switch (variant) {
      case 0:
        for (std::size_t i = 0; i < kCount; ++i) out[i] = x[i] % m;
        break;
      case 1:
        for (std::size_t i = 0; i < kCount; ++i) out[i] = reducer.reduce(x[i]);
        break;
      case 2:
        for (std::size_t i = 0; i < kCount; ++i) {
          out[i] = x[i] - libdivide::libdivide_u64_branchfree_do(x[i], &divider) * m;
        }
        break;
      case 3:
        libdivide_avx512_mod(divider, m, x.data(), kCount, out.data());
        break;
      case 5:
        libdivide_avx2_mod(m, x.data(), kCount, out.data());
        break;
      default:
        abf::simd::reduce_batch(m, x.data(), kCount, out.data());
        break;
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  if (variant == 6) hwy::SetSupportedTargetsForTest(0);
  for (std::size_t i = 0; i < kCount; i += 997) {
    if (out[i] != x[i] % m) state.SkipWithError("wrong remainder");
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(kCount));
  static const char* const kNames[] = {"div",
                                       "probe::Reducer",
                                       "libdivide scalar",
                                       "libdivide avx512",
                                       "simd ModM (dispatched)",
                                       "libdivide avx2",
                                       "simd ModM (AVX2)"};
  state.SetLabel(kNames[variant]);
}

BENCHMARK(BM_ModReduce)->DenseRange(0, 6);

}  // namespace
