// hashProtocolVersion 2 (docs/protocol.md section 4b): keyed (SipHash-2-4-128
// of the digest under a secret key), classic layout.
#pragma once

#include <cstdint>

#include "abf/protocol/classic.hpp"
#include "abf/protocol/common.hpp"
#include "abf/siphash.hpp"

namespace abf::probe {

// Protocol 2's step 1: the two little-endian words of SipHash-2-4-128(K, digest).
ABF_HD constexpr HashPair keyed_hashes(const KeySchedule& key, const std::uint8_t* digest) {
  const Sip128 tag = siphash24_128(key, digest, 32);
  return HashPair{tag.lo, tag.hi};
}

struct Protocol2 {
  static constexpr std::uint32_t kVersion = kProtocolKeyed;
  static constexpr bool kKeyed = true;
  static constexpr const char* kName = "2 (classic, keyed)";
  using Probes = ClassicProbes;

  ABF_HD static constexpr HashPair hashes(const Scheme& scheme, const std::uint8_t* digest) {
    return keyed_hashes(scheme.key, digest);
  }
  // Section 7: keys arrived with format version 2.
  static constexpr bool format_allows(std::uint32_t format_version) { return format_version == 2; }
};

}  // namespace abf::probe
