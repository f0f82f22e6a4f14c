// The probe protocol (docs/protocol.md sections 4, 4b, 4c and 5): the
// reference query and insert of one digest, the shard rule of filter sets,
// and the protocol table (abf/protocol/table.hpp) they dispatch through.
// Everything here is constexpr on fixed-width integers and marked ABF_HD, so
// the scalar reference, the SIMD tail loops, the CUDA kernels and a user's
// own CUDA kernel all call the same code.
//
// A probe is two steps, and each protocol is one policy type that owns both
// (abf/protocol/protocol1.hpp .. protocol4.hpp; table.hpp says what a policy
// provides and how to add one):
//   1. digest -> HashPair: protocols 1 and 3 read the digest's leading
//      big-endian words; protocols 2 and 4 are SipHash-2-4-128 of the whole
//      digest under a secret key (siphash.hpp). Each engine has its own fast
//      form of this step (scalar: OpenSSL; SIMD: vector lanes; CUDA: the
//      policy on the device), all proven equal, chosen through with_protocol.
//   2. HashPair -> the bits to set or test: the policy's `Probes`. Protocols
//      1 and 2 use the classic layout (abf/protocol/classic.hpp: i_0 = h1 mod
//      m, step = (h2 | 1) mod m, i_j+1 = (i_j + step) mod m); protocols 3 and
//      4 the blocked one (abf/protocol/blocked.hpp: one 512-bit block,
//      floor(h * B / 2^64), and one bit in each of its eight words).
// A Scheme names everything both steps need: (m, k), the protocol and, for
// a keyed protocol, the key schedule. The validated host-side type is
// abf::Scheme (abf/scheme.hpp); the plain probe::Scheme is what it hands to
// kernels.
//
// Includes only <cstdint> and the protocol headers (which include only
// <cstdint> and abf/siphash.hpp), so nvcc can compile it in any dialect it
// supports.
#pragma once

#include <cstdint>

#include "abf/protocol/classic.hpp"
#include "abf/protocol/common.hpp"
#include "abf/protocol/table.hpp"
#include "abf/siphash.hpp"

namespace abf::probe {

// The classic layout's limits (protocols 1 and 2; ClassicProbes has them).
// Code that serves every protocol asks the policy's Probes instead.
inline constexpr std::uint64_t kMinBitCount = ClassicProbes::kMinBitCount;
inline constexpr std::uint64_t kMaxBitCount = ClassicProbes::kMaxBitCount;
inline constexpr std::uint32_t kMinHashCount = ClassicProbes::kMinHashCount;
inline constexpr std::uint32_t kMaxHashCount = ClassicProbes::kMaxHashCount;
inline constexpr std::uint64_t kMaxExpectedItemCount = ClassicProbes::kMaxExpectedItemCount;
// A filter set has 1..65,536 shards (section 13).
inline constexpr std::uint32_t kMaxShardCount = 65536;

// The classic step 2's pieces by their protocol names (ClassicProbes).
ABF_HD constexpr std::uint64_t first_index(std::uint64_t h1, std::uint64_t m) {
  return ClassicProbes::first_index(h1, m);
}
ABF_HD constexpr std::uint64_t step_of(std::uint64_t h2, std::uint64_t m) {
  return ClassicProbes::step_of(h2, m);
}
ABF_HD constexpr std::uint64_t advance(std::uint64_t i, std::uint64_t step, std::uint64_t m) {
  return ClassicProbes::advance(i, step, m);
}

// Section 13: the shard of a filter set that holds digest d,
// (unsigned big-endian 64-bit integer of d[24..32)) mod shard_count, for
// 1 <= shard_count <= kMaxShardCount. Bytes 24..32 take no part in
// protocol-1 probes, so the digests of one shard still probe uniformly.
ABF_HD constexpr std::uint32_t shard_of(const std::uint8_t* digest, std::uint32_t shard_count) {
  return static_cast<std::uint32_t>(load_be64(digest + 24) % shard_count);
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

// Step 2 of the reference query, under the view's protocol: true
// ("Maybe") iff all of the digest's bits are set. An unknown protocol traps.
ABF_HD constexpr bool might_contain_hashes(const FilterView& view, HashPair hashes) {
  return with_protocol(
      view.protocol,
      [&](auto protocol) { return decltype(protocol)::Probes::test(view, view.words, hashes); },
      [] {
        unknown_protocol_trap();
        return false;
      });
}

// The reference query for one digest, both steps.
ABF_HD constexpr bool might_contain(const FilterView& view, const std::uint8_t* digest) {
  return with_protocol(
      view.protocol,
      [&](auto protocol) {
        using P = decltype(protocol);
        return P::Probes::test(view, view.words, P::hashes(view, digest));
      },
      [] {
        unknown_protocol_trap();
        return false;
      });
}

// Step 2 of the reference insert into a mutable bitset of this scheme.
ABF_HD constexpr void insert_hashes(const Scheme& scheme, std::uint64_t* words, HashPair hashes) {
  with_protocol(scheme.protocol, [&](auto protocol) {
    decltype(protocol)::Probes::insert(scheme, words, hashes);
  });
}

// The reference insert for one digest, both steps.
ABF_HD constexpr void insert(const Scheme& scheme, std::uint64_t* words,
                             const std::uint8_t* digest) {
  with_protocol(scheme.protocol, [&](auto protocol) {
    using P = decltype(protocol);
    P::Probes::insert(scheme, words, P::hashes(scheme, digest));
  });
}

}  // namespace abf::probe
