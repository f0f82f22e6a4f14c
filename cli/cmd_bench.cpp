// abf bench: throughput of every backend on this machine, next to the
// machine's own random-load ceiling, so CPUs can be compared with one command.
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
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
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
  double fraction_of_ceiling = 0;       // of the random_line row (1 for the ceiling rows)
  std::int64_t prefetch_distance = -1;  // random_line: the best distance; -1 elsewhere
  // Of the --repetitions runs (spread() above); -1 for a row measured once
  // (--repetitions 1, and h2d_copy always): JSON null, "-" in the table.
  double spread = -1;
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
};

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

// Runs every operation of one scenario for the protocols, backends and
// thread counts. `copy_rate`: digests per second a pinned host-to-device copy
// carries, the ceiling of the CUDA rows (their digests start in host memory);
// 0 without CUDA.
Result<void> run_scenario(const Scenario& scenario, const std::vector<std::uint32_t>& protocols,
                          const std::vector<BenchCase>& cases,
                          const std::vector<unsigned>& thread_counts, unsigned repetitions,
                          double fpp, double copy_rate, std::vector<Row>& rows) {
  const BloomSpec spec{scenario.n, fpp};
  auto layout = choose_layout(spec);
  if (!layout) return std::unexpected(layout.error());
  const std::uint64_t batch = std::min(scenario.n, kBatch);

  // The filters the queries run against, one per protocol: all n members,
  // built once (SIMD, all cores, on the target in use before any case).
  apply_threads(0);
  const std::string target_in_use = simd_target_name();
  std::vector<Filter> filters;
  for (const std::uint32_t protocol : protocols) {
    auto builder = FilterBuilder::create(spec, build_options(protocol));
    if (!builder) return std::unexpected(builder.error());
    std::vector<Digest> chunk(kChunk);
    for (std::uint64_t begin = 0; begin < scenario.n; begin += kChunk) {
      const auto count =
          static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, scenario.n - begin));
      fill_digests(kMemberSeed, begin, {chunk.data(), count});
      if (auto added = builder->add({chunk.data(), count}, Backend::kSimd); !added) {
        return std::unexpected(added.error());
      }
    }
    auto finished = std::move(*builder).finish();
    if (!finished) return std::unexpected(finished.error());
    filters.push_back(std::move(*finished));
  }
  std::vector<Digest> present(batch), absent(batch);
  fill_digests(kMemberSeed, 0, present);
  fill_digests(kAbsentSeed, 0, absent);
  std::vector<Answer> answers(batch);

  RandomLoads ceiling(layout->bit_count / 64);
  RandomLines lines(layout->bit_count / 64);
  constexpr std::size_t kDistanceCount = std::size(RandomLines::kDistances);
  const char* kOperations[] = {"build", "query_absent", "query_present"};
  for (const unsigned threads : thread_counts) {
    apply_threads(threads);
    // An arena of exactly `threads`: the library splits a batch by the
    // arena's concurrency, which a global_control limit alone leaves at all
    // cores.
    tbb::task_arena arena(static_cast<int>(threads));
    // Repetitions interleave the protocols and cases (backends, SIMD
    // targets), so a burst of noise from other processes hits all of them
    // alike; the first round only warms up. times[(p * cases + b) * 3 +
    // operation].
    std::vector<double> load_times;
    std::vector<std::vector<double>> line_times(kDistanceCount);
    std::vector<std::vector<double>> times(protocols.size() * cases.size() * 3);
    // The false positives of each protocol and backend's last absent batch
    // (counted outside the timed region).
    std::vector<std::int64_t> false_positives(protocols.size() * cases.size(), 0);
    // Seconds of one query of `digests` (the batch): a batch below kBatch
    // (the l2 scenario's 100,000 digests, 0.3 ms) is asked once untimed and
    // then query_calls times in a row, so its time is the filter's from its
    // cache over a span like the random_line pass's, not one call's cold
    // start after the build (one call measured 5.6 ns a digest at l2, the
    // same call repeated 3.4-3.6 ns).
    const std::uint64_t query_calls = (kBatch + batch - 1) / batch;
    const auto timed_query = [&](const Filter& filter, Backend backend,
                                 std::span<const Digest> digests, Result<void>& done) {
      return arena.execute([&] {
        if (query_calls > 1) {
          done = filter.query(digests, answers, backend);
          if (!done) return 0.0;
        }
        const double seconds = seconds_of([&] {
          for (std::uint64_t call = 0; call < query_calls && done; ++call) {
            done = filter.query(digests, answers, backend);
          }
        });
        return seconds / static_cast<double>(query_calls);
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
        const Filter& filter = filters[p];
        for (std::size_t b = 0; b < cases.size(); ++b) {
          const Backend backend = cases[b].backend;
          if (!cases[b].simd_target.empty()) {
            if (auto used = use_simd_target(cases[b].simd_target); !used) {
              return std::unexpected(used.error());
            }
            benchmark_sink(simd_target_name().size());  // dispatch chosen outside the timing
          }
          // build: `batch` members into a fresh bitset of the scenario's
          // size, from create() to the finished Filter (lanes merged,
          // buckets applied).
          Result<void> done;
          const double build = arena.execute([&] {
            return seconds_of([&] {
              auto fresh = FilterBuilder::create(spec, build_options(protocols[p]));
              done = fresh ? fresh->add(present, backend)
                           : Result<void>(std::unexpected(fresh.error()));
              if (!done) return;
              auto built = std::move(*fresh).finish();
              if (built)
                benchmark_sink(*built);
              else
                done = std::unexpected(built.error());
            });
          });
          if (!done) return std::unexpected(done.error());
          const double query_absent = timed_query(filter, backend, absent, done);
          if (!done) return std::unexpected(done.error());
          if (rep == repetitions) {
            false_positives[p * cases.size() + b] =
                static_cast<std::int64_t>(std::ranges::count(answers, Answer::kMaybe));
          }
          const double query_present = timed_query(filter, backend, present, done);
          if (!done) return std::unexpected(done.error());
          if (rep > 0) {
            const std::size_t at = (p * cases.size() + b) * 3;
            times[at].push_back(build);
            times[at + 1].push_back(query_absent);
            times[at + 2].push_back(query_present);
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
    rows.push_back({"memory", "random_line", 0, threads, scenario.name, lines.reads(),
                    layout->bit_count, layout->hash_count, "random_line", 1e9 / line_ns, line_ns,
                    1.0, RandomLines::kDistances[best]});
    rows.back().spread = spread(line_times[best]);
    // The old ceiling, plain loads without prefetch, kept for continuity.
    rows.push_back({"memory", "random_load", 0, threads, scenario.name, ceiling.loads(),
                    layout->bit_count, layout->hash_count, "random_load", 1e9 / load_ns, load_ns,
                    load_ns == 0 ? 0 : line_ns / load_ns});
    rows.back().spread = spread(load_times);
    if (copy_rate > 0) {
      rows.push_back({"cuda", "h2d_copy", 0, threads, scenario.name, 0, layout->bit_count,
                      layout->hash_count, "h2d_copy", copy_rate, 1e9 / copy_rate, 1.0});
    }
    for (std::size_t p = 0; p < protocols.size(); ++p) {
      const Layout filter_layout = filters[p].info().layout();
      // A one-line filter reads or writes one line a digest, whichever the
      // operation.
      const bool one_line = blocked::is_blocked_protocol(protocols[p]);
      const double fill = filters[p].fill_ratio();
      const double estimated_fpp = filters[p].estimate_false_positive_rate();
      for (std::size_t b = 0; b < cases.size(); ++b) {
        const Backend backend = cases[b].backend;
        const std::string target =
            cases[b].simd_target.empty()
                ? (backend == Backend::kSimd ? target_in_use : target_of(backend))
                : cases[b].simd_target;
        for (std::size_t op = 0; op < 3; ++op) {
          const std::size_t at = (p * cases.size() + b) * 3 + op;
          const double ns = median(times[at]) * 1e9 / static_cast<double>(batch);
          // Random lines a digest reads: k to build or to confirm a member,
          // about 1 / (1 - fill) to rule out a non-member (it stops at its
          // first clear bit). The GPU's ceiling is the bus its digests cross
          // instead.
          const double reads =
              one_line ? 1.0 : (op == 1 ? 1.0 / (1.0 - fill) : filter_layout.hash_count);
          const double fraction =
              backend == Backend::kCuda ? 1e9 / ns / copy_rate : reads * line_ns / ns;
          rows.push_back({std::string(to_string(backend)), target, protocols[p], threads,
                          scenario.name, batch, filter_layout.bit_count, filter_layout.hash_count,
                          kOperations[op], 1e9 / ns, ns, fraction});
          Row& row = rows.back();
          row.spread = spread(times[at]);
          row.has_filter = true;
          row.expected_item_count = scenario.n;
          row.target_fpp = fpp;
          row.fill_ratio = fill;
          row.estimated_fpp = estimated_fpp;
          if (op == 1) row.false_positives = false_positives[p * cases.size() + b];
        }
      }
    }
  }
  return {};
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-6s %-8s %-12s %5s %7s %-14s %12s %10s %9s %7s\n", "scen", "backend", "target",
              "proto", "threads", "operation", "items/s", "ns/item", "ceiling", "spread");
  for (const auto& row : rows) {
    const std::string protocol = row.protocol == 0 ? "-" : std::to_string(row.protocol);
    char spread[16] = "      -";
    if (row.spread >= 0) std::snprintf(spread, sizeof spread, "%6.0f%%", 100.0 * row.spread);
    std::printf("%-6s %-8s %-12s %5s %7u %-14s %12s %10.2f %8.0f%% %s\n", row.scenario.c_str(),
                row.backend.c_str(), row.target.substr(0, 12).c_str(), protocol.c_str(),
                row.threads, row.operation.c_str(), si_rate(row.items_per_second).c_str(),
                row.ns_per_item, 100.0 * row.fraction_of_ceiling, spread);
  }
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
  std::vector<Row> rows;
  for (const auto& scenario : kScenarios) {
    if (options.scenario != "all" && options.scenario != scenario.name) continue;
    if (!options.json) {
      std::fprintf(stderr, "abf bench: %s (n = %s, p = %g)...\n", scenario.name,
                   with_commas(scenario.n).c_str(), options.fpp);
    }
    if (auto done = run_scenario(scenario, protocols, cases, thread_counts, options.repetitions,
                                 options.fpp, copy_rate, rows);
        !done) {
      return report("bench", done.error());
    }
  }
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
                         {"spread", row.spread >= 0 ? nlohmann::json(row.spread) : nullptr}});
      auto& json_row = results.back();
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
    print_table(rows);
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
      "(prefetch_distance); `ceiling` = lines needed (absent 1/(1-fill), present and\n"
      "build k) x ns per line / ns per item. random_load rows (plain random 64-bit loads,\n"
      "no prefetch) are the ceiling of earlier versions, kept for comparison; their\n"
      "`ceiling` column is line / load time. `spread` (JSON spread) is the run-to-run\n"
      "spread of a row: (slowest - fastest) / median of its --repetitions runs (none, JSON\n"
      "null, for a row measured once: --repetitions 1, and h2d_copy).\n"
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
      "scripts/plots draws PNGs from one or more --json outputs (one per machine).\n"
      "Examples:\n"
      "  abf bench --scenario l2\n"
      "  abf bench --scenario llc --protocol all --threads 1\n"
      "  abf bench --scenario dram --backend simd --threads 1 --json\n"
      "  abf bench --backend simd --simd-target all --threads 1\n"
      "  abf bench --scenario l2 --fpp 0.001 --repetitions 1 --json > l2-p0.001.json");
  app->add_option("--scenario", options->scenario, "l2, llc, dram or all (default all)")
      ->check(CLI::IsMember({"l2", "llc", "dram", "all"}));
  std::vector<std::string> backend_choices{"all"};
  for (const auto& name : backend_names()) backend_choices.push_back(name);
  std::string backend_help = "all (default: every backend that can run here)";
  for (const auto& name : backend_names()) backend_help += ", " + name;
  app->add_option("--backend", options->backend, backend_help)
      ->check(CLI::IsMember(backend_choices));
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
  return {app, [options] { return run_bench(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(70, add_bench_command);

}  // namespace abf::cli
