// hashProtocolVersion 4 (docs/protocol.md section 4c): keyed (SipHash-2-4-128
// of the digest under a secret key, as protocol 2), one-line layout.
#pragma once

#include <cstdint>

#include "abf/blocked.hpp"
#include "abf/protocol/blocked.hpp"
#include "abf/protocol/common.hpp"

namespace abf::probe {

struct Protocol4 {
  static constexpr std::uint32_t kVersion = blocked::kProtocolBlockedKeyed;
  static constexpr bool kKeyed = true;
  static constexpr const char* kName = "4 (blocked, keyed)";
  using Probes = BlockedProbes;

  // Step 1: h = the first little-endian word of SipHash-2-4-128(K, digest),
  // q = its second (the output bytes 8..16).
  ABF_HD static constexpr HashPair hashes(const Scheme& scheme, const std::uint8_t* digest) {
    const blocked::LineHash line = blocked::keyed_line_hash(scheme.key, digest);
    return HashPair{line.h, line.q};
  }
  static constexpr bool format_allows(std::uint32_t format_version) { return format_version == 2; }
};

}  // namespace abf::probe
