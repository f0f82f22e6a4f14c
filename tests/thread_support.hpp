// Shared helpers for the tests that sweep thread counts (parallel_test,
// partition_test): an arena of an exact size, the layouts they sweep, and
// the scalar reference bits.
#pragma once

#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <thread>
#include <vector>

#include "abf/digest.hpp"
#include "abf/scheme.hpp"
#include "kernels.hpp"
#include "test_support.hpp"

namespace abf::test {

// Twice the cores: more threads than cores must work too.
inline int max_threads() {
  return 2 * static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Runs `body` in an arena of exactly `threads` threads (more than the cores
// is allowed: global_control lifts TBB's default cap of one worker per core).
template <class Body>
void with_threads(int threads, Body&& body) {
  tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                            static_cast<std::size_t>(threads));
  tbb::task_arena arena(threads);
  arena.execute([&] {
    ASSERT_EQ(tbb::this_task_arena::max_concurrency(), threads);
    body();
  });
}

// Layouts the sweeps cover: the smallest m, non-power-of-two m, m = 2^20
// (several word ranges, several buckets), and k from 1 to 32.
struct Geometry {
  std::uint64_t bit_count;
  std::uint32_t hash_count;
};
inline constexpr Geometry kGeometries[] = {
    {64, 1}, {64, 32}, {9600, 7}, {191872, 7}, {std::uint64_t{1} << 20, 10}, {1437824, 32}};

// The scalar reference build of `digests` into a fresh bitset of the scheme.
inline std::vector<std::uint64_t> scalar_bits(const probe::Scheme& scheme,
                                              std::span<const Digest> digests) {
  std::vector<std::uint64_t> words(scheme.bit_count / 64, 0);
  scalar::insert_batch(scheme, words.data(), digests.data(), digests.size());
  return words;
}
inline std::vector<std::uint64_t> scalar_bits(std::uint64_t bit_count, std::uint32_t hash_count,
                                              std::span<const Digest> digests) {
  return scalar_bits(probe::unkeyed_scheme(bit_count, hash_count), digests);
}

// A protocol-2 scheme of layout (m, k) under the golden key.
inline probe::Scheme keyed_scheme(std::uint64_t bit_count, std::uint32_t hash_count) {
  return Scheme::keyed({bit_count, hash_count}, golden_key().key)->probe();
}

}  // namespace abf::test
