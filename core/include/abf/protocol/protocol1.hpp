// hashProtocolVersion 1 (docs/protocol.md section 4): unkeyed, classic layout.
#pragma once

#include <cstdint>

#include "abf/protocol/classic.hpp"
#include "abf/protocol/common.hpp"

namespace abf::probe {

// h1 and h2 of a 32-byte digest: its first two big-endian words.
ABF_HD constexpr std::uint64_t h1_of(const std::uint8_t* digest) { return load_be64(digest); }
ABF_HD constexpr std::uint64_t h2_of(const std::uint8_t* digest) { return load_be64(digest + 8); }

// Protocol 1's step 1.
ABF_HD constexpr HashPair unkeyed_hashes(const std::uint8_t* digest) {
  return HashPair{h1_of(digest), h2_of(digest)};
}

struct Protocol1 {
  static constexpr std::uint32_t kVersion = kProtocolUnkeyed;
  static constexpr bool kKeyed = false;
  static constexpr const char* kName = "1 (classic, unkeyed)";
  using Probes = ClassicProbes;

  // Step 1: the digest's first two big-endian words.
  ABF_HD static constexpr HashPair hashes(const Scheme&, const std::uint8_t* digest) {
    return unkeyed_hashes(digest);
  }
  // Section 7: snapshots of format version 1 and 2 may hold it.
  static constexpr bool format_allows(std::uint32_t format_version) {
    return format_version == 1 || format_version == 2;
  }
};

}  // namespace abf::probe
