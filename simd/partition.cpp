#include "partition.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <new>

#include "block_pool.hpp"
#include "parallel.hpp"
#include "prefetch.hpp"

namespace abf::detail {

namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kLineEntries = 64 / sizeof(std::uint32_t);

// Entries from one bucket's start to the next: `capacity` or more, whole
// cache lines, and an odd number of them. The scatter writes every bucket's
// tail at once, and the tails advance together; with an odd stride in lines
// bucket b starts b x stride lines in, which differs modulo any power of two
// for every b below it, so in a cache of 2^s sets the first 2^s tails each
// take a different set. A power-of-two stride put every tail in one L2 set
// (2.2x slower scatter), and capacity + 16 entries, the rule before, gave the
// 915 buckets of a 114 MiB filter with a 228 MiB budget a stride of 2^18 +
// 20 bytes: their tails crowded into 286 of the L2's 1024 sets and the
// one-thread build took 23 instead of 17.4 ns a digest.
std::size_t stride_for(std::uint32_t capacity) {
  std::size_t lines = (capacity + kLineEntries - 1) / kLineEntries;
  if (lines % 2 == 0) ++lines;
  return lines * kLineEntries;
}
// Buckets applied per task.
constexpr std::size_t kApplyGrain = 8;
// A sparse bucket (fewer entries than half its range's lines) is not worth
// loading whole: its entries prefetch their own lines this far ahead.
constexpr std::uint32_t kSparseDistance = 16;

using Entries = std::unique_ptr<std::uint32_t, void (*)(void*)>;

// Buffers of 2 MiB and more take whole huge pages; smaller ones (many
// slots) whole cache lines, so rounding never multiplies the budget.
std::size_t entry_alignment(std::size_t bytes) { return bytes >= kHugePage ? kHugePage : 64; }
std::size_t entry_bytes(std::size_t count) {
  const std::size_t bytes = count * sizeof(std::uint32_t);
  const std::size_t alignment = entry_alignment(bytes);
  return (bytes + alignment - 1) / alignment * alignment;
}

// The entry buffers of the last finished build, reused by the next build of
// the same shape (block_pool.hpp has the measurements: the 2-thread `abf
// bench` dram build swung between 11 and 30 ns a digest with fresh buffers
// and held at 12.9 with these). At most one build's worth stays held: the
// budget, kBuildScratchBudget, and each slot's rounding to huge pages.
// Never destroyed, like allocate_words' pool.
BlockPool& entries_pool() {
  static auto* pool = new BlockPool(0, SIZE_MAX, 2 * kBuildScratchBudget);
  return *pool;
}

// Huge-page-advised memory for `count` bucket entries (written before read).
Entries allocate_entries(std::size_t count) {
  const std::size_t bytes = entry_bytes(count);
  if (void* reused = entries_pool().take(bytes)) {
    return {static_cast<std::uint32_t*>(reused), std::free};
  }
  void* memory = std::aligned_alloc(entry_alignment(bytes), bytes);
  if (memory == nullptr) throw std::bad_alloc();
  if (bytes >= kHugePage) madvise(memory, bytes, MADV_HUGEPAGE);  // advice; may be ignored
  return {static_cast<std::uint32_t*>(memory), std::free};
}

}  // namespace

std::size_t pooled_entry_bytes() noexcept { return entries_pool().held_bytes(); }

void release_pooled_entries() noexcept { entries_pool().clear(); }

PartitionedBuild::PartitionedBuild(const probe::Scheme& scheme, std::size_t slots,
                                   const PartitionTuning& tuning)
    : scheme_(scheme),
      bit_count_(scheme.bit_count),
      hash_count_(scheme.hash_count),
      range_bits_(std::clamp(tuning.range_bits, 6u, 30u)),  // a word .. kMaxBitCount
      bucket_count_(static_cast<std::size_t>(
          (scheme.bit_count + (std::uint64_t{1} << range_bits_) - 1) >> range_bits_)) {
  slots = std::max<std::size_t>(1, slots);
  std::size_t budget = tuning.budget_bytes;
  if (budget == 0) {
    budget = std::clamp<std::size_t>(bit_count_ / 4, std::size_t{1} << 20, kBuildScratchBudget);
  }
  const std::size_t per_slot = budget / sizeof(std::uint32_t) / slots;
  capacity_ = static_cast<std::uint32_t>(
      std::clamp<std::size_t>(per_slot / bucket_count_, 64, std::size_t{1} << 30));
  stride_ = stride_for(capacity_);
  // A round fills the buckets to 80% on average: the headroom keeps random
  // digests off the atomic path (a bucket of 1000 entries is then 7 standard
  // deviations from full).
  round_digests_ = std::max<std::size_t>(
      1, static_cast<std::size_t>(capacity_) * bucket_count_ * 4 / 5 / hash_count_);
  slots_.resize(slots);
  for (auto& slot : slots_) {
    slot.entries = allocate_entries(bucket_count_ * stride_);
    slot.fill.assign(bucket_count_, 0);
  }
}

PartitionedBuild::~PartitionedBuild() {
  // This build's buffers replace the last one's in the pool: one build's
  // worth held. Without room for the list they are simply freed.
  std::vector<void*> blocks;
  try {
    blocks.reserve(slots_.size());
  } catch (...) {
    return;
  }
  for (auto& slot : slots_) blocks.push_back(slot.entries.release());
  entries_pool().replace(entry_bytes(bucket_count_ * stride_), std::move(blocks));
}

void PartitionedBuild::add(std::uint64_t* words, const Digest* digests, std::size_t count) {
  const std::size_t slots = slots_.size();
  while (count > 0) {
    const std::size_t room = round_digests_ - buffered_;
    const std::size_t per_slot = std::min(room, (count + slots - 1) / slots);
    const std::size_t take = std::min(count, per_slot * slots);
    parallel_for_chunks(0, slots, 1, [&](std::size_t first, std::size_t last) {
      for (std::size_t s = first; s < last; ++s) {
        const std::size_t begin = std::min(take, s * per_slot);
        const std::size_t end = std::min(take, begin + per_slot);
        if (begin == end) continue;
        Slot& slot = slots_[s];
        const simd::PositionBuckets buckets{range_bits_,        capacity_,        stride_,
                                            slot.entries.get(), slot.fill.data(), &slot.overflowed};
        simd::scatter_positions(scheme_, words, digests + begin, end - begin, buckets);
      }
    });
    buffered_ += per_slot;
    digests += take;
    count -= take;
    if (buffered_ >= round_digests_) flush(words);
  }
}

std::uint64_t PartitionedBuild::overflowed() const noexcept {
  std::uint64_t total = 0;
  for (const auto& slot : slots_) total += slot.overflowed;
  return total;
}

void PartitionedBuild::flush(std::uint64_t* words) {
  parallel_for_chunks(0, bucket_count_, kApplyGrain, [&](std::size_t first, std::size_t last) {
    apply_buckets(words, first, last);
  });
  buffered_ = 0;
}

void PartitionedBuild::apply_buckets(std::uint64_t* words, std::size_t first, std::size_t last) {
  const std::size_t range_words = std::size_t{1} << (range_bits_ - 6);
  const std::size_t word_count = bit_count_ / 64;
  const auto lines_of = [&](std::size_t b) {
    const std::size_t begin = b * range_words;
    return (std::min(word_count, begin + range_words) - begin + 7) / 8;
  };
  const auto entries_of = [&](std::size_t b) {
    std::size_t total = 0;
    for (const auto& slot : slots_) total += slot.fill[b];
    return total;
  };
  std::size_t entries = entries_of(first);
  for (std::size_t b = first; b < last; ++b) {
    std::uint64_t* range = words + b * range_words;
    const bool dense = 2 * entries >= lines_of(b);
    // A dense next range is loaded while this one is set: a line every
    // `every` entries, sequentially, so it sits in L2 when its turn comes
    // (apply measured 6.1 against 9.4 ns a digest at dram without it).
    const std::size_t next_entries = b + 1 < last ? entries_of(b + 1) : 0;
    const std::size_t next_lines = b + 1 < last ? lines_of(b + 1) : 0;
    const char* next = reinterpret_cast<const char*>(range + range_words);
    const bool load_next = 2 * next_entries >= next_lines && next_lines != 0;
    const std::size_t every = load_next ? std::max<std::size_t>(1, entries / next_lines) : 0;
    std::size_t loaded = load_next ? 0 : next_lines;
    std::size_t since = 0;
    for (auto& slot : slots_) {
      const std::uint32_t* e = slot.entries.get() + b * stride_;
      const std::uint32_t n = slot.fill[b];
      if (dense) {
        for (std::uint32_t i = 0; i < n; ++i) {
          range[e[i] >> 6] |= std::uint64_t{1} << (e[i] & 63);
          if (++since >= every && loaded < next_lines) {
            prefetch_for_write(next + 64 * loaded++);
            since = 0;
          }
        }
      } else {
        for (std::uint32_t i = 0; i < n; ++i) {
          if (i + kSparseDistance < n) prefetch_for_write(range + (e[i + kSparseDistance] >> 6));
          range[e[i] >> 6] |= std::uint64_t{1} << (e[i] & 63);
        }
      }
      slot.fill[b] = 0;
    }
    entries = next_entries;
  }
}

}  // namespace abf::detail
