// The one-line probe math of hashProtocolVersion 3 and its keyed form 4
// (docs/protocol.md sections 3c, 4c), in exactly one place. Everything here
// is constexpr on fixed-width integers and marked ABF_HD, so the scalar
// reference, the SIMD tail loops, the CUDA kernels and a user's own CUDA
// kernel all call the same code.
//
// A one-line filter has B blocks of 512 bits (one 64-byte line, eight
// 64-bit words). A probe is two steps:
//   1. digest -> (h, q): protocol 3 reads the digest itself (h = big-endian
//      d[0..8), q = the bytes d[8..16)); protocol 4 is SipHash-2-4-128 of the
//      whole digest under a secret key (h = little-endian o[0..8), q = the
//      bytes o[8..16)). q is kept as the little-endian word of its eight
//      bytes, so q[j] = (q >> 8j) & 0xff.
//   2. (h, q) -> block b = floor(h * B / 2^64) and, in each word j of the
//      block, bit q[j] mod 64.
// Nothing on the path is narrower than 64 bits: B < 2^32, b < 2^31, the
// word index 8b + j < 2^34 (m up to 2^40 bits).
//
// Includes nothing but <cstdint> (through siphash.hpp), so nvcc can compile
// it in any dialect it supports.
#pragma once

#include <cstdint>

#include "abf/siphash.hpp"

namespace abf::blocked {

// hashProtocolVersion of the one-line protocols.
inline constexpr std::uint32_t kProtocolBlocked = 3;
inline constexpr std::uint32_t kProtocolBlockedKeyed = 4;
// k is always 8: one bit in each of a block's eight words.
inline constexpr std::uint32_t kHashCount = 8;
inline constexpr std::uint64_t kBlockBits = 512;
inline constexpr std::uint64_t kWordsPerBlock = 8;
// Section 3c's limits: 1 <= B <= 2^31 (m = 512 * B up to 2^40), n up to 2^36.
inline constexpr std::uint64_t kMaxBlockCount = std::uint64_t{1} << 31;
inline constexpr std::uint64_t kMinBitCount = kBlockBits;
inline constexpr std::uint64_t kMaxBitCount = kBlockBits * kMaxBlockCount;
inline constexpr std::uint64_t kMaxExpectedItemCount = std::uint64_t{1} << 36;

// Step 1's result: the block hash and the eight position bytes.
struct LineHash {
  std::uint64_t h = 0;  // the block comes from it
  std::uint64_t q = 0;  // little-endian word of the eight position bytes
};

// Unsigned big-endian / little-endian 64-bit integers of p[0..8).
ABF_HD constexpr std::uint64_t load_be64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | p[i];
  return v;
}

// Protocol 3: h = BE64 of d[0..8), q = the bytes d[8..16).
ABF_HD constexpr LineHash unkeyed_line_hash(const std::uint8_t* digest) {
  return LineHash{load_be64(digest), probe::load_le64(digest + 8)};
}

// Protocol 4: o = SipHash-2-4-128 under the key of the 32 digest bytes,
// h = LE64 of o[0..8) (the tag's first word), q = o[8..16) (its second).
ABF_HD constexpr LineHash keyed_line_hash(const probe::KeySchedule& key,
                                          const std::uint8_t* digest) {
  const probe::Sip128 tag = probe::siphash24_128(key, digest, 32);
  return LineHash{tag.lo, tag.hi};
}

// floor(h * B / 2^64) for 1 <= B < 2^32: the high 64 bits of the 128-bit
// product, from two 32x32-bit products (section 4c's form; no 128-bit
// arithmetic, no division, the same on every backend).
ABF_HD constexpr std::uint64_t block_of(std::uint64_t h, std::uint64_t block_count) {
  const std::uint64_t hi = h >> 32;
  const std::uint64_t lo = h & 0xffffffffu;
  return (hi * block_count + ((lo * block_count) >> 32)) >> 32;
}

// The bit (0..63) probe j sets in word j of its block: q[j] mod 64.
ABF_HD constexpr unsigned bit_in_word(std::uint64_t q, unsigned j) {
  return static_cast<unsigned>((q >> (8 * j)) & 63);
}
ABF_HD constexpr std::uint64_t mask_in_word(std::uint64_t q, unsigned j) {
  return std::uint64_t{1} << bit_in_word(q, j);
}

// The global bit index of probe j: b * 512 + 64 j + q[j] mod 64.
ABF_HD constexpr std::uint64_t bit_index(std::uint64_t block, std::uint64_t q, unsigned j) {
  return block * kBlockBits + 64 * std::uint64_t{j} + bit_in_word(q, j);
}

// The index of the first of block b's eight words.
ABF_HD constexpr std::uint64_t first_word(std::uint64_t block) { return block * kWordsPerBlock; }

// Whether all eight bits of `hash` are set in a filter of `block_count`
// blocks over `words` (8 * block_count of them): "Maybe".
ABF_HD constexpr bool might_contain_hash(const std::uint64_t* words, std::uint64_t block_count,
                                         LineHash hash) {
  const std::uint64_t* line = words + first_word(block_of(hash.h, block_count));
  bool all = true;
  for (unsigned j = 0; j < kWordsPerBlock; ++j) {
    const std::uint64_t mask = mask_in_word(hash.q, j);
    all = all && (line[j] & mask) == mask;
  }
  return all;
}

// Sets the eight bits of `hash`.
ABF_HD constexpr void insert_hash(std::uint64_t* words, std::uint64_t block_count,
                                  LineHash hash) {
  std::uint64_t* line = words + first_word(block_of(hash.h, block_count));
  for (unsigned j = 0; j < kWordsPerBlock; ++j) line[j] |= mask_in_word(hash.q, j);
}

// Everything that decides where a digest's bits go in a one-line filter:
// B, the protocol (3 or 4) and, for 4, the key schedule. Trivially
// copyable: pass it by value to a kernel.
struct LineScheme {
  std::uint64_t block_count = 1;  // B: 1..2^31
  std::uint32_t protocol = kProtocolBlocked;
  probe::KeySchedule key{};
};

ABF_HD constexpr bool is_blocked_protocol(std::uint32_t protocol) {
  return protocol == kProtocolBlocked || protocol == kProtocolBlockedKeyed;
}

// The reference step 1 by protocol (3 or 4; the key is used by 4 only).
ABF_HD constexpr LineHash line_hash(const LineScheme& scheme, const std::uint8_t* digest) {
  return scheme.protocol == kProtocolBlockedKeyed ? keyed_line_hash(scheme.key, digest)
                                                  : unkeyed_line_hash(digest);
}

// The reference query and insert of one digest, both steps.
ABF_HD constexpr bool might_contain(const LineScheme& scheme, const std::uint64_t* words,
                                    const std::uint8_t* digest) {
  return might_contain_hash(words, scheme.block_count, line_hash(scheme, digest));
}
ABF_HD constexpr void insert(const LineScheme& scheme, std::uint64_t* words,
                             const std::uint8_t* digest) {
  insert_hash(words, scheme.block_count, line_hash(scheme, digest));
}

}  // namespace abf::blocked
