#include "abf/filter.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "engines.hpp"
#include "parallel.hpp"
#include "partition.hpp"

namespace abf {

namespace {

// Bitsets of 2 MiB and more are 2 MiB aligned and advised for transparent
// huge pages: at `dram` sizes a random probe otherwise misses the TLB too.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Private lanes for a parallel build (FilterBuilder::insert_parallel): at most
// this much memory beside the filter, and only for chunks this large. A
// shared bitset costs 2.5-7x per probe whatever the merge (atomic OR, word
// ranges; docs/parallel.md), so a thread filling its own bitset and one OR
// at the end is the only way a 2-thread build beats one thread.
constexpr std::size_t kLaneBudget = std::size_t{256} << 20;
constexpr std::size_t kLaneMinBatch = std::size_t{32} << 10;

std::string layout_problem(const FilterInfo& info) {
  const auto& layout = info.layout;
  if (layout.hash_count < probe::kMinHashCount || layout.hash_count > probe::kMaxHashCount) {
    return "hash count " + std::to_string(layout.hash_count) + " is outside 1..32";
  }
  if (layout.bit_count < probe::kMinBitCount || layout.bit_count > probe::kMaxBitCount ||
      layout.bit_count % 64 != 0) {
    return "bit count " + std::to_string(layout.bit_count) + " is not a multiple of 64 in 64..2^30";
  }
  if (info.spec.expected_item_count < 1 ||
      info.spec.expected_item_count > probe::kMaxExpectedItemCount) {
    return "expected item count " + std::to_string(info.spec.expected_item_count) +
           " is outside 1..2^30";
  }
  if (info.inserted_item_count > info.spec.expected_item_count) {
    return "inserted item count " + std::to_string(info.inserted_item_count) +
           " exceeds the expected item count " + std::to_string(info.spec.expected_item_count);
  }
  if (!(info.spec.target_fpp > 0.0 && info.spec.target_fpp < 1.0)) {
    return "target false-positive rate is not in (0, 1)";
  }
  return {};
}

}  // namespace

std::shared_ptr<std::uint64_t> allocate_words(std::size_t word_count) {
  const std::size_t bytes = std::max<std::size_t>(word_count, 1) * sizeof(std::uint64_t);
  const std::size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* memory = std::aligned_alloc(alignment, rounded);
  if (memory == nullptr) throw std::bad_alloc();
  if (alignment == kHugePage) madvise(memory, rounded, MADV_HUGEPAGE);  // advice; may be ignored
  // Zeroed by every core: at DRAM sizes one thread's memset is a visible
  // part of a parallel build (7 ms of a 70 ms 4 Mi-digest build at 114 MiB).
  auto* bytes_out = static_cast<std::uint8_t*>(memory);
  detail::parallel_for_chunks(
      0, rounded, std::size_t{4} << 20,
      [&](std::size_t begin, std::size_t end) { std::memset(bytes_out + begin, 0, end - begin); });
  return {static_cast<std::uint64_t*>(memory), [](std::uint64_t* p) { std::free(p); }};
}

Result<Filter> Filter::from_words(const FilterInfo& info,
                                  std::shared_ptr<const std::uint64_t> words,
                                  std::size_t word_count) {
  if (auto problem = layout_problem(info); !problem.empty()) {
    return fail(ErrorCode::kInvalidArgument, problem);
  }
  if (word_count != info.layout.bit_count / 64 || words == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "bitset has " + std::to_string(word_count) +
                                                 " words, the layout needs " +
                                                 std::to_string(info.layout.bit_count / 64));
  }
  return Filter(info, std::move(words), word_count);
}

bool Filter::might_contain(const Digest& digest) const noexcept {
  return probe::might_contain(view(), digest.bytes.data());
}

std::uint64_t Filter::popcount() const noexcept {
  std::uint64_t total = 0;
  for (const std::uint64_t word : words()) total += static_cast<std::uint64_t>(std::popcount(word));
  return total;
}

double Filter::fill_ratio() const noexcept {
  return static_cast<double>(popcount()) / static_cast<double>(bit_count());
}

double Filter::estimate_false_positive_rate() const noexcept {
  return modeled_false_positive_rate(info_.layout, info_.inserted_item_count);
}

std::span<const std::uint8_t> Filter::payload() const noexcept {
  static_assert(std::endian::native == std::endian::little,
                "the payload is the words' little-endian bytes; big-endian hosts need a swap");
  return {reinterpret_cast<const std::uint8_t*>(words_.get()), word_count_ * sizeof(std::uint64_t)};
}

Result<FilterBuilder> FilterBuilder::create(const BloomSpec& spec, std::uint64_t catalog_version) {
  auto layout = choose_layout(spec);
  if (!layout) return std::unexpected(layout.error());
  const std::size_t word_count = layout->bit_count / 64;
  FilterInfo info{spec, *layout, 0, catalog_version};
  return FilterBuilder(info, allocate_words(word_count), word_count);
}

FilterBuilder::FilterBuilder(const FilterInfo& info, std::shared_ptr<std::uint64_t> words,
                             std::size_t word_count)
    : info_(info), words_(std::move(words)), word_count_(word_count) {}
FilterBuilder::FilterBuilder(FilterBuilder&&) noexcept = default;
FilterBuilder& FilterBuilder::operator=(FilterBuilder&&) noexcept = default;
FilterBuilder::~FilterBuilder() = default;

Result<void> FilterBuilder::add(std::span<const Digest> digests, Backend backend) {
  if (!words_) return fail(ErrorCode::kInvalidArgument, "FilterBuilder::add after finish()");
  const std::uint64_t capacity = info_.spec.expected_item_count;
  if (digests.size() > capacity - info_.inserted_item_count) {
    return fail(ErrorCode::kCapacityExceeded,
                "adding " + std::to_string(digests.size()) + " digests to the " +
                    std::to_string(info_.inserted_item_count) +
                    " already inserted exceeds the expected item count " +
                    std::to_string(capacity));
  }
  auto resolved = resolve_backend(backend, digests.size());
  if (!resolved) return std::unexpected(resolved.error());
  const auto m = info_.layout.bit_count;
  const auto k = info_.layout.hash_count;
  switch (*resolved) {
    case Backend::kScalar:
      scalar::insert_batch(words_.get(), m, k, digests.data(), digests.size());
      break;
    case Backend::kCuda: {
      Result<void> done;
      if (!device_lane_) {
        auto lane = cuda_engine::open_lane(m, k);
        if (lane)
          device_lane_ = std::move(*lane);
        else
          done = std::unexpected(lane.error());
      }
      // A failure part-way leaves some of the chunk's bits in the lane: bits
      // of inserted digests, harmless beside the fallback's.
      if (done) done = device_lane_->insert(digests.data(), digests.size());
      if (!done) {
        if (backend != Backend::kAuto) return done;
        insert_parallel(digests);
      }
      break;
    }
    case Backend::kAuto:
    case Backend::kSimd:
      insert_parallel(digests);
      break;
  }
  info_.inserted_item_count += digests.size();
  return {};
}

void FilterBuilder::insert_parallel(std::span<const Digest> digests) {
  const auto m = info_.layout.bit_count;
  const auto k = info_.layout.hash_count;
  const std::size_t threads = detail::available_threads();
  // Beyond the LLC the positions are sorted by range before they are set
  // (core/src/partition.hpp), with one thread as with many: one thread so
  // builds the 4 GiB input 19% faster (2.36 against 2.9 s), and several
  // share no random DRAM lines.
  if (partitioned_ || word_count_ * sizeof(std::uint64_t) >= detail::kPartitionMinBytes) {
    if (partitioned_ && partitioned_->slot_count() < threads) {
      // Called from a larger arena than before: set what is buffered, then
      // scatter over one slot per thread (a smaller arena runs the extra
      // slots in turn, so it keeps them).
      partitioned_->flush(words_.get());
      partitioned_.reset();
    }
    if (!partitioned_) partitioned_ = std::make_unique<detail::PartitionedBuild>(m, k, threads);
    partitioned_->add(words_.get(), digests.data(), digests.size());
    return;
  }
  if (threads > 1 && digests.size() >= kLaneMinBatch) {
    // One lane per thread, as many as the budget holds; the filter's own
    // bitset is the first.
    const std::size_t bytes = word_count_ * sizeof(std::uint64_t);
    const std::size_t wanted = std::min(threads, 1 + kLaneBudget / bytes);
    while (lanes_.size() + 1 < wanted) lanes_.push_back(allocate_words(word_count_));
  }
  if (lanes_.empty()) {
    detail::parallel_insert(simd::insert_batch, words_.get(), m, k, digests.data(), digests.size());
    return;
  }
  // Contiguous parts, one per lane; each lane is written by one task only.
  const std::size_t parts = lanes_.size() + 1;
  const std::size_t per_part = (digests.size() + parts - 1) / parts;
  detail::parallel_for_chunks(0, parts, 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t part = first; part < last; ++part) {
      const std::size_t begin = std::min(digests.size(), part * per_part);
      const std::size_t end = std::min(digests.size(), begin + per_part);
      std::uint64_t* lane = part == 0 ? words_.get() : lanes_[part - 1].get();
      simd::insert_batch(lane, m, k, digests.data() + begin, end - begin);
    }
  });
}

Result<Filter> FilterBuilder::finish() && {
  if (!words_)
    return fail(ErrorCode::kInvalidArgument,
                "FilterBuilder::finish on a finished or moved-from builder");
  if (partitioned_) {
    partitioned_->flush(words_.get());
    partitioned_.reset();
  }
  if (device_lane_) {
    auto folded = device_lane_->fold_into(words_.get());
    device_lane_.reset();
    if (!folded) return std::unexpected(folded.error());
  }
  if (!lanes_.empty()) {
    std::uint64_t* words = words_.get();
    detail::parallel_for_chunks(0, word_count_, 1 << 16, [&](std::size_t begin, std::size_t end) {
      for (const auto& lane : lanes_) {
        const std::uint64_t* other = lane.get();
        for (std::size_t w = begin; w < end; ++w) words[w] |= other[w];
      }
    });
    lanes_.clear();
  }
  Filter filter(info_, std::move(words_), word_count_);
  word_count_ = 0;
  return filter;
}

void release_cached_buffers() noexcept {
  detail::release_pooled_entries();
  cuda_engine::release_caches();
}

Result<Filter> build_filter(std::span<const Digest> digests, const BloomSpec& spec,
                            std::uint64_t catalog_version, Backend backend) {
  auto builder = FilterBuilder::create(spec, catalog_version);
  if (!builder) return std::unexpected(builder.error());
  if (auto added = builder->add(digests, backend); !added) return std::unexpected(added.error());
  return std::move(*builder).finish();
}

}  // namespace abf
