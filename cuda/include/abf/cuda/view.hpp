// The device-side API of the CUDA backend: trivially copyable filter views
// passed by value to a kernel, and the per-digest query and insert a kernel
// calls on them. A user's own .cu file includes this header to pre-filter
// digests on the GPU without leaving its pipeline:
//
//   #include "abf/cuda/view.hpp"
//   __global__ void keep_maybe(abf::cuda::DeviceFilterView filter,
//                              const std::uint8_t* digests, std::size_t n,
//                              std::uint8_t* maybe) {
//     for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
//          i += std::size_t{gridDim.x} * blockDim.x)
//       maybe[i] = abf::cuda::might_contain(filter, digests + 32 * i);
//   }
//
// Get a view from abf::cuda::DeviceFilter::view() (device_filter.hpp), or
// make one over your own device bitset with make_view().
//
// Everything here is ABF_HD (__host__ __device__ under nvcc, plain C++
// otherwise) and includes only abf/probe.hpp, so the CPU test suite runs the
// very functions the kernels run, and the header compiles in any C++17 or
// later dialect nvcc supports. The protocol itself (h1, h2, step, advance)
// comes from abf/probe.hpp; this header only replaces the two 64-bit `%` by
// probe::Reducer, which the tests prove equal to `%`.
#pragma once

#include <cstdint>
#include <type_traits>

#include "abf/probe.hpp"

namespace abf::cuda {

// A read-only filter in device memory: what a query kernel needs. Pass it by
// value. `words` holds bit_count / 64 words (bit i in word i / 64 at bit
// i % 64) and must not change while a kernel reads it through this view
// (reads go through the read-only data cache).
struct DeviceFilterView {
  const std::uint64_t* words = nullptr;
  std::uint64_t bit_count = 0;   // m: a multiple of 64 in 64..2^30
  std::uint32_t hash_count = 0;  // k: 1..32
  probe::Reducer reducer{};      // exact `x mod m`, precomputed for this m
};

// A writable filter in device memory: what the build kernel needs. Inserts
// are atomic ORs, so any number of threads may insert at once, in any order,
// and the bits come out the same.
struct DeviceBuildView {
  std::uint64_t* words = nullptr;
  std::uint64_t bit_count = 0;
  std::uint32_t hash_count = 0;
  probe::Reducer reducer{};
};

static_assert(std::is_trivially_copyable_v<DeviceFilterView>);
static_assert(std::is_trivially_copyable_v<DeviceBuildView>);

// A view over `words` (bit_count / 64 words of device memory). The layout
// must be valid (m a multiple of 64 in 64..2^30, k in 1..32); this is not
// checked here (DeviceFilter checks it). Computes the reducer constants: call
// it once per filter on the host, not per digest.
ABF_HD constexpr DeviceFilterView make_view(const std::uint64_t* words, std::uint64_t bit_count,
                                            std::uint32_t hash_count) {
  return DeviceFilterView{words, bit_count, hash_count, probe::Reducer(bit_count)};
}
ABF_HD constexpr DeviceBuildView make_build_view(std::uint64_t* words, std::uint64_t bit_count,
                                                 std::uint32_t hash_count) {
  return DeviceBuildView{words, bit_count, hash_count, probe::Reducer(bit_count)};
}

// Reverses the bytes of a 64-bit word: a little-endian load of d[0..8) made
// big-endian, equal to probe::load_be64(d). Two byte permutes on the device.
ABF_HD constexpr std::uint64_t byte_swap64(std::uint64_t x) {
#if defined(__CUDA_ARCH__)
  const unsigned lo = static_cast<unsigned>(x);
  const unsigned hi = static_cast<unsigned>(x >> 32);
  return (static_cast<std::uint64_t>(__byte_perm(lo, 0, 0x0123)) << 32) |
         __byte_perm(hi, 0, 0x0123);
#else
  x = ((x & 0x00ff00ff00ff00ffull) << 8) | ((x >> 8) & 0x00ff00ff00ff00ffull);
  x = ((x & 0x0000ffff0000ffffull) << 16) | ((x >> 16) & 0x0000ffff0000ffffull);
  return (x << 32) | (x >> 32);
#endif
}

namespace detail {
// A filter word through the read-only data cache on the device.
ABF_HD inline std::uint64_t load_word(const std::uint64_t* p) {
#if defined(__CUDA_ARCH__)
  return __ldg(reinterpret_cast<const unsigned long long*>(p));
#else
  return *p;
#endif
}
// ORs `mask` into *p. Without kTestFirst the atomic's result is unused, so
// it is a fire-and-forget reduction that never waits for memory; kTestFirst
// reads the word first and skips the atomic when the bit is set (about half
// the probes of a filter filled to capacity). The reduction built the dram
// filter 2-3% faster on an H200 (docs/cuda.md).
template <bool kTestFirst = false>
ABF_HD inline void or_word(std::uint64_t* p, std::uint64_t mask) {
#if defined(__CUDA_ARCH__)
  if (!kTestFirst || (*p & mask) == 0) atomicOr(reinterpret_cast<unsigned long long*>(p), mask);
#else
  *p |= mask;
#endif
}
}  // namespace detail

// "Maybe" (true) iff all k bits of the digest whose first two big-endian
// words are h1 and h2 are set; false is a proof of absence.
ABF_HD inline bool might_contain(const DeviceFilterView& view, std::uint64_t h1, std::uint64_t h2) {
  const std::uint64_t m = view.bit_count;
  std::uint64_t i = view.reducer.reduce(h1);               // probe::first_index
  const std::uint64_t step = view.reducer.reduce(h2 | 1);  // probe::step_of
  for (std::uint32_t j = 0; j < view.hash_count; ++j) {
    if ((detail::load_word(view.words + probe::word_of(i)) & probe::mask_of(i)) == 0) return false;
    i = probe::advance(i, step, m);
  }
  return true;
}

// The same for a 32-byte digest record at any address.
ABF_HD inline bool might_contain(const DeviceFilterView& view, const std::uint8_t* digest) {
  return might_contain(view, probe::h1_of(digest), probe::h2_of(digest));
}

// Sets the k bits of the digest whose first two big-endian words are h1, h2.
template <bool kTestFirst = false>
ABF_HD inline void insert(const DeviceBuildView& view, std::uint64_t h1, std::uint64_t h2) {
  const std::uint64_t m = view.bit_count;
  std::uint64_t i = view.reducer.reduce(h1);
  const std::uint64_t step = view.reducer.reduce(h2 | 1);
  for (std::uint32_t j = 0; j < view.hash_count; ++j) {
    detail::or_word<kTestFirst>(view.words + probe::word_of(i), probe::mask_of(i));
    i = probe::advance(i, step, m);
  }
}

// The same for a 32-byte digest record at any address.
ABF_HD inline void insert(const DeviceBuildView& view, const std::uint8_t* digest) {
  insert(view, probe::h1_of(digest), probe::h2_of(digest));
}

}  // namespace abf::cuda
