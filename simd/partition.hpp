// Internal: the partitioned build, how FilterBuilder fills filters too large
// for the last-level cache (docs/parallel.md, "Partitioned build").
//
// Setting a bit of a 100 MiB filter directly costs a random DRAM line read
// and, later, its write-back: 128 bytes of random traffic per probe, and two
// threads doing that share one memory system. So the positions are sorted
// first: every thread ("slot") appends the probe positions of its share of
// the digests to buckets, one bucket per 128 KiB range of the bitset. When
// the buckets are full (a "round"), the ranges are applied one at a time,
// each loaded into L2 once, sequentially, and set there from every slot's
// bucket. With the default budget a round holds ~26 positions per cache line
// of the filter: per probe, 4 bytes written and read back and ~5 bytes of
// the filter's sequential load and write-back, against 128 random bytes.
// The build becomes compute, and scales with the cores.
//
// The bits equal a serial build's for any slot count, split or round size:
// OR is commutative, and every position lands in the bitset exactly once
// (through a bucket, or through an atomic OR when its bucket is full).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "abf/digest.hpp"
#include "abf/probe.hpp"
#include "probe_simd.h"

namespace abf::detail {

// Filters of at least this many bytes are built partitioned (FilterBuilder).
// Below it the bitset stays in the LLC, where setting bits directly is
// cheaper than sorting them (11 MiB: 6.9 ns a digest direct, 13-14 ns
// partitioned; docs/parallel.md).
inline constexpr std::uint64_t kPartitionMinBytes = std::uint64_t{32} << 20;

struct PartitionTuning {
  // A bucket covers 2^range_bits bits (6..30). 2^20 bits (128 KiB) leaves
  // room in a 1 MiB L2 for the next range, prefetched while this one is
  // set; docs/parallel.md has 2^18 and 2^22.
  unsigned range_bits = 20;
  // Bytes of bucket entries over all slots. 0: twice the filter, at most
  // kBuildScratchBudget, the build's one budget (every round streams the
  // whole filter through L2 once). Against once the filter, both with the
  // odd stride, in interleaved runs: the 4 GiB streaming build at 2 threads
  // 1.58 against 1.78 s (medians of 5), the 4 Mi-digest dram build
  // 1.93-2.04x at 2 threads over 1 against 1.50-1.82x; half the filter made
  // the streaming build 15% slower.
  std::size_t budget_bytes = 0;
};

// Bytes of bucket buffers kept from the last finished build for the next,
// and freeing them (abf::release_cached_buffers).
std::size_t pooled_entry_bytes() noexcept;
void release_pooled_entries() noexcept;

class PartitionedBuild {
 public:
  // `slots`: how many threads will scatter at once (>= 1).
  PartitionedBuild(const probe::Scheme& scheme, std::size_t slots,
                   const PartitionTuning& tuning = {});
  ~PartitionedBuild();
  PartitionedBuild(const PartitionedBuild&) = delete;
  PartitionedBuild& operator=(const PartitionedBuild&) = delete;

  // Scatters the digests over the slots in parallel; applies the buckets to
  // `words` whenever a round is full. Positions may stay buffered: `flush`.
  void add(std::uint64_t* words, const Digest* digests, std::size_t count);
  // Applies and empties every bucket.
  void flush(std::uint64_t* words);

  std::size_t slot_count() const noexcept { return slots_.size(); }
  // Digests a slot takes per round.
  std::size_t round_digests() const noexcept { return round_digests_; }
  std::size_t bucket_count() const noexcept { return bucket_count_; }
  std::uint32_t bucket_capacity() const noexcept { return capacity_; }
  // Entries from one bucket's start to the next (partition.cpp, stride_for).
  std::size_t bucket_stride() const noexcept { return stride_; }
  // Positions that found their bucket full and were set directly so far.
  std::uint64_t overflowed() const noexcept;

 private:
  struct Slot {
    std::unique_ptr<std::uint32_t, void (*)(void*)> entries{nullptr,
                                                            nullptr};  // reused (partition.cpp)
    std::vector<std::uint32_t> fill;
    std::uint64_t overflowed = 0;
  };
  // Applies buckets [first, last) of every slot and empties them.
  void apply_buckets(std::uint64_t* words, std::size_t first, std::size_t last);

  probe::Scheme scheme_;
  std::uint64_t bit_count_;
  std::uint32_t hash_count_;
  unsigned range_bits_;
  std::size_t bucket_count_;
  std::uint32_t capacity_;
  std::size_t stride_;
  std::size_t round_digests_;
  std::size_t buffered_ = 0;  // digests a slot has scattered since the last apply (at most)
  std::vector<Slot> slots_;
};

}  // namespace abf::detail
