// Partitioned queries (issue 17), a prototype measured against the direct
// SIMD query (BM_ProbeQuery simd rows, probe_bench.cc) on the llc and dram
// filters, single thread, protocol 1.
//
//   abf_bench --benchmark_filter='PartitionedQuery|ProbeQuery/scenario:[12]/simd:1'
//   ABF_BENCH_DRAM=1 abf_bench --benchmark_filter='PartitionedQuery|ProbeQuery/scenario:2/simd:1'
//
// The direct query pays one random filter line per probe: ~2 for an absent
// digest (1 / (1 - fill)), k for a member. The partitioned query sorts the
// probes first, the way the partitioned build (core/src/partition.hpp) sorts
// its positions: in round r every still-active digest's probe-r position is
// appended to the bucket of its 2^range_bits-bit filter region; then the
// regions are tested one at a time, each region's lines loaded sequentially
// (prefetched while the region before it is tested) so the bit tests hit
// L2. A clear bit answers DefinitelyNot; a set one appends the digest's next
// position to the next round's buckets. After k rounds the survivors are
// Maybe. A round costs a sequential pass over the whole filter however few
// digests are left, so once the active digests per filter line drop below
// `min_density` the remaining rounds probe directly (random reads, prefetched
// ahead, as QueryBlock does).
//
// Every case first checks its answers against the scalar reference
// (absent, present, a random mix, and short batches) and fails with the
// first mismatching index. After the timed loop one more, instrumented call
// reports where the time went (counters *_ns: ns per digest of the batch).
//
// Measured (one thread, AVX3_DL, 4 Mi-digest batches, ns a digest, medians
// of 6 interleaved repetitions): it does not pay here. dram absent: direct
// 10.7, partitioned 12.6 at best (2^20-bit regions, round 0 only, then
// direct); dram present: direct 29.2, partitioned 34.9 (all 7 rounds); llc:
// direct 6.8 / 13.6, partitioned 12.4 / 31.1. A partitioned round costs
// ~4 ns an active digest, no less than a direct probe: ~3 ns of it is moving
// the 12-byte entry (read back, scattered on) even with no filter loads at
// all, and probe_starts plus the round-0 scatter take another ~5 ns a digest.
// So the direct path stays.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <vector>

#include "abf/backend.hpp"
#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "kernels.hpp"
#include "probe_simd.h"
#include "scenario_filter.hpp"
#include "workload.hpp"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace {

using abf::Answer;
using abf::Digest;

using abf::workload::kScenarios;

// ---------------------------------------------------------------------------
// The partitioned query.

enum class RegionLoad : int {
  kNone = 0,            // the entries' own loads (random within the region)
  kPrefetchNext = 1,    // prefetched in order while the region before is tested
  kTouch = 2,           // read in order, one load a line, just before its test
  kPrefetchSecond = 3,  // prefetched in order while the second region before is tested
};

struct PartitionedTuning {
  // A region (bucket) covers 2^range_bits bits of the filter.
  unsigned range_bits = 20;
  // A round runs partitioned while its active digests per 64-byte line of the
  // filter are at least this many; the remaining rounds then run direct.
  // 0: every round partitioned.
  double min_density = 1.0;
  // How a region's lines get into L2 before its entries test them.
  RegionLoad load = RegionLoad::kPrefetchNext;
  // Probes ahead the direct rounds prefetch (QueryBlock's dram distance).
  std::size_t distance = 256;
  // Bucket writes through a staging area and non-temporal stores (Buckets).
  bool write_combine = true;
};

// Seconds spent per phase, filled by an instrumented call.
struct PhaseTimes {
  double starts = 0;   // probe_starts: h1, h2 -> first position and step
  double scatter = 0;  // round 0: starts -> buckets
  double rounds = 0;   // partitioned rounds: test a region's entries, rescatter survivors
  double direct = 0;   // the rounds run direct, flattening the buckets included
  std::uint32_t partitioned_rounds = 0;
  std::uint64_t partitioned_probes = 0;  // entries tested in partitioned rounds
  std::uint64_t direct_probes = 0;       // probes tested in direct rounds
};

// One probe of one digest: its position, its step, and its index in the batch.
struct Entry {
  std::uint32_t position;
  std::uint32_t step;
  std::uint32_t id;
};
static_assert(sizeof(Entry) == 12);

constexpr std::size_t kHugePage = std::size_t{2} << 20;

// Huge-page-advised memory, kept across calls: fresh pages cost more to
// fault in than a whole query (partition.cpp, EntriesPool).
struct Buffer {
  std::unique_ptr<Entry, void (*)(void*)> data{nullptr, std::free};
  std::size_t bytes = 0;

  Entry* reserve(std::size_t count) {
    const std::size_t need = (count * sizeof(Entry) + kHugePage - 1) / kHugePage * kHugePage;
    if (need > bytes) {
      void* memory = std::aligned_alloc(kHugePage, need);
      if (memory == nullptr) throw std::bad_alloc();
      madvise(memory, need, MADV_HUGEPAGE);  // advice; may be ignored
      data.reset(static_cast<Entry*>(memory));
      bytes = need;
    }
    return data.get();
  }
};

// The entries of one round, one bucket per region, written through
// software write-combining: each bucket gathers kStaged entries (3 cache
// lines) in a staging area that stays in L1/L2, then moves them to its tail
// with non-temporal stores, whole lines, no read for ownership. Plain stores
// to the bucket tails (wc:0) stall on their line fills: the round-0 scatter
// at llc took 4.8 against 2.2 ns a digest in the first runs, though later
// interleaved runs could not tell the two apart. A bucket holds `capacity`
// entries; what does not fit goes to `spill` (random digests make that an
// 8-standard-deviation event, it only has to be correct).
class Buckets {
 public:
  static constexpr std::uint32_t kStaged = 16;  // 192 bytes

  void reset(Buffer& buffer, std::size_t bucket_count, std::uint32_t capacity, bool write_combine) {
    write_combine_ = write_combine;
    // An odd number of staging groups (3 lines each) from one bucket's start
    // to the next, so the tails spread over the cache sets (partition.cpp,
    // stride_for).
    std::size_t groups = (capacity + kStaged - 1) / kStaged;
    if (groups % 2 == 0) ++groups;
    stride_ = groups * kStaged;
    entries_ = buffer.reserve(bucket_count * stride_);
    if (bucket_count > stage_buckets_) {
      void* memory = std::aligned_alloc(64, bucket_count * kStaged * sizeof(Entry));
      if (memory == nullptr) throw std::bad_alloc();
      stage_.reset(static_cast<Entry*>(memory));
      stage_buckets_ = bucket_count;
    }
    fill_.assign(bucket_count, 0);
    staged_.assign(bucket_count, 0);
    spill_.clear();
  }
  void clear() {
    std::fill(fill_.begin(), fill_.end(), 0);
    std::fill(staged_.begin(), staged_.end(), 0);
    spill_.clear();
  }
  // Writes `e` to bucket b's staging area; keeps it iff `keep` (no branch on it).
  void push(std::size_t b, Entry e, std::uint32_t keep) {
    if (!write_combine_) {
      std::uint32_t& fill = fill_[b];
      entries_[b * stride_ + fill] = e;
      fill += keep;
      if (fill == stride_) [[unlikely]] {
        spill_.push_back(e);
        --fill;
      }
      return;
    }
    std::uint32_t& n = staged_[b];
    stage_.get()[b * kStaged + n] = e;
    n += keep;
    if (n == kStaged) [[unlikely]] {
      flush(b);
    }
  }
  // push() for a hot loop: the pointers copied out, so they stay in
  // registers (a store through Entry* may alias the members, and push()
  // reloads them after every entry). Write combining only.
  struct Writer {
    Buckets* self;
    Entry* stage;
    std::uint32_t* staged;
    void push(std::size_t b, Entry e, std::uint32_t keep) const {
      std::uint32_t n = staged[b];
      stage[b * kStaged + n] = e;
      n += keep;
      staged[b] = n;
      if (n == kStaged) [[unlikely]] {
        self->flush(b);
      }
    }
  };
  Writer writer() { return Writer{this, stage_.get(), staged_.data()}; }
  bool write_combine() const { return write_combine_; }

  // Moves every staged entry to its bucket; call before reading the buckets.
  void finish() {
    for (std::size_t b = 0; b < fill_.size(); ++b) {
      const Entry* staged = stage_.get() + b * kStaged;
      const std::uint32_t n = staged_[b];
      if (fill_[b] + n <= stride_) {
        std::copy(staged, staged + n, entries_ + b * stride_ + fill_[b]);
        fill_[b] += n;
      } else {
        spill_.insert(spill_.end(), staged, staged + n);
      }
      staged_[b] = 0;
    }
#if defined(__SSE2__)
    _mm_sfence();
#endif
  }
  std::size_t bucket_count() const { return fill_.size(); }
  const Entry* bucket(std::size_t b) const { return entries_ + b * stride_; }
  std::uint32_t fill(std::size_t b) const { return fill_[b]; }
  const std::vector<Entry>& spill() const { return spill_; }
  std::uint64_t size() const {
    std::uint64_t total = spill_.size();
    for (const std::uint32_t f : fill_) total += f;
    return total;
  }

 private:
  [[gnu::noinline]] void flush(std::size_t b) {
    const Entry* staged = stage_.get() + b * kStaged;
    if (fill_[b] + kStaged <= stride_) {
      Entry* tail = entries_ + b * stride_ + fill_[b];  // 64-byte aligned
#if defined(__SSE2__)
      const auto* from = reinterpret_cast<const __m128i*>(staged);
      auto* to = reinterpret_cast<__m128i*>(tail);
      for (std::size_t i = 0; i < kStaged * sizeof(Entry) / 16; ++i) {
        _mm_stream_si128(to + i, _mm_load_si128(from + i));
      }
#else
      std::copy(staged, staged + kStaged, tail);
#endif
      fill_[b] += kStaged;
    } else {
      spill_.insert(spill_.end(), staged, staged + kStaged);
    }
    staged_[b] = 0;
  }

  bool write_combine_ = true;
  Entry* entries_ = nullptr;
  std::size_t stride_ = 0;  // entries from one bucket's start to the next: its capacity
  std::unique_ptr<Entry, void (*)(void*)> stage_{nullptr, std::free};
  std::size_t stage_buckets_ = 0;
  std::vector<std::uint32_t> fill_;    // entries in the bucket
  std::vector<std::uint32_t> staged_;  // entries in its staging area
  std::vector<Entry> spill_;
};

// Scratch of the calling thread, reused by every call.
struct Workspace {
  Buffer buffers[2];
  Buckets buckets[2];
  std::vector<Entry> flat;
  std::vector<std::uint64_t> first;
  std::vector<std::uint64_t> step;
};

Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

// Digests per probe_starts call: first and step, 2 x 32 KiB, stay in L2.
constexpr std::size_t kStartsChunk = 2048;

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// Round 0: the first probe of every digest into `out`, by region.
[[gnu::noinline]] void scatter_starts(const abf::probe::Scheme& scheme, unsigned range_bits,
                                      const Digest* digests, std::size_t count, Workspace& ws,
                                      Buckets& out, PhaseTimes* times) {
  ws.first.resize(kStartsChunk);
  ws.step.resize(kStartsChunk);
  for (std::size_t begin = 0; begin < count; begin += kStartsChunk) {
    const std::size_t n = std::min(kStartsChunk, count - begin);
    const auto t0 = std::chrono::steady_clock::now();
    abf::simd::probe_starts(scheme, digests + begin, n, ws.first.data(), ws.step.data());
    const auto t1 = std::chrono::steady_clock::now();
    for (std::size_t i = 0; i < n; ++i) {
      const auto position = static_cast<std::uint32_t>(ws.first[i]);
      out.push(position >> range_bits,
               Entry{position, static_cast<std::uint32_t>(ws.step[i]),
                     static_cast<std::uint32_t>(begin + i)},
               1);
    }
    if (times != nullptr) {
      times->starts += std::chrono::duration<double>(t1 - t0).count();
      times->scatter += seconds_since(t1);
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  out.finish();
  if (times != nullptr) times->scatter += seconds_since(t2);
}

// Tests one entry; a set bit moves it on to its next position (through
// `out`, a Buckets or a Buckets::Writer), or, in the last round, answers Maybe.
template <bool kLast, class Out>
inline void test_entry(const std::uint64_t* words, std::uint64_t m, unsigned range_bits,
                       const Entry& e, Out& out, Answer* answers) {
  const auto bit =
      static_cast<std::uint32_t>((words[abf::probe::word_of(e.position)] >> (e.position & 63)) & 1);
  if constexpr (kLast) {
    if (bit != 0) answers[e.id] = Answer::kMaybe;
  } else {
    const auto next = static_cast<std::uint32_t>(abf::probe::advance(e.position, e.step, m));
    out.push(next >> range_bits, Entry{next, e.step, e.id}, bit);
  }
}

// One partitioned round: region by region, `in` tested, survivors to `out`.
template <bool kLast, class Out>
[[gnu::noinline]] void partitioned_round(const abf::probe::FilterView& view,
                                         const PartitionedTuning& tuning, const Buckets& in,
                                         Out&& out, Answer* answers) {
  const std::uint64_t* words = view.words;
  const std::uint64_t m = view.bit_count;
  const unsigned range_bits = tuning.range_bits;
  const std::size_t range_lines = std::size_t{1} << (range_bits - 9);
  const std::size_t total_lines = (m + 511) / 512;
  const std::size_t regions = in.bucket_count();
  const char* base = reinterpret_cast<const char*>(words);
  // Interleaved prefetch: the region `ahead` regions on.
  const std::size_t ahead = tuning.load == RegionLoad::kPrefetchNext     ? 1
                            : tuning.load == RegionLoad::kPrefetchSecond ? 2
                                                                         : 0;
  for (std::size_t b = 0; b < regions; ++b) {
    const Entry* e = in.bucket(b);
    const std::uint32_t n = in.fill(b);
    if (n == 0) continue;
    const std::size_t first_line = std::min(total_lines, b * range_lines);
    if (tuning.load == RegionLoad::kTouch) {
      // One load per line, in order: the hardware streams the region in at
      // full bandwidth before its entries are tested.
      const std::size_t lines = std::min(total_lines, first_line + range_lines) - first_line;
      const std::uint64_t* w = words + 8 * first_line;
      std::uint64_t sink = 0;
      for (std::size_t l = 0; l < lines; ++l) sink += w[8 * l];
      __asm__ volatile("" : : "r"(sink));
    }
    // Lines of the region `ahead` on, loaded in step with this region's
    // entries, in order: next_lines / n of them per entry (a running
    // remainder, no division per entry).
    const std::size_t next_first = std::min(total_lines, (b + ahead) * range_lines);
    const std::size_t next_lines =
        ahead != 0 ? std::min(total_lines, next_first + range_lines) - next_first : 0;
    const char* line = base + 64 * next_first;
    std::size_t owed = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      for (owed += next_lines; owed >= n; owed -= n, line += 64) __builtin_prefetch(line);
      test_entry<kLast>(words, m, range_bits, e[i], out, answers);
    }
  }
  // Entries whose bucket was full: random reads, rare.
  for (const Entry& e : in.spill()) test_entry<kLast>(words, m, range_bits, e, out, answers);
}

// The rounds from `round` on, direct: every active entry flattened into one
// list, then breadth first, each round's survivors compacted to the front
// with their next positions, prefetching `distance` probes ahead.
[[gnu::noinline]] std::uint64_t direct_rounds(const abf::probe::FilterView& view,
                                              const PartitionedTuning& tuning, std::uint32_t round,
                                              const Buckets& in, std::vector<Entry>& flat,
                                              Answer* answers) {
  flat.clear();
  for (std::size_t b = 0; b < in.bucket_count(); ++b) {
    flat.insert(flat.end(), in.bucket(b), in.bucket(b) + in.fill(b));
  }
  flat.insert(flat.end(), in.spill().begin(), in.spill().end());
  const std::uint64_t* words = view.words;
  const std::uint64_t m = view.bit_count;
  const std::size_t distance = tuning.distance;
  Entry* list = flat.data();
  std::size_t active = flat.size();
  std::uint64_t probes = 0;
  for (; round < view.hash_count && active != 0; ++round) {
    probes += active;
    for (std::size_t t = 0; t < std::min(active, distance); ++t) {
      __builtin_prefetch(words + abf::probe::word_of(list[t].position));
    }
    std::size_t kept = 0;
    for (std::size_t t = 0; t < active; ++t) {
      if (t + distance < active) {
        __builtin_prefetch(words + abf::probe::word_of(list[t + distance].position));
      }
      const Entry e = list[t];
      const auto bit = static_cast<std::size_t>(
          (words[abf::probe::word_of(e.position)] >> (e.position & 63)) & 1);
      // Written always, kept iff the bit is set: kept <= t.
      list[kept] = Entry{static_cast<std::uint32_t>(abf::probe::advance(e.position, e.step, m)),
                         e.step, e.id};
      kept += bit;
    }
    active = kept;
  }
  for (std::size_t t = 0; t < active; ++t) answers[list[t].id] = Answer::kMaybe;
  return probes;
}

// Answers digests[0, count) as abf::scalar::query_batch does, for protocol 1.
void partitioned_query(const abf::probe::FilterView& view, const Digest* digests, std::size_t count,
                       Answer* answers, const PartitionedTuning& tuning,
                       PhaseTimes* times = nullptr) {
  const std::uint64_t m = view.bit_count;
  const std::uint32_t k = view.hash_count;
  const double lines = static_cast<double>(m / 512);
  // Below one region, or a batch too thin for even one partitioned round: direct.
  if (view.protocol != abf::probe::kProtocolUnkeyed || tuning.range_bits < 9 ||
      m <= (std::uint64_t{1} << tuning.range_bits) ||
      static_cast<double>(count) < tuning.min_density * lines ||
      count >= (std::uint64_t{1} << 32)) {
    abf::simd::query_batch(view, digests, count, answers);
    return;
  }
  std::fill(answers, answers + count, Answer::kDefinitelyNot);
  Workspace& ws = workspace();
  const unsigned range_bits = tuning.range_bits;
  const std::size_t regions =
      static_cast<std::size_t>((m + (std::uint64_t{1} << range_bits) - 1) >> range_bits);
  // Mean entries of a whole region in round 0, plus 8 standard deviations.
  const double mean = static_cast<double>(count) *
                      static_cast<double>(std::uint64_t{1} << range_bits) / static_cast<double>(m);
  const auto capacity = static_cast<std::uint32_t>(mean + 8 * std::sqrt(mean) + 64);
  ws.buckets[0].reset(ws.buffers[0], regions, capacity, tuning.write_combine);
  ws.buckets[1].reset(ws.buffers[1], regions, capacity, tuning.write_combine);

  scatter_starts(view, range_bits, digests, count, ws, ws.buckets[0], times);
  std::uint32_t round = 0;
  std::uint64_t active = count;
  for (; round < k; ++round) {
    Buckets& in = ws.buckets[round % 2];
    Buckets& out = ws.buckets[(round + 1) % 2];
    if (round > 0) {
      active = in.size();
      if (active == 0) return;
      if (static_cast<double>(active) < tuning.min_density * lines) break;
    }
    const auto t1 = std::chrono::steady_clock::now();
    out.clear();
    if (round + 1 == k) {
      partitioned_round<true>(view, tuning, in, out, answers);
    } else if (out.write_combine()) {
      partitioned_round<false>(view, tuning, in, out.writer(), answers);
    } else {
      partitioned_round<false>(view, tuning, in, out, answers);
    }
    out.finish();
    if (times != nullptr) {
      times->rounds += seconds_since(t1);
      ++times->partitioned_rounds;
      times->partitioned_probes += active;
    }
  }
  if (round == k) return;
  const auto t2 = std::chrono::steady_clock::now();
  const std::uint64_t probes =
      direct_rounds(view, tuning, round, ws.buckets[round % 2], ws.flat, answers);
  if (times != nullptr) {
    times->direct += seconds_since(t2);
    times->direct_probes += probes;
  }
}

// ---------------------------------------------------------------------------
// Fixture: the llc and dram filters of probe_bench.cc, rebuilt here (its
// helpers are internal to that file), and the scalar reference's answers.

// The scenario's filter and batches, with a batch mixing members and
// non-members and the scalar reference's answers to all three.
struct Fixture {
  const abf::bench::ScenarioFilter& filter;
  std::vector<Digest> mixed;  // present[i] or absent[i], at random
  std::vector<Answer> present_expected, absent_expected, mixed_expected;

  abf::probe::FilterView view() const { return filter.view(); }
};

const Fixture& fixture(std::size_t scenario) {
  static std::map<std::size_t, Fixture> cache;
  auto found = cache.find(scenario);
  if (found != cache.end()) return found->second;
  Fixture f{abf::bench::scenario_filter(scenario), {}, {}, {}, {}};
  const std::size_t batch = f.filter.present.size();
  f.mixed.resize(batch);
  for (std::size_t i = 0; i < batch; ++i) {
    f.mixed[i] =
        (abf::workload::splitmix64(i) & 1) != 0 ? f.filter.present[i] : f.filter.absent[i];
  }
  const auto reference = [&f](const std::vector<Digest>& digests, std::vector<Answer>& out) {
    out.resize(digests.size());
    abf::scalar::query_batch(f.view(), digests.data(), digests.size(), out.data());
  };
  reference(f.filter.present, f.present_expected);
  reference(f.filter.absent, f.absent_expected);
  reference(f.mixed, f.mixed_expected);
  return cache.emplace(scenario, std::move(f)).first->second;
}

using abf::bench::skip_dram;

// The first i where partitioned_query(digests[0, count)) differs from
// expected[i], or -1.
std::int64_t first_mismatch(const Fixture& f, const PartitionedTuning& tuning,
                            const std::vector<Digest>& digests, const std::vector<Answer>& expected,
                            std::size_t count) {
  std::vector<Answer> answers(count);
  partitioned_query(f.view(), digests.data(), count, answers.data(), tuning);
  const auto miss = std::mismatch(answers.begin(), answers.end(), expected.begin());
  return miss.first == answers.end() ? -1 : miss.first - answers.begin();
}

// Checks a tuning on absent, present and mixed batches (whole, and cut short
// so that the direct fallback runs too) once per scenario and tuning; false
// after SkipWithError.
bool check(benchmark::State& state, std::size_t scenario, const PartitionedTuning& tuning) {
  static std::map<std::tuple<std::size_t, unsigned, double, RegionLoad, bool>, std::string> checked;
  const auto key = std::make_tuple(scenario, tuning.range_bits, tuning.min_density, tuning.load,
                                   tuning.write_combine);
  auto found = checked.find(key);
  if (found == checked.end()) {
    const Fixture& f = fixture(scenario);
    std::string error;
    const auto run = [&](const char* name, const std::vector<Digest>& digests,
                         const std::vector<Answer>& expected) {
      for (const std::size_t count : {digests.size(), std::size_t{1000}, std::size_t{3}}) {
        if (!error.empty()) return;
        const std::int64_t i = first_mismatch(f, tuning, digests, expected, count);
        if (i >= 0) {
          error = std::string("mismatch with the scalar reference: ") + name + " batch of " +
                  std::to_string(count) + ", first at index " + std::to_string(i);
        }
      }
    };
    run("absent", f.filter.absent, f.absent_expected);
    run("present", f.filter.present, f.present_expected);
    run("mixed", f.mixed, f.mixed_expected);
    found = checked.emplace(key, error).first;
  }
  if (found->second.empty()) return true;
  state.SkipWithError(found->second.c_str());
  return false;
}

// Args: scenario (1 llc, 2 dram), present (0 absent, 1 present), range_bits,
// min_density x 10 (0: every round partitioned), load (RegionLoad), wc (1: write
// combining, 0: plain bucket stores).
void BM_PartitionedQuery(benchmark::State& state) {
  const auto scenario = static_cast<std::size_t>(state.range(0));
  if (skip_dram(state, scenario)) return;
  const bool present = state.range(1) == 1;
  PartitionedTuning tuning;
  tuning.range_bits = static_cast<unsigned>(state.range(2));
  tuning.min_density = static_cast<double>(state.range(3)) / 10;
  tuning.load = static_cast<RegionLoad>(state.range(4));
  tuning.write_combine = state.range(5) == 1;
  if (!check(state, scenario, tuning)) return;
  const Fixture& f = fixture(scenario);
  const auto& digests = present ? f.filter.present : f.filter.absent;
  const abf::probe::FilterView view = f.view();
  std::vector<Answer> answers(digests.size());
  for (auto _ : state) {
    partitioned_query(view, digests.data(), digests.size(), answers.data(), tuning);
    benchmark::DoNotOptimize(answers.data());
    benchmark::ClobberMemory();
  }
  const auto maybe = std::count(answers.begin(), answers.end(), Answer::kMaybe);
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(digests.size()));
  state.counters["fp_rate"] = static_cast<double>(maybe) / static_cast<double>(digests.size());
  state.counters["k"] = f.filter.layout.hash_count;
  // One instrumented call: ns per digest of each phase.
  PhaseTimes times;
  const auto begin = std::chrono::steady_clock::now();
  partitioned_query(view, digests.data(), digests.size(), answers.data(), tuning, &times);
  const double total = seconds_since(begin);
  const double per_digest = 1e9 / static_cast<double>(digests.size());
  state.counters["total_ns"] = total * per_digest;
  state.counters["starts_ns"] = times.starts * per_digest;
  state.counters["scatter_ns"] = times.scatter * per_digest;
  state.counters["rounds_ns"] = times.rounds * per_digest;
  state.counters["direct_ns"] = times.direct * per_digest;
  state.counters["p_rounds"] = times.partitioned_rounds;
  state.counters["p_probes"] =
      static_cast<double>(times.partitioned_probes) / static_cast<double>(digests.size());
  state.counters["d_probes"] =
      static_cast<double>(times.direct_probes) / static_cast<double>(digests.size());
  state.SetLabel(std::string(kScenarios[scenario].name) + " partitioned " +
                 abf::simd::target_name());
}

// The tunings: regions of 2^18, 2^20 and 2^22 bits (32 / 128 / 512 KiB)
// with each way of loading a region into L2, switching to direct below 1
// active digest a filter line; at 2^20, no region load, plain bucket stores,
// and the other switch points (0: never).
void partitioned_args(benchmark::internal::Benchmark* b) {
  constexpr auto kPrefetchNext = static_cast<std::int64_t>(RegionLoad::kPrefetchNext);
  for (std::int64_t s = 1; s < 3; ++s) {
    for (std::int64_t present = 0; present < 2; ++present) {
      for (std::int64_t bits : {18, 20, 22}) {
        for (std::int64_t load = 1; load < 4; ++load) b->Args({s, present, bits, 10, load, 1});
      }
      b->Args({s, present, 20, 10, static_cast<std::int64_t>(RegionLoad::kNone), 1});
      b->Args({s, present, 20, 10, kPrefetchNext, 0});
      for (std::int64_t density : {0, 5, 20, 40}) {
        b->Args({s, present, 20, density, kPrefetchNext, 1});
      }
    }
  }
}

BENCHMARK(BM_PartitionedQuery)
    ->ArgNames({"scenario", "present", "range_bits", "density10", "load", "wc"})
    ->Apply(partitioned_args)
    ->Unit(benchmark::kMillisecond);

}  // namespace
