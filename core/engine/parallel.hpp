// Internal: splitting batch work over the cores of the current TBB arena.
// Every function here gives the same result for any thread count and split.
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/fingerprint.hpp"

namespace abf::detail {

// The one memory budget of a build: bytes of scratch a build may hold beside
// its filter (private bitsets, bucket buffers), whichever strategy the
// engine and choose_strategy pick. docs/parallel.md has the measurements.
inline constexpr std::size_t kBuildScratchBudget = std::size_t{256} << 20;

// A single-threaded engine entry point (scalar::query_batch, simd::query_batch).
using QueryFn = void (*)(const probe::FilterView&, const Digest*, std::size_t, Answer*) noexcept;
using InsertFn = void (*)(const probe::Scheme&, std::uint64_t*, const Digest*,
                          std::size_t) noexcept;

// Answers digests[i] into answers[i], in chunks spread over the arena. Small
// batches run on the calling thread.
void parallel_query(QueryFn engine, const probe::FilterView& view, const Digest* digests,
                    std::size_t count, Answer* answers);

// Sets the bits of every digest in `words` (bit_count / 64 words). The bitset
// is identical to engine(scheme, words, digests, count) run serially: OR is
// commutative, so neither the split nor the order can change it.
//
// With one thread in the arena, or a batch too small to split, this is the
// engine itself. Otherwise shards of the batch run in parallel, merged by
// the strategy choose_strategy() picks (docs/parallel.md has the
// measurements): extra memory stays below kBuildScratchBudget + 16 MiB
// whatever the filter, batch or thread count.
void parallel_insert(InsertFn engine, const probe::Scheme& scheme, std::uint64_t* words,
                     const Digest* digests, std::size_t count);

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
  // No merge: the engine on the calling thread.
  kSerial,
  // Pick by size: choose_strategy().
  kAuto,
};

// The strategy kAuto uses for a batch of `count` digests into a filter of
// `bit_count` bits with `threads` threads:
//   kShardBitsets when the private bitsets fit kBuildScratchBudget and the
//     batch has at least 4 probes per word of private bitset to OR back
//     (the engine's own speed on every thread; the reduction then costs
//     < 1/4 extra);
//   else, with fewer than 4 threads, kSerial: an atomic OR or a bucketed
//     probe costs 2.5-7x the SIMD engine's plain OR (docs/parallel.md), so
//     2 or 3 threads would lose to one;
//   else kWordRange for bitsets up to 32 MiB (in the LLC), kAtomicOr above.
MergeStrategy choose_strategy(std::uint64_t bit_count, std::uint32_t hash_count, std::size_t count,
                              std::size_t threads);

// Knobs for tests and benchmarks. grain 0 means the default for the call.
struct ParallelOptions {
  MergeStrategy strategy = MergeStrategy::kAuto;
  std::size_t grain = 0;     // digests per shard (at least 1)
  bool force_split = false;  // split even with one thread or a small batch
};

void parallel_insert(const ParallelOptions& options, InsertFn engine, const probe::Scheme& scheme,
                     std::uint64_t* words, const Digest* digests, std::size_t count);

void parallel_query(const ParallelOptions& options, QueryFn engine, const probe::FilterView& view,
                    const Digest* digests, std::size_t count, Answer* answers);

// ContentFingerprint::of(digests), in blocks of 64 Ki digests spread over
// the arena when there are several: the sum mod 2^128 does not depend on
// how the blocks are added.
ContentFingerprint content_fingerprint_of(std::span<const Digest> digests);

// Threads a parallel loop here can use: the current arena's concurrency,
// capped by tbb::global_control's max_allowed_parallelism (what `--threads`
// sets), which max_concurrency() alone does not report.
inline std::size_t available_threads() {
  const auto arena = static_cast<std::size_t>(tbb::this_task_arena::max_concurrency());
  const auto allowed =
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
  return std::max<std::size_t>(1, std::min(arena, allowed));
}

// tbb::parallel_for over [begin, end) in chunks of at least `grain` (>= 1)
// digests or words; body(chunk_begin, chunk_end).
//
// Under ThreadSanitizer the chunks run on plain std::threads instead, as
// many as the TBB arena allows. Debian's libtbb is not built with
// -fsanitize=thread, so TSan cannot see how TBB hands a task to a worker and
// joins it: it reports TBB's own recycled task objects, and every write made
// before the loop and read in a task, as races. Thread creation and join it
// does see, and tasks share no synchronization beyond them, so a race
// between two chunks of the body is still reported.
template <class Body>
void parallel_for_chunks(std::size_t begin, std::size_t end, std::size_t grain, const Body& body) {
  if (begin >= end) return;
#if defined(__SANITIZE_THREAD__)
  const std::size_t chunks = (end - begin + grain - 1) / grain;
  const auto threads = std::min<std::size_t>(chunks, available_threads());
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      body(begin + c * grain, std::min(end, begin + (c + 1) * grain));
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (auto& helper : helpers) helper.join();
#else
  tbb::parallel_for(
      tbb::blocked_range<std::size_t>(begin, end, grain),
      [&](const tbb::blocked_range<std::size_t>& range) { body(range.begin(), range.end()); });
#endif
}

}  // namespace abf::detail
