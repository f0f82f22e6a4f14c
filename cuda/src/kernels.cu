// The CUDA backend's kernels: batch query and build over device-resident
// 32-byte digest records, one thread per digest, grid-stride, for both
// hash protocols. The per-digest work is abf::cuda::might_contain / insert
// and the step-1 hashes of view.hpp, the same functions the CPU tests run, so
// the kernels add only the loads, the stores and the loop.
//
// Measured on an H200 (docs/cuda.md): the dram-sized query is bound by DRAM
// (ncu: ~61% of peak read bandwidth, 64 bytes fetched per random probe), so
// neither more digests per thread in flight (tried: 2, 4 and 8 per thread,
// probed round by round) nor fewer resident threads change its speed.
#include <algorithm>

#include "launch.hpp"

namespace abf::cuda::detail {
namespace {

// Step 1 (digest -> h1, h2) of one aligned record's 128-bit loads, one
// overload per row of the protocol table (abf/protocol/table.hpp): a row
// without one does not compile. `tail()` loads bytes 16..32, for the
// protocols that read them.
template <class Tail>
__device__ __forceinline__ probe::HashPair hashes_of_record(probe::Protocol1,
                                                            const probe::Scheme&, ulonglong2 head,
                                                            Tail&&) {
  return unkeyed_hashes_of_words(head.x, head.y);
}
template <class Tail>
__device__ __forceinline__ probe::HashPair hashes_of_record(probe::Protocol2,
                                                            const probe::Scheme& scheme,
                                                            ulonglong2 head, Tail&& tail) {
  const ulonglong2 rest = tail();
  return keyed_hashes_of_words(scheme.key, head.x, head.y, rest.x, rest.y);
}

// Protocol 3: h = the big-endian bytes 0..8 (the first little-endian word
// swapped), q = bytes 8..16 as loaded.
template <class Tail>
__device__ __forceinline__ probe::HashPair hashes_of_record(probe::Protocol3,
                                                            const probe::Scheme&, ulonglong2 head,
                                                            Tail&&) {
  return probe::HashPair{byte_swap64(head.x), head.y};
}
// Protocol 4: protocol 2's SipHash-2-4-128, h and q its two words.
template <class Tail>
__device__ __forceinline__ probe::HashPair hashes_of_record(probe::Protocol4,
                                                            const probe::Scheme& scheme,
                                                            ulonglong2 head, Tail&& tail) {
  const ulonglong2 rest = tail();
  return keyed_hashes_of_words(scheme.key, head.x, head.y, rest.x, rest.y);
}

// Step 1 of one record under the view's protocol, a branch every thread of
// the grid takes alike (one view per launch), so it costs no divergence and
// no second set of kernels to compile. Aligned: 128-bit loads, through the
// read-only cache or, streaming, marked evict-first (each record is read
// once; the cache is better spent on the filter); protocol 1 needs only the
// first 16 bytes, protocol 2 hashes all 32. Otherwise byte loads
// (probe::hashes_of), for views into a caller's buffer at any offset. A
// version outside the table traps (never that of a valid Scheme).
template <bool kAligned, bool kStreaming>
__device__ __forceinline__ probe::HashPair load_hashes(const probe::Scheme& scheme,
                                                       const std::uint8_t* record) {
  if constexpr (kAligned) {
    const auto* p = reinterpret_cast<const ulonglong2*>(record);
    const ulonglong2 head = kStreaming ? __ldcs(p) : __ldg(p);
    return probe::with_protocol(
        scheme.protocol,
        [&](auto protocol) {
          return hashes_of_record(protocol, scheme, head,
                                  [p] { return kStreaming ? __ldcs(p + 1) : __ldg(p + 1); });
        },
        [] {
          probe::unknown_protocol_trap();
          return probe::HashPair{};
        });
  } else {
    return probe::hashes_of(scheme, record);
  }
}

template <bool kAligned, bool kStreaming>
__global__ void __launch_bounds__(kBlockSize)
    query_kernel(DeviceFilterView view, const std::uint8_t* records, std::size_t count,
                 std::uint8_t* answers) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += stride) {
    const probe::HashPair hashes = load_hashes<kAligned, kStreaming>(view, records + 32 * i);
    const unsigned char answer = might_contain(view, hashes) ? 1 : 0;
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
    insert<kTestFirst>(view, load_hashes<kAligned, kStreaming>(view, records + 32 * i));
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
