// abf bench: throughput of every backend on this machine, next to the
// machine's own random-line ceiling (each row says what it counts and when
// it beats it), so CPUs can be compared with one command; --items,
// --snapshot and --input time a chosen n or the user's own filter and
// digests, --batch sweeps the call size.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/abf.hpp"
#include "abf/cuda/controls.hpp"
#include "abf/simd/target.hpp"
#include "command.hpp"
#include "common.hpp"
#include "workload.hpp"

namespace abf::cli {
namespace {

struct BenchOptions {
  std::string scenario = "all";
  std::string backend = "all";
  std::string protocol = "1";
  unsigned threads = 0;  // 0: report at 1 thread and at all cores
  unsigned repetitions = 5;
  double fpp = workload::kTargetFpp;  // every scenario's target p
  bool json = false;
  std::string simd_targets;  // --simd-target: "all" or names; empty: the one in use
  bool simd_targets_given = false;  // --simd-target was on the line (perhaps empty)
  std::uint64_t items = 0;          // --items: one filter of this n instead of the scenarios
  std::string snapshot;             // --snapshot: time this filter instead of the scenarios
  std::string input;                // --input: the digests to ask it (with --snapshot)
  std::string input_format = "hex";
  std::string key_file;                // --key-file: a keyed snapshot's key
  std::vector<std::uint64_t> batches;  // --batch: digests per query call, each a row
};

// One backend as measured: the SIMD engine once per Highway target asked for
// with --simd-target (empty target: whichever runs now).
struct BenchCase {
  Backend backend;
  std::string simd_target;
};

using workload::kAbsentSeed;
using workload::kBatch;
using workload::kMemberSeed;
using workload::kScenarios;
using workload::Scenario;
constexpr std::size_t kChunk = std::size_t{1} << 20;

void fill_digests(std::uint64_t seed, std::uint64_t first, std::span<Digest> out) {
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, out.size(), 4096), [&](const auto& range) {
    for (std::size_t i = range.begin(); i != range.end(); ++i) {
      out[i] = workload::digest_at(seed, first + i);
    }
  });
}

// The first value of /proc/cpuinfo's `key` line ("model name", "flags"), or "".
std::string cpuinfo_value(std::string_view key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0 && line.find(':') != std::string::npos &&
        line.find_first_not_of(" \t", key.size()) == line.find(':')) {
      const auto value = line.find_first_not_of(' ', line.find(':') + 1);
      return value == std::string::npos ? std::string() : line.substr(value);
    }
  }
  return "";
}

std::string cpu_name() {
  const std::string name = cpuinfo_value("model name");
  return name.empty() ? "unknown" : name;
}

// The CPU's family and model numbers ("25/17" is AMD Zen 4), which tell
// apart what one model name ("AMD EPYC") covers in a virtual machine.
std::string cpu_family_model() {
  return cpuinfo_value("cpu family") + "/" + cpuinfo_value("model");
}

// The vector extensions of the CPU that decide the Highway target and the
// kernels' paths: AVX2, BMI2, and each AVX-512 part.
std::string cpu_vector_flags() {
  std::istringstream flags(cpuinfo_value("flags"));
  std::string flag;
  std::string out;
  while (flags >> flag) {
    if (flag == "avx2" || flag == "bmi2" || flag == "fma" || flag.rfind("avx512", 0) == 0) {
      out += (out.empty() ? "" : " ") + flag;
    }
  }
  return out;
}

using Clock = std::chrono::steady_clock;

template <class Body>
double seconds_of(Body&& body) {
  const auto start = Clock::now();
  body();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// Run-to-run spread of a row's timed runs: (slowest - fastest) / median; -1
// (unmeasured: JSON null) for a single run. What "spread under 15% over
// five runs" reads.
double spread(const std::vector<double>& values) {
  if (values.size() < 2) return -1;
  const auto [fastest, slowest] = std::ranges::minmax(values);
  const double middle = median(values);
  return middle > 0 ? (slowest - fastest) / middle : 0;
}

// A row whose spread is over this is flagged ("!" in the table, JSON
// high_spread): its median is not to be trusted alone.
constexpr double kHighSpread = 0.20;

struct Row {
  std::string backend;
  std::string target;
  std::uint32_t protocol = 1;  // hashProtocolVersion of the filter
  unsigned threads = 1;
  std::string scenario;
  std::uint64_t items = 0;
  std::uint64_t bit_count = 0;
  std::uint32_t hash_count = 0;
  std::string operation;
  double items_per_second = 0;
  double ns_per_item = 0;
  double fraction_of_ceiling = 0;       // ceiling_ns / ns_per_item (1 for the ceiling rows)
  std::int64_t prefetch_distance = -1;  // random_line: the best distance; -1 elsewhere
  // Of the --repetitions runs (spread() above); -1 for a row measured once
  // (--repetitions 1, and h2d_copy always): JSON null, "-" in the table.
  double spread = -1;
  // The ceiling in ns per item the row is compared with, and what it
  // counts ("7 random lines: k"); why the row can beat it when it does.
  double ceiling_ns = 0;
  std::string ceiling_counts = {};
  std::string beats_why = {};
  // Query rows: digests per query() call (--batch; else the whole batch);
  // 0 elsewhere. Single-digest rows are latencies: the median over the
  // repetitions of each run's 50th and 99th percentile call, in ns; -1
  // elsewhere.
  std::uint64_t batch = 0;
  double p50_ns = -1;
  double p99_ns = -1;
  // The filter the row ran against (filter rows only; the ceiling rows have
  // none): its spec, and its fill and false-positive rate once all n members
  // are in.
  bool has_filter = false;
  std::uint64_t expected_item_count = 0;
  double target_fpp = 0;
  double fill_ratio = 0;
  double estimated_fpp = 0;
  // query_absent: the non-members answered `maybe`, out of `items`; -1 elsewhere.
  std::int64_t false_positives = -1;
  // query_input (--input): the digests answered `maybe`; -1 elsewhere.
  std::int64_t maybe_answers = -1;

  bool high_spread() const { return spread > kHighSpread; }
  bool beats_ceiling() const { return fraction_of_ceiling > 1.0; }
};

// Why a row can pass 100% of its model: the model's line time is the line
// pass's, random reads each paid in full.
constexpr const char* kWhyLoadRow =
    "random_load is the line pass over the plain-load pass (line ns / load ns): both read "
    "random words of the same buffer, so over 100% is the two passes' noise, or in cache the "
    "plain loop's fewer instructions";
constexpr const char* kWhyBuild =
    "the model pays every line a digest writes as one random access; the build buckets its "
    "writes by region of the filter, so consecutive writes share lines and pages the model "
    "pays for each time";
constexpr const char* kWhyQuery =
    "the model pays every line a probe reads as one random access at the line pass's best "
    "prefetch distance; a batched query overlaps its hashing with the loads and its probes "
    "share hot lines and mapped pages";
constexpr const char* kWhyLatency =
    "the model is the throughput of independent line reads; a single-digest call's own "
    "lines overlap each other, and a filter in cache answers at cache speed";
constexpr const char* kWhyCopy =
    "h2d_copy is the pinned copy bandwidth measured once before the run; a run faster than "
    "it overlaps copies with work or moved fewer bytes";
// The ceiling: independent random 64-bit loads over a buffer of the filter's
// size allocated like the filter (allocate_words: alignment, huge pages).
// Load i reads word floor(frac(i * phi) * word_count), phi the golden ratio:
// a Weyl sequence, spread evenly and without a stride a prefetcher could
// follow, at one add and one multiply a load. No index array streams beside
// the loads (at l2 that would measure the stream, not the loads).
class RandomLoads {
 public:
  explicit RandomLoads(std::uint64_t word_count)
      : buffer_(allocate_words(word_count)), word_count_(word_count) {
    std::uint64_t* words = buffer_.get();
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, word_count, 1 << 16),
                      [&](const auto& r) {
                        for (auto i = r.begin(); i != r.end(); ++i)
                          words[i] = workload::splitmix64(i);
                      });
  }

  static constexpr std::uint64_t loads() { return 4 * kBatch; }

  // One pass over the current arena's threads; seconds.
  double run() {
    const std::uint64_t* words = buffer_.get();
    const std::uint64_t word_count = word_count_;
    return seconds_of([&] {
      tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, loads(), 1 << 16), [&](const auto& r) {
        __extension__ using U128 = unsigned __int128;
        constexpr std::uint64_t kPhi = 0x9e3779b97f4a7c15ull;
        std::uint64_t sum = 0;
        std::uint64_t fraction = r.begin() * kPhi;
        for (auto i = r.begin(); i != r.end(); ++i) {
          fraction += kPhi;
          sum +=
              words[static_cast<std::uint64_t>((static_cast<U128>(fraction) * word_count) >> 64)];
        }
        sink_.fetch_add(sum, std::memory_order_relaxed);
      });
    });
  }

 private:
  std::shared_ptr<std::uint64_t> buffer_;
  std::uint64_t word_count_;
  std::atomic<std::uint64_t> sink_{0};  // keeps the loads
};

// The honest ceiling: independent random 64-byte-line reads over a buffer of
// the filter's size, allocated like the filter, with software prefetch
// `distance` reads ahead, so as many misses are in flight as the core can
// hold. Line i is line floor(frac(i * phi) * lines) (the Weyl sequence of
// RandomLoads); the prefetch runs the same sequence `distance` steps ahead.
// A query that reads k random lines of the filter per digest needs at least
// k times this line's time: it cannot pass it, however it is batched
// (docs/performance.md). run() sweeps the distances and keeps the best.
class RandomLines {
 public:
  explicit RandomLines(std::uint64_t word_count)
      : buffer_(allocate_words(word_count)),
        line_count_(std::max<std::uint64_t>(1, word_count / 8)) {
    std::uint64_t* words = buffer_.get();
    tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, word_count, 1 << 16),
                      [&](const auto& r) {
                        for (auto i = r.begin(); i != r.end(); ++i)
                          words[i] = workload::splitmix64(i);
                      });
  }

  static constexpr std::uint64_t reads() { return 4 * kBatch; }
  // The distances swept: none (the out-of-order core alone) to 1024 lines.
  static constexpr std::uint32_t kDistances[] = {0, 8, 16, 32, 64, 128, 256, 512, 1024};

  // One pass at one prefetch distance over the current arena's threads;
  // seconds.
  double run(std::uint32_t distance) {
    const std::uint64_t* words = buffer_.get();
    const std::uint64_t lines = line_count_;
    return seconds_of([&] {
      tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, reads(), 1 << 16), [&](const auto& r) {
        __extension__ using U128 = unsigned __int128;
        constexpr std::uint64_t kPhi = 0x9e3779b97f4a7c15ull;
        const auto line_of = [lines](std::uint64_t fraction) {
          return static_cast<std::uint64_t>((static_cast<U128>(fraction) * lines) >> 64);
        };
        std::uint64_t sum = 0;
        std::uint64_t fraction = r.begin() * kPhi;
        std::uint64_t ahead = fraction + distance * kPhi;
        for (auto i = r.begin(); i != r.end(); ++i) {
          fraction += kPhi;
          ahead += kPhi;
          if (distance != 0) __builtin_prefetch(words + 8 * line_of(ahead));
          sum += words[8 * line_of(fraction)];
        }
        sink_.fetch_add(sum, std::memory_order_relaxed);
      });
    });
  }

 private:
  std::shared_ptr<std::uint64_t> buffer_;
  std::uint64_t line_count_;
  std::atomic<std::uint64_t> sink_{0};  // keeps the loads
};

// What the backend runs on: "AVX3_ZEN4", a GPU, "reference".
std::string target_of(Backend backend) {
  for (const auto& info : list_backends()) {
    if (info.backend == backend) return info.detail;
  }
  return std::string(backend.name());
}

// Keeps a value observable so the work behind it is not optimized away.
void benchmark_sink(std::uint64_t value) {
  static std::atomic<std::uint64_t> sink;
  sink.store(value, std::memory_order_relaxed);
}
void benchmark_sink(const Filter& filter) { benchmark_sink(filter.words()[0]); }

// The key of the protocol-2 rows: fixed, so runs compare; a benchmark's key
// guards nothing.
Key bench_key() {
  std::array<std::uint8_t, Key::kSize> bytes{};
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<std::uint8_t>(workload::splitmix64(i));
  }
  return Key::from_bytes(bytes);
}

BuildOptions build_options(std::uint32_t protocol) {
  BuildOptions options;
  options.protocol = protocol;
  if (probe::keyed_protocol(protocol)) options.key = bench_key();
  return options;
}

// One filter the rows time: a scenario of bench/workload.hpp, --items' own
// n ("custom"), or --snapshot's filter, asked --input's digests when given.
struct Workload {
  std::string name;
  std::uint64_t n = 0;
  const Filter* snapshot = nullptr;
  const std::vector<Digest>* input = nullptr;
};

enum class OpKind { kBuild, kAbsent, kPresent, kInput };
struct Operation {
  OpKind kind;
  const char* name;
  std::uint64_t batch;  // digests per query call; 0: the whole set (and build)
};

// Generated digests tried for the present rows of a --snapshot, whose
// members are not known: those the filter answers `maybe` (its false
// positives, which read every line a member reads).
constexpr std::uint64_t kMaybeSearch = std::uint64_t{16} << 20;
// Query calls per timed run at most: 1Mi single-digest calls (--batch 1)
// are enough for a 99th percentile and take about 0.2 s.
constexpr std::uint64_t kMaxCalls = std::uint64_t{1} << 20;

Result<std::vector<Digest>> maybe_digests(const Filter& filter, std::uint64_t want,
                                          std::uint64_t& tried) {
  std::vector<Digest> found;
  tried = 0;
  std::vector<Digest> chunk(kChunk);
  std::vector<Answer> answers(kChunk);
  for (std::uint64_t begin = 0; begin < kMaybeSearch && found.size() < want; begin += kChunk) {
    fill_digests(kMemberSeed, begin, chunk);
    if (auto done = filter.query(chunk, answers, Backend::kSimd); !done) {
      return std::unexpected(done.error());
    }
    for (std::size_t i = 0; i < chunk.size() && found.size() < want; ++i, ++tried) {
      if (answers[i] == Answer::kMaybe) found.push_back(chunk[i]);
    }
  }
  return found;
}

double percentile(std::vector<double>& values, double fraction) {
  if (values.empty()) return 0;
  const auto at = static_cast<std::size_t>(fraction * static_cast<double>(values.size() - 1));
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(at), values.end());
  return values[at];
}

std::string lines_text(double lines) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f", lines);
  return text;
}

// Runs every operation of one workload for the protocols, backends and
// thread counts. `copy_rate`: digests per second a pinned host-to-device copy
// carries, the ceiling of the CUDA rows (their digests start in host memory);
// 0 without CUDA. `notes` receives what the rows alone do not say.
Result<void> run_workload(const Workload& workload, std::vector<std::uint32_t> protocols,
                          const std::vector<BenchCase>& cases,
                          const std::vector<unsigned>& thread_counts, unsigned repetitions,
                          double fpp, const std::vector<std::uint64_t>& batches, double copy_rate,
                          std::vector<Row>& rows, std::vector<std::string>& notes) {
  const BloomSpec spec =
      workload.snapshot != nullptr ? workload.snapshot->info().spec : BloomSpec{workload.n, fpp};
  Result<Layout> layout =
      workload.snapshot != nullptr ? workload.snapshot->info().layout() : choose_layout(spec);
  if (!layout) return std::unexpected(layout.error());
  const std::uint64_t batch = std::min(spec.expected_item_count, kBatch);

  // The filters the queries run against, one per protocol: all n members,
  // built once (SIMD, all cores, on the target in use before any case), or
  // the snapshot in its own protocol.
  apply_threads(0);
  const std::string target_in_use = simd_target_name();
  std::vector<Filter> built;
  std::vector<const Filter*> filters;
  if (workload.snapshot != nullptr) {
    protocols = {workload.snapshot->hash_protocol_version()};
    filters = {workload.snapshot};
  } else {
    for (const std::uint32_t protocol : protocols) {
      auto builder = FilterBuilder::create(spec, build_options(protocol));
      if (!builder) return std::unexpected(builder.error());
      std::vector<Digest> chunk(kChunk);
      for (std::uint64_t begin = 0; begin < spec.expected_item_count; begin += kChunk) {
        const auto count = static_cast<std::size_t>(
            std::min<std::uint64_t>(kChunk, spec.expected_item_count - begin));
        fill_digests(kMemberSeed, begin, {chunk.data(), count});
        if (auto added = builder->add({chunk.data(), count}, Backend::kSimd); !added) {
          return std::unexpected(added.error());
        }
      }
      auto finished = std::move(*builder).finish();
      if (!finished) return std::unexpected(finished.error());
      built.push_back(std::move(*finished));
    }
    for (const Filter& filter : built) filters.push_back(&filter);
  }
  std::vector<Digest> present, absent;
  if (workload.input == nullptr) {
    absent.resize(batch);
    fill_digests(kAbsentSeed, 0, absent);
    if (workload.snapshot == nullptr) {
      present.resize(batch);
      fill_digests(kMemberSeed, 0, present);
    } else {
      std::uint64_t tried = 0;
      auto found = maybe_digests(*workload.snapshot, batch, tried);
      if (!found) return std::unexpected(found.error());
      present = std::move(*found);
      notes.push_back(
          present.empty()
              ? "no query_present rows: none of " + with_commas(kMaybeSearch) +
                    " generated digests was answered maybe by the snapshot (its members are "
                    "not known to bench); give them with --input"
              : "query_present asks the " + with_commas(present.size()) +
                    " generated digests the snapshot answered maybe (of " + with_commas(tried) +
                    " tried): its false positives, which read every line a member reads");
    }
  }
  std::vector<Operation> operations;
  if (workload.snapshot == nullptr) operations.push_back({OpKind::kBuild, "build", 0});
  const std::vector<std::uint64_t> call_sizes =
      batches.empty() ? std::vector<std::uint64_t>{0} : batches;
  for (const std::uint64_t size : call_sizes) {
    if (workload.input != nullptr) {
      operations.push_back({OpKind::kInput, "query_input", size});
      continue;
    }
    operations.push_back({OpKind::kAbsent, "query_absent", size});
    if (!present.empty()) operations.push_back({OpKind::kPresent, "query_present", size});
  }
  const auto digests_of = [&](OpKind kind) -> std::span<const Digest> {
    if (kind == OpKind::kInput) return *workload.input;
    return kind == OpKind::kAbsent ? std::span<const Digest>(absent)
                                   : std::span<const Digest>(present);
  };
  std::size_t answer_count = std::max(absent.size(), present.size());
  if (workload.input != nullptr) answer_count = workload.input->size();
  std::vector<Answer> answers(answer_count);

  RandomLoads ceiling(layout->bit_count / 64);
  RandomLines lines(layout->bit_count / 64);
  constexpr std::size_t kDistanceCount = std::size(RandomLines::kDistances);
  const std::size_t op_count = operations.size();
  for (const unsigned threads : thread_counts) {
    apply_threads(threads);
    // An arena of exactly `threads`: the library splits a batch by the
    // arena's concurrency, which a global_control limit alone leaves at all
    // cores.
    tbb::task_arena arena(static_cast<int>(threads));
    // Repetitions interleave the protocols and cases (backends, SIMD
    // targets), so a burst of noise from other processes hits all of them
    // alike; the first round only warms up. times[(p * cases + b) *
    // operations + operation], ns per item; p50s and p99s likewise for the
    // single-digest rows.
    std::vector<double> load_times;
    std::vector<std::vector<double>> line_times(kDistanceCount);
    const std::size_t slots = protocols.size() * cases.size() * op_count;
    std::vector<std::vector<double>> times(slots), p50s(slots), p99s(slots);
    // The `maybe` answers of each slot's last query of the whole set
    // (counted outside the timed region): false positives of query_absent.
    std::vector<std::int64_t> maybes(slots, -1);
    std::vector<double> latencies;
    // Ns per digest of asking `digests` in calls of `call_size` digests (0:
    // all in one call), cycling through them until about kBatch digests are
    // answered. A set below kBatch (the l2 scenario's 100,000 digests, 0.3
    // ms) is asked once whole untimed first, so its time is the filter's
    // from its cache over a span like the random_line pass's, not one
    // call's cold start after the build (one call measured 5.6 ns a digest
    // at l2, the same call repeated 3.4-3.6 ns). `latencies`, when given,
    // receives each call's ns (one clock read between calls included).
    const auto timed_query = [&](const Filter& filter, Backend backend,
                                 std::span<const Digest> digests, std::uint64_t call_size,
                                 Result<void>& done, std::vector<double>* per_call) {
      const std::uint64_t size =
          call_size == 0 ? digests.size() : std::min<std::uint64_t>(call_size, digests.size());
      const std::uint64_t calls = std::min((kBatch + size - 1) / size, kMaxCalls);
      return arena.execute([&] {
        if (calls > 1) {
          done = filter.query(digests, answers, backend);
          if (!done) return 0.0;
        }
        std::uint64_t offset = 0;
        const auto next = [&] {
          offset += size;
          if (offset + size > digests.size()) offset = 0;
        };
        const std::span<Answer> out(answers.data(), size);
        double seconds = 0;
        if (per_call == nullptr) {
          seconds = seconds_of([&] {
            for (std::uint64_t call = 0; call < calls && done; ++call) {
              done = filter.query(digests.subspan(offset, size), out, backend);
              next();
            }
          });
        } else {
          per_call->resize(calls);
          const auto start = Clock::now();
          auto before = start;
          for (std::uint64_t call = 0; call < calls && done; ++call) {
            done = filter.query(digests.subspan(offset, size), out, backend);
            const auto after = Clock::now();
            (*per_call)[call] = std::chrono::duration<double, std::nano>(after - before).count();
            before = after;
            next();
          }
          seconds = std::chrono::duration<double>(before - start).count();
        }
        return seconds * 1e9 / static_cast<double>(calls * size);
      });
    };
    for (unsigned rep = 0; rep <= repetitions; ++rep) {
      const double load = arena.execute([&] { return ceiling.run(); });
      if (rep > 0) load_times.push_back(load);
      for (std::size_t d = 0; d < kDistanceCount; ++d) {
        const double time = arena.execute([&] { return lines.run(RandomLines::kDistances[d]); });
        if (rep > 0) line_times[d].push_back(time);
      }
      for (std::size_t p = 0; p < protocols.size(); ++p) {
        const Filter& filter = *filters[p];
        for (std::size_t b = 0; b < cases.size(); ++b) {
          const Backend backend = cases[b].backend;
          if (!cases[b].simd_target.empty()) {
            if (auto used = use_simd_target(cases[b].simd_target); !used) {
              return std::unexpected(used.error());
            }
            benchmark_sink(simd_target_name().size());  // dispatch chosen outside the timing
          }
          for (std::size_t op = 0; op < op_count; ++op) {
            const Operation& operation = operations[op];
            const std::size_t at = (p * cases.size() + b) * op_count + op;
            Result<void> done;
            double ns = 0;
            if (operation.kind == OpKind::kBuild) {
              // build: `batch` members into a fresh bitset of the scenario's
              // size, from create() to the finished Filter (lanes merged,
              // buckets applied).
              ns = arena.execute([&] {
                return seconds_of([&] {
                  auto fresh = FilterBuilder::create(spec, build_options(protocols[p]));
                  done = fresh ? fresh->add(present, backend)
                               : Result<void>(std::unexpected(fresh.error()));
                  if (!done) return;
                  auto finished = std::move(*fresh).finish();
                  if (finished)
                    benchmark_sink(*finished);
                  else
                    done = std::unexpected(finished.error());
                });
              }) * 1e9 /
                   static_cast<double>(batch);
            } else {
              const auto digests = digests_of(operation.kind);
              const bool latency = operation.batch == 1;
              ns = timed_query(filter, backend, digests, operation.batch, done,
                               latency ? &latencies : nullptr);
              if (done && rep > 0 && latency) {
                p50s[at].push_back(percentile(latencies, 0.50));
                p99s[at].push_back(percentile(latencies, 0.99));
              }
              if (done && rep == repetitions && operation.kind != OpKind::kPresent) {
                // The answers of the whole set, for its maybe count.
                const bool whole = operation.batch == 0 || operation.batch >= digests.size();
                if (!whole)
                  done = arena.execute([&] { return filter.query(digests, answers, backend); });
                maybes[at] = static_cast<std::int64_t>(std::count(
                    answers.begin(), answers.begin() + static_cast<std::ptrdiff_t>(digests.size()),
                    Answer::kMaybe));
              }
            }
            if (!done) return std::unexpected(done.error());
            if (rep > 0) times[at].push_back(ns);
          }
        }
      }
    }
    // Back to the target the scenario found, for its next thread count and
    // the next scenario's filters.
    if (auto used = use_simd_target(target_in_use); !used) return std::unexpected(used.error());
    const double load_ns = median(load_times) * 1e9 / static_cast<double>(ceiling.loads());
    // The best prefetch distance: the one whose median pass was fastest.
    std::size_t best = 0;
    for (std::size_t d = 1; d < kDistanceCount; ++d) {
      if (median(line_times[d]) < median(line_times[best])) best = d;
    }
    const double line_ns = median(line_times[best]) * 1e9 / static_cast<double>(lines.reads());
    rows.push_back({"memory", "random_line", 0, threads, workload.name, lines.reads(),
                    layout->bit_count, layout->hash_count, "random_line", 1e9 / line_ns, line_ns,
                    1.0, RandomLines::kDistances[best]});
    rows.back().spread = spread(line_times[best]);
    rows.back().ceiling_ns = line_ns;
    rows.back().ceiling_counts = "one random line: this row";
    // The old ceiling, plain loads without prefetch, kept for continuity.
    rows.push_back({"memory", "random_load", 0, threads, workload.name, ceiling.loads(),
                    layout->bit_count, layout->hash_count, "random_load", 1e9 / load_ns, load_ns,
                    load_ns == 0 ? 0 : line_ns / load_ns});
    rows.back().spread = spread(load_times);
    rows.back().ceiling_ns = line_ns;
    rows.back().ceiling_counts = "one random line";
    rows.back().beats_why = kWhyLoadRow;
    if (copy_rate > 0) {
      rows.push_back({"cuda", "h2d_copy", 0, threads, workload.name, 0, layout->bit_count,
                      layout->hash_count, "h2d_copy", copy_rate, 1e9 / copy_rate, 1.0});
      rows.back().ceiling_ns = 1e9 / copy_rate;
      rows.back().ceiling_counts = "one digest's pinned host-to-device copy: this row";
    }
    for (std::size_t p = 0; p < protocols.size(); ++p) {
      const Filter& filter = *filters[p];
      const Layout filter_layout = filter.info().layout();
      // A one-line filter reads or writes one line a digest, whichever the
      // operation.
      const bool one_line = blocked::is_blocked_protocol(protocols[p]);
      const double fill = filter.fill_ratio();
      const double estimated_fpp = filter.estimate_false_positive_rate();
      const double k = filter_layout.hash_count;
      for (std::size_t b = 0; b < cases.size(); ++b) {
        const Backend backend = cases[b].backend;
        const std::string target =
            cases[b].simd_target.empty()
                ? (backend == Backend::kSimd ? target_in_use : target_of(backend))
                : cases[b].simd_target;
        for (std::size_t op = 0; op < op_count; ++op) {
          const Operation& operation = operations[op];
          const std::size_t at = (p * cases.size() + b) * op_count + op;
          const double ns = median(times[at]);
          const std::uint64_t items =
              operation.kind == OpKind::kBuild ? batch : digests_of(operation.kind).size();
          // Random lines a digest reads: k to build or to confirm a member,
          // about 1 / (1 - fill) to rule out a non-member (it stops at its
          // first clear bit), the mix of both for the user's digests; one
          // for a one-line filter. The GPU's ceiling is the bus its digests
          // cross instead.
          double reads = k;
          std::string counts = "k = " + std::to_string(filter_layout.hash_count) + " random lines";
          if (one_line) {
            reads = 1;
            counts = "one random line";
          } else if (operation.kind == OpKind::kAbsent) {
            reads = 1.0 / (1.0 - fill);
            counts = lines_text(reads) + " random lines: 1/(1-fill)";
          } else if (operation.kind == OpKind::kInput) {
            const double maybe_share =
                items == 0 ? 0 : static_cast<double>(maybes[at]) / static_cast<double>(items);
            reads = maybe_share * k + (1 - maybe_share) / (1.0 - fill);
            counts = lines_text(reads) + " random lines: maybe share x k + absent share/(1-fill)";
          }
          Row row{std::string(to_string(backend)),
                  target,
                  protocols[p],
                  threads,
                  workload.name,
                  items,
                  filter_layout.bit_count,
                  filter_layout.hash_count,
                  operation.name,
                  1e9 / ns,
                  ns,
                  0};
          if (backend == Backend::kCuda) {
            row.ceiling_ns = 1e9 / copy_rate;
            row.ceiling_counts = "one digest's pinned host-to-device copy";
            row.beats_why = kWhyCopy;
          } else {
            row.ceiling_ns = reads * line_ns;
            row.ceiling_counts = counts;
            row.beats_why = operation.kind == OpKind::kBuild ? kWhyBuild
                            : operation.batch == 1           ? kWhyLatency
                                                             : kWhyQuery;
          }
          row.fraction_of_ceiling = row.ceiling_ns / ns;
          row.spread = spread(times[at]);
          if (operation.kind != OpKind::kBuild) {
            row.batch = operation.batch == 0 ? items : std::min(operation.batch, items);
          }
          if (!p50s[at].empty()) {
            row.p50_ns = median(p50s[at]);
            row.p99_ns = median(p99s[at]);
          }
          row.has_filter = true;
          row.expected_item_count = spec.expected_item_count;
          row.target_fpp = spec.target_fpp;
          row.fill_ratio = fill;
          row.estimated_fpp = estimated_fpp;
          if (operation.kind == OpKind::kAbsent) row.false_positives = maybes[at];
          if (operation.kind == OpKind::kInput) row.maybe_answers = maybes[at];
          rows.push_back(std::move(row));
        }
      }
    }
  }
  return {};
}

// Marks of the table and the footnotes they point to.
constexpr const char* kBeatsMark = "^";
constexpr const char* kSpreadMark = "!";

std::string ns_text(double ns) {
  char text[32];
  std::snprintf(text, sizeof text, ns < 10 ? "%.2f" : ns < 100 ? "%.1f" : "%.0f", ns);
  return text;
}

void print_table(const std::vector<Row>& rows, bool batch_column) {
  std::printf("%-8s %-8s %-12s %5s %7s %-14s", "scen", "backend", "target", "proto", "threads",
              "operation");
  if (batch_column) std::printf(" %8s", "batch");
  std::printf(" %12s %10s %9s %7s  %s\n", "items/s", "ns/item", "ceiling", "spread",
              "ceiling ns (what it counts)");
  bool any_beats = false;
  bool any_spread = false;
  bool any_latency = false;
  for (const auto& row : rows) {
    const std::string protocol = row.protocol == 0 ? "-" : std::to_string(row.protocol);
    char spread[16] = "      - ";
    if (row.spread >= 0) {
      std::snprintf(spread, sizeof spread, "%6.0f%%%s", 100.0 * row.spread,
                    row.high_spread() ? kSpreadMark : " ");
    }
    std::printf("%-8s %-8s %-12s %5s %7u %-14s", row.scenario.c_str(), row.backend.c_str(),
                row.target.substr(0, 12).c_str(), protocol.c_str(), row.threads,
                row.operation.c_str());
    if (batch_column) {
      std::printf(" %8s", row.batch == 0 ? "-" : std::to_string(row.batch).c_str());
    }
    std::printf(" %12s %10.2f %8.0f%%%s%s  %s ns (%s)", si_rate(row.items_per_second).c_str(),
                row.ns_per_item, 100.0 * row.fraction_of_ceiling,
                row.beats_ceiling() ? kBeatsMark : " ", spread, ns_text(row.ceiling_ns).c_str(),
                row.ceiling_counts.c_str());
    if (row.p50_ns >= 0) {
      std::printf("; latency p50 %s ns, p99 %s ns", ns_text(row.p50_ns).c_str(),
                  ns_text(row.p99_ns).c_str());
      any_latency = true;
    }
    std::printf("\n");
    any_beats = any_beats || row.beats_ceiling();
    any_spread = any_spread || row.high_spread();
  }
  if (any_beats) {
    // One footnote per reason, in the order the rows first give it.
    std::vector<std::string> reasons;
    for (const auto& row : rows) {
      if (row.beats_ceiling() && std::ranges::find(reasons, row.beats_why) == reasons.end()) {
        reasons.push_back(row.beats_why);
      }
    }
    std::printf("%s over 100%% of its ceiling: the ceiling is a model, not a bound.\n", kBeatsMark);
    for (const auto& why : reasons) std::printf("  %s.\n", why.c_str());
  }
  if (any_spread) {
    std::printf(
        "%s spread over %.0f%%: (slowest - fastest) / median of the row's runs; its median "
        "alone is not to be trusted (a busy machine, or a short row): rerun with more "
        "--repetitions or on an idle machine, and compare rows of one run.\n",
        kSpreadMark, 100 * kHighSpread);
  }
  if (any_latency) {
    std::printf(
        "latency: single-digest calls (--batch 1), each timed (one clock read included); the "
        "median over the runs of each run's 50th and 99th percentile call.\n");
  }
}

// Which Highway target the simd rows say is fastest here, against the one
// in use (chosen automatically as the best this CPU runs, or by
// ABF_SIMD_TARGET): over the rows both ran, the geometric mean of the time
// ratio. The advice printed and its JSON.
struct TargetAdvice {
  std::string text;
  nlohmann::json json;
};

TargetAdvice target_advice(const std::vector<Row>& rows,
                           const std::vector<std::string>& measured_targets) {
  if (measured_targets.empty()) return {};
  const std::string chosen = simd_target_name();
  const char* environment = std::getenv("ABF_SIMD_TARGET");
  const bool by_environment = environment != nullptr && *environment != '\0';
  const std::string how = by_environment ? "chosen by ABF_SIMD_TARGET"
                                         : "chosen automatically: the best this CPU runs in "
                                           "Highway's order, not by a measurement";
  nlohmann::json json = {{"in_use", chosen},
                         {"chosen_by", by_environment ? "ABF_SIMD_TARGET" : "automatic"},
                         {"timed", measured_targets},
                         {"fastest", nullptr},
                         {"faster_than_in_use", false}};
  if (measured_targets.size() == 1) {
    const std::string text =
        measured_targets.front() == chosen
            ? "SIMD target " + chosen + " (" + how +
                  ") was the only one timed: --simd-target all times every target this CPU "
                  "runs and says which is fastest here."
            : "SIMD target " + measured_targets.front() +
                  " was the only one timed; the one in "
                  "use otherwise is " +
                  chosen + " (" + how + ").";
    json["message"] = text;
    return {text, json};
  }
  // The simd rows of each target, keyed by what they measured.
  const auto key_of = [](const Row& row) {
    return row.scenario + "/" + std::to_string(row.protocol) + "/" + std::to_string(row.threads) +
           "/" + row.operation + "/" + std::to_string(row.batch);
  };
  struct Timed {
    std::string key;
    double ns;
    double spread;
  };
  std::vector<Timed> chosen_rows;
  for (const Row& row : rows) {
    if (row.backend == "simd" && row.target == chosen) {
      chosen_rows.push_back({key_of(row), row.ns_per_item, row.spread});
    }
  }
  if (chosen_rows.empty()) {
    const std::string text = "SIMD target in use, " + chosen + " (" + how +
                             "), was not timed: add it to --simd-target to compare.";
    json["message"] = text;
    return {text, json};
  }
  std::string fastest = chosen;
  double fastest_ratio = 1;
  std::size_t fastest_wins = 0;
  std::size_t fastest_rows = 0;
  double fastest_noise = 0;
  std::size_t fastest_noisy_rows = 0;  // of the rows compared (both targets'), spread > 20%
  std::string runner_up;
  double runner_up_ratio = 0;
  for (const std::string& target : measured_targets) {
    if (target == chosen) continue;
    double log_sum = 0;
    std::size_t compared = 0;
    std::size_t wins = 0;
    std::vector<double> spreads;
    for (const Row& row : rows) {
      if (row.backend != "simd" || row.target != target) continue;
      const auto key = key_of(row);
      const auto match =
          std::ranges::find_if(chosen_rows, [&](const Timed& c) { return c.key == key; });
      if (match == chosen_rows.end() || match->ns <= 0 || row.ns_per_item <= 0) continue;
      log_sum += std::log(row.ns_per_item / match->ns);
      ++compared;
      spreads.push_back(std::max(0.0, row.spread));
      spreads.push_back(std::max(0.0, match->spread));
      wins += row.ns_per_item < match->ns ? 1 : 0;
    }
    if (compared == 0) continue;
    const double ratio = std::exp(log_sum / static_cast<double>(compared));
    if (ratio < fastest_ratio) {
      fastest = target;
      fastest_ratio = ratio;
      fastest_wins = wins;
      fastest_rows = compared;
      fastest_noise = median(spreads);
      fastest_noisy_rows = static_cast<std::size_t>(
          std::ranges::count_if(spreads, [](double value) { return value > kHighSpread; }));
    }
    if (runner_up.empty() || ratio < runner_up_ratio) {
      runner_up = target;
      runner_up_ratio = ratio;
    }
  }
  char ratio_text[32];
  std::string text;
  json["fastest"] = fastest;
  if (fastest != chosen) {
    // Settled: no row compared is flagged, and the gain passes their
    // median spread and 3%.
    const bool settled =
        fastest_noisy_rows == 0 && 1 - fastest_ratio >= std::max(0.03, fastest_noise);
    std::snprintf(ratio_text, sizeof ratio_text, "%.2f", fastest_ratio);
    text =
        "SIMD target " + fastest + " measured faster than " + chosen + " (" + how + ") on " +
        std::to_string(fastest_wins) + " of the " + std::to_string(fastest_rows) +
        " rows both ran (geometric mean " + ratio_text +
        "x its time). To use it: "
        "ABF_SIMD_TARGET=" +
        fastest + " for any abf command (e.g. ABF_SIMD_TARGET=" + fastest +
        " abf query ...), or --simd-target " + fastest + " for abf bench." +
        (!settled ? " (Not settled: " +
                        (fastest_noisy_rows > 0 ? std::to_string(fastest_noisy_rows) +
                                                      " of the rows compared have spreads over 20%"
                                                : std::string("within the rows' spread or 3%")) +
                        "; rerun with more --repetitions, on an idle machine, before choosing.)"
                  : "");
    json["settled"] = settled;
    json["faster_than_in_use"] = true;
    json["time_ratio"] = fastest_ratio;
    json["rows_faster"] = fastest_wins;
    json["rows_compared"] = fastest_rows;
  } else {
    std::snprintf(ratio_text, sizeof ratio_text, "%.2f", runner_up_ratio);
    text = "SIMD target " + chosen + " (" + how + ") was the fastest of the " +
           std::to_string(measured_targets.size()) + " timed" +
           (runner_up.empty() ? std::string(".")
                              : "; the next, " + runner_up + ", took " + ratio_text +
                                    "x its time (geometric mean of the rows both ran).");
    if (!runner_up.empty()) json["time_ratio"] = runner_up_ratio;
  }
  json["message"] = text;
  return {text, json};
}
int run_bench(const BenchOptions& options) {
  std::vector<Backend> backends;
  if (options.backend == "all") {
    for (const auto& info : list_backends()) {
      if (info.available) backends.push_back(info.backend);
    }
  } else {
    auto parsed = parse_backend(options.backend);
    if (!parsed) return report("bench", parsed.error());
    auto resolved = resolve_backend(*parsed, kBatch);
    if (!resolved) return report("bench", resolved.error());
    backends = {*resolved};
  }
  // The SIMD engine once per target asked for, in the order listed.
  std::vector<BenchCase> cases;
  for (const Backend backend : backends) {
    if (backend != Backend::kSimd || options.simd_targets.empty()) {
      cases.push_back({backend, ""});
      continue;
    }
    std::vector<std::string> targets;
    if (options.simd_targets == "all") {
      targets = simd_compiled_targets();
    } else {
      // Each name (spaces around it dropped, any case; "best": the best
      // this CPU runs) checked by choosing it and recorded as the target
      // it chose, once; then the target in use again.
      const std::string in_use = simd_target_name();
      std::istringstream names(options.simd_targets);
      for (std::string name; std::getline(names, name, ',');) {
        const auto first = name.find_first_not_of(" \t");
        if (first == std::string::npos) continue;
        name = simd_target_spelling(name.substr(first, name.find_last_not_of(" \t") - first + 1));
        if (auto known = use_simd_target(name); !known) {
          return usage_error("bench", "--simd-target: " + known.error().message);
        }
        std::string chosen = simd_target_name();
        if (std::ranges::find(targets, chosen) == targets.end()) {
          targets.push_back(std::move(chosen));
        }
      }
      if (auto used = use_simd_target(in_use); !used) return report("bench", used.error());
      if (targets.empty()) {
        return usage_error("bench", "--simd-target '" + options.simd_targets +
                                        "' names no target: all, best, or names such as AVX2 "
                                        "(`abf --version` lists this CPU's)");
      }
    }
    for (auto& target : targets) cases.push_back({backend, std::move(target)});
  }
  if (options.simd_targets_given &&
      std::ranges::none_of(cases, [](const BenchCase& c) { return !c.simd_target.empty(); })) {
    return usage_error("bench", "--simd-target measures the simd backend, which --backend " +
                                    options.backend + " leaves out");
  }
  // The targets the simd rows run on, for the header and the JSON's top level.
  std::vector<std::string> measured_targets;
  for (const BenchCase& c : cases) {
    if (c.backend == Backend::kSimd) {
      measured_targets.push_back(c.simd_target.empty() ? simd_target_name() : c.simd_target);
    }
  }
  std::string measured_list;
  for (const auto& target : measured_targets) {
    measured_list += (measured_list.empty() ? "" : ", ") + target;
  }
  // "all", or a comma list of versions (checked by the option), each once,
  // in the order given: the rows of each are measured interleaved.
  std::vector<std::uint32_t> protocols;
  if (options.protocol == "all") {
    protocols = {probe::kProtocolUnkeyed, probe::kProtocolKeyed, blocked::kProtocolBlocked,
                 blocked::kProtocolBlockedKeyed};
  } else {
    std::size_t at = 0;
    while (at <= options.protocol.size()) {
      const std::size_t comma = std::min(options.protocol.find(',', at), options.protocol.size());
      const auto version =
          static_cast<std::uint32_t>(std::stoul(options.protocol.substr(at, comma - at)));
      if (std::ranges::find(protocols, version) == protocols.end()) protocols.push_back(version);
      at = comma + 1;
    }
  }
  std::vector<unsigned> thread_counts;
  if (options.threads != 0) {
    thread_counts = {options.threads};
  } else {
    thread_counts = {1};
    if (hardware_threads() > 1) thread_counts.push_back(hardware_threads());
  }
  double copy_rate = 0;
  if (std::ranges::find(backends, Backend::kCuda) != backends.end()) {
    auto bandwidth = cuda_copy_bandwidth();
    if (!bandwidth) return report("bench", bandwidth.error());
    copy_rate = *bandwidth / sizeof(Digest);
  }
  // The workloads: the scenarios, or --items' one filter, or --snapshot's.
  std::optional<Filter> snapshot;
  std::vector<Digest> input;
  std::vector<Workload> workloads;
  if (!options.snapshot.empty()) {
    if (options.snapshot != "-") {
      auto is_set = names_filter_set(options.snapshot);
      if (!is_set) return report("bench", is_set.error());
      if (*is_set) {
        return report("bench", Error{ErrorCode::kInvalidArgument,
                                     "--snapshot " + options.snapshot +
                                         ": a filter-set manifest; bench times one snapshot "
                                         "(give one of its shard files)"});
      }
    }
    auto key = key_from_option(options.key_file);
    if (!key) return report("bench", key.error());
    LoadOptions load_options;
    load_options.key = std::move(*key);
    auto loaded = load_snapshot_argument(options.snapshot, load_options);
    if (!loaded) return report("bench", loaded.error());
    snapshot = std::move(*loaded);
    Workload workload{"snapshot", snapshot->expected_item_count(), &*snapshot, nullptr};
    if (!options.input.empty()) {
      auto format = parse_input_format(options.input_format);
      if (!format) return report("bench", format.error());
      auto reader = DigestReader::open(options.input, *format);
      if (!reader) return report("bench", reader.error());
      auto all = reader->read_all();
      if (!all) return report("bench", all.error());
      if (all->empty()) {
        return report("bench", Error{ErrorCode::kInvalidArgument,
                                     "--input " + options.input + ": no digests to time"});
      }
      input = std::move(*all);
      workload.input = &input;
    }
    workloads.push_back(workload);
  } else if (options.items != 0) {
    if (auto fits = choose_layout({options.items, options.fpp}); !fits) {
      char fpp[32];
      std::snprintf(fpp, sizeof fpp, "%g", options.fpp);
      return usage_error("bench", "--items " + std::to_string(options.items) + " at --fpp " + fpp +
                                      ": " + fits.error().message);
    }
    workloads.push_back({"custom", options.items, nullptr, nullptr});
  } else {
    for (const auto& scenario : kScenarios) {
      if (options.scenario != "all" && options.scenario != scenario.name) continue;
      workloads.push_back({scenario.name, scenario.n, nullptr, nullptr});
    }
  }
  // --batch sizes in the order given, each once.
  std::vector<std::uint64_t> batches;
  for (const std::uint64_t size : options.batches) {
    if (std::ranges::find(batches, size) == batches.end()) batches.push_back(size);
  }
  std::vector<Row> rows;
  std::vector<std::string> notes;
  for (const auto& workload : workloads) {
    if (!options.json) {
      const double p = workload.snapshot != nullptr ? workload.snapshot->target_fpp() : options.fpp;
      std::fprintf(stderr, "abf bench: %s (n = %s, p = %g)...\n", workload.name.c_str(),
                   with_commas(workload.n).c_str(), p);
    }
    if (auto done = run_workload(workload, protocols, cases, thread_counts, options.repetitions,
                                 options.fpp, batches, copy_rate, rows, notes);
        !done) {
      return report("bench", done.error());
    }
  }
  const TargetAdvice advice = target_advice(rows, measured_targets);
  const std::string cpu = cpu_name();
  const std::string family_model = cpu_family_model();
  const std::string flags = cpu_vector_flags();
  if (options.json) {
    nlohmann::json results = nlohmann::json::array();
    for (const auto& row : rows) {
      nlohmann::json protocol = nullptr;  // the ceiling rows have none
      if (row.protocol != 0) protocol = row.protocol;
      results.push_back({{"backend", row.backend},
                         {"target", row.target},
                         {"cpu", cpu},
                         {"cpu_family_model", family_model},
                         {"cpu_flags", flags},
                         {"hash_protocol_version", protocol},
                         {"threads", row.threads},
                         {"scenario", row.scenario},
                         {"items", row.items},
                         {"bit_count", row.bit_count},
                         {"hash_count", row.hash_count},
                         {"operation", row.operation},
                         {"items_per_second", row.items_per_second},
                         {"ns_per_item", row.ns_per_item},
                         {"fraction_of_ceiling", row.fraction_of_ceiling},
                         {"spread", row.spread >= 0 ? nlohmann::json(row.spread) : nullptr},
                         {"high_spread", row.high_spread()},
                         {"ceiling_ns", row.ceiling_ns},
                         {"ceiling_counts", row.ceiling_counts},
                         {"beats_ceiling", row.beats_ceiling()}});
      auto& json_row = results.back();
      if (row.beats_ceiling()) json_row["beats_ceiling_why"] = row.beats_why;
      if (row.batch != 0) json_row["batch"] = row.batch;
      if (row.p50_ns >= 0) {
        json_row["latency_p50_ns"] = row.p50_ns;
        json_row["latency_p99_ns"] = row.p99_ns;
      }
      if (row.maybe_answers >= 0) json_row["maybe_answers"] = row.maybe_answers;
      if (row.prefetch_distance >= 0) json_row["prefetch_distance"] = row.prefetch_distance;
      if (row.has_filter) {
        json_row["expected_item_count"] = row.expected_item_count;
        json_row["target_fpp"] = row.target_fpp;
        json_row["bits_per_key"] =
            static_cast<double>(row.bit_count) / static_cast<double>(row.expected_item_count);
        json_row["fill_ratio"] = row.fill_ratio;
        json_row["estimated_fpp"] = row.estimated_fpp;
      }
      if (row.false_positives >= 0) {
        json_row["false_positives"] = row.false_positives;
        json_row["observed_fpp"] =
            static_cast<double>(row.false_positives) / static_cast<double>(row.items);
      }
    }
    const nlohmann::json out = {{"cpu", cpu},
                                {"cpu_family_model", family_model},
                                {"cpu_flags", flags},
                                {"simd_target", simd_target_name()},
                                {"simd_targets", measured_targets},
                                {"hardware_threads", hardware_threads()},
                                {"repetitions", options.repetitions},
                                {"simd_target_advice", advice.json},
                                {"notes", notes},
                                {"results", results}};
    std::cout << out.dump(2) << '\n';
  } else {
    const std::string simd_line =
        measured_targets.empty() || measured_list == simd_target_name()
            ? "SIMD target: " + simd_target_name()
            : "SIMD targets measured: " + measured_list + " (in use otherwise: " +
                  simd_target_name() + ")";
    std::printf("cpu: %s (family/model %s; %s), %s\n", cpu.c_str(), family_model.c_str(),
                flags.empty() ? "no AVX2" : flags.c_str(), simd_line.c_str());
    print_table(rows, !options.batches.empty());
    for (const auto& note : notes) std::printf("note: %s\n", note.c_str());
    if (!advice.text.empty()) std::printf("%s\n", advice.text.c_str());
  }
  return kExitOk;
}

Command add_bench_command(CLI::App& root) {
  auto options = std::make_shared<BenchOptions>();
  CLI::App* app =
      root.add_subcommand("bench", "Measure build and query throughput of every backend here");
  app->footer(
      "Scenarios (p = 0.01 or --fpp, uniformly random digests): l2 n = 100,000;\n"
      "llc n = 10,000,000; dram n = 100,000,000. Operations: build (min(n, 4Mi) members\n"
      "into a fresh filter of the scenario's size), query_absent and query_present\n"
      "(min(n, 4Mi) digests; a smaller batch is asked once untimed, then again until\n"
      "4Mi digests are answered, so a cache-sized filter is timed from its cache), each\n"
      "the median of --repetitions runs. random_line rows are the machine's ceiling:\n"
      "independent random 64-byte-line reads over a buffer of the filter's size,\n"
      "allocated like the filter, with software prefetch the best of 0..1024 reads ahead\n"
      "(prefetch_distance). Each row's last column is its ceiling in ns per item and what it\n"
      "counts (JSON ceiling_ns, ceiling_counts): lines needed (build and present k, absent\n"
      "1/(1-fill), a one-line filter 1) x ns per line; `ceiling` = that / ns per item.\n"
      "It is a model, not a bound: a row over 100% (marked ^, JSON beats_ceiling) is\n"
      "footnoted with why (e.g. the build buckets its writes). random_load rows (plain\n"
      "random 64-bit loads, no prefetch) are the ceiling of earlier versions, kept for\n"
      "comparison; their `ceiling` column is line / load time. `spread` (JSON spread) is\n"
      "the run-to-run spread of a row: (slowest - fastest) / median of its --repetitions\n"
      "runs (none, JSON null, for a row measured once: --repetitions 1, and h2d_copy);\n"
      "over 20% it is marked ! (JSON high_spread) and footnoted.\n"
      "For cuda rows the ceiling is the h2d_copy row instead: digests per second a pinned\n"
      "host-to-device copy carries (their digests start in host memory).\n"
      "Without --threads every case runs at 1 thread and at every core. --protocol 2 runs\n"
      "keyed filters (hashProtocolVersion 2: SipHash-2-4-128 of every digest, under a fixed\n"
      "benchmark key); all runs both, interleaved, so their ratio is measured side by side.\n"
      "--json rows of a filter also carry its bits_per_key, fill_ratio and estimated_fpp;\n"
      "query_absent rows the observed_fpp (false_positives of the non-members asked).\n"
      "--simd-target runs the simd rows once per Highway target named (comma-separated, in\n"
      "any case; best: the best this CPU runs; all: every target it runs, as in `abf\n"
      "--version`), interleaved, so an AVX-512 machine measures its AVX2 path too.\n"
      "ABF_SIMD_TARGET=AVX2 (one target) runs any command on that target. JSON rows name\n"
      "the cpu, its family/model and vector flags, and the target each ran on; the top\n"
      "level lists simd_targets, the targets measured.\n"
      "After the table: which SIMD target was fastest of those timed (geometric mean over\n"
      "the rows they all ran) and, when it is not the one in use, how to choose it\n"
      "(ABF_SIMD_TARGET=NAME, --simd-target NAME); with one target timed, that only it\n"
      "was (JSON simd_target_advice).\n"
      "--items N times one filter of n = N (scenario `custom`) instead of the scenarios.\n"
      "--snapshot FILE times your own filter (scenario `snapshot`, its n, p and protocol;\n"
      "no build rows): with --input DIGESTS, one query_input row asks your digests (read as\n"
      "abf query reads them, held in memory: 32 bytes a digest; its ceiling counts the\n"
      "lines of the maybe and absent answers it got); without, query_absent asks generated\n"
      "digests and query_present those of up to 16Mi generated ones the filter answers\n"
      "maybe (its false positives probe every line a member does).\n"
      "--batch 1,64,1024 times each query row once per call size (JSON batch: digests per\n"
      "query() call, cycling through the set until 4Mi are answered); batch 1 rows are\n"
      "latencies: each call is timed, and they add p50 and p99 (JSON latency_p50_ns,\n"
      "latency_p99_ns; one clock read included).\n"
      "scripts/plots draws PNGs from one or more --json outputs (one per machine).\n"
      "Examples:\n"
      "  abf bench --scenario l2\n"
      "  abf bench --scenario llc --protocol all --threads 1\n"
      "  abf bench --scenario dram --backend simd --threads 1 --json\n"
      "  abf bench --backend simd --simd-target all --threads 1\n"
      "  abf bench --scenario l2 --fpp 0.001 --repetitions 1 --json > l2-p0.001.json\n"
      "  abf bench --items 2e6 --backend simd --threads 1\n"
      "  abf bench --snapshot c.abf --input candidates.txt --backend simd --threads 1\n"
      "  abf bench --scenario llc --backend simd --threads 1 --batch 1,64,1024,16384");
  auto* scenario =
      app->add_option("--scenario", options->scenario, "l2, llc, dram or all (default all)")
          ->check(CLI::IsMember({"l2", "llc", "dram", "all"}));
  std::vector<std::string> backend_choices{"all"};
  for (const auto& name : backend_names()) backend_choices.push_back(name);
  std::string backend_help = "all (default: every backend that can run here)";
  for (const auto& name : backend_names()) backend_help += ", " + name;
  app->add_option("--backend", options->backend, backend_help)
      ->check(CLI::IsMember(backend_choices));
  auto* protocol =
      app->add_option("--protocol", options->protocol,
                      "Hash protocols to measure, interleaved in one run: a comma list of 1\n"
                      "(classic, default), 2 (classic keyed: SipHash per digest), 3 (blocked: one\n"
                      "line a digest), 4 (blocked keyed), or all")
          ->check([](const std::string& text) -> std::string {
            if (text == "all") return {};
            std::size_t at = 0;
            while (at <= text.size()) {
              const std::size_t comma = std::min(text.find(',', at), text.size());
              const std::string item = text.substr(at, comma - at);
              if (item != "1" && item != "2" && item != "3" && item != "4") {
                return "--protocol takes a comma list of 1, 2, 3 and 4, or all; got '" + text + "'";
              }
              at = comma + 1;
            }
            return {};
          });
  app->add_option("--repetitions", options->repetitions, "Timed runs per case (default 5)")
      ->transform(count_validator(1, 1000));
  auto* fpp =
      app->add_option("--fpp,-p", options->fpp,
                      "Target false-positive rate of every scenario's filter (default 0.01)")
          ->check(real_validator(1e-9, 0.5, "the false-positive rate of every scenario"));
  app->add_flag("--json", options->json, "Print one JSON object instead of a table");
  app->add_option("--simd-target", options->simd_targets,
                  "Highway targets of the simd rows: all, best, or names such as AVX3_DL,AVX2\n"
                  "(default: the best this CPU runs, or ABF_SIMD_TARGET)")
      ->each([options](const std::string&) { options->simd_targets_given = true; });
  // Not add_threads_option: the default here is two thread counts.
  app->add_option("--threads", options->threads,
                  "Worker threads of every case (default: each case at 1 thread and at every\n"
                  "core)")
      ->transform(count_validator(1, 4096));
  auto* items =
      app->add_option("--items,-n", options->items,
                      "Time one filter of this n (scenario custom) instead of the scenarios")
          ->transform(count_validator(1, kMaxSetExpectedItemCount))
          ->excludes(scenario);
  auto* snapshot =
      app->add_option("--snapshot,-s", options->snapshot,
                      "Time this ABF1 snapshot (- for standard input) instead of the scenarios:\n"
                      "its queries, no build")
          ->excludes(scenario)
          ->excludes(items)
          ->excludes(protocol)
          ->excludes(fpp);
  auto* input = app->add_option("--input,-i", options->input,
                                "With --snapshot: the digests to ask it, read as abf query reads\n"
                                "them (- for standard input)")
                    ->needs(snapshot);
  app->add_option("--input-format,-f", options->input_format, "hex or bin (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}))
      ->needs(input);
  add_key_file_option(*app, options->key_file, "time a keyed snapshot");
  app->get_option("--key-file")->needs(snapshot);
  app->add_option("--batch", options->batches,
                  "Digests per query call, a comma list (e.g. 1,64,1024,16384): each query row\n"
                  "once per size; 1 adds latency percentiles (default: the whole set a call)")
      ->delimiter(',')
      ->transform(count_validator(1, kBatch));
  return {app, [options] { return run_bench(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(70, add_bench_command);

}  // namespace abf::cli
