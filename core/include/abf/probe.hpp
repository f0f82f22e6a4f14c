// The probe protocol (docs/protocol.md sections 4, 4b and 5) in exactly one
// place. Everything here is constexpr on fixed-width integers and marked
// ABF_HD, so the scalar reference, the SIMD tail loops, the CUDA kernels and
// a user's own CUDA kernel all call the same code.
//
// A probe is two steps:
//   1. digest -> (h1, h2): the only step the protocols differ in. Protocol 1
//      reads the digest's first two big-endian words; protocol 2 is
//      SipHash-2-4-128 of the whole digest under a secret key (siphash.hpp).
//      Each backend has its own implementation of this step (scalar:
//      OpenSSL; SIMD: vector lanes; CUDA: this header on the device), all
//      proven equal, chosen through the protocol table at the end of this
//      header.
//   2. (h1, h2) -> k positions: i_0 = h1 mod m, step = (h2 | 1) mod m,
//      i_j+1 = (i_j + step) mod m. Shared by both protocols.
// A Scheme names everything both steps need: (m, k), the protocol and, for
// protocol 2, the key schedule. The validated host-side type is abf::Scheme
// (abf/scheme.hpp); this plain struct is what it hands to kernels.
//
// This header includes nothing but <cstdint>, so nvcc can compile it in any
// dialect it supports.
#pragma once

#include <cstdint>

#include "abf/siphash.hpp"

namespace abf::probe {

// hashProtocolVersion: 1 unkeyed (section 4), 2 keyed (section 4b).
inline constexpr std::uint32_t kProtocolUnkeyed = 1;
inline constexpr std::uint32_t kProtocolKeyed = 2;
inline constexpr std::uint64_t kMinBitCount = 64;
inline constexpr std::uint64_t kMaxBitCount = std::uint64_t{1} << 30;
inline constexpr std::uint32_t kMinHashCount = 1;
inline constexpr std::uint32_t kMaxHashCount = 32;
inline constexpr std::uint64_t kMaxExpectedItemCount = std::uint64_t{1} << 30;
// A filter set has 1..65,536 shards (section 13).
inline constexpr std::uint32_t kMaxShardCount = 65536;

// Unsigned big-endian 64-bit integer of p[0..8).
ABF_HD constexpr std::uint64_t load_be64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// h1 and h2 of a 32-byte digest: its first two big-endian words.
ABF_HD constexpr std::uint64_t h1_of(const std::uint8_t* digest) { return load_be64(digest); }
ABF_HD constexpr std::uint64_t h2_of(const std::uint8_t* digest) { return load_be64(digest + 8); }

// i_0 = h1 mod m.
ABF_HD constexpr std::uint64_t first_index(std::uint64_t h1, std::uint64_t m) { return h1 % m; }

// step = (h2 | 1) mod m. Odd before the reduction; since m is a multiple of
// 64, step stays odd, so the k <= 32 positions are distinct.
ABF_HD constexpr std::uint64_t step_of(std::uint64_t h2, std::uint64_t m) { return (h2 | 1) % m; }

// i_{j+1} = (i_j + step) mod m. Both terms are < m <= 2^30, so one
// conditional subtraction is the exact reduction.
ABF_HD constexpr std::uint64_t advance(std::uint64_t i, std::uint64_t step, std::uint64_t m) {
  const std::uint64_t next = i + step;
  return next >= m ? next - m : next;
}

// Section 13: the shard of a filter set that holds digest d,
// (unsigned big-endian 64-bit integer of d[24..32)) mod shard_count, for
// 1 <= shard_count <= kMaxShardCount. Bytes 24..32 take no part in
// protocol-1 probes, so the digests of one shard still probe uniformly.
ABF_HD constexpr std::uint32_t shard_of(const std::uint8_t* digest, std::uint32_t shard_count) {
  return static_cast<std::uint32_t>(load_be64(digest + 24) % shard_count);
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

// Exact x mod m for any 64-bit x and a fixed m in [1, 2^32), without a
// division: Lemire, Kaser and Kurz, "Faster remainder by direct computation"
// (2019), with a 128-bit reciprocal c = ceil(2^128 / m). Their bound needs
// F >= N + log2(m) fractional bits, 128 >= 64 + 32 here. Four 64-bit
// multiplies instead of a 64-bit divide: on Zen 4 a `div r64` costs about
// 14 cycles of latency, on a GPU 64-bit `%` is a long software routine.
// Tests prove it equal to `%` over the m, h sweep of the backends.
struct Reducer {
  std::uint64_t m = 1;
  std::uint64_t c_hi = 0;  // c = c_hi * 2^64 + c_lo = floor((2^128 - 1) / m) + 1
  std::uint64_t c_lo = 0;

  constexpr Reducer() = default;
  ABF_HD constexpr explicit Reducer(std::uint64_t divisor) : m(divisor) {
    // floor((2^128 - 1) / m) by long division in two 64-bit halves.
    const std::uint64_t all = ~std::uint64_t{0};
    const std::uint64_t q_hi = all / m;
    const std::uint64_t r_hi = all % m;
    // (r_hi * 2^64 + all) / m with r_hi < m < 2^32: split the low word in
    // two 32-bit digits so every partial dividend fits in 64 bits.
    std::uint64_t rem = r_hi;
    std::uint64_t q_lo = 0;
    for (int shift = 32; shift >= 0; shift -= 32) {
      const std::uint64_t digit = (all >> shift) & 0xffffffffu;
      const std::uint64_t part = (rem << 32) | digit;
      q_lo = (q_lo << 32) | (part / m);
      rem = part % m;
    }
    c_lo = q_lo + 1;
    c_hi = q_hi + (c_lo == 0 ? 1 : 0);
  }

  ABF_HD constexpr std::uint64_t reduce(std::uint64_t x) const {
    // low = (c * x) mod 2^128
    const std::uint64_t low_lo = c_lo * x;
    const std::uint64_t low_hi = mul_hi64(c_lo, x) + c_hi * x;
    // (low * m) >> 128, m < 2^32
    const std::uint64_t mid = low_hi * m;  // low 64 bits of low_hi * m
    const std::uint64_t carry_in = mul_hi64(low_lo, m);
    const std::uint64_t carry = (mid + carry_in < mid) ? 1 : 0;
    return mul_hi64(low_hi, m) + carry;
  }
};

// Everything that decides where a digest's bits go. Trivially copyable:
// pass it by value to a kernel. Made valid by abf::Scheme; `key` is all zero
// for protocol 1.
struct Scheme {
  std::uint64_t bit_count = 0;   // m: a multiple of 64 in 64..2^30
  std::uint32_t hash_count = 0;  // k: 1..32
  std::uint32_t protocol = kProtocolUnkeyed;
  KeySchedule key{};
};

// h1 and h2 of one digest (step 1).
struct HashPair {
  std::uint64_t h1 = 0;
  std::uint64_t h2 = 0;
};

// Protocol 1: the digest's first two big-endian words.
ABF_HD constexpr HashPair unkeyed_hashes(const std::uint8_t* digest) {
  return HashPair{h1_of(digest), h2_of(digest)};
}

// Protocol 2: the two little-endian words of SipHash-2-4-128(K, digest).
ABF_HD constexpr HashPair keyed_hashes(const KeySchedule& key, const std::uint8_t* digest) {
  const Sip128 tag = siphash24_128(key, digest, 32);
  return HashPair{tag.lo, tag.hi};
}

// --- The protocol table --------------------------------------------------------
//
// Every hashProtocolVersion this library knows is one row: a tag type naming
// its version, whether its filters take a key, and its portable step 1 (this
// header's, the one a CUDA kernel runs). with_protocol is the one branch on
// a protocol: an engine calls it once per batch and picks its own fast step
// 1 for the tag it is handed, by overload, so an engine that has none for a
// new row does not compile. The SIMD engine writes the same branch out
// inside its Highway targets (probe_simd.cc, WithHash, says why), and a CUDA
// kernel asks keyed_protocol per record. Scheme::open validates a stored
// version with known_protocol.
//
// Adding protocol N: its step 1 here, a tag and a line in known_protocol,
// keyed_protocol and with_protocol, each engine's step 1 for the tag (scalar:
// engine_scalar.cpp; SIMD: probe_simd.cc, with a case in WithHash, whose
// static_assert asks for it; CUDA: load_hashes in kernels.cu), its section
// of docs/protocol.md and its golden vectors. (snapshot.cpp and
// filter_set_io.cpp still check the version in their readers.)

struct UnkeyedProtocol {  // section 4
  static constexpr std::uint32_t kVersion = kProtocolUnkeyed;
  static constexpr bool kKeyed = false;
  ABF_HD static constexpr HashPair hashes(const Scheme&, const std::uint8_t* digest) {
    return unkeyed_hashes(digest);
  }
};

struct KeyedProtocol {  // section 4b
  static constexpr std::uint32_t kVersion = kProtocolKeyed;
  static constexpr bool kKeyed = true;
  ABF_HD static constexpr HashPair hashes(const Scheme& scheme, const std::uint8_t* digest) {
    return keyed_hashes(scheme.key, digest);
  }
};

// Whether `version` is a row of the table.
ABF_HD constexpr bool known_protocol(std::uint32_t version) {
  return version == UnkeyedProtocol::kVersion || version == KeyedProtocol::kVersion;
}

// Whether filters of protocol `version` take a key.
ABF_HD constexpr bool keyed_protocol(std::uint32_t version) {
  return version == KeyedProtocol::kVersion;
}

// body(UnkeyedProtocol{}) or body(KeyedProtocol{}) by `version`. A version
// outside the table (never that of a valid Scheme) takes protocol 1's row.
template <class Body>
constexpr decltype(auto) with_protocol(std::uint32_t version, Body&& body) {
  if (version == KeyedProtocol::kVersion) return body(KeyedProtocol{});
  return body(UnkeyedProtocol{});
}

// Step 1 by the table, for code that holds a Scheme rather than a tag.
ABF_HD constexpr HashPair hashes_of(const Scheme& scheme, const std::uint8_t* digest) {
  return keyed_protocol(scheme.protocol) ? KeyedProtocol::hashes(scheme, digest)
                                         : UnkeyedProtocol::hashes(scheme, digest);
}

// What a probing kernel needs to know of a filter: its scheme and its words
// (bit_count / 64 of them).
struct FilterView : Scheme {
  const std::uint64_t* words = nullptr;
};

ABF_HD constexpr FilterView make_view(const std::uint64_t* words, const Scheme& scheme) {
  FilterView view;
  static_cast<Scheme&>(view) = scheme;
  view.words = words;
  return view;
}

// An unkeyed (protocol 1) scheme of layout (m, k), for tests and tools.
ABF_HD constexpr Scheme unkeyed_scheme(std::uint64_t bit_count, std::uint32_t hash_count) {
  return Scheme{bit_count, hash_count, kProtocolUnkeyed, KeySchedule{}};
}

// Step 2 of the reference query: true ("Maybe") iff all k bits are set.
ABF_HD constexpr bool might_contain_hashes(const FilterView& view, HashPair hashes) {
  const std::uint64_t m = view.bit_count;
  std::uint64_t i = first_index(hashes.h1, m);
  const std::uint64_t step = step_of(hashes.h2, m);
  for (std::uint32_t j = 0; j < view.hash_count; ++j) {
    if ((view.words[word_of(i)] & mask_of(i)) == 0) return false;
    i = advance(i, step, m);
  }
  return true;
}

// The reference query for one digest, both steps.
ABF_HD constexpr bool might_contain(const FilterView& view, const std::uint8_t* digest) {
  return might_contain_hashes(view, hashes_of(view, digest));
}

// Step 2 of the reference insert into a mutable bitset of this scheme.
ABF_HD constexpr void insert_hashes(const Scheme& scheme, std::uint64_t* words, HashPair hashes) {
  const std::uint64_t m = scheme.bit_count;
  std::uint64_t i = first_index(hashes.h1, m);
  const std::uint64_t step = step_of(hashes.h2, m);
  for (std::uint32_t j = 0; j < scheme.hash_count; ++j) {
    words[word_of(i)] |= mask_of(i);
    i = advance(i, step, m);
  }
}

// The reference insert for one digest, both steps.
ABF_HD constexpr void insert(const Scheme& scheme, std::uint64_t* words,
                             const std::uint8_t* digest) {
  insert_hashes(scheme, words, hashes_of(scheme, digest));
}

}  // namespace abf::probe
