// Internal: freed memory blocks of one size kept for the next allocation of
// that size, shared by the bitset of allocate_words (core/src/filter.cpp) and
// the partitioned build's bucket buffers (simd/partition.cpp).
//
// Fresh memory is slow and erratic on the machines measured (a KVM guest
// whose freed pages go back to its host): a one-thread `abf bench` dram build
// took 210-360 ns a digest with a fresh bitset, most of it the kernel's
// clear_page on huge-page faults, and about 44 ns with warm memory; a build
// slot's first touch of its 28 MiB of buckets took 10 ms, now and then 37-78.
// A build that reuses the last build's memory measures the build, and a
// service that rebuilds its filter gains the same way. docs/performance.md.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

namespace abf::detail {

// Blocks from std::aligned_alloc / std::malloc (freed with std::free), all of
// one size at a time: a block of another size replaces those held. At most
// max_blocks blocks and max_held_bytes are held; a block below
// min_block_bytes (cheap to fault in) or above max_held_bytes is freed and
// leaves the pool as it was, and one past either cap is freed. give and
// replace never throw (they run in deleters and destructors): a block the
// pool cannot record is freed. Thread-safe.
class BlockPool {
 public:
  constexpr BlockPool(std::size_t min_block_bytes, std::size_t max_blocks,
                      std::size_t max_held_bytes) noexcept
      : min_block_bytes_(min_block_bytes),
        max_blocks_(max_blocks),
        max_held_bytes_(max_held_bytes) {}
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;
  ~BlockPool() { clear(); }

  // A held block of exactly `bytes`, now the caller's; nullptr if none.
  void* take(std::size_t bytes) {
    const std::lock_guard lock(mutex_);
    if (bytes != bytes_ || blocks_.empty()) return nullptr;
    void* block = blocks_.back();
    blocks_.pop_back();
    return block;
  }

  // Hands `block` of `bytes` to the pool, which keeps it beside those held
  // (within the caps) or frees it.
  void give(void* block, std::size_t bytes) noexcept {
    if (block == nullptr) return;
    if (bytes < min_block_bytes_ || bytes > max_held_bytes_) {
      std::free(block);
      return;
    }
    std::vector<void*> dropped;
    {
      const std::lock_guard lock(mutex_);
      if (bytes != bytes_) {
        dropped = std::exchange(blocks_, {});
        bytes_ = bytes;
      }
      if (fits(blocks_.size() + 1, bytes)) {
        try {
          blocks_.push_back(block);
          block = nullptr;
        } catch (...) {  // no room to record it: freed below
        }
      }
    }
    std::free(block);
    for (void* old : dropped) std::free(old);
  }

  // Frees every block held and keeps `blocks`, each of `bytes`, in their
  // place (as many as the caps allow; the rest are freed): one owner's
  // set, such as a finished build's buffers, replacing the last one's.
  void replace(std::size_t bytes, std::vector<void*> blocks) noexcept {
    if (bytes < min_block_bytes_ || bytes > max_held_bytes_) {
      for (void* block : blocks) std::free(block);
      blocks.clear();
    }
    std::size_t keep = 0;
    while (keep < blocks.size() && fits(keep + 1, bytes)) ++keep;
    for (std::size_t i = keep; i < blocks.size(); ++i) std::free(blocks[i]);
    blocks.resize(keep);  // shrinks: no allocation
    {
      const std::lock_guard lock(mutex_);
      std::swap(blocks_, blocks);
      bytes_ = bytes;
    }
    for (void* old : blocks) std::free(old);  // what was held before
  }

  std::size_t held_bytes() {
    const std::lock_guard lock(mutex_);
    return bytes_ * blocks_.size();
  }

  // Frees every block held.
  void clear() noexcept {
    std::vector<void*> dropped;
    {
      const std::lock_guard lock(mutex_);
      dropped = std::exchange(blocks_, {});
    }
    for (void* old : dropped) std::free(old);
  }

 private:
  // Whether `count` blocks of `bytes` stay within both caps.
  bool fits(std::size_t count, std::size_t bytes) const noexcept {
    return count <= max_blocks_ && count * bytes <= max_held_bytes_;
  }

  const std::size_t min_block_bytes_;
  const std::size_t max_blocks_;
  const std::size_t max_held_bytes_;
  std::mutex mutex_;
  std::size_t bytes_ = 0;
  std::vector<void*> blocks_;
};

}  // namespace abf::detail
