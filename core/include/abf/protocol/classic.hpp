// Step 2 of the classic layout (docs/protocol.md sections 3, 4 and 5), shared
// by protocols 1 and 2: a policy's `Probes`. Everything a classic filter does
// with its step-1 words (h1, h2) is here once: the k probe positions, the
// reference test and insert, the layout's limits, and (host only, defined in
// core/src/layout.cpp) section 3's model and choice of (m, k).
//
//   i_0 = h1 mod m, step = (h2 | 1) mod m, i_j+1 = (i_j + step) mod m.
//
// Engines that need their own form of this step (the SIMD vector rounds,
// simd/probe_simd-inl.h) write it once per probe kind, not per protocol.
#pragma once

#include <cstdint>

#include "abf/protocol/common.hpp"

namespace abf {
struct FillBounds;                       // abf/layout.hpp
enum class FillCheck : std::uint8_t;     // abf/layout.hpp
}  // namespace abf

namespace abf::probe {

// Exact x mod m for any 64-bit x and a fixed m in [1, 2^32), without a
// division: Lemire, Kaser and Kurz, "Faster remainder by direct computation"
// (2019), with a 128-bit reciprocal c = ceil(2^128 / m). Their bound needs
// F >= N + log2(m) fractional bits, 128 >= 64 + 32 here. Four 64-bit
// multiplies instead of a 64-bit divide: on Zen 4 a `div r64` costs about
// 14 cycles of latency, on a GPU 64-bit `%` is a long software routine.
// Tests prove it equal to `%` over the m, h sweep of the backends.
struct Reducer {
  std::uint64_t m = 1;
  std::uint64_t c_hi = 0;  // c = c_hi * 2^64 + c_lo = floor((2^128 - 1) / m) + 1
  std::uint64_t c_lo = 0;

  constexpr Reducer() = default;
  ABF_HD constexpr explicit Reducer(std::uint64_t divisor) : m(divisor) {
    // floor((2^128 - 1) / m) by long division in two 64-bit halves.
    const std::uint64_t all = ~std::uint64_t{0};
    const std::uint64_t q_hi = all / m;
    const std::uint64_t r_hi = all % m;
    // (r_hi * 2^64 + all) / m with r_hi < m < 2^32: split the low word in
    // two 32-bit digits so every partial dividend fits in 64 bits.
    std::uint64_t rem = r_hi;
    std::uint64_t q_lo = 0;
    for (int shift = 32; shift >= 0; shift -= 32) {
      const std::uint64_t digit = (all >> shift) & 0xffffffffu;
      const std::uint64_t part = (rem << 32) | digit;
      q_lo = (q_lo << 32) | (part / m);
      rem = part % m;
    }
    c_lo = q_lo + 1;
    c_hi = q_hi + (c_lo == 0 ? 1 : 0);
  }

  ABF_HD constexpr std::uint64_t reduce(std::uint64_t x) const {
    // low = (c * x) mod 2^128
    const std::uint64_t low_lo = c_lo * x;
    const std::uint64_t low_hi = mul_hi64(c_lo, x) + c_hi * x;
    // (low * m) >> 128, m < 2^32
    const std::uint64_t mid = low_hi * m;  // low 64 bits of low_hi * m
    const std::uint64_t carry_in = mul_hi64(low_lo, m);
    const std::uint64_t carry = (mid + carry_in < mid) ? 1 : 0;
    return mul_hi64(low_hi, m) + carry;
  }
};

// x mod m by the `%` operator: the reference's reduction.
struct Modulo {
  std::uint64_t m = 1;
  ABF_HD constexpr std::uint64_t reduce(std::uint64_t x) const { return x % m; }
};

struct ClassicProbes {
  static constexpr const char* kName = "classic";

  // --- Limits (section 3) ------------------------------------------------------
  // m is a multiple of kBitGranularity in [kMinBitCount, kMaxBitCount]; k in
  // [kMinHashCount, kMaxHashCount]; n at most kMaxExpectedItemCount.
  static constexpr std::uint64_t kBitGranularity = 64;
  static constexpr std::uint64_t kMinBitCount = 64;
  static constexpr std::uint64_t kMaxBitCount = std::uint64_t{1} << 30;
  static constexpr std::uint32_t kMinHashCount = 1;
  static constexpr std::uint32_t kMaxHashCount = 32;
  static constexpr std::uint64_t kMaxExpectedItemCount = std::uint64_t{1} << 30;
  // The limits in words, for messages ("bit count 100 is not a multiple of
  // 64 in 64..2^30").
  static constexpr const char* kBitCountRule = "a multiple of 64 in 64..2^30";
  static constexpr const char* kHashCountRule = "1..32";
  static constexpr const char* kMaxBitCountText = "2^30";
  static constexpr const char* kMaxExpectedItemCountText = "2^30";

  // --- Step 2 ----------------------------------------------------------------------

  // The division-free x mod m the fast paths pass to for_each_position
  // (m < 2^32).
  using FastReduce = Reducer;

  // i_0 = h1 mod m.
  ABF_HD static constexpr std::uint64_t first_index(std::uint64_t h1, std::uint64_t m) {
    return h1 % m;
  }
  // step = (h2 | 1) mod m. Odd before the reduction; since m is a multiple of
  // 64, step stays odd, so the k <= 32 positions are distinct.
  ABF_HD static constexpr std::uint64_t step_of(std::uint64_t h2, std::uint64_t m) {
    return (h2 | 1) % m;
  }
  // i_{j+1} = (i_j + step) mod m. Both terms are < m <= 2^30, so one
  // conditional subtraction is the exact reduction.
  ABF_HD static constexpr std::uint64_t advance(std::uint64_t i, std::uint64_t step,
                                                std::uint64_t m) {
    const std::uint64_t next = i + step;
    return next >= m ? next - m : next;
  }

  // Calls visit(i) for the k positions of `hashes` in probe order, with
  // `reduce` the x mod m of this filter (Modulo, Reducer, or an engine's
  // own: all proven equal to `%`). Stops at, and returns false for, the
  // first visit that returns false; true when all k were visited.
  template <class Reduce, class Visit>
  ABF_HD static constexpr bool for_each_position(HashPair hashes, std::uint32_t k,
                                                 const Reduce& reduce, Visit&& visit) {
    const std::uint64_t m = reduce.m;
    std::uint64_t i = reduce.reduce(hashes.h1);
    const std::uint64_t step = reduce.reduce(hashes.h2 | 1);
    for (std::uint32_t j = 0; j < k; ++j) {
      if (!visit(i)) return false;
      i = advance(i, step, m);
    }
    return true;
  }

  // The reference test: true ("Maybe") iff all k bits are set.
  ABF_HD static constexpr bool test(const Scheme& scheme, const std::uint64_t* words,
                                    HashPair hashes) {
    return for_each_position(hashes, scheme.hash_count, Modulo{scheme.bit_count},
                             [words](std::uint64_t i) { return (words[word_of(i)] & mask_of(i)) != 0; });
  }

  // The reference insert into a mutable bitset of this scheme.
  ABF_HD static constexpr void insert(const Scheme& scheme, std::uint64_t* words,
                                      HashPair hashes) {
    for_each_position(hashes, scheme.hash_count, Modulo{scheme.bit_count},
                      [words](std::uint64_t i) {
                        words[word_of(i)] |= mask_of(i);
                        return true;
                      });
  }

  // --- Layout rule and estimate (host only: core/src/layout.cpp) ----------------

  // (-expm1(-k * items / m))^k: section 3's model of the false-positive
  // rate of (m, k) holding `items` digests (duplicates counted).
  static double modeled_false_positive_rate(std::uint64_t bit_count, std::uint32_t hash_count,
                                            std::uint64_t items) noexcept;
  // Section 3's choice for n (in 1..kMaxExpectedItemCount) and p (0 < p < 1):
  // the smallest m, then the smallest k, whose modeled rate is <= p. False
  // when no (m, k) within the limits reaches p.
  static bool choose_layout(std::uint64_t n, double p, std::uint64_t& bit_count,
                            std::uint32_t& hash_count) noexcept;
  // The plausible population counts of (m, k) after `inserted` insertions
  // ("Plausibility of the fill", abf/layout.hpp has the derivation).
  static FillBounds plausible_fill(std::uint64_t bit_count, std::uint32_t hash_count,
                                   std::uint64_t inserted, FillCheck check) noexcept;
};

}  // namespace abf::probe
