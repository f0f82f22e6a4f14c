// Internal: splitting batch work over the cores of the current TBB arena.
// Every function here gives the same result for any thread count and split.
#pragma once

#include <cstddef>
#include <cstdint>

#include "abf/digest.hpp"
#include "abf/filter.hpp"

namespace abf::detail {

// A single-threaded engine entry point (scalar::query_batch, simd::query_batch).
using QueryFn = void (*)(const probe::FilterView&, const Digest*, std::size_t, Answer*) noexcept;
using InsertFn = void (*)(std::uint64_t*, std::uint64_t, std::uint32_t, const Digest*,
                          std::size_t) noexcept;

// Answers digests[i] into answers[i], in chunks spread over the arena. Small
// batches run on the calling thread.
void parallel_query(QueryFn engine, const probe::FilterView& view, const Digest* digests,
                    std::size_t count, Answer* answers);

// Sets the bits of every digest in `words` (bit_count / 64 words). The bitset
// is identical to engine(words, ..., digests, count) run serially: OR is
// commutative, so neither the split nor the order can change it.
//
// With one thread in the arena, or a batch too small to split, this is the
// engine itself. Otherwise shards of the batch run in parallel and set their
// bits with an atomic OR into the one shared bitset (docs/parallel.md says
// why that merge and not the others). Extra memory: a few KiB per thread,
// whatever the filter or batch size.
void parallel_insert(InsertFn engine, std::uint64_t* words, std::uint64_t bit_count,
                     std::uint32_t hash_count, const Digest* digests, std::size_t count);

// How concurrent shards combine their bits. All three give the same bitset;
// they differ in speed and memory (bench/parallel_bench.cc measures them).
enum class MergeStrategy {
  // Each shard ORs its bits atomically into the shared bitset. No extra memory.
  kAtomicOr,
  // Each shard runs the engine into a private zeroed bitset; the bitsets are
  // then OR-reduced word range by word range. Extra memory: one whole bitset
  // per shard in flight (threads x filter size).
  kShardBitsets,
  // The bitset is cut into word ranges, one owner each. Shards compute their
  // probe indices into per-range buckets; then every owner applies its
  // buckets with a plain OR. Extra memory: 4 bytes per probe of a bounded
  // sub-batch.
  kWordRange,
};

// Knobs for tests and benchmarks. grain 0 means the default for the call.
struct ParallelOptions {
  MergeStrategy strategy = MergeStrategy::kAtomicOr;
  std::size_t grain = 0;     // digests per shard (at least 1)
  bool force_split = false;  // split even with one thread or a small batch
};

void parallel_insert(const ParallelOptions& options, InsertFn engine, std::uint64_t* words,
                     std::uint64_t bit_count, std::uint32_t hash_count, const Digest* digests,
                     std::size_t count);

void parallel_query(const ParallelOptions& options, QueryFn engine, const probe::FilterView& view,
                    const Digest* digests, std::size_t count, Answer* answers);

}  // namespace abf::detail
