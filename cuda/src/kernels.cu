// The CUDA backend's kernels: batch query and build over device-resident
// 32-byte digest records. One thread per digest, grid-stride. The per-digest
// work is abf::cuda::might_contain / insert (view.hpp), the same functions
// the CPU tests run, so the kernels add only the loads and the loop.
#include <algorithm>

#include "launch.hpp"

namespace abf::cuda::detail {
namespace {

// h1, h2 of one record. Aligned: one 128-bit read-only load and two byte
// swaps; otherwise byte loads (probe::load_be64), for views into a caller's
// buffer at any offset.
template <bool kAligned>
__device__ __forceinline__ void load_h1_h2(const std::uint8_t* record, std::uint64_t& h1,
                                           std::uint64_t& h2) {
  if constexpr (kAligned) {
    const ulonglong2 w = __ldg(reinterpret_cast<const ulonglong2*>(record));
    h1 = byte_swap64(w.x);
    h2 = byte_swap64(w.y);
  } else {
    h1 = probe::h1_of(record);
    h2 = probe::h2_of(record);
  }
}

template <bool kAligned>
__global__ void __launch_bounds__(kBlockSize)
    query_kernel(DeviceFilterView view, const std::uint8_t* records, std::size_t count,
                 std::uint8_t* answers) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    std::uint64_t h1, h2;
    load_h1_h2<kAligned>(records + 32 * i, h1, h2);
    answers[i] = might_contain(view, h1, h2) ? 1 : 0;
  }
}

template <bool kAligned>
__global__ void __launch_bounds__(kBlockSize)
    insert_kernel(DeviceBuildView view, const std::uint8_t* records, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    std::uint64_t h1, h2;
    load_h1_h2<kAligned>(records + 32 * i, h1, h2);
    insert(view, h1, h2);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

}  // namespace

int grid_size(std::size_t count, int sm_count) noexcept {
  // 8 blocks of 256 threads per SM keeps 2048 threads resident on sm_80/90,
  // enough loads in flight to hide DRAM latency; beyond that, stride.
  const std::size_t wanted = (count + kBlockSize - 1) / kBlockSize;
  const std::size_t cap = static_cast<std::size_t>(std::max(sm_count, 1)) * 8;
  return static_cast<int>(std::max<std::size_t>(1, std::min(wanted, cap)));
}

cudaError_t launch_query(const DeviceFilterView& view, const std::uint8_t* records,
                         std::size_t count, std::uint8_t* answers, int sm_count,
                         cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  const int blocks = grid_size(count, sm_count);
  if (aligned16(records)) {
    query_kernel<true><<<blocks, kBlockSize, 0, stream>>>(view, records, count, answers);
  } else {
    query_kernel<false><<<blocks, kBlockSize, 0, stream>>>(view, records, count, answers);
  }
  return cudaGetLastError();
}

cudaError_t launch_insert(const DeviceBuildView& view, const std::uint8_t* records,
                          std::size_t count, int sm_count, cudaStream_t stream) noexcept {
  if (count == 0) return cudaSuccess;
  const int blocks = grid_size(count, sm_count);
  if (aligned16(records)) {
    insert_kernel<true><<<blocks, kBlockSize, 0, stream>>>(view, records, count);
  } else {
    insert_kernel<false><<<blocks, kBlockSize, 0, stream>>>(view, records, count);
  }
  return cudaGetLastError();
}

}  // namespace abf::cuda::detail
