// Layout selection: how many bits m and probes k a filter gets for a design
// capacity n and target false-positive rate p (docs/protocol.md section 3).
#pragma once

#include <cstdint>
#include <string>

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

// Picks (m, k) by the layout rule of hashProtocolVersion `protocol` (its
// policy's Probes, abf/protocol/): for protocols 1 and 2 exactly as section
// 3 prescribes, the smallest m, then the smallest k, whose modeled rate is
// <= p. Errors: kInvalidExpectedItemCount, kInvalidFalsePositiveRate,
// kFilterTooLarge, and kSnapshotUnsupportedHashProtocol for a version this
// build does not implement.
Result<Layout> choose_layout(const BloomSpec& spec, std::uint32_t protocol = 1);

// The modeled false-positive rate of a filter of this layout and protocol
// holding `items` digests (duplicates counted): for protocols 1 and 2,
// (-expm1(-k * items / m))^k. NaN for an unknown protocol.
double modeled_false_positive_rate(const Layout& layout, std::uint64_t items,
                                   std::uint32_t protocol = 1) noexcept;

// --- Plausibility of a payload's population count (docs/protocol.md,
// "Plausibility of the fill") -------------------------------------------------
//
// Every insertion sets exactly k distinct bits (section 4: the step is odd
// and m a multiple of 64), each bit with probability k / m. So after N
// insertions of uniformly spread digests the number of set bits X has
//   expected  E = m * (1 - (1 - k/m)^N)   (N distinct digests)
// and duplicates only make X smaller. The spread of X lies between that of
// independent bits and that of k bits moving together, so its standard
// deviation is at most sigma = sqrt(k * m * q * (1 - q)), q = (1 - k/m)^N.
// The bounds allow 8 sigma + k either side (a legitimate build falls outside
// with probability far below 1e-12; the sweep in core_fill_test builds from
// N = 1 to 1e6 and never comes near):
//   any N >= 1:            k <= X <= min(m, k * N, E + 8 sigma + k)
//   N = 0:                 X = 0
//   distinct insertions:   also X >= E - 8 sigma - k
// The lower bound holds only when the N insertions were N distinct digests
// (a catalog version's digests are); a build that inserts duplicates sets
// fewer bits, so loaders check only the upper bounds.
enum class FillCheck : std::uint8_t {
  // insertedItemCount counts duplicates: k <= X <= min(m, k*N, E + margin).
  kAnyInsertions,
  // The insertedItemCount insertions were distinct digests: the above, and
  // X >= E - margin.
  kDistinctInsertions,
};

// The bounds above for a filter of `layout` after `inserted` insertions.
struct FillBounds {
  std::uint64_t low = 0;   // the least plausible popcount
  std::uint64_t high = 0;  // the most plausible popcount
  double expected = 0.0;   // E
};
// Under hashProtocolVersion `protocol`'s policy (the classic bounds above
// for protocols 1 and 2; all zero for an unknown protocol).
FillBounds plausible_fill(const Layout& layout, std::uint64_t inserted, FillCheck check,
                          std::uint32_t protocol = 1) noexcept;

// Empty when `popcount` set bits are plausible for `inserted` insertions
// into `layout`; otherwise what is wrong, with the numbers ("2000
// insertions set 0 of 19200 bits; at least 7 expected").
std::string describe_fill_fault(const Layout& layout, std::uint64_t inserted,
                                std::uint64_t popcount, FillCheck check,
                                std::uint32_t protocol = 1);

}  // namespace abf
