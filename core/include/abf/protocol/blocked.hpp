// Step 2 of the one-line layout (docs/protocol.md sections 3c and 4c),
// shared by protocols 3 and 4: a policy's `Probes`. The math is
// abf/blocked.hpp's (block = floor(h * B / 2^64), bit q[j] mod 64 of word
// 8b + j); this type gives it the probe-kind interface the engines and the
// header rules ask for: the limits, the reference test and insert, and
// (host only, core/src/layout_blocked.cpp) the model and the layout rule.
//
// A one-line policy's step 1 yields HashPair{h, q}: h1 the block hash, h2
// the little-endian word of the eight position bytes.
#pragma once

#include <cstdint>

#include "abf/blocked.hpp"
#include "abf/protocol/common.hpp"

namespace abf {
struct FillBounds;                    // abf/layout.hpp
enum class FillCheck : std::uint8_t;  // abf/layout.hpp
}  // namespace abf

namespace abf::probe {

struct BlockedProbes {
  static constexpr const char* kName = "blocked";

  // --- Limits (section 3c) ---------------------------------------------------------
  static constexpr std::uint64_t kBitGranularity = blocked::kBlockBits;
  static constexpr std::uint64_t kMinBitCount = blocked::kMinBitCount;
  static constexpr std::uint64_t kMaxBitCount = blocked::kMaxBitCount;
  static constexpr std::uint32_t kMinHashCount = blocked::kHashCount;
  static constexpr std::uint32_t kMaxHashCount = blocked::kHashCount;
  static constexpr std::uint64_t kMaxExpectedItemCount = blocked::kMaxExpectedItemCount;
  static constexpr const char* kBitCountRule = "a multiple of 512 in 512..2^40";
  static constexpr const char* kHashCountRule = "8";
  static constexpr const char* kMaxBitCountText = "2^40";
  static constexpr const char* kMaxExpectedItemCountText = "2^36";

  ABF_HD static constexpr blocked::LineHash line(HashPair hashes) {
    return blocked::LineHash{hashes.h1, hashes.h2};
  }
  ABF_HD static constexpr std::uint64_t block_count(const Scheme& scheme) {
    return scheme.bit_count / blocked::kBlockBits;
  }

  // What the engines hand for_each_position: the filter's bit count (the
  // one-line layout needs no reduction; B = m / 512).
  struct FastReduce {
    std::uint64_t m = blocked::kBlockBits;
    constexpr FastReduce() = default;
    ABF_HD constexpr explicit FastReduce(std::uint64_t bit_count) : m(bit_count) {}
  };

  // Calls visit(i) for the eight bit positions (64-bit: up to 2^40), word 0
  // to word 7; stops at, and returns false for, the first visit that
  // returns false. k is always 8.
  template <class Reduce, class Visit>
  ABF_HD static constexpr bool for_each_position(HashPair hashes, std::uint32_t /*k*/,
                                                 const Reduce& reduce, Visit&& visit) {
    const std::uint64_t block = blocked::block_of(hashes.h1, reduce.m / blocked::kBlockBits);
    for (unsigned j = 0; j < blocked::kWordsPerBlock; ++j) {
      if (!visit(blocked::bit_index(block, hashes.h2, j))) return false;
    }
    return true;
  }

  // The reference test: true ("Maybe") iff all eight bits are set.
  ABF_HD static constexpr bool test(const Scheme& scheme, const std::uint64_t* words,
                                    HashPair hashes) {
    return blocked::might_contain_hash(words, block_count(scheme), line(hashes));
  }
  // The reference insert.
  ABF_HD static constexpr void insert(const Scheme& scheme, std::uint64_t* words,
                                      HashPair hashes) {
    blocked::insert_hash(words, block_count(scheme), line(hashes));
  }

  // --- Layout rule and estimate (host only: core/src/layout_blocked.cpp) ----------
  // modeled3(items, m / 512).
  static double modeled_false_positive_rate(std::uint64_t bit_count, std::uint32_t hash_count,
                                            std::uint64_t items) noexcept;
  // Section 3c's binary search; false when 2^31 blocks do not reach p.
  static bool choose_layout(std::uint64_t n, double p, std::uint64_t& bit_count,
                            std::uint32_t& hash_count) noexcept;
  // The classic bounds (every insertion sets 8 distinct bits, each bit with
  // probability 8 / m: the same expectation and spread bound).
  static FillBounds plausible_fill(std::uint64_t bit_count, std::uint32_t hash_count,
                                   std::uint64_t inserted, FillCheck check) noexcept;
};

}  // namespace abf::probe
