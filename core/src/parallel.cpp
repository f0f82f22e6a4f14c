// Parallel batch query and build with oneTBB.
//
// The shards of a build meet in one bitset in one of three ways (atomic OR,
// private bitsets OR-reduced, word-range owners); choose_strategy picks by
// size. OR is commutative and idempotent, so the bitset cannot depend on the
// strategy, the split, the thread count or the input order;
// parallel_test.cc proves it word for word against the scalar reference.
#include "parallel.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <type_traits>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/probe.hpp"

namespace abf::detail {

namespace {

// Below this many digests a batch runs on the calling thread: a task costs
// about a microsecond to spawn, ~100 absent probes' worth at L2.
constexpr std::size_t kQueryGrain = 16 * 1024;
// Build shards: big enough that a task's spawn cost vanishes (~1 us against
// ~100 us of probes), small enough that 2 x cores shards balance a 1 M chunk.
constexpr std::size_t kInsertGrain = 8 * 1024;

// choose_strategy's limits (docs/parallel.md has the measurements).
constexpr std::uint64_t kWordRangeMaxBytes = std::uint64_t{32} << 20;
constexpr std::size_t kMinThreadsToShare = 4;

// Digests whose probe indices are computed (and their words prefetched) one
// block ahead of the block whose bits are being set. 8 digests x k = 7..10
// probes keeps ~60-80 lines in flight: enough to cover a DRAM miss at the
// rate the atomic ORs retire, few enough not to evict each other from L1.
constexpr std::size_t kBlock = 8;

struct ProbeBlock {
  std::uint32_t bits[kBlock * probe::kMaxHashCount];
  std::size_t count = 0;
};

// The positions of a policy's step 2 (its Probes' for_each_position, with
// the kind's division-free reduction) for the build paths that bucket or
// pipeline positions themselves. They hold a position in 32 bits.
template <class P>
struct PolicyPositions {
  using Probes = typename P::Probes;
  static_assert(Probes::kMaxBitCount <= (std::uint64_t{1} << 32),
                "parallel.cpp keeps positions in 32 bits: widen ProbeBlock and the buckets");
  const probe::Scheme& scheme;
  typename Probes::FastReduce reducer;

  template <class Sink>
  void operator()(const Digest& digest, Sink&& sink) const {
    Probes::for_each_position(P::hashes(scheme, digest.bytes.data()), scheme.hash_count, reducer,
                              [&](std::uint64_t i) {
                                sink(static_cast<std::uint32_t>(i));
                                return true;
                              });
  }
};

// Computes the bit indices of up to kBlock digests and prefetches their
// words for writing.
template <class Positions>
inline void compute_block(const Positions& positions, std::uint64_t* words, const Digest* digests,
                          std::size_t n, ProbeBlock& block) noexcept {
  std::size_t e = 0;
  for (std::size_t b = 0; b < n; ++b) {
    positions(digests[b], [&](std::uint32_t i) {
      block.bits[e++] = i;
      __builtin_prefetch(words + probe::word_of(i), 1, 3);
    });
  }
  block.count = e;
}

template <bool kAtomic>
inline void apply_block(std::uint64_t* words, const ProbeBlock& block) noexcept {
  for (std::size_t e = 0; e < block.count; ++e) {
    const std::uint64_t i = block.bits[e];
    if constexpr (kAtomic) {
      // Relaxed is enough: nothing reads the bitset until the parallel_for
      // has joined, and the join orders every OR before the reads.
      std::atomic_ref<std::uint64_t>(words[probe::word_of(i)])
          .fetch_or(probe::mask_of(i), std::memory_order_relaxed);
    } else {
      words[probe::word_of(i)] |= probe::mask_of(i);
    }
  }
}

// The shard body: inserts `count` digests, software-pipelined one block deep.
template <bool kAtomic, class Positions>
void insert_shard(const Positions& positions, std::uint64_t* words, const Digest* digests,
                  std::size_t count) noexcept {
  ProbeBlock blocks[2];
  std::size_t done = std::min(count, kBlock);
  compute_block(positions, words, digests, done, blocks[0]);
  int current = 0;
  while (done < count) {
    const std::size_t n = std::min(count - done, kBlock);
    compute_block(positions, words, digests + done, n, blocks[current ^ 1]);
    apply_block<kAtomic>(words, blocks[current]);
    current ^= 1;
    done += n;
  }
  apply_block<kAtomic>(words, blocks[current]);
}

void insert_atomic_or(std::size_t grain, const probe::Scheme& scheme, std::uint64_t* words,
                      const Digest* digests, std::size_t count) {
  probe::with_protocol(scheme.protocol, [&](auto protocol) {
    using P = decltype(protocol);
    if constexpr (std::is_same_v<typename P::Probes, probe::ClassicProbes>) {
      const PolicyPositions<P> positions{scheme, typename P::Probes::FastReduce(scheme.bit_count)};
      parallel_for_chunks(0, count, grain, [&](std::size_t begin, std::size_t end) {
        insert_shard<true>(positions, words, digests + begin, end - begin);
      });
    } else {
      probe::unknown_protocol_trap();  // parallel_insert sends the one-line kind elsewhere
    }
  });
}

void insert_shard_bitsets(InsertFn engine, std::size_t grain, const probe::Scheme& scheme,
                          std::uint64_t* words, const Digest* digests, std::size_t count) {
  const std::size_t word_count = scheme.bit_count / 64;
  // One contiguous part per thread (fewer when shards of `grain` run out):
  // part 0 writes straight into `words`, every other part into a private
  // zeroed bitset. Memory is (parts - 1) x filter whatever the scheduling.
  const auto threads = available_threads();
  const std::size_t parts =
      std::max<std::size_t>(1, std::min(threads, (count + grain - 1) / grain));
  const std::size_t per_part = (count + parts - 1) / parts;
  std::vector<std::shared_ptr<std::uint64_t>> private_bits(parts);
  parallel_for_chunks(0, parts, 1, [&](std::size_t first_part, std::size_t end_part) {
    for (std::size_t p = first_part; p < end_part; ++p) {
      const std::size_t begin = std::min(count, p * per_part);
      const std::size_t end = std::min(count, begin + per_part);
      std::uint64_t* target = words;
      if (p != 0) {
        private_bits[p] = allocate_words(word_count);
        target = private_bits[p].get();
      }
      engine(scheme, target, digests + begin, end - begin);
    }
  });
  // OR-reduce by word range: each task reads every private copy of its range.
  parallel_for_chunks(0, word_count, 4096, [&](std::size_t begin, std::size_t end) {
    for (std::size_t p = 1; p < parts; ++p) {
      const std::uint64_t* bits = private_bits[p].get();
      for (std::size_t w = begin; w < end; ++w) words[w] |= bits[w];
    }
  });
}

// Word-range partitioning. The bitset is cut into ranges of 2^shift bits,
// one owner each. A parallel counting sort buckets the probe indices by
// range (pass 1 counts, pass 2 recomputes and scatters: recomputing two
// reductions per digest is cheaper than writing and rereading k indices),
// then each range's owner sets its bits with plain ORs, its range resident
// in cache (pass 3). Sub-batches bound the memory.
constexpr std::size_t kMaxBucketedProbes = std::size_t{4} << 20;  // 16 MiB of indices
constexpr unsigned kRangeShiftMax = 25;  // ranges of at most 4 MiB: two fit the LLC
constexpr unsigned kRangeShiftMin = 15;  // and at least 4 KiB

template <class Positions, class Sink>
inline void for_each_probe(const Positions& positions, const Digest* digests, std::size_t count,
                           Sink&& sink) {
  for (std::size_t d = 0; d < count; ++d) positions(digests[d], sink);
}

template <class Positions>
void insert_word_range(std::size_t grain, const Positions& positions, std::uint64_t* words,
                       const Digest* digests, std::size_t count) {
  const std::uint64_t bit_count = positions.scheme.bit_count;
  const std::uint32_t hash_count = positions.scheme.hash_count;
  // At least 4 ranges per thread, so owners balance.
  const auto threads = static_cast<std::uint64_t>(available_threads());
  unsigned shift = kRangeShiftMax;
  while (shift > kRangeShiftMin && (bit_count >> shift) < 4 * threads) --shift;
  const std::size_t ranges = static_cast<std::size_t>((bit_count + (1ull << shift) - 1) >> shift);

  const std::size_t batch = std::max<std::size_t>(1, kMaxBucketedProbes / hash_count);
  std::vector<std::uint32_t> sorted(std::min(batch, count) * hash_count);
  std::vector<std::size_t> cursors;
  std::vector<std::size_t> range_begin(ranges + 1);
  for (std::size_t first = 0; first < count; first += batch) {
    const std::size_t n = std::min(batch, count - first);
    const Digest* chunk = digests + first;
    const std::size_t shards = (n + grain - 1) / grain;
    cursors.assign(shards * ranges, 0);
    const auto shard_span = [&](std::size_t s) {
      return std::pair{chunk + s * grain, std::min(grain, n - s * grain)};
    };
    // 1: count the probes of each (shard, range).
    parallel_for_chunks(0, shards, 1, [&](std::size_t first_shard, std::size_t end_shard) {
      for (std::size_t s = first_shard; s < end_shard; ++s) {
        std::size_t* counts = cursors.data() + s * ranges;
        const auto [begin, size] = shard_span(s);
        for_each_probe(positions, begin, size, [&](std::uint32_t i) { ++counts[i >> shift]; });
      }
    });
    // Offsets, range-major, so that each range's indices are contiguous.
    std::size_t offset = 0;
    for (std::size_t r = 0; r < ranges; ++r) {
      range_begin[r] = offset;
      for (std::size_t s = 0; s < shards; ++s) {
        const std::size_t c = cursors[s * ranges + r];
        cursors[s * ranges + r] = offset;
        offset += c;
      }
    }
    range_begin[ranges] = offset;
    // 2: scatter; every shard writes its own slots.
    parallel_for_chunks(0, shards, 1, [&](std::size_t first_shard, std::size_t end_shard) {
      for (std::size_t s = first_shard; s < end_shard; ++s) {
        std::size_t* cursor = cursors.data() + s * ranges;
        const auto [begin, size] = shard_span(s);
        for_each_probe(positions, begin, size,
                       [&](std::uint32_t i) { sorted[cursor[i >> shift]++] = i; });
      }
    });
    // 3: each range's owner ORs its bits; no two tasks share a word.
    parallel_for_chunks(0, ranges, 1, [&](std::size_t first_range, std::size_t end_range) {
      for (std::size_t e = range_begin[first_range]; e < range_begin[end_range]; ++e) {
        const std::uint32_t i = sorted[e];
        words[probe::word_of(i)] |= probe::mask_of(i);
      }
    });
  }
}

}  // namespace

MergeStrategy choose_strategy(std::uint64_t bit_count, std::uint32_t hash_count, std::size_t count,
                              std::size_t threads) {
  const std::uint64_t words = bit_count / 64;
  const std::uint64_t private_words = words * (threads > 0 ? threads - 1 : 0);
  const std::uint64_t probes = std::uint64_t{count} * hash_count;
  if (private_words * 8 <= kBuildScratchBudget && probes >= 4 * private_words) {
    return MergeStrategy::kShardBitsets;
  }
  if (threads < kMinThreadsToShare) return MergeStrategy::kSerial;
  return words * 8 <= kWordRangeMaxBytes ? MergeStrategy::kWordRange : MergeStrategy::kAtomicOr;
}

void parallel_query(const ParallelOptions& options, QueryFn engine, const probe::FilterView& view,
                    const Digest* digests, std::size_t count, Answer* answers) {
  const std::size_t grain = options.grain != 0 ? options.grain : kQueryGrain;
  if (!options.force_split && (count <= grain || available_threads() == 1)) {
    engine(view, digests, count, answers);
    return;
  }
  parallel_for_chunks(0, count, grain, [&](std::size_t begin, std::size_t end) {
    engine(view, digests + begin, end - begin, answers + begin);
  });
}

void parallel_query(QueryFn engine, const probe::FilterView& view, const Digest* digests,
                    std::size_t count, Answer* answers) {
  parallel_query(ParallelOptions{}, engine, view, digests, count, answers);
}

void parallel_insert(const ParallelOptions& options, InsertFn engine, const probe::Scheme& scheme,
                     std::uint64_t* words, const Digest* digests, std::size_t count) {
  const std::size_t grain = options.grain != 0 ? options.grain : kInsertGrain;
  if (count == 0) return;
  if (!options.force_split && (count <= grain || available_threads() == 1)) {
    engine(scheme, words, digests, count);
    return;
  }
  MergeStrategy strategy = options.strategy;
  if (blocked::is_blocked_protocol(scheme.protocol)) {
    // The one-line protocols: private bitsets when they fit the budget,
    // else the engine on one thread (the atomic-OR and word-range paths
    // hold 32-bit positions of the classic kind).
    const std::size_t threads = available_threads();
    const std::uint64_t bytes = scheme.bit_count / 8;
    const bool fits = (threads - 1) * bytes <= kBuildScratchBudget;
    strategy = fits && (options.force_split || count >= bytes / 64) ? MergeStrategy::kShardBitsets
                                                                      : MergeStrategy::kSerial;
  } else if (strategy == MergeStrategy::kAuto) {
    strategy = choose_strategy(scheme.bit_count, scheme.hash_count, count, available_threads());
  }
  switch (strategy) {
    case MergeStrategy::kAuto:
    case MergeStrategy::kSerial:
      engine(scheme, words, digests, count);
      return;
    case MergeStrategy::kAtomicOr:
      insert_atomic_or(grain, scheme, words, digests, count);
      return;
    case MergeStrategy::kShardBitsets:
      insert_shard_bitsets(engine, grain, scheme, words, digests, count);
      return;
    case MergeStrategy::kWordRange:
      probe::with_protocol(scheme.protocol, [&](auto protocol) {
        using P = decltype(protocol);
        if constexpr (std::is_same_v<typename P::Probes, probe::ClassicProbes>) {
          const PolicyPositions<P> positions{scheme,
                                             typename P::Probes::FastReduce(scheme.bit_count)};
          insert_word_range(grain, positions, words, digests, count);
        } else {
          probe::unknown_protocol_trap();  // sent to kShardBitsets or kSerial above
        }
      });
      return;
  }
}

void parallel_insert(InsertFn engine, const probe::Scheme& scheme, std::uint64_t* words,
                     const Digest* digests, std::size_t count) {
  parallel_insert(ParallelOptions{}, engine, scheme, words, digests, count);
}

ContentFingerprint content_fingerprint_of(std::span<const Digest> digests) {
  // XXH3-128 of 32 bytes is a few nanoseconds; below two blocks a task
  // would cost more than it saves.
  constexpr std::size_t kBlock = 64 * 1024;
  const std::size_t blocks = (digests.size() + kBlock - 1) / kBlock;
  if (blocks < 2 || available_threads() < 2) return ContentFingerprint::of(digests);
  std::vector<ContentFingerprint> sums(blocks);
  parallel_for_chunks(0, blocks, 1, [&](std::size_t begin, std::size_t end) {
    for (std::size_t b = begin; b < end; ++b) {
      sums[b] = ContentFingerprint::of(
          digests.subspan(b * kBlock, std::min(kBlock, digests.size() - b * kBlock)));
    }
  });
  ContentFingerprint total;
  for (const ContentFingerprint& sum : sums) total += sum;
  return total;
}

}  // namespace abf::detail
