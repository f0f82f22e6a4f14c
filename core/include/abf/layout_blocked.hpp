// Layout selection for the one-line protocols 3 and 4 (docs/protocol.md
// section 3c): k is always 8, the layout is the block count B (m = 512 B),
// chosen by a binary search over an exact Poisson model of the
// false-positive rate, evaluated in plain binary64 operations in a fixed
// order (layout_blocked.cpp is compiled with contraction off, so that every
// language and compiler gets the same bits; vectors/v3/layout-v3.tsv pins
// the modeled rate of every row as a hex float).
#pragma once

#include <cstdint>

#include "abf/error.hpp"
#include "abf/layout.hpp"

namespace abf {

// modeled3(x, B): the average over a block's load L ~ Poisson(x / B) of
// (1 - (63/64)^L)^8, exactly as section 3c writes it. 0 for x = 0; B >= 1.
double modeled3(std::uint64_t items, std::uint64_t block_count) noexcept;

// Section 3c: n in 1..2^36 (kInvalidExpectedItemCount), 0 < p < 1
// (kInvalidFalsePositiveRate), modeled3(n, 2^31) <= p (kFilterTooLarge);
// then the smallest B with modeled3(n, B) <= p by the section's binary
// search. The result's bit_count is 512 B, its hash_count 8.
Result<Layout> choose_blocked_layout(const BloomSpec& spec);

// modeled3(items, bit_count / 512): the estimate of section 6 for protocols
// 3 and 4.
double modeled_blocked_false_positive_rate(const Layout& layout, std::uint64_t items) noexcept;

}  // namespace abf
