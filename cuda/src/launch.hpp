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

// Blocks for `count` items on a device of `sm_count` multiprocessors: enough
// to fill every SM several times over, no more (the kernels are grid-stride).
int grid_size(std::size_t count, int sm_count) noexcept;

// answers[i] = 1 ("Maybe") or 0 for the 32-byte digest records[i]; all in
// device memory. Any alignment of `records` works; 16-byte aligned records
// are read with one 128-bit load each.
cudaError_t launch_query(const DeviceFilterView& view, const std::uint8_t* records,
                         std::size_t count, std::uint8_t* answers, int sm_count,
                         cudaStream_t stream) noexcept;

// Sets the bits of records[0..count) with atomic ORs; all in device memory.
cudaError_t launch_insert(const DeviceBuildView& view, const std::uint8_t* records,
                          std::size_t count, int sm_count, cudaStream_t stream) noexcept;

}  // namespace abf::cuda::detail
