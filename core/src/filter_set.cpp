// Filter sets (docs/protocol.md section 13): the set, its batch query with the
// partition step, its streaming builder and merge. The manifest and the set's
// files are filter_set_io.cpp.
#include "abf/filter_set.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine.hpp"
#include "filter_set_internal.hpp"
#include "parallel.hpp"

namespace abf {

namespace {

// A rate in messages: "0.001", "1e-09" (std::to_string gives "0.000000").
std::string rate_text(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", p);
  return text;
}

// Digests per block of the partition step (one task each); a smaller batch
// is partitioned on the calling thread. A block costs ~3 ns a digest, so
// 16 Ki of them is ~50 us, far above a task's spawn cost.
constexpr std::size_t kPartitionGrain = 16 * 1024;
// A query is partitioned and answered block by block, one task a block: a
// block's digests, their sorted copy and answers stay in the core's caches
// (16 Ki digests: 0.5 MiB each way; copying 256 Ki-digest pieces through
// DRAM instead cost ~13 ns a digest on this VM), and each shard's part of a
// block is one engine call on the task's thread. A block has at least ~1 Ki
// digests a shard, so calls stay long beside their cost, and at most 1 Mi
// (36 MiB of scratch). A device engine gets blocks of 4 Mi digests, one after
// the other: its copies pay only for big batches (the CUDA row's auto rule).
constexpr std::size_t kMinQueryBlock = 16 * 1024;
constexpr std::size_t kMaxQueryBlock = std::size_t{1} << 20;
constexpr std::size_t kDeviceQueryBlock = std::size_t{4} << 20;
// Query scratch kept for the next call (one a task; 0.6 MiB for a 16 Ki block).
constexpr std::size_t kPooledScratch = 16;
// The builder's staging over all shards: 8 Mi digests (256 MiB), but at
// least kMinRegion a shard and never more than n_i.
constexpr std::size_t kStagingDigests = std::size_t{8} << 20;
constexpr std::size_t kMinRegion = 256;

std::string commas(std::uint64_t value) {
  std::string digits = std::to_string(value);
  for (std::size_t i = digits.size(); i > 3; i -= 3) digits.insert(i - 3, ",");
  return digits;
}

// The smallest r with r * r >= q (q <= 2^46, so r * r cannot overflow).
std::uint64_t ceil_sqrt(std::uint64_t q) {
  auto r = static_cast<std::uint64_t>(std::sqrt(static_cast<double>(q)));
  while (r * r < q) ++r;
  while (r > 0 && (r - 1) * (r - 1) >= q) --r;
  return r;
}

Error fpp_error(double p) {
  return Error{ErrorCode::kInvalidFalsePositiveRate, "target false-positive rate " + rate_text(p) +
                                                         " must be a finite number with 0 < p < 1"};
}

bool valid_fpp(double p) { return std::isfinite(p) && p > 0.0 && p < 1.0; }

// One filter's limits under hashProtocolVersion `protocol` (its policy's
// Probes: 2^30 digests and bits for the classic layout, 2^36 and 2^40 for the
// one-line layout); the classic ones for a version outside the table (whose
// builder fails on its own).
struct FilterLimits {
  std::uint64_t max_items = probe::kMaxExpectedItemCount;
  std::uint64_t max_bits = probe::kMaxBitCount;
  const char* max_items_text = "2^30";
  const char* max_bits_text = "2^30";
};
FilterLimits limits_of(std::uint32_t protocol) {
  FilterLimits limits;
  probe::with_protocol(
      protocol,
      [&](auto policy) {
        using Probes = typename decltype(policy)::Probes;
        limits = {Probes::kMaxExpectedItemCount, Probes::kMaxBitCount,
                  Probes::kMaxExpectedItemCountText, Probes::kMaxBitCountText};
      },
      [] {});
  return limits;
}

// Whether shards designed for n_i digests at p fit the protocol.
bool shard_fits(std::uint64_t shard_items, double p, std::uint32_t protocol) {
  return shard_items <= limits_of(protocol).max_items &&
         choose_layout({shard_items, p}, protocol).has_value();
}

// --- The partition step ---------------------------------------------------------

std::size_t partition_blocks(std::size_t count) {
  return std::clamp<std::size_t>(count / kPartitionGrain, 1, detail::available_threads());
}

std::size_t block_begin(std::size_t block, std::size_t blocks, std::size_t count) {
  return count / blocks * block + std::min(block, count % blocks);
}

// Pass 1: ids[i] = the shard of in[i]; counts[b * S + s] = how many digests
// of block b are in shard s. `ids` may be null (counting only).
void count_shards(const detail::ShardRouter& route, std::uint32_t shard_count, const Digest* in,
                  std::size_t count, std::size_t blocks, std::uint16_t* ids,
                  std::uint32_t* counts) {
  std::fill(counts, counts + blocks * shard_count, 0u);
  detail::parallel_for_chunks(0, blocks, 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t b = first; b < last; ++b) {
      std::uint32_t* c = counts + b * shard_count;
      const std::size_t end = block_begin(b + 1, blocks, count);
      for (std::size_t i = block_begin(b, blocks, count); i < end; ++i) {
        const std::uint32_t s = route(in[i]);
        if (ids != nullptr) ids[i] = static_cast<std::uint16_t>(s);
        ++c[s];
      }
    }
  });
}

// Turns the per-block counts into each block's first position within its
// shard's part (blocks in order, so each shard keeps the input order), and
// writes each shard's total to totals[s].
void block_offsets(std::uint32_t shard_count, std::size_t blocks, std::uint32_t* counts,
                   std::size_t* totals) {
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    std::size_t run = 0;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::uint32_t n = counts[b * shard_count + s];
      counts[b * shard_count + s] = static_cast<std::uint32_t>(run);
      run += n;
    }
    totals[s] = run;
  }
}

// Pass 2: copies in[i] to dest[ids[i]][cursor], each block from its cursors
// (consumed).
void scatter_digests(const Digest* in, std::size_t count, const std::uint16_t* ids,
                     std::size_t blocks, std::uint32_t shard_count, std::uint32_t* cursors,
                     Digest* const* dest) {
  detail::parallel_for_chunks(0, blocks, 1, [&](std::size_t first, std::size_t last) {
    for (std::size_t b = first; b < last; ++b) {
      std::uint32_t* cursor = cursors + b * shard_count;
      const std::size_t end = block_begin(b + 1, blocks, count);
      for (std::size_t i = block_begin(b, blocks, count); i < end; ++i) {
        const std::uint16_t s = ids[i];
        dest[s][cursor[s]++] = in[i];
      }
    }
  });
}

// --- Query scratch ----------------------------------------------------------------

struct QueryScratch {
  std::vector<std::uint16_t> ids;
  std::vector<Digest> sorted;
  std::vector<Answer> sorted_answers;
  std::vector<std::uint32_t> counts;  // S
  std::vector<std::size_t> start;     // S + 1
  std::vector<std::size_t> cursor;    // S
};

// Scratch handed to one call at a time. Not thread_local: a thread waiting
// inside a TBB loop may run another task, and that task may be a caller's
// own query on another set.
class ScratchPool {
 public:
  static ScratchPool& instance() {
    static ScratchPool pool;
    return pool;
  }
  std::unique_ptr<QueryScratch> take() {
    {
      const std::lock_guard lock(mutex_);
      if (!free_.empty()) {
        auto scratch = std::move(free_.back());
        free_.pop_back();
        return scratch;
      }
    }
    return std::make_unique<QueryScratch>();
  }
  void give(std::unique_ptr<QueryScratch> scratch) {
    const std::lock_guard lock(mutex_);
    if (free_.size() < kPooledScratch) free_.push_back(std::move(scratch));
  }
  void clear() {
    std::vector<std::unique_ptr<QueryScratch>> dropped;
    const std::lock_guard lock(mutex_);
    dropped.swap(free_);
  }

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<QueryScratch>> free_;
};

class ScratchLease {
 public:
  ScratchLease() : scratch_(ScratchPool::instance().take()) {}
  ~ScratchLease() { ScratchPool::instance().give(std::move(scratch_)); }
  ScratchLease(const ScratchLease&) = delete;
  ScratchLease& operator=(const ScratchLease&) = delete;
  QueryScratch& operator*() { return *scratch_; }

 private:
  std::unique_ptr<QueryScratch> scratch_;
};

}  // namespace

namespace detail {

void release_filter_set_scratch() noexcept { ScratchPool::instance().clear(); }

}  // namespace detail

// --- The split -------------------------------------------------------------------

std::uint32_t shard_of(const Digest& digest, std::uint32_t shard_count) noexcept {
  return probe::shard_of(digest.bytes.data(), std::max<std::uint32_t>(shard_count, 1));
}

std::uint64_t shard_expected_item_count(std::uint64_t expected_item_count,
                                        std::uint32_t shard_count) noexcept {
  if (shard_count <= 1) return expected_item_count;
  const std::uint64_t q = (expected_item_count + shard_count - 1) / shard_count;
  return std::min(expected_item_count, q + 8 * ceil_sqrt(q) + 64);
}

Result<std::uint32_t> choose_shard_count(const BloomSpec& spec, std::uint32_t protocol) {
  const FilterLimits limits = limits_of(protocol);
  const std::uint64_t n = spec.expected_item_count;
  const double p = spec.target_fpp;
  if (n < 1 || n > kMaxSetExpectedItemCount) {
    return fail(ErrorCode::kInvalidExpectedItemCount,
                "expected item count " + std::to_string(n) +
                    " is outside 1..2^46 (65,536 shards of 2^30 digests)");
  }
  if (!valid_fpp(p)) return std::unexpected(fpp_error(p));
  // No set of fewer shards than ideal bits / 2^30 can hold n: start there
  // (the shards' capacities sum to at least n, and ideal bits are linear in n).
  const double ln2 = std::log(2.0);
  const double ideal = -static_cast<double>(n) * std::log(p) / (ln2 * ln2);
  std::uint32_t shards = 1;
  if (std::isfinite(ideal)) {
    const double lower = std::floor(ideal / static_cast<double>(limits.max_bits));
    shards = static_cast<std::uint32_t>(std::clamp(lower, 1.0, double{kMaxShardCount}));
  } else {
    shards = kMaxShardCount;
  }
  for (; shards <= kMaxShardCount; ++shards) {
    if (shard_fits(shard_expected_item_count(n, shards), p, protocol)) return shards;
  }
  return fail(ErrorCode::kFilterTooLarge, "not even 65,536 shards hold n = " + commas(n) +
                                              " at p = " + rate_text(p) +
                                              " (each filter holds at most " +
                                              limits.max_bits_text + " bits)");
}

// --- FilterSet -------------------------------------------------------------------

struct FilterSet::State {
  std::vector<Filter> shards;
  std::uint64_t expected_item_count = 0;
  std::uint64_t inserted_item_count = 0;
  // The sum of the shards' fingerprints when every shard has one.
  std::optional<ContentFingerprint> content_fingerprint;
  detail::ShardRouter route{1};
};

namespace {

std::optional<ContentFingerprint> sum_of_fingerprints(std::span<const Filter> filters) {
  ContentFingerprint sum;
  for (const Filter& filter : filters) {
    if (!filter.content_fingerprint()) return std::nullopt;
    sum += *filter.content_fingerprint();
  }
  return sum;
}

}  // namespace

FilterSet::FilterSet(std::shared_ptr<const State> state) : state_(std::move(state)) {}

FilterSet::FilterSet(Filter filter) {
  auto state = std::make_shared<State>();
  state->expected_item_count = filter.expected_item_count();
  state->inserted_item_count = filter.inserted_item_count();
  state->content_fingerprint = filter.content_fingerprint();
  state->shards.push_back(std::move(filter));
  state_ = std::move(state);
}

Result<FilterSet> FilterSet::from_shards(std::vector<Filter> shards,
                                         std::uint64_t expected_item_count) {
  const std::size_t count = shards.size();
  if (count < 1 || count > kMaxShardCount) {
    return fail(ErrorCode::kInvalidArgument,
                "a filter set has 1..65,536 shards, not " + std::to_string(count));
  }
  const auto shard_count = static_cast<std::uint32_t>(count);
  if (expected_item_count < 1 || expected_item_count > kMaxSetExpectedItemCount) {
    return fail(ErrorCode::kInvalidArgument, "a filter set's expected item count " +
                                                 std::to_string(expected_item_count) +
                                                 " is outside 1..2^46");
  }
  const std::uint64_t per_shard = abf::shard_expected_item_count(expected_item_count, shard_count);
  const Filter& first = shards.front();
  std::uint64_t inserted = 0;
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    const Filter& shard = shards[i];
    const std::string name = "shard " + std::to_string(i) + " of " + std::to_string(shard_count);
    const auto differs = [&](std::string_view field, const std::string& theirs,
                             const std::string& ours) {
      return fail(ErrorCode::kIncompatibleFilters, "filter set: " + name + " has " +
                                                       std::string(field) + " " + theirs +
                                                       ", shard 0 has " + ours);
    };
    if (shard.expected_item_count() != per_shard) {
      return fail(ErrorCode::kIncompatibleFilters,
                  "filter set: " + name + " has expectedItemCount " +
                      std::to_string(shard.expected_item_count()) + "; a set of " +
                      std::to_string(shard_count) +
                      " shards for n = " + std::to_string(expected_item_count) +
                      " gives every shard " + std::to_string(per_shard));
    }
    if (std::bit_cast<std::uint64_t>(shard.target_fpp()) !=
        std::bit_cast<std::uint64_t>(first.target_fpp())) {
      std::ostringstream a, b;
      a.precision(17);
      b.precision(17);
      a << shard.target_fpp();
      b << first.target_fpp();
      return differs("targetFpp", a.str(), b.str());
    }
    if (shard.catalog_id() != first.catalog_id()) {
      return differs("catalogId", shard.catalog_id().hex(), first.catalog_id().hex());
    }
    if (shard.catalog_version() != first.catalog_version()) {
      return differs("catalogVersion", std::to_string(shard.catalog_version()),
                     std::to_string(first.catalog_version()));
    }
    if (!(shard.scheme() == first.scheme())) {
      return differs("scheme", shard.scheme().describe(), first.scheme().describe());
    }
    inserted += shard.inserted_item_count();
  }
  if (inserted > expected_item_count) {
    return fail(ErrorCode::kCapacityExceeded,
                "filter set: its shards hold " + std::to_string(inserted) +
                    " digests, more than the set's expected item count " +
                    std::to_string(expected_item_count));
  }
  auto state = std::make_shared<State>();
  state->shards = std::move(shards);
  state->expected_item_count = expected_item_count;
  state->inserted_item_count = inserted;
  state->content_fingerprint = sum_of_fingerprints(state->shards);
  state->route = detail::ShardRouter(shard_count);
  return FilterSet(std::shared_ptr<const State>(std::move(state)));
}

std::uint32_t FilterSet::shard_count() const noexcept {
  return static_cast<std::uint32_t>(state_->shards.size());
}
std::span<const Filter> FilterSet::shards() const noexcept { return state_->shards; }
const Filter& FilterSet::shard(std::uint32_t index) const noexcept { return state_->shards[index]; }
std::uint32_t FilterSet::shard_index(const Digest& digest) const noexcept {
  return shard_count() == 1 ? 0 : state_->route(digest);
}
bool FilterSet::might_contain(const Digest& digest) const noexcept {
  return shard(shard_index(digest)).might_contain(digest);
}

std::uint64_t FilterSet::expected_item_count() const noexcept {
  return state_->expected_item_count;
}
std::uint64_t FilterSet::shard_expected_item_count() const noexcept {
  return state_->shards.front().expected_item_count();
}
double FilterSet::target_fpp() const noexcept { return state_->shards.front().target_fpp(); }
std::uint64_t FilterSet::inserted_item_count() const noexcept {
  return state_->inserted_item_count;
}
const std::optional<ContentFingerprint>& FilterSet::content_fingerprint() const noexcept {
  return state_->content_fingerprint;
}
std::uint64_t FilterSet::catalog_version() const noexcept {
  return state_->shards.front().catalog_version();
}
const CatalogId& FilterSet::catalog_id() const noexcept {
  return state_->shards.front().catalog_id();
}
const Scheme& FilterSet::scheme() const noexcept { return state_->shards.front().scheme(); }
std::uint32_t FilterSet::hash_protocol_version() const noexcept { return scheme().protocol(); }
std::uint32_t FilterSet::hash_count() const noexcept { return scheme().hash_count(); }
std::uint64_t FilterSet::shard_bit_count() const noexcept { return scheme().bit_count(); }
std::uint64_t FilterSet::bit_count() const noexcept {
  return shard_bit_count() * state_->shards.size();
}

std::uint64_t FilterSet::popcount() const noexcept {
  std::uint64_t total = 0;
  for (const Filter& shard : state_->shards) total += shard.popcount();
  return total;
}

double FilterSet::fill_ratio() const noexcept {
  return static_cast<double>(popcount()) / static_cast<double>(bit_count());
}

double FilterSet::estimate_false_positive_rate() const noexcept {
  if (state_->shards.size() == 1) return state_->shards.front().estimate_false_positive_rate();
  double sum = 0.0;
  for (const Filter& shard : state_->shards) sum += shard.estimate_false_positive_rate();
  return sum / static_cast<double>(state_->shards.size());
}

namespace {

// One block of a set's query, on the calling thread: counting sort by shard,
// one engine call per shard's part, the answers back in input order.
template <class Ask>
Result<void> query_block(const detail::ShardRouter& route, std::span<const Filter> shards,
                         const Digest* in, std::size_t count, Answer* out, QueryScratch& s,
                         const Ask& ask) {
  const auto shard_count = static_cast<std::uint32_t>(shards.size());
  if (s.ids.size() < count) s.ids.resize(count);
  if (s.sorted.size() < count) s.sorted.resize(count);
  if (s.sorted_answers.size() < count) s.sorted_answers.resize(count);
  s.counts.assign(shard_count, 0);
  s.start.resize(shard_count + 1);
  s.cursor.resize(shard_count);
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint32_t shard = route(in[i]);
    s.ids[i] = static_cast<std::uint16_t>(shard);
    ++s.counts[shard];
  }
  s.start[0] = 0;
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    s.start[i + 1] = s.start[i] + s.counts[i];
    s.cursor[i] = s.start[i];
  }
  for (std::size_t i = 0; i < count; ++i) s.sorted[s.cursor[s.ids[i]]++] = in[i];
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    if (s.counts[i] == 0) continue;
    const std::size_t first = s.start[i];
    if (auto done = ask(shards[i], std::span<const Digest>(s.sorted.data() + first, s.counts[i]),
                        std::span<Answer>(s.sorted_answers.data() + first, s.counts[i]));
        !done) {
      return done;
    }
  }
  for (std::uint32_t i = 0; i < shard_count; ++i) s.cursor[i] = s.start[i];
  for (std::size_t i = 0; i < count; ++i) out[i] = s.sorted_answers[s.cursor[s.ids[i]]++];
  return {};
}

}  // namespace

Result<void> FilterSet::query(std::span<const Digest> digests, std::span<Answer> answers,
                              Backend backend) const {
  const State& state = *state_;
  if (state.shards.size() == 1) return state.shards.front().query(digests, answers, backend);
  if (answers.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "answer buffer holds " +
                                                 std::to_string(answers.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  // One engine for the whole batch, chosen as Filter::query chooses for a
  // filter of one shard's size.
  auto choice = detail::choose_engine(backend, {digests.size(), shard_bit_count() / 8});
  if (!choice) return std::unexpected(choice.error());
  const auto ask = [&](const Filter& shard, std::span<const Digest> part,
                       std::span<Answer> out) -> Result<void> {
    return detail::run_with_fallback(
        *choice, [&](const detail::Engine& engine) { return engine.query(shard, part, out); });
  };
  const std::span<const Filter> shards = state.shards;
  const std::size_t count = digests.size();
  const auto block_of = [&](std::size_t block, std::size_t size, QueryScratch& scratch) {
    const std::size_t first = block * size;
    return query_block(state.route, shards, digests.data() + first, std::min(size, count - first),
                       answers.data() + first, scratch, ask);
  };

  if (choice->engine->kind == detail::EngineKind::kDevice) {
    // A device engine: big blocks, one after the other.
    ScratchLease lease;
    for (std::size_t block = 0; block * kDeviceQueryBlock < count; ++block) {
      if (auto done = block_of(block, kDeviceQueryBlock, *lease); !done) return done;
    }
    return {};
  }
  const std::size_t size =
      std::clamp<std::size_t>(shards.size() * 1024, kMinQueryBlock, kMaxQueryBlock);
  const std::size_t blocks = (count + size - 1) / size;
  if (blocks <= 1) {
    if (blocks == 0) return {};
    ScratchLease lease;
    return block_of(0, size, *lease);
  }
  std::mutex error_mutex;
  std::optional<Error> first_error;
  detail::parallel_for_chunks(0, blocks, 1, [&](std::size_t first, std::size_t last) {
    ScratchLease lease;
    for (std::size_t block = first; block < last; ++block) {
      if (auto done = block_of(block, size, *lease); !done) {
        const std::lock_guard lock(error_mutex);
        if (!first_error) first_error = done.error();
        return;
      }
    }
  });
  if (first_error) return std::unexpected(*first_error);
  return {};
}

// --- FilterSetBuilder ----------------------------------------------------------

struct FilterSetBuilder::State {
  BloomSpec spec;
  std::uint32_t shard_count = 1;
  std::uint64_t shard_capacity = 0;  // n_i
  std::vector<FilterBuilder> builders;
  std::vector<std::uint64_t> accepted;  // per shard: inserted or staged
  std::uint64_t max_accepted = 0;
  std::uint64_t inserted = 0;
  Backend backend = Backend::kAuto;
  detail::ShardRouter route{1};
  // Staging (more than one shard): shard s's region is
  // staging[s * region, s * region + fill[s]).
  std::size_t region = 0;
  std::unique_ptr<Digest, void (*)(void*)> staging{nullptr, std::free};
  std::vector<std::size_t> fill;
  // Partition scratch.
  std::vector<std::uint16_t> ids;
  std::vector<std::uint32_t> counts;
  std::vector<std::size_t> totals;
  std::vector<Digest*> dest;

  Digest* region_of(std::uint32_t shard) { return staging.get() + shard * region; }

  Result<void> flush_shard(std::uint32_t shard) {
    if (fill[shard] == 0) return {};
    const std::span<const Digest> staged(region_of(shard), fill[shard]);
    fill[shard] = 0;
    if (auto added = builders[shard].add(staged, backend); !added) return added;
    return builders[shard].flush();
  }

  // Stages a piece whose every shard's count fits in a region; false (and
  // nothing staged) when one does not.
  Result<bool> stage(const Digest* in, std::size_t count) {
    const std::size_t blocks = partition_blocks(count);
    if (ids.size() < count) ids.resize(count);
    counts.resize(blocks * shard_count);
    count_shards(route, shard_count, in, count, blocks, ids.data(), counts.data());
    block_offsets(shard_count, blocks, counts.data(), totals.data());
    for (std::uint32_t s = 0; s < shard_count; ++s) {
      if (totals[s] > region) return false;
    }
    for (std::uint32_t s = 0; s < shard_count; ++s) {
      if (fill[s] + totals[s] > region) {
        if (auto flushed = flush_shard(s); !flushed) return std::unexpected(flushed.error());
      }
      dest[s] = region_of(s) + fill[s];
    }
    scatter_digests(in, count, ids.data(), blocks, shard_count, counts.data(), dest.data());
    for (std::uint32_t s = 0; s < shard_count; ++s) fill[s] += totals[s];
    return true;
  }
};

FilterSetBuilder::FilterSetBuilder(std::unique_ptr<State> state) : state_(std::move(state)) {}
FilterSetBuilder::FilterSetBuilder(FilterSetBuilder&&) noexcept = default;
FilterSetBuilder& FilterSetBuilder::operator=(FilterSetBuilder&&) noexcept = default;
FilterSetBuilder::~FilterSetBuilder() = default;

Result<FilterSetBuilder> FilterSetBuilder::create(const BloomSpec& spec, std::uint32_t shard_count,
                                                  const BuildOptions& options) {
  if (shard_count < 1 || shard_count > kMaxShardCount) {
    return fail(ErrorCode::kInvalidArgument,
                "shard count " + std::to_string(shard_count) + " is outside 1..65,536");
  }
  auto state = std::make_unique<State>();
  state->spec = spec;
  state->shard_count = shard_count;
  state->route = detail::ShardRouter(shard_count);
  if (shard_count == 1) {
    // A plain filter: its own checks and messages, no staging.
    auto builder = FilterBuilder::create(spec, options);
    if (!builder) return std::unexpected(builder.error());
    state->shard_capacity = spec.expected_item_count;
    state->builders.push_back(std::move(*builder));
    state->accepted.assign(1, 0);
    return FilterSetBuilder(std::move(state));
  }
  const std::uint64_t n = spec.expected_item_count;
  if (n < 1 || n > kMaxSetExpectedItemCount) {
    return fail(ErrorCode::kInvalidExpectedItemCount,
                "expected item count " + std::to_string(n) +
                    " is outside 1..2^46 (65,536 shards of 2^30 digests)");
  }
  if (!valid_fpp(spec.target_fpp)) return std::unexpected(fpp_error(spec.target_fpp));
  const std::uint64_t per_shard = abf::shard_expected_item_count(n, shard_count);
  // The shards' limits and layout rule are those of the protocol they take.
  const std::uint32_t protocol = options.resolved_protocol();
  const FilterLimits limits = limits_of(protocol);
  const auto too_large = [&](const std::string& why) {
    std::string hint;
    if (auto fewest = choose_shard_count(spec, protocol)) {
      hint = "; use at least " + std::to_string(*fewest) + " shards (--shards auto)";
    }
    return fail(ErrorCode::kFilterTooLarge,
                "n = " + commas(n) + " over " + std::to_string(shard_count) +
                    " shards gives each shard n_i = " + commas(per_shard) + " digests, " + why +
                    hint);
  };
  if (per_shard > limits.max_items) {
    return too_large(std::string("more than the ") + limits.max_items_text + " one filter holds");
  }
  const BloomSpec shard_spec{per_shard, spec.target_fpp};
  if (!choose_layout(shard_spec, protocol)) {
    return too_large(std::string("more than a filter of ") + limits.max_bits_text +
                     " bits holds at p = " + rate_text(spec.target_fpp));
  }
  state->shard_capacity = per_shard;
  state->builders.reserve(shard_count);
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    auto builder = FilterBuilder::create(shard_spec, options);
    if (!builder) return std::unexpected(builder.error());
    state->builders.push_back(std::move(*builder));
  }
  state->accepted.assign(shard_count, 0);
  state->region = static_cast<std::size_t>(
      std::min<std::uint64_t>(per_shard, std::max(kMinRegion, kStagingDigests / shard_count)));
  void* staging = std::malloc(state->region * shard_count * sizeof(Digest));
  if (staging == nullptr) throw std::bad_alloc();
  state->staging.reset(static_cast<Digest*>(staging));
  state->fill.assign(shard_count, 0);
  state->totals.resize(shard_count);
  state->dest.resize(shard_count);
  return FilterSetBuilder(std::move(state));
}

Result<void> FilterSetBuilder::add(std::span<const Digest> digests, Backend backend) {
  if (!state_) return fail(ErrorCode::kInvalidArgument, "FilterSetBuilder::add after finish()");
  State& st = *state_;
  st.backend = backend;
  const std::uint64_t capacity = st.spec.expected_item_count;
  if (st.shard_count == 1) {
    if (auto added = st.builders.front().add(digests, backend); !added) return added;
    st.inserted += digests.size();
    st.accepted.front() = st.inserted;
    return {};
  }
  if (digests.size() > capacity - st.inserted) {
    return fail(ErrorCode::kCapacityExceeded,
                "adding " + std::to_string(digests.size()) + " digests to the " +
                    std::to_string(st.inserted) +
                    " already inserted exceeds the filter set's expected item count " +
                    std::to_string(capacity));
  }
  const std::uint32_t shard_count = st.shard_count;
  // Every shard's count after this chunk, checked before anything of it is
  // staged; skipped while no shard could reach n_i with the whole chunk.
  std::vector<std::size_t> chunk_totals;
  if (st.max_accepted + digests.size() > st.shard_capacity) {
    const std::size_t blocks = partition_blocks(digests.size());
    st.counts.resize(blocks * shard_count);
    count_shards(st.route, shard_count, digests.data(), digests.size(), blocks, nullptr,
                 st.counts.data());
    chunk_totals.resize(shard_count);
    block_offsets(shard_count, blocks, st.counts.data(), chunk_totals.data());
    for (std::uint32_t s = 0; s < shard_count; ++s) {
      if (st.accepted[s] + chunk_totals[s] > st.shard_capacity) {
        return fail(ErrorCode::kCapacityExceeded,
                    "shard " + std::to_string(s) + " of " + std::to_string(shard_count) +
                        " would hold " + std::to_string(st.accepted[s] + chunk_totals[s]) +
                        " digests, more than its expected item count " +
                        std::to_string(st.shard_capacity) + " (n = " + std::to_string(capacity) +
                        " over " + std::to_string(shard_count) +
                        " shards); the input is far from uniform over the shards");
      }
    }
  }
  // Pieces of half the staging; a piece with more of one shard than its
  // region holds (input skewed toward one shard) goes again in pieces of
  // one region, which always fit.
  const std::size_t piece =
      std::max<std::size_t>(st.region, st.region * static_cast<std::size_t>(shard_count) / 2);
  for (std::size_t offset = 0; offset < digests.size();) {
    const std::size_t count = std::min(piece, digests.size() - offset);
    auto staged = st.stage(digests.data() + offset, count);
    if (!staged) return std::unexpected(staged.error());
    if (!*staged) {
      for (std::size_t sub = 0; sub < count; sub += st.region) {
        auto again = st.stage(digests.data() + offset + sub, std::min(st.region, count - sub));
        if (!again) return std::unexpected(again.error());
      }
    }
    offset += count;
  }
  if (chunk_totals.empty()) {
    // Counted from the staging instead: what each shard holds now.
    for (std::uint32_t s = 0; s < shard_count; ++s) {
      st.accepted[s] = st.builders[s].inserted_item_count() + st.fill[s];
    }
  } else {
    for (std::uint32_t s = 0; s < shard_count; ++s) st.accepted[s] += chunk_totals[s];
  }
  st.max_accepted = *std::max_element(st.accepted.begin(), st.accepted.end());
  st.inserted += digests.size();
  return {};
}

std::uint64_t FilterSetBuilder::inserted_item_count() const noexcept {
  return state_ ? state_->inserted : 0;
}
std::uint32_t FilterSetBuilder::shard_count() const noexcept {
  return state_ ? state_->shard_count : 0;
}
const BloomSpec& FilterSetBuilder::spec() const noexcept {
  static const BloomSpec kNone{};
  return state_ ? state_->spec : kNone;
}
std::uint64_t FilterSetBuilder::shard_expected_item_count() const noexcept {
  return state_ ? state_->shard_capacity : 0;
}

Result<FilterSet> FilterSetBuilder::finish() && {
  if (!state_) {
    return fail(ErrorCode::kInvalidArgument,
                "FilterSetBuilder::finish on a finished or moved-from builder");
  }
  std::unique_ptr<State> state = std::move(state_);
  std::vector<Filter> shards;
  shards.reserve(state->shard_count);
  for (std::uint32_t s = 0; s < state->shard_count; ++s) {
    if (state->shard_count > 1) {
      if (auto flushed = state->flush_shard(s); !flushed) return std::unexpected(flushed.error());
    }
    auto filter = std::move(state->builders[s]).finish();
    if (!filter) return std::unexpected(filter.error());
    shards.push_back(std::move(*filter));
  }
  if (state->shard_count == 1) return FilterSet(std::move(shards.front()));
  return FilterSet::from_shards(std::move(shards), state->spec.expected_item_count);
}

Result<FilterSet> build_filter_set(std::span<const Digest> digests, const BloomSpec& spec,
                                   std::uint32_t shard_count, const BuildOptions& options,
                                   Backend backend) {
  auto builder = FilterSetBuilder::create(spec, shard_count, options);
  if (!builder) return std::unexpected(builder.error());
  if (auto added = builder->add(digests, backend); !added) return std::unexpected(added.error());
  return std::move(*builder).finish();
}

Result<void> check_fill(const FilterSet& set, FillCheck check, const std::string& where) {
  const std::string prefix = where.empty() ? "filter set" : where;
  for (std::uint32_t i = 0; i < set.shard_count(); ++i) {
    const std::string name = set.shard_count() == 1
                                 ? prefix
                                 : prefix + ": shard " + std::to_string(i) + " of " +
                                       std::to_string(set.shard_count());
    if (auto ok = check_fill(set.shard(i), check, name); !ok) return ok;
  }
  return {};
}

// --- Merge -----------------------------------------------------------------------

Result<FilterSet> merge_filter_sets(std::span<const FilterSet> sets, const MergeOptions& options) {
  if (sets.empty()) return fail(ErrorCode::kInvalidArgument, "merge needs at least one filter");
  if (!options.labels.empty() && options.labels.size() != sets.size()) {
    return fail(ErrorCode::kInvalidArgument, "merge got " + std::to_string(options.labels.size()) +
                                                 " labels for " + std::to_string(sets.size()) +
                                                 " filters");
  }
  const auto label = [&](std::size_t index) {
    return options.labels.empty() ? "input " + std::to_string(index + 1) : options.labels[index];
  };
  const FilterSet& first = sets.front();
  const std::uint32_t shard_count = first.shard_count();
  for (std::size_t j = 1; j < sets.size(); ++j) {
    if (sets[j].shard_count() != shard_count) {
      return fail(ErrorCode::kIncompatibleFilters,
                  "cannot merge: shard count differs: " + label(0) + " has " +
                      std::to_string(shard_count) + ", " + label(j) + " has " +
                      std::to_string(sets[j].shard_count()));
    }
    if (shard_count > 1 && sets[j].expected_item_count() != first.expected_item_count()) {
      return fail(ErrorCode::kIncompatibleFilters,
                  "cannot merge: the set's expectedItemCount differs: " + label(0) + " has " +
                      std::to_string(first.expected_item_count()) + ", " + label(j) + " has " +
                      std::to_string(sets[j].expected_item_count()));
    }
  }
  std::vector<Filter> merged;
  merged.reserve(shard_count);
  std::vector<Filter> parts(sets.size(), first.shard(0));
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    MergeOptions shard_options;
    shard_options.catalog_version = options.catalog_version;
    for (std::size_t j = 0; j < sets.size(); ++j) {
      parts[j] = sets[j].shard(s);
      // A one-shard set is a plain filter: its inputs keep their own names.
      shard_options.labels.push_back(shard_count == 1 ? label(j)
                                                      : label(j) + " shard " + std::to_string(s));
    }
    auto filter = merge_filters(parts, shard_options);
    if (!filter) return std::unexpected(filter.error());
    merged.push_back(std::move(*filter));
  }
  if (shard_count == 1) return FilterSet(std::move(merged.front()));
  auto set = FilterSet::from_shards(std::move(merged), first.expected_item_count());
  if (!set && set.error().code == ErrorCode::kCapacityExceeded) {
    return fail(ErrorCode::kCapacityExceeded,
                "merged insertedItemCount is more than the set's expectedItemCount " +
                    std::to_string(first.expected_item_count()));
  }
  return set;
}

}  // namespace abf
