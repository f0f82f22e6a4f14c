// Per-target kernels of the SIMD probe engine: vector index computation
// (first probe and step of every digest) and the batched probe loops.
// Included once per Highway target by probe_simd.cc through foreach_target.h,
// hence the toggle guard instead of #pragma once.

// Normal include guard for the target-independent part.
#ifndef ABF_SIMD_PROBE_SIMD_INL_COMMON_H_
#define ABF_SIMD_PROBE_SIMD_INL_COMMON_H_

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/probe.hpp"
#include "prefetch.hpp"
#include "probe_simd.h"

namespace abf::simd::detail {

// Digests per block. A block's probe state (position|id and step, 16 bytes a
// digest) stays in L1, and its 1024 independent first probes give the
// prefetcher below enough distance to cover DRAM latency; the last rounds of
// a block, with few survivors left, pay about one latency each, 1/1024 of it
// per digest.
inline constexpr std::size_t kBlock = 1024;
// Filters smaller than this sit in L2 (1 MiB a core here); prefetching them
// only costs instructions.
inline constexpr std::uint64_t kPrefetchMinBytes = std::uint64_t{1} << 20;

// How many probes ahead a compaction round prefetches. Measured on the
// absent-query benchmark (ns per digest at distance 16 / 32 / 64 / 128 / 256):
// llc 5.4 / 6.8 / 5.4 / 5.1 / 5.5, dram 39 / 30 / 22 / 18.4 / 18.2; prefetching
// the whole round first gave 5.9 and 20. The LLC's shorter latency is
// covered at 128; further ahead only holds more lines in flight.
inline std::size_t prefetch_distance(std::uint64_t bit_count) {
  return bit_count / 8 > (std::uint64_t{32} << 20) ? 256 : 128;
}

// A probe's state packs the digest's index within its block (high 32 bits)
// with its current bit position (low 32 bits, < m <= 2^30): one load, one
// store per compaction step, and position + step never carries into the id.
inline constexpr std::uint64_t kPositionMask = 0xffffffffu;

// Helpers written as lambdas are called more than once per kernel; GCC
// otherwise keeps them out of line (measured 10% slower at l2).
#define ABF_INLINE_LAMBDA __attribute__((always_inline))

// Digests per batch of the straight finish: their remaining probe positions
// and word indices take 2 x 8 bytes x 64 x k, 7 KiB at k = 7.
inline constexpr std::size_t kStraight = 64;

// Digests per batch of the insert (a divisor of kStraight). Filters below
// kPrefetchMinBytes take whole kStraight batches (fewer loop turns); larger
// ones prefetch the k x batch lines of the next batch while setting this
// one's, and a short distance measured best (BM_ProbeBuild, ns per digest at
// batch 8 / 16 / 32 / 64: llc 7.4 / 6.4 / 6.4 / 7.7, dram 27 / 19.1 / 20.6 /
// 22.6).
inline std::size_t insert_batch_size(std::uint64_t bit_count) {
  return bit_count / 8 >= kPrefetchMinBytes ? 16 : kStraight;
}

// Scratch of one block; one per thread (thread_scratch()).
struct alignas(64) BlockState {
  std::uint64_t state[kBlock];
  std::uint64_t step[kBlock];
  // The straight finish and the insert, double-buffered (one batch is
  // prefetched while the previous one is tested): positions[b][j * kStraight
  // + i] is probe j of digest i of batch buffer b.
  std::uint64_t positions[2][probe::kMaxHashCount * kStraight];
  std::uint64_t word_index[2][probe::kMaxHashCount * kStraight];  // positions >> 6
  std::uint64_t id[2][kStraight];
  std::uint64_t loaded[kStraight];  // words[word_index] of one probe
  std::uint64_t all[kStraight];     // AND of the tested bits
  std::uint64_t first[kStraight];
  std::uint64_t straight_step[kStraight];
};

// This thread's BlockState (the engine is not reentrant on one thread: it
// calls no user code).
BlockState& thread_scratch();

}  // namespace abf::simd::detail

#endif  // ABF_SIMD_PROBE_SIMD_INL_COMMON_H_

#if defined(ABF_SIMD_PROBE_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ABF_SIMD_PROBE_SIMD_INL_H_
#undef ABF_SIMD_PROBE_SIMD_INL_H_
#else
#define ABF_SIMD_PROBE_SIMD_INL_H_
#endif

#include "hwy/cache_control.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace abf::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The per-filter constants of simd::ModConstants, broadcast once per batch.
template <class D>
struct ModVectors {
  using DF = hn::Rebind<double, D>;
  hn::VFromD<D> r34;
  hn::VFromD<DF> m_prime;
  hn::VFromD<DF> inv_m_prime;

  ModVectors(D d, const simd::ModConstants& c)
      : r34(hn::Set(d, c.r34)),
        m_prime(hn::Set(DF(), c.m_prime)),
        inv_m_prime(hn::Set(DF(), c.inv_m_prime)) {}
};

// x mod m, exactly; see simd::ModConstants for the derivation.
template <class D>
HWY_INLINE hn::VFromD<D> ModM(D d, hn::VFromD<D> x, const ModVectors<D>& c) {
  const hn::Rebind<double, D> df;
  const auto two52 = hn::Set(df, 4503599627370496.0);                     // 2^52
  const auto two52_bits = hn::Set(d, std::uint64_t{0x4330000000000000});  // bits of 2^52
  const auto low52 = hn::Set(d, (std::uint64_t{1} << 52) - 1);

  const auto y = hn::ShiftRight<6>(x);
  const auto a = hn::ShiftRight<34>(y);
  const auto b = hn::And(y, hn::Set(d, (std::uint64_t{1} << 34) - 1));
  // a, r34 < 2^24: the even (low) u32 halves hold them whole.
#if HWY_TARGET == HWY_SCALAR
  const auto product = hn::Set(d, hn::GetLane(a) * hn::GetLane(c.r34));  // one lane: no u32 view
#else
  const hn::Repartition<std::uint32_t, D> d32;
  const auto product = hn::MulEven(hn::BitCast(d32, a), hn::BitCast(d32, c.r34));
#endif
  const auto s = hn::Add(product, b);
  // s < 2^49: exact as a double via the 2^52 trick.
  const auto s_f = hn::Sub(hn::BitCast(df, hn::Or(s, two52_bits)), two52);
  // Adding 2^52 rounds s / m' to an integer q: floor(s / m') or one more.
  const auto q_f = hn::Sub(hn::MulAdd(s_f, c.inv_m_prime, two52), two52);
  auto r_f = hn::NegMulAdd(q_f, c.m_prime, s_f);  // s - q m', exact, in (-m', m')
  r_f = hn::Add(r_f, hn::IfThenElseZero(hn::Lt(r_f, hn::Zero(df)), c.m_prime));
  const auto r = hn::And(hn::BitCast(d, hn::Add(r_f, two52)), low52);
  return hn::Or(hn::ShiftLeft<6>(r), hn::And(x, hn::Set(d, std::uint64_t{63})));
}

// Big-endian u64 lanes to native: reverse the bytes of every 8-byte lane.
template <class D>
HWY_INLINE hn::VFromD<D> ByteSwap64(D d, hn::VFromD<D> v) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(d, __builtin_bswap64(hn::GetLane(v)));  // one lane: no byte shuffle
#else
  const hn::Repartition<std::uint8_t, D> d8;
  alignas(16) static constexpr std::uint8_t kReverse[16] = {7,  6,  5,  4,  3,  2,  1, 0,
                                                            15, 14, 13, 12, 11, 10, 9, 8};
  return hn::BitCast(d, hn::TableLookupBytes(hn::BitCast(d8, v), hn::LoadDup128(d8, kReverse)));
#endif
}

// Step 1 of the protocol, digest -> (h1, h2): the one piece that differs
// between protocols, so every kernel below takes it as a template parameter
// and the protocol is chosen once per batch. Each hasher maps the digest's
// four little-endian words (one LoadInterleaved4) to h1 and h2 in lanes, and
// one digest through the protocol header for the tails.

// Protocol 1: the first two big-endian words.
struct UnkeyedHash {
  template <class D, class V = hn::VFromD<D>>
  HWY_INLINE void operator()(D d, V w0, V w1, V /*w2*/, V /*w3*/, V& h1, V& h2) const {
    h1 = ByteSwap64(d, w0);
    h2 = ByteSwap64(d, w1);
  }
  probe::HashPair operator()(const std::uint8_t* digest) const {
    return probe::unkeyed_hashes(digest);
  }
};

// SipHash's round on u64 lanes (siphash.hpp has the scalar one). Rotations
// are right rotations by 64 - b: Highway 1.0.3 has RotateRight only.
template <class V>
HWY_INLINE void SipRound(V& v0, V& v1, V& v2, V& v3) {
  v0 = hn::Add(v0, v1);
  v1 = hn::RotateRight<64 - 13>(v1);
  v1 = hn::Xor(v1, v0);
  v0 = hn::RotateRight<32>(v0);
  v2 = hn::Add(v2, v3);
  v3 = hn::RotateRight<64 - 16>(v3);
  v3 = hn::Xor(v3, v2);
  v0 = hn::Add(v0, v3);
  v3 = hn::RotateRight<64 - 21>(v3);
  v3 = hn::Xor(v3, v0);
  v2 = hn::Add(v2, v1);
  v1 = hn::RotateRight<64 - 17>(v1);
  v1 = hn::Xor(v1, v2);
  v2 = hn::RotateRight<32>(v2);
}

template <class V>
HWY_INLINE void SipAbsorb(V& v0, V& v1, V& v2, V& v3, V m) {
  v3 = hn::Xor(v3, m);
  SipRound(v0, v1, v2, v3);
  SipRound(v0, v1, v2, v3);
  v0 = hn::Xor(v0, m);
}

// Protocol 2: SipHash-2-4-128 of the 32-byte digest under the filter's key,
// one digest per lane: four message blocks, the length block (32 << 56),
// then the 128-bit finalization (probe::siphash24_128_digest).
struct KeyedHash {
  probe::KeySchedule key;

  template <class D, class V = hn::VFromD<D>>
  HWY_INLINE void operator()(D d, V w0, V w1, V w2, V w3, V& h1, V& h2) const {
    V v0 = hn::Set(d, key.v0);
    V v1 = hn::Set(d, key.v1);
    V v2 = hn::Set(d, key.v2);
    V v3 = hn::Set(d, key.v3);
    SipAbsorb(v0, v1, v2, v3, w0);
    SipAbsorb(v0, v1, v2, v3, w1);
    SipAbsorb(v0, v1, v2, v3, w2);
    SipAbsorb(v0, v1, v2, v3, w3);
    SipAbsorb(v0, v1, v2, v3, hn::Set(d, std::uint64_t{32} << 56));
    v2 = hn::Xor(v2, hn::Set(d, std::uint64_t{0xee}));
    for (int r = 0; r < 4; ++r) SipRound(v0, v1, v2, v3);
    h1 = hn::Xor(hn::Xor(v0, v1), hn::Xor(v2, v3));
    v1 = hn::Xor(v1, hn::Set(d, std::uint64_t{0xdd}));
    for (int r = 0; r < 4; ++r) SipRound(v0, v1, v2, v3);
    h2 = hn::Xor(hn::Xor(v0, v1), hn::Xor(v2, v3));
  }
  probe::HashPair operator()(const std::uint8_t* digest) const {
    return probe::keyed_hashes(key, digest);
  }
};

// For digests[0, count), count <= kBlock: first[i] = h1 mod m,
// step[i] = (h2 | 1) mod m. The first `lanes`-multiple go through vectors,
// the rest through the protocol header. Each vector also prefetches the
// digests at the same offset of the next block (next_digests, next_count of
// them): they arrive while this block's probes run, and the next block's
// starts read them from the cache instead of waiting on the input stream,
// which the hardware prefetcher alone does not keep ahead of. Measured
// (BM_ProbeQuery, one thread, medians of 5, four alternating runs): llc
// query_absent 23.0-25.5 -> 14.2-17.5 ms, query_present 46.5-48.3 ->
// 37.5-40.2 ms; dram 41.4-42.6 -> 36.8-37.8 and 109-116 -> 107 ms; l2 alike.
//
// kReduceStep false leaves step[i] = h2 | 1 unreduced, for QueryBlock's
// vector rounds, which reduce only the steps of the digests that pass their
// first probe (ReduceSteps).
template <bool kReduceStep = true, class Hash, class StoreFirst>
HWY_INLINE void ComputeStarts(const Hash& hash, const simd::ModConstants& constants,
                              const Digest* digests, std::size_t count, std::uint64_t* step,
                              StoreFirst&& store_first, const Digest* next_digests = nullptr,
                              std::size_t next_count = 0) {
  using D = hn::ScalableTag<std::uint64_t>;
  const D d;
  const std::size_t lanes = hn::Lanes(d);
  const ModVectors<D> c(d, constants);
  const auto one = hn::Set(d, std::uint64_t{1});
  std::size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    if (i < next_count) {
      const char* from = reinterpret_cast<const char*>(next_digests + i);
      for (std::size_t b = 0; b < lanes * sizeof(Digest); b += 64) hwy::Prefetch(from + b);
    }
    // A digest is four u64 (protocol 1 reads the first two).
    hn::VFromD<D> w0, w1, w2, w3, h1, h2;
    hn::LoadInterleaved4(d, reinterpret_cast<const std::uint64_t*>(digests + i), w0, w1, w2, w3);
    hash(d, w0, w1, w2, w3, h1, h2);
    store_first(d, i, ModM(d, h1, c));
    if constexpr (kReduceStep) {
      hn::StoreU(ModM(d, hn::Or(h2, one), c), d, step + i);
    } else {
      hn::StoreU(hn::Or(h2, one), d, step + i);
    }
  }
  for (; i < count; ++i) {
    const probe::HashPair h = hash(digests[i].bytes.data());
    const hn::CappedTag<std::uint64_t, 1> d1;
    store_first(d1, i, hn::Set(d1, probe::first_index(h.h1, constants.m)));
    step[i] = kReduceStep ? probe::step_of(h.h2, constants.m) : (h.h2 | 1);
  }
}

// After the first vector round (kFirst): the `active` survivors' unreduced
// steps h2 | 1 become (h2 | 1) mod m, and their states advance to the second
// probe. An absent digest fails its first probe about half the time
// (1 - fill), so its step is never reduced.
HWY_INLINE void ReduceSteps(const simd::ModConstants& constants, std::uint64_t* HWY_RESTRICT state,
                            std::uint64_t* HWY_RESTRICT step, std::size_t active) {
  using simd::detail::kPositionMask;
  using D = hn::ScalableTag<std::uint64_t>;
  const D d;
  const std::size_t lanes = hn::Lanes(d);
  const ModVectors<D> c(d, constants);
  const auto vm = hn::Set(d, constants.m);
  const auto position_mask = hn::Set(d, kPositionMask);
  std::size_t t = 0;
  for (; t + lanes <= active; t += lanes) {
    const auto st = ModM(d, hn::LoadU(d, step + t), c);
    auto next = hn::Add(hn::LoadU(d, state + t), st);
    next = hn::IfThenElse(hn::Lt(hn::And(next, position_mask), vm), next, hn::Sub(next, vm));
    hn::StoreU(st, d, step + t);
    hn::StoreU(next, d, state + t);
  }
  for (; t < active; ++t) {
    step[t] %= constants.m;  // already h2 | 1
    std::uint64_t next = state[t] + step[t];
    next -= ((next & kPositionMask) >= constants.m) ? constants.m : 0;
    state[t] = next;
  }
}

// positions[j * kStraight + i] = probe j of digest i, for i < n <= kStraight
// starting at first[i] with step[i], and word_index likewise (positions >> 6)
// unless null. Reads whole vectors: first and step must hold valid values up
// to n rounded up to the lane count.
HWY_INLINE void ExpandPositions(const std::uint64_t* HWY_RESTRICT first,
                                const std::uint64_t* HWY_RESTRICT step, std::size_t n,
                                std::uint32_t probes, std::uint64_t m,
                                std::uint64_t* HWY_RESTRICT positions,
                                std::uint64_t* HWY_RESTRICT word_index,
                                std::size_t stride = simd::detail::kStraight) {
  const hn::ScalableTag<std::uint64_t> d;
  const auto vm = hn::Set(d, m);
  for (std::size_t i = 0; i < n; i += hn::Lanes(d)) {
    auto position = hn::LoadU(d, first + i);
    const auto st = hn::LoadU(d, step + i);
    for (std::uint32_t j = 0; j < probes; ++j) {
      hn::StoreU(position, d, positions + j * stride + i);
      if (word_index != nullptr) {
        hn::StoreU(hn::ShiftRight<6>(position), d, word_index + j * stride + i);
      }
      const auto next = hn::Add(position, st);
      position = hn::Min(next, hn::Sub(next, vm));  // probe::advance: next - m wraps if next < m
    }
  }
}

// The remaining `probes` probes of the `active` digests in `state`, without
// compaction: for a batch of members every probe must be tested anyway.
// kStraight digests at a time, vectors compute every remaining position up
// front; large filters prefetch all lines of the next batch before testing
// this one (a test waiting on a miss holds scheduler entries, a prefetch
// does not, so this keeps more misses in flight than the tests alone and
// overlaps them with the tests). `contiguous`: state[i] is digest i's bare
// first position, padded to whole vectors; otherwise state holds packed
// survivors of compaction, whose steps are step[id] or, `step_by_slot`
// (compacted alongside by VectorRound), step[slot].
HWY_INLINE std::size_t FinishStraight(const std::uint64_t* HWY_RESTRICT words, std::uint64_t m,
                                      std::uint32_t probes, bool prefetch, bool contiguous,
                                      const std::uint64_t* HWY_RESTRICT state,
                                      const std::uint64_t* HWY_RESTRICT step, std::size_t active,
                                      Answer* HWY_RESTRICT answers, simd::detail::BlockState& block,
                                      bool step_by_slot = false) {
  using simd::detail::kPositionMask;
  using simd::detail::kStraight;
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto prepare = [&](std::size_t base, int buffer, bool burst) ABF_INLINE_LAMBDA {
    const std::size_t n = std::min(kStraight, active - base);
    std::uint64_t* HWY_RESTRICT word_index = block.word_index[buffer];
    if (contiguous) {
      ExpandPositions(state + base, step + base, n, probes, m, block.positions[buffer], word_index);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t s = state[base + i];
        block.id[buffer][i] = s >> 32;
        block.first[i] = s & kPositionMask;
        block.straight_step[i] = step_by_slot ? step[base + i] : step[s >> 32];
      }
      for (std::size_t i = n; i < kStraight && i % lanes != 0; ++i) {
        block.first[i] = 0;  // whole vectors: valid padding
        block.straight_step[i] = 0;
      }
      ExpandPositions(block.first, block.straight_step, n, probes, m, block.positions[buffer],
                      word_index);
    }
    if (prefetch && burst) {
      for (std::size_t p = 0; p < probes * kStraight; p += kStraight) {
        for (std::size_t i = 0; i < n; ++i) hwy::Prefetch(words + word_index[p + i]);
      }
    }
  };
  std::uint64_t* HWY_RESTRICT loaded = block.loaded;
  std::uint64_t* HWY_RESTRICT all = block.all;
  const auto bit_of = hn::Set(d, std::uint64_t{63});  // vector shifts do not wrap the count
  std::size_t maybe = 0;
  // Large filters prepare one batch ahead and prefetch its lines between
  // the loads of this one; small ones (no prefetch) prepare just in time.
  if (active != 0 && prefetch) prepare(0, 0, true);
  for (std::size_t base = 0, buffer = 0; base < active; base += kStraight, buffer ^= 1) {
    const bool has_next = base + kStraight < active;
    if (!prefetch) {
      prepare(base, static_cast<int>(buffer), false);
    } else if (has_next) {
      prepare(base + kStraight, static_cast<int>(buffer ^ 1), false);
    }
    const std::size_t n = std::min(kStraight, active - base);
    const std::size_t n_next =
        has_next && prefetch ? std::min(kStraight, active - base - kStraight) : 0;
    const std::uint64_t* HWY_RESTRICT positions = block.positions[buffer];
    const std::uint64_t* HWY_RESTRICT word_index = block.word_index[buffer];
    const std::uint64_t* HWY_RESTRICT next_index = block.word_index[buffer ^ 1];
    // Per probe, a scalar loop loads the words (two instructions a probe:
    // no gather instruction here is faster) and vectors test the bits.
    const std::size_t whole = (n + lanes - 1) / lanes * lanes;  // padded lanes index word 0
    for (std::size_t i = 0; i < n; i += lanes) {
      hn::StoreU(hn::Set(d, ~std::uint64_t{0}), d, all + i);
    }
    for (std::size_t p = 0; p < probes * kStraight; p += kStraight) {
      for (std::size_t i = 0; i < n_next; ++i) hwy::Prefetch(words + next_index[p + i]);
      for (std::size_t i = 0; i < whole; ++i) loaded[i] = words[word_index[p + i]];
      for (std::size_t i = 0; i < n; i += lanes) {
        const auto bits =
            hn::LoadU(d, loaded + i) >> hn::And(hn::LoadU(d, positions + p + i), bit_of);
        hn::StoreU(hn::And(hn::LoadU(d, all + i), bits), d, all + i);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint64_t maybe_bit = all[i] & 1;
      const std::size_t id = contiguous ? base + i : block.id[buffer][i];
      answers[id] = maybe_bit != 0 ? Answer::kMaybe : Answer::kDefinitelyNot;
      maybe += maybe_bit;
    }
  }
  return maybe;
}

// The compaction rounds in vectors (VectorRound) on AVX-512, with its
// gathers, and on AVX2, with four scalar loads a vector (AVX2's gathers and
// the emulated ones lost to scalar loads, 3x absent and 7x present:
// docs/performance.md, issue 17). Elsewhere (SSE4, SSSE3, EMU128, SCALAR) the
// scalar round.
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL || HWY_TARGET == HWY_AVX2
inline constexpr bool kVectorRounds = true;
#else
inline constexpr bool kVectorRounds = false;
#endif

#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
inline constexpr bool kTwoCompressForms = true;
#else
inline constexpr bool kTwoCompressForms = false;
#endif

#if HWY_TARGET == HWY_AVX2
// AVX2's left-pack of four u64 lanes (there is no compress instruction):
// for each 4-bit mask of lanes kept, the vpermd u32 indices that move those
// lanes to the front, in order. Static, unlike Highway 1.0.3's own table, a
// local constexpr array that GCC copies onto the stack (512 bytes, rep movsq)
// at every CompressStore: that copy took 36% of an absent query at l2.
alignas(32) inline constexpr std::uint32_t kLeftPack4[16][8] = {
    {0, 1, 2, 3, 4, 5, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {2, 3, 0, 1, 4, 5, 6, 7},
    {0, 1, 2, 3, 4, 5, 6, 7}, {4, 5, 0, 1, 2, 3, 6, 7}, {0, 1, 4, 5, 2, 3, 6, 7},
    {2, 3, 4, 5, 0, 1, 6, 7}, {0, 1, 2, 3, 4, 5, 6, 7}, {6, 7, 0, 1, 2, 3, 4, 5},
    {0, 1, 6, 7, 2, 3, 4, 5}, {2, 3, 6, 7, 0, 1, 4, 5}, {0, 1, 2, 3, 6, 7, 4, 5},
    {4, 5, 6, 7, 0, 1, 2, 3}, {0, 1, 4, 5, 6, 7, 2, 3}, {2, 3, 4, 5, 6, 7, 0, 1},
    {0, 1, 2, 3, 4, 5, 6, 7}};
#endif

// Writes the lanes of `st` and `next` that `keep` marks, in order, to
// step_out and state_out (a whole vector each: entries past the count are
// scratch); returns their count. The three forms are VectorRound's, below.
template <bool kRegisterCompress, class D, class M, class V>
HWY_INLINE std::size_t CompressPair(D d, M keep, V st, V next, std::uint64_t* HWY_RESTRICT step_out,
                                    std::uint64_t* HWY_RESTRICT state_out) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if constexpr (kRegisterCompress) {
    // Highway 1.0.3 has no name for the register form (its Compress is a
    // table permute), hence the intrinsic.
    hn::StoreU(V{_mm512_maskz_compress_epi64(keep.raw, st.raw)}, d, step_out);
    hn::StoreU(V{_mm512_maskz_compress_epi64(keep.raw, next.raw)}, d, state_out);
    return hn::CountTrue(d, keep);
  }
#endif
#if HWY_TARGET == HWY_AVX2
  const auto kept_lanes = static_cast<unsigned>(hn::detail::BitsFromMask(keep));
  const hn::Indices256<std::uint32_t> pack{
      _mm256_load_si256(reinterpret_cast<const __m256i*>(kLeftPack4[kept_lanes]))};
  const hn::Repartition<std::uint32_t, D> d32;
  hn::StoreU(hn::BitCast(d, hn::TableLookupLanes(hn::BitCast(d32, st), pack)), d, step_out);
  hn::StoreU(hn::BitCast(d, hn::TableLookupLanes(hn::BitCast(d32, next), pack)), d, state_out);
  return static_cast<std::size_t>(__builtin_popcount(kept_lanes));
#else
  hn::CompressStore(st, keep, d, step_out);
  return hn::CompressStore(next, keep, d, state_out);
#endif
}

// One compaction round of QueryBlock in vectors: a lane per probe, the
// words gathered, each probe's next state and its step compressed to the
// front when its bit is set. The steps move with the states (step is by
// slot, not by digest id, afterwards). Returns the survivors. Each vector
// writes a whole vector at `kept` <= t, over entries already loaded.
//
// The compress, by target and CPU (simd::CompressForm):
// - AVX-512, kRegisterCompress false: vpcompressq straight to memory.
//   Measured on a Zen 5 EPYC (family 26; AVX3_DL, abf bench, medians of
//   four alternating runs): llc query_absent 7.10 -> 6.56 ns against the
//   scalar round, query_present 12.19 -> 11.59 ns, dram unchanged; at l2
//   (BM_ProbeQuery) 3.15-3.29 -> 2.57-2.82 ns. There Highway's Compress and
//   a whole-vector StoreU measured 4x slower at l2 and 2x at llc (its table
//   permute), the native vpcompressq into a register 20% slower at l2.
// - AVX-512, kRegisterCompress true: vpcompressq into a register and a
//   whole-vector store. Zen 4 runs the memory form in microcode: on a Zen 4
//   EPYC (family 25, model 17) query_absent took 14-17 ns at l2 with it and
//   4.1-5.2 with this (docs/performance.md), so Zen 4 takes this one.
// - AVX2: four scalar loads make the vector of words, and the left-pack
//   table above packs the states and steps (vpermd). Measured on the same
//   EPYC with ABF_SIMD_TARGET=AVX2: l2 query_absent 5.9-6.2 -> 4.1-5.2 ns
//   against the scalar round.
//
// kFirst: the first round, whose steps are not reduced yet (ComputeStarts
// with kReduceStep false): the survivors are compacted as they are, neither
// advanced nor reduced, for ReduceSteps.
template <bool kRegisterCompress, bool kFirst = false>
HWY_INLINE std::size_t VectorRound(const std::uint64_t* HWY_RESTRICT words, std::uint64_t m,
                                   bool prefetch, std::size_t distance,
                                   std::uint64_t* HWY_RESTRICT state,
                                   std::uint64_t* HWY_RESTRICT step, std::size_t active) {
  using simd::detail::kPositionMask;
  const hn::ScalableTag<std::uint64_t> d;
  const hn::RebindToSigned<decltype(d)> di;
  const std::size_t lanes = hn::Lanes(d);
  const auto vm = hn::Set(d, m);
  const auto position_mask = hn::Set(d, kPositionMask);
  const auto bit_of = hn::Set(d, std::uint64_t{63});
  const auto one = hn::Set(d, std::uint64_t{1});
  std::size_t kept = 0;
  std::size_t t = 0;
  for (; t + lanes <= active; t += lanes) {
    if (prefetch) {
      if (t + distance + lanes <= active) {
        // A whole vector ahead: a fixed count GCC unrolls, each line
        // from a 32-bit load of the position and one shift.
#pragma GCC unroll 16
        for (std::size_t l = 0; l < lanes; ++l) {
          hwy::Prefetch(words + (static_cast<std::uint32_t>(state[t + distance + l]) >> 6));
        }
      } else {
        for (std::size_t l = t + distance; l < active; ++l) {
          hwy::Prefetch(words + ((state[l] & kPositionMask) >> 6));
        }
      }
    }
    const auto s = hn::LoadU(d, state + t);
    const auto st = hn::LoadU(d, step + t);
    const auto position = hn::And(s, position_mask);
#if HWY_TARGET == HWY_AVX2
    // Four scalar loads, each from a 32-bit load of the position and a
    // shift, into one vector (vmovq, vpinsrq, vinserti128).
    static_assert(sizeof(long long) == sizeof(std::uint64_t));
    const auto word_at = [&](std::size_t l) ABF_INLINE_LAMBDA {
      return static_cast<long long>(words[static_cast<std::uint32_t>(state[t + l]) >> 6]);
    };
    const hn::VFromD<decltype(d)> word{
        _mm256_set_epi64x(word_at(3), word_at(2), word_at(1), word_at(0))};
    (void)di;
#else
    const auto word = hn::GatherIndex(d, words, hn::BitCast(di, hn::ShiftRight<6>(position)));
#endif
    const auto keep = hn::Ne(hn::And(hn::Shr(word, hn::And(position, bit_of)), one), hn::Zero(d));
    auto next = s;
    if constexpr (!kFirst) {
      next = hn::Add(s, st);
      // probe::advance on the low half: next - m when the position reached m.
      next = hn::IfThenElse(hn::Lt(hn::And(next, position_mask), vm), next, hn::Sub(next, vm));
    }
    kept += CompressPair<kRegisterCompress>(d, keep, st, next, step + kept, state + kept);
  }
  for (; t < active; ++t) {
    const std::uint64_t s = state[t];
    const std::uint64_t st = step[t];
    const std::uint64_t position = s & kPositionMask;
    const std::uint64_t bit = (words[position >> 6] >> (position & 63)) & 1;
    std::uint64_t next = s;
    if constexpr (!kFirst) {
      next = s + st;
      next -= ((next & kPositionMask) >= m) ? m : 0;
    }
    state[kept] = next;
    step[kept] = st;
    kept += bit;
  }
  return kept;
}

// Answers one block of count <= kBlock digests. All first probes are tested
// in one pass, with prefetch ahead; the digests still Maybe are compacted to
// the front and advance to their next probe, so an absent digest costs about
// 1 / (1 - fill) memory accesses (2 at the optimum), not k, and no branch
// depends on a bit of the filter. When most digests survive a round (a batch
// of members), compaction no longer pays: the survivors then run their
// remaining probes straight through, one digest at a time, without a branch.
//
// On AVX-512 and AVX2 targets the compaction rounds run in vectors
// (VectorRound, in the `compress` form the CPU runs best); elsewhere they are
// scalar. The straight finish is scalar everywhere. `next_digests`: the next
// block's next_count digests, prefetched while this block's starts are
// computed.
template <class Hash>
HWY_INLINE void QueryBlock(const probe::FilterView& view, const Hash& hash,
                           const simd::ModConstants& constants, const Digest* digests,
                           std::size_t count, const Digest* next_digests, std::size_t next_count,
                           Answer* answers, simd::detail::BlockState& block, bool& members,
                           simd::CompressForm compress) {
  using simd::detail::kPositionMask;
  std::uint64_t* HWY_RESTRICT state = block.state;
  // By digest index; by slot once a VectorRound has compacted it.
  std::uint64_t* HWY_RESTRICT step = block.step;
  const std::uint64_t* HWY_RESTRICT words = view.words;
  const std::uint64_t m = view.bit_count;
  const std::uint32_t k = view.hash_count;
  const bool prefetch = m / 8 >= simd::detail::kPrefetchMinBytes;
  if (members) {
    // After a block of mostly members, expect another: every probe of every
    // digest, no compaction, straight from the starts.
    ComputeStarts(
        hash, constants, digests, count, step,
        [state](auto dn, std::size_t i, auto first) { hn::StoreU(first, dn, state + i); },
        next_digests, next_count);
    const std::size_t lanes = hn::Lanes(hn::ScalableTag<std::uint64_t>());
    for (std::size_t i = count; i % lanes != 0; ++i) {
      state[i] = 0;  // whole vectors: valid padding (kBlock is a multiple of lanes)
      step[i] = 0;
    }
    const std::size_t maybe = FinishStraight(words, m, k, prefetch, /*contiguous=*/true, state,
                                             step, count, answers, block);
    members = 4 * maybe > 3 * count;
    return;
  }
  // The vector rounds reduce the steps of the first round's survivors only.
  ComputeStarts</*kReduceStep=*/!kVectorRounds>(
      hash, constants, digests, count, step,
      [state](auto dn, std::size_t i, auto first) {
        // Digest index i + lane in the high half of each state word. Not
        // Iota(dn, i): Highway 1.0.3 builds it in a stack array, four or
        // eight 8-byte stores read back as one vector, which stalls on
        // store forwarding every vector (24% of an AVX2 absent query at l2
        // under perf); Iota(dn, 0) folds to a constant.
        const auto lane = hn::ShiftLeft<32>(hn::Iota(dn, std::uint64_t{0}));
        const auto ids = hn::Add(lane, hn::Set(dn, static_cast<std::uint64_t>(i) << 32));
        hn::StoreU(hn::Or(first, ids), dn, state + i);
      },
      next_digests, next_count);
  std::fill(answers, answers + count, Answer::kDefinitelyNot);

  const std::size_t distance = simd::detail::prefetch_distance(m);
  std::size_t active = count;
  std::uint32_t round = 0;
  while (round < k && active != 0) {
    if (prefetch) {
      for (std::size_t t = 0; t < std::min(active, distance); ++t) {
        hwy::Prefetch(words + ((state[t] & kPositionMask) >> 6));
      }
    }
    if (kVectorRounds) {
      // Only the AVX-512 targets have two compress forms; elsewhere both
      // names are one round, inlined once.
      const bool in_register = kTwoCompressForms && compress == simd::CompressForm::kRegister;
      std::size_t kept = 0;
      if (round == 0) {
        kept = in_register
                   ? VectorRound<true, true>(words, m, prefetch, distance, state, step, active)
                   : VectorRound<false, true>(words, m, prefetch, distance, state, step, active);
        ReduceSteps(constants, state, step, kept);
      } else {
        kept = in_register ? VectorRound<true>(words, m, prefetch, distance, state, step, active)
                           : VectorRound<false>(words, m, prefetch, distance, state, step, active);
      }
      ++round;
      active = kept;
      if (4 * kept > 3 * count && round < k) break;  // mostly members
      continue;
    }
    std::size_t kept = 0;
    for (std::size_t t = 0; t < active; ++t) {
      if (prefetch && t + distance < active) {
        hwy::Prefetch(words + ((state[t + distance] & kPositionMask) >> 6));
      }
      const std::uint64_t s = state[t];
      const std::uint64_t position = s & kPositionMask;
      const std::uint64_t bit = (words[position >> 6] >> (position & 63)) & 1;
      std::uint64_t next = s + step[s >> 32];
      next -= ((next & kPositionMask) >= m) ? m : 0;  // probe::advance on the low half
      // Written always, kept only if the bit was set: kept <= t, so this
      // never overwrites an entry not yet read.
      state[kept] = next;
      kept += bit;
    }
    ++round;
    active = kept;
    if (4 * kept > 3 * count && round < k) break;  // mostly members
  }
  if (round < k && active != 0) {
    const std::size_t maybe = FinishStraight(words, m, k - round, prefetch, /*contiguous=*/false,
                                             state, step, active, answers, block,
                                             /*step_by_slot=*/kVectorRounds);
    members = 4 * maybe > 3 * count;
    return;
  }
  members = false;
  for (std::size_t t = 0; t < active; ++t) answers[state[t] >> 32] = Answer::kMaybe;
}

// block.state[i] = first position and block.step[i] = step of digests[i],
// i < count <= kBlock, zero-padded to whole vectors (ExpandPositions reads
// whole vectors; kBlock is a multiple of the lane count). Insert and scatter.
template <class Hash>
HWY_INLINE void StartsOfBlock(const Hash& hash, const simd::ModConstants& constants,
                              const Digest* digests, std::size_t count,
                              simd::detail::BlockState& block) {
  std::uint64_t* HWY_RESTRICT first = block.state;
  std::uint64_t* HWY_RESTRICT step = block.step;
  ComputeStarts(hash, constants, digests, count, step,
                [first](auto dn, std::size_t i, auto v) { hn::StoreU(v, dn, first + i); });
  const std::size_t lanes = hn::Lanes(hn::ScalableTag<std::uint64_t>());
  for (std::size_t i = count; i % lanes != 0; ++i) {
    first[i] = 0;
    step[i] = 0;
  }
}

// Sets the k bits of count <= kBlock digests, insert_batch_size() digests at
// a time: vectors expand all their positions, large filters prefetch every
// line of the next batch (for writing) and the next block's digests, then a
// tight loop ORs the bits in, so k x batch stores overlap their misses
// instead of waiting for them one digest at a time.
template <class Hash>
HWY_INLINE void InsertBlock(std::uint64_t* HWY_RESTRICT words, std::uint32_t hash_count,
                            const Hash& hash, const simd::ModConstants& constants,
                            const Digest* digests, std::size_t count, const Digest* next_digests,
                            std::size_t next_count, simd::detail::BlockState& block) {
  std::uint64_t* HWY_RESTRICT first = block.state;
  std::uint64_t* HWY_RESTRICT step = block.step;
  StartsOfBlock(hash, constants, digests, count, block);
  const std::uint64_t m = constants.m;
  const bool prefetch = m / 8 >= simd::detail::kPrefetchMinBytes;
  const std::size_t batch = simd::detail::insert_batch_size(m);
  const auto prepare = [&](std::size_t base, int buffer, bool burst) ABF_INLINE_LAMBDA {
    const std::size_t n = std::min(batch, count - base);
    ExpandPositions(first + base, step + base, n, hash_count, m, block.positions[buffer], nullptr,
                    batch);
    if (prefetch && burst) {
      const std::uint64_t* HWY_RESTRICT positions = block.positions[buffer];
      for (std::size_t p = 0; p < hash_count * batch; p += batch) {
        for (std::size_t i = 0; i < n; ++i) {
          ::abf::detail::prefetch_for_write(words + (positions[p + i] >> 6));
        }
      }
    }
  };
  const auto set = [words](std::uint64_t position)
                       ABF_INLINE_LAMBDA { words[position >> 6] |= probe::mask_of(position); };
  // As in FinishStraight: large filters prefetch the lines of the next
  // batch between the stores of this one.
  if (count != 0) prepare(0, 0, prefetch);
  for (std::size_t base = 0, buffer = 0; base < count; base += batch, buffer ^= 1) {
    const bool has_next = base + batch < count;
    if (has_next) prepare(base + batch, static_cast<int>(buffer ^ 1), false);
    const std::size_t n = std::min(batch, count - base);
    const std::size_t n_next = has_next && prefetch ? std::min(batch, count - base - batch) : 0;
    const std::uint64_t* HWY_RESTRICT positions = block.positions[buffer];
    const std::uint64_t* HWY_RESTRICT next = block.positions[buffer ^ 1];
    if (prefetch && base < next_count) {
      // The next block's digests, a batch's share at a time: the input
      // streams in beside the filter's misses instead of stalling its
      // ComputeStarts.
      const char* from = reinterpret_cast<const char*>(next_digests + base);
      const std::size_t bytes = std::min(batch, next_count - base) * sizeof(Digest);
      for (std::size_t b = 0; b < bytes; b += 64) hwy::Prefetch(from + b);
    }
    if (!prefetch && n == batch) {
      // A whole batch: its positions are one contiguous run, unrolled (the
      // loop is bound by instructions, not by the L2 hits).
#pragma GCC unroll 8
      for (std::size_t t = 0; t < hash_count * batch; ++t) set(positions[t]);
      continue;
    }
    for (std::size_t p = 0; p < hash_count * batch; p += batch) {
      for (std::size_t i = 0; i < n_next; ++i) {
        ::abf::detail::prefetch_for_write(words + (next[p + i] >> 6));
      }
      for (std::size_t i = 0; i < n; ++i) set(positions[p + i]);
    }
  }
}

// Appends the k positions of count <= kBlock digests to their buckets (the
// partitioned build's scatter; partition.hpp). Vectors expand the
// positions kStraight digests at a time; the append is scalar, a load and two
// stores a position, and the bucket's next lines are prefetched for writing
// (measured 10.0 against 11.6 ns a digest at dram, k = 7). A full bucket
// sends its position straight to `words` with an atomic OR: rare for random
// digests (buckets are sized with headroom), and it keeps a flood of one
// repeated digest correct without ending the round.
template <class Hash>
HWY_INLINE void ScatterBlock(std::uint64_t* HWY_RESTRICT words, std::uint32_t hash_count,
                             const Hash& hash, const simd::ModConstants& constants,
                             const Digest* digests, std::size_t count,
                             const simd::PositionBuckets& buckets,
                             simd::detail::BlockState& block) {
  using simd::detail::kStraight;
  std::uint64_t* HWY_RESTRICT first = block.state;
  std::uint64_t* HWY_RESTRICT step = block.step;
  StartsOfBlock(hash, constants, digests, count, block);
  const std::uint64_t m = constants.m;
  const unsigned shift = buckets.range_bits;
  const std::uint32_t offset_mask = (std::uint32_t{1} << shift) - 1;
  const std::uint32_t capacity = buckets.capacity;
  const std::size_t stride = buckets.stride;
  std::uint32_t* HWY_RESTRICT entries = buckets.entries;
  std::uint32_t* HWY_RESTRICT fill = buckets.fill;
  std::uint64_t* HWY_RESTRICT positions = block.positions[0];
  for (std::size_t base = 0; base < count; base += kStraight) {
    const std::size_t n = std::min(kStraight, count - base);
    ExpandPositions(first + base, step + base, n, hash_count, m, positions, nullptr);
    for (std::size_t p = 0; p < hash_count * kStraight; p += kStraight) {
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t position = positions[p + i];
        const std::size_t bucket = static_cast<std::size_t>(position >> shift);
        const std::uint32_t at = fill[bucket];
        std::uint32_t* slot = entries + bucket * stride + at;
        if (HWY_LIKELY(at < capacity)) {
          *slot = static_cast<std::uint32_t>(position) & offset_mask;
          fill[bucket] = at + 1;
          // 4 lines ahead; may pass the end: harmless.
          ::abf::detail::prefetch_for_write(slot + 64);
        } else {
          std::atomic_ref<std::uint64_t>(words[position >> 6])
              .fetch_or(probe::mask_of(position), std::memory_order_relaxed);
          ++*buckets.overflowed;
        }
      }
    }
  }
}

}  // namespace abf::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ABF_SIMD_PROBE_SIMD_INL_H_
