// The benchmark workload shared by `abf bench` (cli/cmd_bench.cpp) and the
// Google Benchmark suite (bench/probe_bench.cc), so both measure the same
// scenarios on the same digests. Not part of the library: nothing in core/
// uses it, so it lives with the benchmarks and cli takes it from here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "abf/digest.hpp"

namespace abf::workload {

// Filter sizes that sit in L2, the last-level cache and DRAM, at p = 0.01.
struct Scenario {
  const char* name;
  std::uint64_t n;
};
inline constexpr Scenario kScenarios[] = {
    {"l2", 100'000}, {"llc", 10'000'000}, {"dram", 100'000'000}};
inline constexpr double kTargetFpp = 0.01;
// Digests per timed query batch and per timed build (at most n): 128 MiB of
// input, enough to leave every cache behind at llc and dram.
inline constexpr std::uint64_t kBatch = std::uint64_t{1} << 22;
// Streams of digests: members and non-members.
inline constexpr std::uint64_t kMemberSeed = 1;
inline constexpr std::uint64_t kAbsentSeed = 2;

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Digest i of stream `seed`: uniformly random and computable in any order,
// so a 100M-member build never holds its input in memory.
inline Digest digest_at(std::uint64_t seed, std::uint64_t i) {
  Digest digest;
  const std::uint64_t base = (seed << 40) ^ (i * 4);
  for (std::size_t w = 0; w < 4; ++w) {
    const std::uint64_t word = splitmix64(base + w);
    std::memcpy(digest.bytes.data() + 8 * w, &word, 8);
  }
  return digest;
}

}  // namespace abf::workload
