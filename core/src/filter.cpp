#include "abf/filter.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "block_pool.hpp"
#include "engine.hpp"
#include "filter_set_internal.hpp"
#include "header_rules.hpp"
#include "kernels.hpp"
#include "parallel.hpp"
#include "words_pool.hpp"

namespace abf {

namespace {

// Bitsets of 2 MiB and more are 2 MiB aligned and advised for transparent
// huge pages: at `dram` sizes a random probe otherwise misses the TLB too.
constexpr std::size_t kHugePage = std::size_t{2} << 20;

std::string info_problem(const FilterInfo& info) {
  detail::HeaderFacts facts;
  facts.hash_protocol_version = info.scheme.protocol();
  facts.layout = info.layout();
  facts.expected_item_count = info.spec.expected_item_count;
  facts.inserted_item_count = info.inserted_item_count;
  facts.target_fpp = info.spec.target_fpp;
  const auto fault = detail::check_header(detail::HeaderKind::kFilterInfo, facts);
  return fault ? fault->problem : std::string();
}

}  // namespace

namespace detail {

namespace {

// A freed filter's bitset, kept for the next allocate_words of the same
// size, so a build zeroes memory it already has instead of faulting in fresh
// pages (block_pool.hpp has the measurements). One block, from 2 MiB (a huge
// page: smaller ones are cheap to fault in) to the build budget; a bitset of
// another size freed later takes its place, one of the same size is freed.
// Never destroyed: a filter freed during static destruction still finds it.
BlockPool& words_pool() {
  static auto* pool = new BlockPool(kHugePage, 1, kBuildScratchBudget);
  return *pool;
}

}  // namespace

std::size_t pooled_words_bytes() noexcept { return words_pool().held_bytes(); }
void release_pooled_words() noexcept { words_pool().clear(); }

Result<void> BuildLane::insert_fingerprinted(std::span<const Digest> digests,
                                             ContentFingerprint& sum) {
  if (auto inserted = insert(digests); !inserted) return inserted;
  sum = content_fingerprint_of(digests);
  return {};
}

}  // namespace detail

std::shared_ptr<std::uint64_t> allocate_words(std::size_t word_count) {
  const std::size_t bytes = std::max<std::size_t>(word_count, 1) * sizeof(std::uint64_t);
  const std::size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  const std::size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* memory = detail::words_pool().take(rounded);
  if (memory == nullptr) {
    memory = std::aligned_alloc(alignment, rounded);
    if (memory == nullptr) throw std::bad_alloc();
    if (alignment == kHugePage) madvise(memory, rounded, MADV_HUGEPAGE);  // advice; may be ignored
  }
  // Zeroed by every core: at DRAM sizes one thread's memset is a visible
  // part of a parallel build (7 ms of a 70 ms 4 Mi-digest build at 114 MiB).
  auto* bytes_out = static_cast<std::uint8_t*>(memory);
  detail::parallel_for_chunks(
      0, rounded, std::size_t{4} << 20,
      [&](std::size_t begin, std::size_t end) { std::memset(bytes_out + begin, 0, end - begin); });
  return {static_cast<std::uint64_t*>(memory),
          [rounded](std::uint64_t* p) { detail::words_pool().give(p, rounded); }};
}

Filter::Filter(const FilterInfo& info, std::shared_ptr<const std::uint64_t> words,
               std::size_t word_count)
    : info_(info),
      words_(std::move(words)),
      word_count_(word_count),
      attachments_(std::make_shared<detail::FilterAttachments>()) {}

Result<Filter> Filter::from_words(const FilterInfo& info,
                                  std::shared_ptr<const std::uint64_t> words,
                                  std::size_t word_count) {
  if (auto problem = info_problem(info); !problem.empty()) {
    return fail(ErrorCode::kInvalidArgument, problem);
  }
  if (word_count != info.scheme.bit_count() / 64 || words == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "bitset has " + std::to_string(word_count) +
                                                 " words, the layout needs " +
                                                 std::to_string(info.scheme.bit_count() / 64));
  }
  return Filter(info, std::move(words), word_count);
}

bool Filter::might_contain(const Digest& digest) const noexcept {
  Answer answer = Answer::kDefinitelyNot;
  scalar::query_batch(view(), &digest, 1, &answer);
  return answer == Answer::kMaybe;
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
  return modeled_false_positive_rate(info_.layout(), info_.inserted_item_count,
                                     info_.scheme.protocol());
}

Result<void> check_fill(const Filter& filter, FillCheck check, const std::string& where) {
  const auto fault = describe_fill_fault(filter.info().layout(), filter.inserted_item_count(),
                                         filter.popcount(), check, filter.hash_protocol_version());
  if (fault.empty()) return {};
  return fail(ErrorCode::kSnapshotImplausibleFill,
              (where.empty() ? "filter" : where) + ": " + fault);
}

std::span<const std::uint8_t> Filter::payload() const noexcept {
  static_assert(std::endian::native == std::endian::little,
                "the payload is the words' little-endian bytes; big-endian hosts need a swap");
  return {reinterpret_cast<const std::uint8_t*>(words_.get()), word_count_ * sizeof(std::uint64_t)};
}

Result<FilterBuilder> FilterBuilder::create(const BloomSpec& spec, const BuildOptions& options) {
  const std::uint32_t protocol = options.resolved_protocol();
  auto layout = choose_layout(spec, protocol);
  if (!layout) return std::unexpected(layout.error());
  auto scheme = Scheme::of(protocol, *layout, options.key);
  if (!scheme) return std::unexpected(scheme.error());
  const std::size_t word_count = layout->bit_count / 64;
  // The empty multiset's fingerprint; add() sums each chunk's into it.
  FilterInfo info{
      spec, *scheme, 0, options.catalog_version, options.catalog_id, ContentFingerprint{}};
  return FilterBuilder(info, allocate_words(word_count), word_count);
}

Result<FilterBuilder> FilterBuilder::create(const BloomSpec& spec, std::uint64_t catalog_version) {
  BuildOptions options;
  options.catalog_version = catalog_version;
  return create(spec, options);
}

FilterBuilder::FilterBuilder(const FilterInfo& info, std::shared_ptr<std::uint64_t> words,
                             std::size_t word_count)
    : info_(info), words_(std::move(words)), word_count_(word_count) {}
FilterBuilder::FilterBuilder(FilterBuilder&&) noexcept = default;
FilterBuilder& FilterBuilder::operator=(FilterBuilder&&) noexcept = default;
FilterBuilder::~FilterBuilder() = default;

Result<detail::BuildLane*> FilterBuilder::lane_for(const detail::Engine& engine) {
  for (auto& open : lanes_) {
    if (open.engine == &engine) return open.lane.get();
  }
  auto lane = engine.open_lane(info_.scheme, words_.get());
  if (!lane) return std::unexpected(lane.error());
  lanes_.push_back(OpenLane{&engine, std::move(*lane)});
  return lanes_.back().lane.get();
}

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
  auto choice = detail::choose_engine(backend, {digests.size(), 0});
  if (!choice) return std::unexpected(choice.error());
  // An automatic choice that fails at run time (a GPU out of memory or
  // lost) falls back; the fallback sets the same bits.
  // The chunk's content fingerprint, from the lane that inserted it (the
  // SIMD lane sums it in the insert's own pass over the digests).
  ContentFingerprint sum;
  const auto added = detail::run_with_fallback(*choice, [&](const detail::Engine& engine) {
    auto lane = lane_for(engine);
    if (!lane) return Result<void>(std::unexpected(lane.error()));
    sum = ContentFingerprint{};
    return (*lane)->insert_fingerprinted(digests, sum);
  });
  if (!added) return added;
  info_.inserted_item_count += digests.size();
  *info_.content_fingerprint += sum;
  return {};
}

Result<void> FilterBuilder::flush() {
  if (!words_) return fail(ErrorCode::kInvalidArgument, "FilterBuilder::flush after finish()");
  Result<void> flushed;
  for (auto& open : lanes_) {
    if (auto r = open.lane->finish(); !r && flushed) flushed = r;
  }
  lanes_.clear();
  return flushed;
}

Result<Filter> FilterBuilder::finish() && {
  if (!words_)
    return fail(ErrorCode::kInvalidArgument,
                "FilterBuilder::finish on a finished or moved-from builder");
  Result<void> finished;
  for (auto& open : lanes_) {
    if (auto r = open.lane->finish(); !r && finished) finished = r;
  }
  lanes_.clear();
  if (!finished) return std::unexpected(finished.error());
  Filter filter(info_, std::move(words_), word_count_);
  word_count_ = 0;
  return filter;
}

void release_cached_buffers() noexcept {
  for (const detail::Engine* engine : detail::engine_table()) engine->release_caches();
  detail::release_pooled_words();
  detail::release_filter_set_scratch();
}

Result<Filter> build_filter(std::span<const Digest> digests, const BloomSpec& spec,
                            const BuildOptions& options, Backend backend) {
  auto builder = FilterBuilder::create(spec, options);
  if (!builder) return std::unexpected(builder.error());
  if (auto added = builder->add(digests, backend); !added) return std::unexpected(added.error());
  return std::move(*builder).finish();
}

Result<Filter> build_filter(std::span<const Digest> digests, const BloomSpec& spec,
                            std::uint64_t catalog_version, Backend backend) {
  BuildOptions options;
  options.catalog_version = catalog_version;
  return build_filter(digests, spec, options, backend);
}

}  // namespace abf
