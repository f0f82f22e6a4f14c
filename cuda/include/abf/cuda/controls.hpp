// The CUDA engine's host-side controls and its part of the `auto` rule.
// Declared by the engine's folder (cuda/) in every build, with or without
// the backend: without it cuda/src/unavailable.cpp answers (cuda_compiled()
// false, kBackendUnavailable). Core names no engine; the engine's row
// (cuda/src/engine_cuda.cpp) applies auto_prefers_cuda for Backend::kAuto.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "abf/error.hpp"

namespace abf {

// kAuto picks CUDA (when a device is present) for batches of at least this
// many digests; below it, copying them to the GPU costs more than probing
// them with SIMD. Streaming callers that want kAuto to be able to choose the
// GPU hand over chunks at least this large (`abf build` does for large
// inputs).
inline constexpr std::size_t kAutoCudaMinBatch = std::size_t{1} << 20;

// ... and for a query, only against a filter of at least this many bytes.
// A smaller filter sits in the CPU's caches, where SIMD answers about as
// fast as host memory can feed the GPU, or faster: on a 16-core host with
// an H200, SIMD answered absent-heavy batches against 120 KB and 12 MB
// filters 1.1-1.6x faster than the GPU, while against the 114 MiB filter
// every query ran 1.3-2.4x faster on the GPU (docs/cuda.md). Builds have
// no such floor: the GPU built 2-10x faster at every size.
inline constexpr std::uint64_t kAutoCudaMinQueryFilterBytes = std::uint64_t{32} << 20;

// The rule above, given a usable device: whether kAuto sends a batch of
// `batch_size` digests to the GPU. `query_filter_bytes`: for a query, the
// filter's size in bytes (bit_count / 8); 0 for a build.
constexpr bool auto_prefers_cuda(std::size_t batch_size,
                                 std::uint64_t query_filter_bytes) noexcept {
  return batch_size >= kAutoCudaMinBatch &&
         (query_filter_bytes == 0 || query_filter_bytes >= kAutoCudaMinQueryFilterBytes);
}

// True when the CUDA backend was compiled in (whether or not a device exists).
bool cuda_compiled();
// A description of the CUDA device the backend would use, or why there is none.
std::string cuda_device_description();
// Bytes per second of a host-to-device copy from pinned memory (64 MiB,
// median of 5 after a warm-up): the ceiling of any CUDA query whose digests
// start in host memory (`abf bench` reports it). kBackendUnavailable without
// a CUDA build or a device.
Result<double> cuda_copy_bandwidth();

}  // namespace abf
