// Internal: the kernel launchers of kernels.cu. Plain types and CUDA runtime
// errors only, so kernels.cu needs no C++23 header (nvcc 13 parses C++20 at
// most); device_filter.cpp turns the errors into abf::Error.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "abf/cuda/view.hpp"

namespace abf::cuda::detail {

// Threads per block of both kernels (their __launch_bounds__).
inline constexpr int kBlockSize = 256;

// How the kernels run; the defaults are the fastest measured on an H200
// (docs/cuda.md), the alternatives exist for that measurement.
// `streaming`: digests are read and answers written with evict-first hints,
// leaving the L2 cache to the filter's words (+2-3% at dram, even at llc).
struct QueryShape {
  bool streaming = true;
};
// `test_first`: read each word and skip the atomic when its bit is set,
// instead of a fire-and-forget atomic OR (which was 2-3% faster).
struct InsertShape {
  bool test_first = false;
  bool streaming = true;
};

// Blocks for `count` items on a device of `sm_count` multiprocessors that
// keep `blocks_per_sm` blocks each resident: one full wave, no more (the
// kernels are grid-stride, so no block waits for a slot while others
// finish), or fewer for a small batch.
int grid_size(std::size_t count, int sm_count, int blocks_per_sm) noexcept;

// answers[i] = 1 ("Maybe") or 0 for the 32-byte digest records[i], under
// the view's protocol; all in device memory. Any alignment of `records`
// works; 16-byte aligned records are read with 128-bit loads (one for
// protocol 1, two for protocol 2), others with byte loads (and the default
// shape).
cudaError_t launch_query(const DeviceFilterView& view, const std::uint8_t* records,
                         std::size_t count, std::uint8_t* answers, int sm_count,
                         cudaStream_t stream, QueryShape shape = {}) noexcept;

// Sets the bits of records[0..count) with atomic ORs; all in device memory.
cudaError_t launch_insert(const DeviceBuildView& view, const std::uint8_t* records,
                          std::size_t count, int sm_count, cudaStream_t stream,
                          InsertShape shape = {}) noexcept;

}  // namespace abf::cuda::detail
