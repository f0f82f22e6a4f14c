// What every protocol policy (abf/protocol/*.hpp) shares: the plain scheme a
// kernel is handed, the output of step 1, and the bit addressing of a filter's
// words. ABF_HD and constexpr on fixed-width integers, like the policies, so
// host code, the SIMD tails and CUDA kernels compile the same functions.
// Includes nothing but <cstdint> and abf/siphash.hpp (any C++17 or later
// dialect nvcc supports).
#pragma once

#include <cstdint>

#include "abf/siphash.hpp"

namespace abf::probe {

// hashProtocolVersion of the two classic protocols, unkeyed and keyed (their
// policies: protocol1.hpp, protocol2.hpp). Every protocol this library
// implements, the blocked 3 and 4 among them, is a policy in table.hpp's
// list, which is what code should iterate; these two names remain for the
// classic defaults.
inline constexpr std::uint32_t kProtocolUnkeyed = 1;
inline constexpr std::uint32_t kProtocolKeyed = 2;

// Everything that decides where a digest's bits go. Trivially copyable:
// pass it by value to a kernel. Made valid by abf::Scheme (abf/scheme.hpp);
// `key` is all zero for an unkeyed protocol. bit_count is 64-bit everywhere:
// a protocol's own limits say how large it may be.
struct Scheme {
  std::uint64_t bit_count = 0;   // m, within the protocol's limits
  std::uint32_t hash_count = 0;  // k, within the protocol's limits
  std::uint32_t protocol = kProtocolUnkeyed;
  KeySchedule key{};
};

// The output of step 1: two 64-bit words of hash material per digest. Each
// protocol says what they are (h1, h2 of sections 4 and 4b; a blocked
// protocol reads its block and bit positions from them).
struct HashPair {
  std::uint64_t h1 = 0;
  std::uint64_t h2 = 0;
};

// Unsigned big-endian 64-bit integer of p[0..8).
ABF_HD constexpr std::uint64_t load_be64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// Bit i is bit i % 64 of 64-bit word i / 64 (LSB first; words little-endian).
ABF_HD constexpr std::uint64_t word_of(std::uint64_t i) { return i >> 6; }
ABF_HD constexpr std::uint64_t mask_of(std::uint64_t i) { return std::uint64_t{1} << (i & 63); }

// High 64 bits of the 128-bit product a * b.
ABF_HD inline constexpr std::uint64_t mul_hi64(std::uint64_t a, std::uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  __extension__ using U128 = unsigned __int128;
  return static_cast<std::uint64_t>((static_cast<U128>(a) * b) >> 64);
#endif
}

// A version reached code that only a validated Scheme reaches: stop loudly
// rather than answer under another protocol's rules.
ABF_HD inline void unknown_protocol_trap() {
#if defined(__CUDA_ARCH__)
  __trap();
#else
  __builtin_trap();
#endif
}

}  // namespace abf::probe
