// Per-target vector content fingerprint (abf/fingerprint.hpp): XXH3-128
// (seed 0) of each 32-byte digest, summed mod 2^128, one digest a lane.
// Included once per Highway target by probe_simd.cc (FingerprintBatch) and
// blocked_simd.cc (the protocol-3/4 inserts, which sum it in the same pass
// that sets the bits), hence the toggle guard instead of #pragma once.
//
// For a 32-byte input XXH3-128 is one round of XXH128_mix32B and the finish
// of XXH3_len_17to128_128b (xxhash.h 0.8): two 64x64 -> 128-bit products,
// three 64-bit ones and two avalanches, here built from 32x32 -> 64-bit
// MulEven (AVX2 has no 64-bit multiply; AVX-512 has vpmullq for the 64-bit
// ones). Tested against the library on every target
// (SimdTargetTest.ContentFingerprintEqualsTheLibrary, and the blocked
// builds' fingerprints in simd_blocked_test).

// Normal include guard for the target-independent part.
#ifndef ABF_SIMD_FINGERPRINT_INL_COMMON_H_
#define ABF_SIMD_FINGERPRINT_INL_COMMON_H_

#include <cstddef>
#include <cstdint>

#include "abf/digest.hpp"
#include "abf/fingerprint.hpp"

// XXH3's constants (XXH_PRIME64_*, XXH3_kSecret), from the library's own
// header.
#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

#endif  // ABF_SIMD_FINGERPRINT_INL_COMMON_H_

#if defined(ABF_SIMD_FINGERPRINT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ABF_SIMD_FINGERPRINT_INL_H_
#undef ABF_SIMD_FINGERPRINT_INL_H_
#else
#define ABF_SIMD_FINGERPRINT_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace abf::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The 128-bit product of the u64 lanes a and b, as its low and high halves
// (XXH_mult64to128's portable form, a lane at a time).
template <class D, class V = hn::VFromD<D>>
HWY_INLINE void Mul128(D d, V a, V b, V& low, V& high) {
#if HWY_TARGET == HWY_SCALAR
  __extension__ using U128 = unsigned __int128;
  const U128 product = static_cast<U128>(hn::GetLane(a)) * hn::GetLane(b);
  low = hn::Set(d, static_cast<std::uint64_t>(product));
  high = hn::Set(d, static_cast<std::uint64_t>(product >> 64));
#else
  const hn::Repartition<std::uint32_t, D> d32;
  const V a_high = hn::ShiftRight<32>(a);
  const V b_high = hn::ShiftRight<32>(b);
  const V lo_lo = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, b));
  const V hi_lo = hn::MulEven(hn::BitCast(d32, a_high), hn::BitCast(d32, b));
  const V lo_hi = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, b_high));
  const V hi_hi = hn::MulEven(hn::BitCast(d32, a_high), hn::BitCast(d32, b_high));
  const V low32 = hn::Set(d, std::uint64_t{0xffffffff});
  // Cannot overflow: at most (2^32 - 1)^2 + 2 (2^32 - 1) = 2^64 - 1.
  const V cross = hn::Add(hn::Add(hn::ShiftRight<32>(lo_lo), hn::And(hi_lo, low32)), lo_hi);
  high = hn::Add(hn::Add(hn::ShiftRight<32>(hi_lo), hn::ShiftRight<32>(cross)), hi_hi);
  low = hn::Or(hn::ShiftLeft<32>(cross), hn::And(lo_lo, low32));
#endif
}

// a * constant mod 2^64 in every lane.
template <class D, class V = hn::VFromD<D>>
HWY_INLINE V MulLow64(D d, V a, std::uint64_t constant) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(d, hn::GetLane(a) * constant);
#elif HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  return a * hn::Set(d, constant);  // vpmullq
#else
  const hn::Repartition<std::uint32_t, D> d32;
  const V c = hn::Set(d, constant);
  const V c_high = hn::Set(d, constant >> 32);
  const V lo_lo = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, c));
  const V cross = hn::Add(hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(a)), hn::BitCast(d32, c)),
                          hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, c_high)));
  return hn::Add(lo_lo, hn::ShiftLeft<32>(cross));
#endif
}

// XXH3_avalanche.
template <class D, class V = hn::VFromD<D>>
HWY_INLINE V Avalanche(D d, V h) {
  h = hn::Xor(h, hn::ShiftRight<37>(h));
  h = MulLow64(d, h, 0x165667919E3779F9ULL);
  return hn::Xor(h, hn::ShiftRight<32>(h));
}

// The running sum of the fingerprints of Lanes(d) digests at a time, a
// 128-bit sum in each lane (low and high words); Total() adds the lanes.
template <class D>
class FingerprintLanes {
 public:
  using V = hn::VFromD<D>;

  explicit FingerprintLanes(D d)
      : s0_(hn::Set(d, Secret(0))),
        s1_(hn::Set(d, Secret(1))),
        s2_(hn::Set(d, Secret(2))),
        s3_(hn::Set(d, Secret(3))),
        start_(hn::Set(d, kLength * XXH_PRIME64_1)),
        length_term_(hn::Set(d, kLength * XXH_PRIME64_2)),  // (len - seed) * PRIME64_2
        sum_low_(hn::Zero(d)),
        sum_high_(hn::Zero(d)) {}

  // Adds the digests whose little-endian words 0..3 are the lanes of w0..w3
  // (LoadInterleaved4 of Lanes(d) digests).
  HWY_INLINE void Add(D d, V w0, V w1, V w2, V w3) {
    V lo, hi;
    // XXH128_mix32B(acc, input, input + 16, secret, 0).
    Mul128(d, hn::Xor(w0, s0_), hn::Xor(w1, s1_), lo, hi);
    const V acc_low = hn::Xor(hn::Add(start_, hn::Xor(lo, hi)), hn::Add(w2, w3));
    Mul128(d, hn::Xor(w2, s2_), hn::Xor(w3, s3_), lo, hi);
    const V acc_high = hn::Xor(hn::Xor(lo, hi), hn::Add(w0, w1));
    const V low = Avalanche(d, hn::Add(acc_low, acc_high));
    const V high_in =
        hn::Add(hn::Add(MulLow64(d, acc_low, XXH_PRIME64_1), MulLow64(d, acc_high, XXH_PRIME64_4)),
                length_term_);
    // The hash's high word is 0 - avalanche(high_in): subtracted, not
    // negated and added. The lane's running sum mod 2^128: a carry out of
    // the low half adds one to the high half (subtracting the all-ones mask).
    sum_low_ = hn::Add(sum_low_, low);
    sum_high_ = hn::Sub(hn::Sub(sum_high_, Avalanche(d, high_in)),
                        hn::VecFromMask(d, hn::Lt(sum_low_, low)));
  }

  // Adds Lanes(d) digests from memory.
  HWY_INLINE void Add(D d, const Digest* digests) {
    V w0, w1, w2, w3;
    hn::LoadInterleaved4(d, reinterpret_cast<const std::uint64_t*>(digests), w0, w1, w2, w3);
    Add(d, w0, w1, w2, w3);
  }

  // The lanes' sums added.
  ContentFingerprint Total(D d) const {
    HWY_ALIGN std::uint64_t lows[HWY_MAX_BYTES / sizeof(std::uint64_t)];
    HWY_ALIGN std::uint64_t highs[HWY_MAX_BYTES / sizeof(std::uint64_t)];
    hn::Store(sum_low_, d, lows);
    hn::Store(sum_high_, d, highs);
    ContentFingerprint total;
    for (std::size_t lane = 0; lane < hn::Lanes(d); ++lane) {
      total += {.low = lows[lane], .high = highs[lane]};
    }
    return total;
  }

 private:
  static constexpr std::uint64_t kLength = Digest::kSize;
  static std::uint64_t Secret(std::size_t word) { return XXH_readLE64(XXH3_kSecret + 8 * word); }

  V s0_, s1_, s2_, s3_, start_, length_term_;
  V sum_low_, sum_high_;
};

// The fingerprint of digests [0, count): whole vectors of Lanes(d), the
// rest one by one.
HWY_INLINE ContentFingerprint FingerprintRange(const Digest* digests, std::size_t count) {
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  FingerprintLanes<decltype(d)> sum(d);
  std::size_t i = 0;
  for (; i + lanes <= count; i += lanes) sum.Add(d, digests + i);
  ContentFingerprint total = sum.Total(d);
  for (; i < count; ++i) total += ContentFingerprint::of(digests[i]);
  return total;
}

}  // namespace abf::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ABF_SIMD_FINGERPRINT_INL_H_
