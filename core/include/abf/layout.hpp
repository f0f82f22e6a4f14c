// Layout selection: how many bits m and probes k a filter gets for a design
// capacity n and target false-positive rate p (PROTOCOL.md section 3).
#pragma once

#include <cstdint>

#include "abf/error.hpp"

namespace abf {

// The design inputs of a filter.
struct BloomSpec {
  std::uint64_t expected_item_count = 0;  // n, 1..2^30
  double target_fpp = 0.0;                // p, 0 < p < 1
};

// The chosen geometry.
struct Layout {
  std::uint64_t bit_count = 0;   // m: a multiple of 64 in 64..2^30
  std::uint32_t hash_count = 0;  // k: 1..32

  friend constexpr bool operator==(const Layout&, const Layout&) = default;
};

// Picks (m, k) exactly as section 3 prescribes: the smallest m, then the
// smallest k, whose modeled rate is <= p. Errors: kInvalidExpectedItemCount,
// kInvalidFalsePositiveRate, kFilterTooLarge.
Result<Layout> choose_layout(const BloomSpec& spec);

// (-expm1(-k * items / m))^k: the modeled false-positive rate of a filter of
// this layout holding `items` digests (duplicates counted).
double modeled_false_positive_rate(const Layout& layout, std::uint64_t items) noexcept;

}  // namespace abf
