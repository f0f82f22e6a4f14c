// Probe engines. Every engine answers bit for bit as the scalar reference;
// they differ only in speed. One binary can run every engine it was built
// with, so tests and benchmarks compare them side by side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abf/error.hpp"

namespace abf {

// Names a probe engine. The engines themselves live in one table inside the
// library (core/src/engine_table.cpp; each engine's folder registers its
// row): scalar, simd and cuda today, in that order. A Backend is one of
// their names or "auto"; parse() accepts exactly the names the table holds,
// and list_backends() says which can run here.
//
//   auto    the fastest available engine for the work: CUDA for large
//           batches (queries: against large filters) when a device is
//           present, else SIMD (the rule: auto_prefers_cuda in
//           abf/cuda/controls.hpp; each engine's row says what it prefers). ABF_BACKEND
//           names an engine for every kAuto request of the process, exactly
//           as if it had been asked for by name.
//   scalar  the reference: one digest at a time, plain `%` (and OpenSSL's
//           SipHash for keyed filters); its builds run on the calling
//           thread alone, its queries split over the arena like the others'
//   simd    Highway batch engine, best target chosen at run time
//   cuda    NVIDIA GPU; kBackendUnavailable without a build or a device
class Backend {
 public:
  static const Backend kAuto;
  static const Backend kScalar;
  static const Backend kSimd;
  static const Backend kCuda;

  // "auto".
  constexpr Backend() noexcept = default;

  // "auto" or the name of an engine in the table; kInvalidArgument listing
  // the names otherwise.
  static Result<Backend> parse(std::string_view name);

  constexpr std::string_view name() const noexcept { return name_; }
  constexpr bool is_auto() const noexcept { return name_ == "auto"; }

  friend constexpr bool operator==(Backend a, Backend b) noexcept { return a.name_ == b.name_; }

 private:
  constexpr explicit Backend(std::string_view name) noexcept : name_(name) {}
  std::string_view name_ = "auto";  // always a string with static storage
};

inline constexpr Backend Backend::kAuto{"auto"};
inline constexpr Backend Backend::kScalar{"scalar"};
inline constexpr Backend Backend::kSimd{"simd"};
inline constexpr Backend Backend::kCuda{"cuda"};

// backend.name().
std::string_view to_string(Backend backend) noexcept;
// Backend::parse.
Result<Backend> parse_backend(std::string_view name);

// One engine of the table, as a user sees it.
struct BackendInfo {
  Backend backend;
  std::string summary;     // one line: what it is
  bool available = false;  // compiled in and runnable here
  std::string detail;      // what it runs on ("AVX3_ZEN4", a GPU), or why it cannot run
};
// Every engine in the table, in its order ("auto" not included).
std::vector<BackendInfo> list_backends();
// "auto" followed by every engine's name: what --backend accepts.
std::vector<std::string> backend_names();

// The engine a request runs on, for a batch of `batch_size` digests
// (`query_filter_bytes`: for a query, the filter's size in bytes; 0 for a
// build). A request for kAuto first takes ABF_BACKEND when it is set
// (kInvalidArgument if it names no engine), and is then treated exactly as
// a request by name; a named engine that cannot run here is
// kBackendUnavailable, saying why. Never returns kAuto.
Result<Backend> resolve_backend(Backend requested, std::size_t batch_size,
                                std::uint64_t query_filter_bytes = 0);

// Whether the backend can run here: compiled in, and for CUDA a device found.
// True for kAuto (it always finds an engine).
bool backend_available(Backend backend);

}  // namespace abf
