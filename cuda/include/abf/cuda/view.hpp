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
// A view carries its filter's scheme (probe::Scheme): the layout, the
// hashProtocolVersion and, for protocol 2, the key schedule, so the same
// kernel answers unkeyed and keyed filters. A keyed view holds the key's
// schedule, which is as secret as the key: never print or store a view.
//
// Everything here is ABF_HD (__host__ __device__ under nvcc, plain C++
// otherwise) and includes only abf/probe.hpp, so the CPU test suite runs the
// very functions the kernels run, and the header compiles in any C++17 or
// later dialect nvcc supports. The protocol itself (digest -> h1, h2, then
// first index, step, advance) comes from abf/probe.hpp and abf/siphash.hpp;
// this header only replaces the two 64-bit `%` by probe::Reducer, which the
// tests prove equal to `%`.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "abf/probe.hpp"

namespace abf::cuda {

// A read-only filter in device memory: what a query kernel needs. Pass it by
// value. `words` holds bit_count / 64 words (bit i in word i / 64 at bit
// i % 64) and must not change while a kernel reads it through this view
// (reads go through the read-only data cache).
struct DeviceFilterView : probe::Scheme {
  const std::uint64_t* words = nullptr;
  probe::Reducer reducer{};  // exact `x mod m`, precomputed for this m
};

// A writable filter in device memory: what the build kernel needs. Inserts
// are atomic ORs, so any number of threads may insert at once, in any order,
// and the bits come out the same.
struct DeviceBuildView : probe::Scheme {
  std::uint64_t* words = nullptr;
  probe::Reducer reducer{};
};

static_assert(std::is_trivially_copyable_v<DeviceFilterView>);
static_assert(std::is_trivially_copyable_v<DeviceBuildView>);

// Whether `scheme` is a layout its protocol allows (the policy's limits,
// PROTOCOL.md sections 3 and 3c): a known hashProtocolVersion, bit_count a
// multiple of the layout's granularity within its range, hash_count within
// its range. Protocols 1 and 2: m a multiple of 64 in 64..2^30, k in 1..32;
// protocols 3 and 4: m a multiple of 512 in 512..2^40, k = 8. What
// make_view and make_build_view check before they divide by m.
ABF_HD constexpr bool valid_scheme(const probe::Scheme& scheme) {
  return probe::with_protocol(
      scheme.protocol,
      [&](auto protocol) {
        using Probes = typename decltype(protocol)::Probes;
        return scheme.bit_count >= Probes::kMinBitCount &&
               scheme.bit_count <= Probes::kMaxBitCount &&
               scheme.bit_count % Probes::kBitGranularity == 0 &&
               scheme.hash_count >= Probes::kMinHashCount &&
               scheme.hash_count <= Probes::kMaxHashCount;
      },
      [] { return false; });
}

namespace detail {
// A view asked of an invalid scheme: a broken precondition of the caller's,
// reported with the values (on the host to stderr, on the device through
// printf), then the program stops (abort; __trap on the device), where
// computing the reducer would divide by zero or a kernel would read past
// the bitset.
ABF_HD inline void invalid_view(const char* what, const probe::Scheme& scheme) {
#if defined(__CUDA_ARCH__)
  printf("abf::cuda::%s: bit_count %llu, hash_count %u is no layout of protocol %u\n", what,
         static_cast<unsigned long long>(scheme.bit_count), scheme.hash_count, scheme.protocol);
  __trap();
#else
  std::fprintf(stderr,
               "abf::cuda::%s: bit_count %llu, hash_count %u is no layout of protocol %u "
               "(protocols 1 and 2: bit_count a multiple of 64 in 64..2^30, hash_count 1..32; "
               "3 and 4: a multiple of 512 in 512..2^40, hash_count 8)\n",
               what, static_cast<unsigned long long>(scheme.bit_count), scheme.hash_count,
               scheme.protocol);
  std::abort();
#endif
}
}  // namespace detail

// A view over `words` (scheme.bit_count / 64 words of device memory).
// Precondition: valid_scheme(scheme) (abf::Scheme::probe() and DeviceFilter
// give only such schemes); a view of any other stops the program with a
// message naming the values, on the host or the device, instead of dividing
// by zero. Computes the reducer constants: call it once per filter on the
// host, not per digest.
//
// The name is shared with probe::make_view (abf/probe.hpp), the host view,
// which takes the same arguments; an unqualified call with a probe::Scheme
// finds both by argument-dependent lookup and does not compile (ambiguous:
// tests/cuda_math_test.cc checks it), so it never silently makes the other
// view. Call it qualified, cuda::make_view.
ABF_HD constexpr DeviceFilterView make_view(const std::uint64_t* words,
                                            const probe::Scheme& scheme) {
  if (!valid_scheme(scheme)) detail::invalid_view("make_view", scheme);
  return DeviceFilterView{scheme, words, probe::Reducer(scheme.bit_count)};
}
ABF_HD constexpr DeviceBuildView make_build_view(std::uint64_t* words,
                                                 const probe::Scheme& scheme) {
  if (!valid_scheme(scheme)) detail::invalid_view("make_build_view", scheme);
  return DeviceBuildView{scheme, words, probe::Reducer(scheme.bit_count)};
}

// Protocol 1 (unkeyed) views of layout (bit_count, hash_count).
ABF_HD constexpr DeviceFilterView make_view(const std::uint64_t* words, std::uint64_t bit_count,
                                            std::uint32_t hash_count) {
  return cuda::make_view(words, probe::unkeyed_scheme(bit_count, hash_count));
}
ABF_HD constexpr DeviceBuildView make_build_view(std::uint64_t* words, std::uint64_t bit_count,
                                                 std::uint32_t hash_count) {
  return cuda::make_build_view(words, probe::unkeyed_scheme(bit_count, hash_count));
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

// --- Step 1 (digest -> h1, h2) from words already loaded ----------------------
// w0..w3 are the digest's four little-endian 64-bit words, bytes 0..8 to
// 24..32: what wide loads of a 16-byte aligned record yield. The build's own
// kernels read an aligned record this way instead of byte by byte.

// Protocol 1 reads only the first 16 bytes: their two big-endian words.
ABF_HD constexpr probe::HashPair unkeyed_hashes_of_words(std::uint64_t w0, std::uint64_t w1) {
  return probe::HashPair{byte_swap64(w0), byte_swap64(w1)};
}

// Protocol 2 hashes all 32 bytes: SipHash-2-4-128 under the view's key.
ABF_HD constexpr probe::HashPair keyed_hashes_of_words(const probe::KeySchedule& key,
                                                       std::uint64_t w0, std::uint64_t w1,
                                                       std::uint64_t w2, std::uint64_t w3) {
  const probe::Sip128 tag = probe::siphash24_128_digest(key, w0, w1, w2, w3);
  return probe::HashPair{tag.lo, tag.hi};
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

// --- Query and insert ----------------------------------------------------------

// "Maybe" (true) iff all bits of the digest whose step-1 hashes (under the
// view's protocol) are `hashes` are set; false is a proof of absence. Step 2
// is the protocol policy's own (its Probes), with the view's reducer for the
// `x mod m`, word loads through the read-only cache.
ABF_HD inline bool might_contain(const DeviceFilterView& view, probe::HashPair hashes) {
  const std::uint64_t* words = view.words;
  return probe::with_protocol(
      view.protocol,
      [&](auto protocol) {
        return decltype(protocol)::Probes::for_each_position(
            hashes, view.hash_count, view.reducer, [words](std::uint64_t i) {
              return (detail::load_word(words + probe::word_of(i)) & probe::mask_of(i)) != 0;
            });
      },
      [] {
        probe::unknown_protocol_trap();
        return false;
      });
}

ABF_HD inline bool might_contain(const DeviceFilterView& view, std::uint64_t h1, std::uint64_t h2) {
  return might_contain(view, probe::HashPair{h1, h2});
}

// The same for a 32-byte digest record at any address (byte loads), under
// the view's protocol.
ABF_HD inline bool might_contain(const DeviceFilterView& view, const std::uint8_t* digest) {
  return might_contain(view, probe::hashes_of(view, digest));
}

// Sets the bits of the digest whose step-1 hashes are `hashes` (the
// policy's step 2, as might_contain).
template <bool kTestFirst = false>
ABF_HD inline void insert(const DeviceBuildView& view, probe::HashPair hashes) {
  std::uint64_t* words = view.words;
  probe::with_protocol(view.protocol, [&](auto protocol) {
    decltype(protocol)::Probes::for_each_position(
        hashes, view.hash_count, view.reducer, [words](std::uint64_t i) {
          detail::or_word<kTestFirst>(words + probe::word_of(i), probe::mask_of(i));
          return true;
        });
  });
}

template <bool kTestFirst = false>
ABF_HD inline void insert(const DeviceBuildView& view, std::uint64_t h1, std::uint64_t h2) {
  insert<kTestFirst>(view, probe::HashPair{h1, h2});
}

// The same for a 32-byte digest record at any address, under the view's
// protocol.
ABF_HD inline void insert(const DeviceBuildView& view, const std::uint8_t* digest) {
  insert(view, probe::hashes_of(view, digest));
}

}  // namespace abf::cuda
