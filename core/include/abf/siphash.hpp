// SipHash-2-4 with 128-bit output (Aumasson and Bernstein, "SipHash: a fast
// short-input PRF", 2012; the 128-bit variant of the reference code), the
// keyed hash of hashProtocolVersion 2 (docs/protocol.md section 4b).
//
// Portable and ABF_HD, like the rest of the protocol header: the SIMD tail
// loops, the CUDA kernels and a user's own kernel call this code. The scalar
// reference engine computes the same function with OpenSSL's SIPHASH MAC
// instead (core/src/keyed_hash.cpp), and the tests prove the two equal; the
// SIMD engine has its own copy in vector lanes (simd/probe_simd-inl.h).
//
// Includes nothing but <cstdint>.
#pragma once

#include <cstdint>

#ifndef ABF_HD
#if defined(__CUDACC__)
#define ABF_HD __host__ __device__
#else
#define ABF_HD
#endif
#endif

namespace abf::probe {

// The key schedule: SipHash's state after keying, for one 16-byte key
// K = k0 || k1 (little-endian words), with the 128-bit output's 0xee already
// folded into v1. Everything a kernel needs of the key; computed once per
// filter (make_key_schedule). A schedule is as secret as the key: never
// print or store it.
struct KeySchedule {
  std::uint64_t v0 = 0;
  std::uint64_t v1 = 0;
  std::uint64_t v2 = 0;
  std::uint64_t v3 = 0;

  // Spelled out, not defaulted: this header is also compiled as C++17
  // (a user's .cu file including abf/cuda/view.hpp).
  friend constexpr bool operator==(const KeySchedule& a, const KeySchedule& b) {
    return a.v0 == b.v0 && a.v1 == b.v1 && a.v2 == b.v2 && a.v3 == b.v3;
  }
};

// Little-endian u64 of p[0..8).
ABF_HD constexpr std::uint64_t load_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

ABF_HD constexpr KeySchedule make_key_schedule(std::uint64_t k0, std::uint64_t k1) {
  return KeySchedule{k0 ^ 0x736f6d6570736575ull, k1 ^ 0x646f72616e646f6dull ^ 0xee,
                     k0 ^ 0x6c7967656e657261ull, k1 ^ 0x7465646279746573ull};
}

// The schedule of a 16-byte key.
ABF_HD constexpr KeySchedule make_key_schedule(const std::uint8_t* key16) {
  return make_key_schedule(load_le64(key16), load_le64(key16 + 8));
}

ABF_HD constexpr std::uint64_t rotl64(std::uint64_t x, int b) { return (x << b) | (x >> (64 - b)); }

struct SipState {
  std::uint64_t v0, v1, v2, v3;

  ABF_HD constexpr void round() {
    v0 += v1;
    v1 = rotl64(v1, 13);
    v1 ^= v0;
    v0 = rotl64(v0, 32);
    v2 += v3;
    v3 = rotl64(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl64(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl64(v1, 17);
    v1 ^= v2;
    v2 = rotl64(v2, 32);
  }
  // One message word: two compression rounds.
  ABF_HD constexpr void absorb(std::uint64_t m) {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

// The two little-endian output words of SipHash-2-4-128: bytes 0..8 and
// 8..16 of the 16-byte tag.
struct Sip128 {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
};

// The finalization of the 128-bit variant, after the last block.
ABF_HD constexpr Sip128 sip_finish(SipState s) {
  s.v2 ^= 0xee;
  for (int r = 0; r < 4; ++r) s.round();
  const std::uint64_t lo = s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
  s.v1 ^= 0xdd;
  for (int r = 0; r < 4; ++r) s.round();
  return Sip128{lo, s.v0 ^ s.v1 ^ s.v2 ^ s.v3};
}

// SipHash-2-4-128 of `length` bytes at `message` under `key`.
ABF_HD constexpr Sip128 siphash24_128(const KeySchedule& key, const std::uint8_t* message,
                                      std::uint64_t length) {
  SipState s{key.v0, key.v1, key.v2, key.v3};
  const std::uint64_t whole = length / 8 * 8;
  for (std::uint64_t i = 0; i < whole; i += 8) s.absorb(load_le64(message + i));
  std::uint64_t last = (length & 0xff) << 56;
  for (std::uint64_t i = whole; i < length; ++i)
    last |= std::uint64_t{message[i]} << (8 * (i - whole));
  s.absorb(last);
  return sip_finish(s);
}

// The protocol's one case: a 32-byte digest, given as its four
// little-endian words (what a 32-byte load yields on a little-endian
// machine). Five blocks: the four words, then the length block 32 << 56.
ABF_HD constexpr Sip128 siphash24_128_digest(const KeySchedule& key, std::uint64_t w0,
                                             std::uint64_t w1, std::uint64_t w2, std::uint64_t w3) {
  SipState s{key.v0, key.v1, key.v2, key.v3};
  s.absorb(w0);
  s.absorb(w1);
  s.absorb(w2);
  s.absorb(w3);
  s.absorb(std::uint64_t{32} << 56);
  return sip_finish(s);
}

}  // namespace abf::probe
