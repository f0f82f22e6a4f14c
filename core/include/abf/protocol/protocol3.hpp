// hashProtocolVersion 3 (docs/protocol.md section 4c): unkeyed, one-line
// layout (section 3c).
#pragma once

#include <cstdint>

#include "abf/blocked.hpp"
#include "abf/protocol/blocked.hpp"
#include "abf/protocol/common.hpp"

namespace abf::probe {

struct Protocol3 {
  static constexpr std::uint32_t kVersion = blocked::kProtocolBlocked;
  static constexpr bool kKeyed = false;
  static constexpr const char* kName = "3 (blocked, unkeyed)";
  using Probes = BlockedProbes;

  // Step 1: h = the big-endian d[0..8), q = the bytes d[8..16).
  ABF_HD static constexpr HashPair hashes(const Scheme&, const std::uint8_t* digest) {
    const blocked::LineHash line = blocked::unkeyed_line_hash(digest);
    return HashPair{line.h, line.q};
  }
  // Section 7: the one-line protocols exist only in format version 2.
  static constexpr bool format_allows(std::uint32_t format_version) { return format_version == 2; }
};

}  // namespace abf::probe
