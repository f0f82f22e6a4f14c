// Probe engines. Every engine answers bit for bit as the scalar reference;
// they differ only in speed. One binary can run every engine it was built
// with, so tests and benchmarks compare them side by side.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "abf/error.hpp"

namespace abf {

enum class Backend {
  kAuto,    // the fastest available: CUDA for large batches when a device is
            // present, else SIMD. ABF_BACKEND=scalar|simd|cuda overrides it.
  kScalar,  // the reference: one digest at a time, plain `%`
  kSimd,    // Highway batch engine, best target chosen at run time
  kCuda,    // NVIDIA GPU; kBackendUnavailable without a build or a device
};

// kAuto picks CUDA (when a device is present) for batches of at least this
// many digests; below it, copying them to the GPU costs more than probing
// them with SIMD. Streaming callers that want kAuto to be able to choose the
// GPU hand over chunks at least this large (the CLI does).
inline constexpr std::size_t kAutoCudaMinBatch = std::size_t{1} << 20;

// "auto", "scalar", "simd", "cuda".
std::string_view to_string(Backend backend) noexcept;
// Parses those names; kInvalidArgument otherwise.
Result<Backend> parse_backend(std::string_view name);

// The backend `kAuto` resolves to for a batch of `batch_size` digests,
// honouring ABF_BACKEND (kInvalidArgument if it names no backend). Never
// returns kAuto; an explicit request is returned as it is.
Result<Backend> resolve_backend(Backend requested, std::size_t batch_size);

// Whether the backend can run here: compiled in, and for CUDA a device found.
bool backend_available(Backend backend);

// The Highway target the SIMD engine runs on this CPU ("AVX3_ZEN4", "AVX2", ...).
std::string simd_target_name();
// Every Highway target compiled into this binary that this CPU supports.
std::vector<std::string> simd_compiled_targets();
// True when the CUDA backend was compiled in (whether or not a device exists).
bool cuda_compiled();
// A description of the CUDA device the backend would use, or why there is none.
std::string cuda_device_description();

}  // namespace abf
