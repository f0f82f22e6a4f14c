// Internal: the engine table, the one seam between the library and its probe
// engines. An engine is a row of data and function pointers (name, kind,
// rank, fallback, available, query, lane); each engine's folder defines its
// row and registers it (abf_add_engine in its CMakeLists.txt; core's
// CMakeLists.txt turns the registered rows into the generated list
// engine_rows.cpp). One function, choose_engine, picks the row a request
// runs on, and one, run_with_fallback, runs it. Filter::query, FilterSet::query
// and FilterBuilder::add know no engine by name, and the CLI takes the names
// from the table (abf::list_backends). Adding an engine is a folder that
// defines its row and registers it, and its add_subdirectory in the
// top-level CMakeLists.txt; core changes nothing.
//
// core/engine/ is everything an engine may include from core besides the
// public headers (this file, and parallel.hpp for the host engines'
// threading); the engines' CMake targets (simd/, cuda/) see no other core
// folder, so an engine reaching into core/src does not compile.
//
// Not installed; includes no Highway or CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/fingerprint.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"

namespace abf::detail {

// What a request is, for the automatic choice.
struct Workload {
  std::size_t batch = 0;  // digests in the call
  // For a query: the filter's bytes (bit_count / 8). 0 for a build.
  std::uint64_t query_filter_bytes = 0;
};

// One engine's share of one filter's build, opened by the engine's
// open_lane on the builder's bitset (which outlives it). It may set bits in
// those words at once, or hold them (bucket buffers, private or device
// bitsets) until finish.
class BuildLane {
 public:
  virtual ~BuildLane() = default;
  // Inserts a chunk. On failure some of its bits may be set already: bits of
  // digests the caller then inserts elsewhere, harmless.
  virtual Result<void> insert(std::span<const Digest> digests) = 0;
  // insert, and `sum` = the content fingerprint of the chunk (equal to
  // content_fingerprint_one_by_one). By default insert and then
  // content_fingerprint_of (filter.cpp); a lane may sum it in the same pass.
  virtual Result<void> insert_fingerprinted(std::span<const Digest> digests,
                                            ContentFingerprint& sum);
  // Sets every bit still held elsewhere in the builder's words.
  virtual Result<void> finish() = 0;
};

// Where an engine runs. A host engine answers on the current TBB arena's
// threads and a batch of any size suits it; a device engine (a GPU) wants
// large batches, one after the other (FilterSet::query hands it big blocks
// serially).
enum class EngineKind { kHost, kDevice };

// An engine's content fingerprint of a block of digests (Engine::fingerprint).
using FingerprintFn = ContentFingerprint (*)(std::span<const Digest> digests) noexcept;

struct Engine {
  std::string_view name;     // what Backend::parse accepts
  std::string_view summary;  // one line for --help and `abf --version`
  EngineKind kind = EngineKind::kHost;
  // The row's place in the table: list_backends and --help go by ascending
  // rank (the reference first), an automatic choice asks the engines from
  // the highest rank (the most specialized) down. Unique.
  int rank = 0;
  // The engine an automatic choice runs when no engine prefers the
  // workload, and falls back to when its pick fails at run time (out of
  // device memory, a lost device). It must always run. One row says so.
  bool fallback = false;
  // Compiled in and runnable here.
  bool (*available)() noexcept;
  // What it runs on ("AVX3_ZEN4", a GPU's description), or why it cannot run.
  std::string (*detail)();
  // Whether an automatic choice takes this engine for the workload, asked of
  // the available engines by descending rank; null: never.
  bool (*auto_prefers)(const Workload&) noexcept;
  // Answers a batch, on the current TBB arena's threads (or a device).
  Result<void> (*query)(const Filter& filter, std::span<const Digest> digests,
                        std::span<Answer> answers);
  // Opens this engine's lane into `words` (scheme.bit_count() / 64 words).
  Result<std::unique_ptr<BuildLane>> (*open_lane)(const Scheme& scheme, std::uint64_t* words);
  // Frees memory kept for the next build or query (abf::release_cached_buffers).
  void (*release_caches)() noexcept;
  // The content fingerprint of a block of digests on the calling thread,
  // equal to content_fingerprint_one_by_one; ContentFingerprint::of (every
  // build sums one) calls the fallback row's when it has one; null: none.
  FingerprintFn fingerprint = nullptr;
};

// ContentFingerprint::of(span) without any engine: the library's XXH3-128 a
// digest at a time (fingerprint.cpp). The reference an engine's fingerprint
// is tested against.
ContentFingerprint content_fingerprint_one_by_one(std::span<const Digest> digests) noexcept;

// The rows the engine folders registered, in no particular order: the
// generated list (engine_rows.cpp, from abf_register_engine).
std::span<const Engine* const> registered_engines() noexcept;

// Every engine, by ascending rank (engine_table.cpp).
std::span<const Engine* const> engine_table() noexcept;
// The row named `name`, or null.
const Engine* find_engine(std::string_view name) noexcept;
// The row marked `fallback` (SIMD today).
const Engine& fallback_engine() noexcept;
// That row's fingerprint (null if it has none), found without the table:
// callable from any context, static destruction included.
FingerprintFn fallback_fingerprint() noexcept;

struct EngineChoice {
  const Engine* engine = nullptr;
  bool automatic = false;  // chosen by kAuto's rule, not by name (nor ABF_BACKEND)
};
// The one choice: ABF_BACKEND for a kAuto request, then a name (which must be
// available: kBackendUnavailable saying why), or the rule.
Result<EngineChoice> choose_engine(Backend requested, const Workload& workload);

// Runs `run(engine)` (a Result<void>) on the chosen engine. When an
// automatic choice fails at run time, runs it again on the fallback engine,
// which gives the same answers and sets the same bits; a choice by name (or
// by ABF_BACKEND) reports its engine's error as it is.
template <class Run>
Result<void> run_with_fallback(const EngineChoice& choice, Run&& run) {
  Result<void> done = run(*choice.engine);
  if (done || !choice.automatic) return done;
  const Engine& fallback = fallback_engine();
  if (choice.engine == &fallback) return done;
  return run(fallback);
}

// --- Per-filter engine state -------------------------------------------------

// What engines attach to one Filter and all its copies: at most one object
// per engine, made on first use, destroyed with the filter's last copy.
struct FilterAttachments {
  std::mutex mutex;
  std::vector<std::pair<const Engine*, std::shared_ptr<void>>> items;
};

struct FilterAccess {
  // The engine's object attached to `filter`, made by `make()` (a
  // Result<std::shared_ptr<T>>) on first use. Thread-safe; `make` runs under
  // the filter's lock, so two threads never make two.
  template <class T, class Make>
  static Result<std::shared_ptr<T>> attachment(const Filter& filter, const Engine& engine,
                                               Make&& make) {
    FilterAttachments& attachments = *filter.attachments_;
    std::lock_guard lock(attachments.mutex);
    for (const auto& [owner, item] : attachments.items) {
      if (owner == &engine) return std::static_pointer_cast<T>(item);
    }
    Result<std::shared_ptr<T>> made = make();
    if (made) attachments.items.emplace_back(&engine, *made);
    return made;
  }
};

}  // namespace abf::detail
