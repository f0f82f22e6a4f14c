// Internal: the engine table, the one seam between the library and its probe
// engines. An engine is a row of function pointers (name, available, query,
// insert, lane); the rows are registered in one list (engine_table.cpp) and
// one function, choose_engine, picks the row a request runs on. Filter::query
// and FilterBuilder::add know no engine by name, and the CLI takes the names
// from the table (abf::list_backends). Adding an engine is one file that
// defines its row, and one line in the list.
//
// Not installed; includes no Highway, TBB or CUDA header.
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
  // Sets every bit still held elsewhere in the builder's words.
  virtual Result<void> finish() = 0;
};

// The single-threaded host insert kernel of an engine.
using InsertKernel = void (*)(const probe::Scheme&, std::uint64_t*, const Digest*,
                              std::size_t) noexcept;

struct Engine {
  std::string_view name;     // what Backend::parse accepts
  std::string_view summary;  // one line for --help and `abf --version`
  // Compiled in and runnable here.
  bool (*available)() noexcept;
  // What it runs on ("AVX3_ZEN4", a GPU's description), or why it cannot run.
  std::string (*detail)();
  // Whether an automatic choice takes this engine for the workload, asked of
  // the available engines from the table's last row to its first; null:
  // never. With no taker the choice is fallback_engine().
  bool (*auto_prefers)(const Workload&) noexcept;
  // Answers a batch, on the current TBB arena's threads (or a device).
  Result<void> (*query)(const Filter& filter, std::span<const Digest> digests,
                        std::span<Answer> answers);
  // The engine's single-threaded host kernel (the parallel build strategies
  // run it per shard); null for an engine with no host kernel.
  InsertKernel insert;
  // Opens this engine's lane into `words` (scheme.bit_count() / 64 words).
  Result<std::unique_ptr<BuildLane>> (*open_lane)(const Scheme& scheme, std::uint64_t* words);
  // Frees memory kept for the next build or query (abf::release_cached_buffers).
  void (*release_caches)() noexcept;
};

// Every engine, in registration order (engine_table.cpp).
std::span<const Engine* const> engine_table() noexcept;
// The row named `name`, or null.
const Engine* find_engine(std::string_view name) noexcept;
// The engine an automatic choice falls back to when its pick fails at run
// time (out of device memory, a lost device): SIMD, which always runs.
const Engine& fallback_engine() noexcept;

struct EngineChoice {
  const Engine* engine = nullptr;
  bool automatic = false;  // chosen by kAuto's rule, not by name (nor ABF_BACKEND)
};
// The one choice: ABF_BACKEND for a kAuto request, then a name (which must be
// available: kBackendUnavailable saying why), or the rule.
Result<EngineChoice> choose_engine(Backend requested, const Workload& workload);

// The rows, defined beside their engines.
extern const Engine kScalarEngine;  // core/src/engine_scalar.cpp
extern const Engine kSimdEngine;    // core/src/engine_simd.cpp
extern const Engine kCudaEngine;    // cuda/src/engine.cpp (cuda/src/unavailable.cpp without CUDA)

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
