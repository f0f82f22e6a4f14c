// The CUDA backend's kernels: batch query and build over device-resident
// 32-byte digest records, one thread per digest, grid-stride. The
// per-digest work is abf::cuda::might_contain / insert (view.hpp), the same
// functions the CPU tests run, so the kernels add only the loads, the stores
// and the loop.
//
// Measured on an H200 (docs/cuda.md): the dram-sized query is bound by DRAM
// (ncu: ~61% of peak read bandwidth, 64 bytes fetched per random probe), so
// neither more digests per thread in flight (tried: 2, 4 and 8 per thread,
// probed round by round) nor fewer resident threads change its speed.
#include <algorithm>

#include "launch.hpp"

namespace abf::cuda::detail {
namespace {

// h1, h2 of one record. Aligned: one 128-bit load and two byte swaps,
// through the read-only cache or, streaming, marked evict-first (each record
// is read once; the cache is better spent on the filter). Otherwise byte
// loads (probe::load_be64), for views into a caller's buffer at any offset.
template <bool kAligned, bool kStreaming>
__device__ __forceinline__ void load_h1_h2(const std::uint8_t* record, std::uint64_t& h1,
                                           std::uint64_t& h2) {
  if constexpr (kAligned) {
    const auto* p = reinterpret_cast<const ulonglong2*>(record);
    const ulonglong2 w = kStreaming ? __ldcs(p) : __ldg(p);
    h1 = byte_swap64(w.x);
    h2 = byte_swap64(w.y);
  } else {
    h1 = probe::h1_of(record);
    h2 = probe::h2_of(record);
  }
}

template <bool kAligned, bool kStreaming>
__global__ void __launch_bounds__(kBlockSize)
    query_kernel(DeviceFilterView view, const std::uint8_t* records, std::size_t count,
                 std::uint8_t* answers) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    std::uint64_t h1, h2;
    load_h1_h2<kAligned, kStreaming>(records + 32 * i, h1, h2);
    const unsigned char answer = might_contain(view, h1, h2) ? 1 : 0;
    if constexpr (kStreaming) {
      __stcs(answers + i, answer);
    } else {
      answers[i] = answer;
    }
  }
}

template <bool kAligned, bool kTestFirst, bool kStreaming>
__global__ void __launch_bounds__(kBlockSize)
    insert_kernel(DeviceBuildView view, const std::uint8_t* records, std::size_t count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    std::uint64_t h1, h2;
    load_h1_h2<kAligned, kStreaming>(records + 32 * i, h1, h2);
    insert<kTestFirst>(view, h1, h2);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Blocks of `kernel` one SM keeps resident (its registers decide). Asked
// once per kernel; all devices of one process are assumed alike.
template <auto kKernel>
int resident_blocks() {
  static const int blocks = [] {
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kKernel, kBlockSize, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      n = 0;
    }
    return n > 0 ? n : 8;
  }();
  return blocks;
}

// Launches `kernel` over `count` items with one resident wave of blocks (or
// fewer, for a small batch).
template <auto kKernel, class... Args>
void launch(std::size_t count, int sm_count, cudaStream_t stream, Args... args) {
  kKernel<<<grid_size(count, sm_count, resident_blocks<kKernel>()), kBlockSize, 0, stream>>>(
      args...);
}

}  // namespace

int grid_size(std::size_t count, int sm_count, int blocks_per_sm) noexcept {
  const std::size_t wanted = (count + kBlockSize - 1) / kBlockSize;
  const std::size_t cap =
      static_cast<std::size_t>(std::max(sm_count, 1)) * std::max(blocks_per_sm, 1);
  return static_cast<int>(std::max<std::size_t>(1, std::min(wanted, cap)));
}

cudaError_t launch_query(const DeviceFilterView& view, const std::uint8_t* records,
                         std::size_t count, std::uint8_t* answers, int sm_count,
                         cudaStream_t stream, QueryShape shape) noexcept {
  if (count == 0) return cudaSuccess;
  if (!aligned16(records)) {
    launch<query_kernel<false, QueryShape{}.streaming>>(count, sm_count, stream, view, records,
                                                        count, answers);
  } else if (shape.streaming) {
    launch<query_kernel<true, true>>(count, sm_count, stream, view, records, count, answers);
  } else {
    launch<query_kernel<true, false>>(count, sm_count, stream, view, records, count, answers);
  }
  return cudaGetLastError();
}

cudaError_t launch_insert(const DeviceBuildView& view, const std::uint8_t* records,
                          std::size_t count, int sm_count, cudaStream_t stream,
                          InsertShape shape) noexcept {
  if (count == 0) return cudaSuccess;
  if (!aligned16(records)) {
    constexpr InsertShape kDefault;
    launch<insert_kernel<false, kDefault.test_first, kDefault.streaming>>(count, sm_count, stream,
                                                                          view, records, count);
  } else if (shape.test_first && shape.streaming) {
    launch<insert_kernel<true, true, true>>(count, sm_count, stream, view, records, count);
  } else if (shape.test_first) {
    launch<insert_kernel<true, true, false>>(count, sm_count, stream, view, records, count);
  } else if (shape.streaming) {
    launch<insert_kernel<true, false, true>>(count, sm_count, stream, view, records, count);
  } else {
    launch<insert_kernel<true, false, false>>(count, sm_count, stream, view, records, count);
  }
  return cudaGetLastError();
}

}  // namespace abf::cuda::detail
