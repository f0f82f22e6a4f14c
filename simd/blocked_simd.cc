// The Highway kernels of the one-line protocols 3 and 4 (blocked_simd.h,
// docs/protocol.md section 4c), compiled for every target in hwy_targets.h
// and dispatched at run time, as probe_simd.cc is.
//
// A digest touches one 64-byte block: eight 64-bit words, one bit in each.
// The eight masks: on x86 the position bytes zero-extended into the lanes
// (AVX-512 then rotates a one left by each and tests the block with one
// vptestmq; AVX2 keeps the low six bits and shifts), elsewhere one
// broadcast of q shifted right by 8 j in lane j, the low six bits kept, a
// one shifted left by them. AVX-512 holds the whole block in one register,
// AVX2 in two, the 128-bit targets in four, the scalar target in eight.
//
// The pipelines: protocol 3 computes a digest's block where it is used
// and prefetches a fixed distance ahead (LineStream3); protocol 4 computes
// the block and q of a group of digests in vector lanes (SipHash-2-4-128,
// probe_simd-inl.h's) and prefetches one group's lines between the steps
// that hash the next (LineGroups), so the misses run while it computes.
#include "hwy_targets.h"  // first: fixes HWY_TARGETS for this file

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "abf/blocked.hpp"
#include "blocked_simd.h"
#include "prefetch.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "blocked_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "fingerprint-inl.h"
#include "probe_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace abf::HWY_NAMESPACE {

// Digests whose blocks are computed and prefetched while the group before
// them is tested or set.
inline constexpr std::size_t kLineGroup = 32;

// Shift of lane j of a block: 8 j (the position byte of word j).
alignas(64) static constexpr std::uint64_t kLineShifts[8] = {0, 8, 16, 24, 32, 40, 48, 56};

// Vector step 1 of protocol 3: h = the big-endian d[0..8), q = the
// little-endian d[8..16).
struct LineHash3 {
  template <class D, class V = hn::VFromD<D>>
  HWY_INLINE void operator()(D d, V w0, V w1, V /*w2*/, V /*w3*/, V& h, V& q) const {
    h = ByteSwap64(d, w0);
    q = w1;
  }
  blocked::LineHash operator()(const std::uint8_t* digest) const {
    return blocked::unkeyed_line_hash(digest);
  }
};

// Vector step 1 of protocol 4: the two words of SipHash-2-4-128 (the
// vector SipHash of protocol 2, probe_simd-inl.h).
struct LineHash4 {
  KeyedHash sip;
  template <class D, class V = hn::VFromD<D>>
  HWY_INLINE void operator()(D d, V w0, V w1, V w2, V w3, V& h, V& q) const {
    sip(d, w0, w1, w2, w3, h, q);
  }
  blocked::LineHash operator()(const std::uint8_t* digest) const {
    return blocked::keyed_line_hash(sip.key, digest);
  }
};

// floor(h * B / 2^64) in lanes, B < 2^32 (blocked::block_of): two 32x32-bit
// products.
template <class D, class V = hn::VFromD<D>>
HWY_INLINE V BlockOf(D d, V h, V block_count) {
#if HWY_TARGET == HWY_SCALAR
  return hn::Set(d, blocked::block_of(hn::GetLane(h), hn::GetLane(block_count)));
#else
  const hn::Repartition<std::uint32_t, D> d32;
  const V low = hn::MulEven(hn::BitCast(d32, h), hn::BitCast(d32, block_count));
  const V high = hn::MulEven(hn::BitCast(d32, hn::ShiftRight<32>(h)), hn::BitCast(d32, block_count));
  return hn::ShiftRight<32>(hn::Add(high, hn::ShiftRight<32>(low)));
#endif
}

// Nothing between HashGroup's steps.
struct NoStep {
  HWY_INLINE void operator()(std::size_t, std::size_t) const {}
};

// line[i] = the first word of digest i's block, q[i] its position bytes;
// `between(i, n)` after the step that hashed digests [i, i + n).
template <class Hash, class Between = NoStep>
HWY_INLINE void HashGroup(const Hash& hash, std::uint64_t block_count, const Digest* digests,
                          std::size_t count, std::uint64_t* HWY_RESTRICT line,
                          std::uint64_t* HWY_RESTRICT q, const Between& between = {}) {
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto blocks = hn::Set(d, block_count);
  std::size_t i = 0;
  for (; i + lanes <= count; i += lanes) {
    hn::VFromD<decltype(d)> w0, w1, w2, w3, h, qv;
    hn::LoadInterleaved4(d, reinterpret_cast<const std::uint64_t*>(digests + i), w0, w1, w2, w3);
    hash(d, w0, w1, w2, w3, h, qv);
    hn::StoreU(hn::ShiftLeft<3>(BlockOf(d, h, blocks)), d, line + i);
    hn::StoreU(qv, d, q + i);
    between(i, lanes);
  }
  for (; i < count; ++i) {
    const blocked::LineHash x = hash(digests[i].bytes.data());
    line[i] = blocked::first_word(blocked::block_of(x.h, block_count));
    q[i] = x.q;
    between(i, 1);
  }
}

// The eight one-bit masks of q, `lanes` words at a time, chunk c of the block.
template <class D, class V = hn::VFromD<D>>
HWY_INLINE V LineMask(D d, V q, std::size_t c) {
  const V shift = hn::Load(d, kLineShifts + c);
  // The operators, not hn::Shl / hn::Shr: Highway 1.0.3 declares those
  // without HWY_API, so GCC may leave them out of line.
  return hn::Set(d, std::uint64_t{1}) << hn::And(q >> shift, hn::Set(d, std::uint64_t{63}));
}

// Whether every bit of q is set in the block at words + line.
HWY_INLINE bool LineHas(const std::uint64_t* HWY_RESTRICT block, std::uint64_t q) {
  const hn::CappedTag<std::uint64_t, 8> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto qv = hn::Set(d, q);
  auto missing = hn::Zero(d);
  for (std::size_t c = 0; c < blocked::kWordsPerBlock; c += lanes) {
    missing = hn::Or(missing, hn::AndNot(hn::LoadU(d, block + c), LineMask(d, qv, c)));
  }
  return hn::AllTrue(d, hn::Eq(missing, hn::Zero(d)));
}

// Sets every bit of q in the block at `block`.
HWY_INLINE void LineSet(std::uint64_t* HWY_RESTRICT block, std::uint64_t q) {
  const hn::CappedTag<std::uint64_t, 8> d;
  const std::size_t lanes = hn::Lanes(d);
  const auto qv = hn::Set(d, q);
  for (std::size_t c = 0; c < blocked::kWordsPerBlock; c += lanes) {
    hn::StoreU(hn::Or(hn::LoadU(d, block + c), LineMask(d, qv, c)), d, block + c);
  }
}

// The same two from the eight position bytes themselves (pos[j] = q[j]: a
// digest's bytes 8..16, or the little-endian bytes of protocol 4's q). The
// x86 targets zero-extend the bytes into the lanes (vpmovzxbq, which
// Highway 1.0.3 has no op for) instead of broadcasting q and shifting each
// lane right: AVX-512 then rotates a one left by each byte (vprolvq counts
// mod 64, so no mask) and tests the block with one vptestmq (a word holds
// one probe bit, so it has it iff word & mask != 0): LineQuery3's loop is
// 15 instructions a digest, 18 with the broadcast and shifts.
static_assert(std::endian::native == std::endian::little,
              "protocol 4's q words are read as their little-endian position bytes");
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
HWY_INLINE __m512i LineMask512(const std::uint8_t* pos) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(pos));
  return _mm512_rolv_epi64(_mm512_set1_epi64(1), _mm512_cvtepu8_epi64(bytes));
}
HWY_INLINE bool LineHas(const std::uint64_t* HWY_RESTRICT block, const std::uint8_t* pos) {
  const __mmask8 has = _mm512_test_epi64_mask(_mm512_loadu_si512(block), LineMask512(pos));
  return _kortestc_mask8_u8(has, has) != 0;  // all eight: kortestb's carry
}
HWY_INLINE void LineSet(std::uint64_t* HWY_RESTRICT block, const std::uint8_t* pos) {
  _mm512_storeu_si512(block, _mm512_or_si512(_mm512_loadu_si512(block), LineMask512(pos)));
}
#elif HWY_TARGET == HWY_AVX2
// Words 4 h .. 4 h + 3's masks from bytes pos[0..4).
HWY_INLINE __m256i LineMask256(const std::uint8_t* pos) {
  std::int32_t four;
  std::memcpy(&four, pos, sizeof four);
  const __m256i bits =
      _mm256_and_si256(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128(four)), _mm256_set1_epi64x(63));
  return _mm256_sllv_epi64(_mm256_set1_epi64x(1), bits);
}
HWY_INLINE bool LineHas(const std::uint64_t* HWY_RESTRICT block, const std::uint8_t* pos) {
  const __m256i low = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block));
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 4));
  const __m256i missing = _mm256_or_si256(_mm256_andnot_si256(low, LineMask256(pos)),
                                          _mm256_andnot_si256(high, LineMask256(pos + 4)));
  return _mm256_testz_si256(missing, missing) != 0;
}
HWY_INLINE void LineSet(std::uint64_t* HWY_RESTRICT block, const std::uint8_t* pos) {
  auto* low = reinterpret_cast<__m256i*>(block);
  _mm256_storeu_si256(low, _mm256_or_si256(_mm256_loadu_si256(low), LineMask256(pos)));
  _mm256_storeu_si256(low + 1, _mm256_or_si256(_mm256_loadu_si256(low + 1), LineMask256(pos + 4)));
}
#else
HWY_INLINE bool LineHas(const std::uint64_t* HWY_RESTRICT block, const std::uint8_t* pos) {
  return LineHas(block, probe::load_le64(pos));
}
HWY_INLINE void LineSet(std::uint64_t* HWY_RESTRICT block, const std::uint8_t* pos) {
  LineSet(block, probe::load_le64(pos));
}
#endif

// The position bytes of protocol 4's q (a word of LineGroups' buffer).
HWY_INLINE const std::uint8_t* PositionBytes(const std::uint64_t* q) {
  return reinterpret_cast<const std::uint8_t*>(q);
}

// Filters below this many bytes sit in L2: prefetching costs instructions only.
inline bool LinePrefetches(std::uint64_t block_count) {
  return block_count * 64 >= simd::detail::kPrefetchMinBytes;
}

// The batch pipeline of a vector hash (protocol 4), three groups deep:
// while group g + 2 is hashed, the lines of group g + 1 (hashed before)
// are prefetched (`prefetch`, for reading or writing) a vector step's
// worth after each step of the hash; then group g is visited,
// `visit(i, line, &q)` for each of its digests (LineQueryBlocks tests,
// LineInsertBlocks sets). The misses so run while the core hashes, and a
// line has a whole group's hashing and visit to arrive in.
template <class Hash, class Prefetch, class Visit>
HWY_INLINE void LineGroups(const Hash& hash, std::uint64_t block_count, const Digest* digests,
                           std::size_t count, const Prefetch& prefetch, const Visit& visit) {
  HWY_ALIGN std::uint64_t line[3][kLineGroup];
  HWY_ALIGN std::uint64_t q[3][kLineGroup];
  const bool prefetches = LinePrefetches(block_count);
  const auto group = [&](std::size_t begin) ABF_INLINE_LAMBDA {
    return begin < count ? std::min(kLineGroup, count - begin) : std::size_t{0};
  };
  if (count == 0) return;
  HashGroup(hash, block_count, digests, group(0), line[0], q[0]);
  if (prefetches) {
    for (std::size_t i = 0; i < group(0); ++i) prefetch(line[0][i]);
  }
  // Group g + 2 into buffer (g + 2) % 3, prefetching group g + 1's (buffer
  // `ahead`, n lines) between its steps.
  const auto hash_ahead = [&](std::size_t begin, std::size_t into, std::size_t ahead,
                              std::size_t n) ABF_INLINE_LAMBDA {
    const std::uint64_t* lines = line[ahead];
    if (!prefetches || n == 0) {
      HashGroup(hash, block_count, digests + begin, group(begin), line[into], q[into]);
      return;
    }
    HashGroup(hash, block_count, digests + begin, group(begin), line[into], q[into],
              [&](std::size_t i, std::size_t step) ABF_INLINE_LAMBDA {
                for (std::size_t k = i; k < std::min(i + step, n); ++k) prefetch(lines[k]);
              });
    // A shorter group g + 2 leaves the rest of group g + 1's lines.
    for (std::size_t k = group(begin); k < n; ++k) prefetch(lines[k]);
  };
  std::size_t at = 0;  // buffer of group g
  if (group(kLineGroup) > 0) {
    const std::size_t n1 = group(kLineGroup);
    HashGroup(hash, block_count, digests + kLineGroup, n1, line[1], q[1]);
    if (prefetches) {
      for (std::size_t i = 0; i < n1; ++i) prefetch(line[1][i]);
    }
  }
  for (std::size_t begin = 0; begin < count; begin += kLineGroup) {
    const std::size_t next = at == 2 ? 0 : at + 1;
    const std::size_t after = next == 2 ? 0 : next + 1;
    if (group(begin + 2 * kLineGroup) > 0) {
      // Group g + 1's lines were prefetched when it was hashed (the first
      // two groups) or are prefetched now, between group g + 2's steps.
      hash_ahead(begin + 2 * kLineGroup, after, next, begin == 0 ? 0 : group(begin + kLineGroup));
    } else if (begin > 0 && prefetches) {
      for (std::size_t k = 0; k < group(begin + kLineGroup); ++k) prefetch(line[next][k]);
    }
    const std::size_t n = group(begin);
    for (std::size_t i = 0; i < n; ++i) visit(begin + i, line[at][i], q[at] + i);
    at = next;
  }
}

template <class Hash>
HWY_NOINLINE void LineQueryBlocks(const Hash& hash, std::uint64_t block_count,
                                  const std::uint64_t* words, const Digest* digests,
                                  std::size_t count, Answer* answers) {
  LineGroups(
      hash, block_count, digests, count,
      [&](std::uint64_t line) ABF_INLINE_LAMBDA { hwy::Prefetch(words + line); },
      [&](std::size_t i, std::uint64_t line, const std::uint64_t* q) ABF_INLINE_LAMBDA {
        answers[i] =
            LineHas(words + line, PositionBytes(q)) ? Answer::kMaybe : Answer::kDefinitelyNot;
      });
}

template <class Hash>
HWY_NOINLINE void LineInsertBlocks(const Hash& hash, std::uint64_t block_count,
                                   std::uint64_t* words, const Digest* digests,
                                   std::size_t count) {
  LineGroups(
      hash, block_count, digests, count,
      [&](std::uint64_t line) ABF_INLINE_LAMBDA { detail::prefetch_for_write(words + line); },
      [&](std::size_t, std::uint64_t line, const std::uint64_t* q) ABF_INLINE_LAMBDA {
        LineSet(words + line, PositionBytes(q));
      });
}

// Protocol 3's step 1 costs two loads and a multiply (movbe, mulx): cheaper
// to compute where it is used, twice (once to prefetch, once to test), than
// to store and reload. The block is the high word of the 128-bit product,
// equal to blocked::block_of's two 32-bit products (tests prove it).
HWY_INLINE std::uint64_t Load64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
HWY_INLINE std::uint64_t Line3(const Digest& digest, std::uint64_t block_count) {
  __extension__ using U128 = unsigned __int128;
  const std::uint64_t h = __builtin_bswap64(Load64(digest.bytes.data()));
  return static_cast<std::uint64_t>((static_cast<U128>(h) * block_count) >> 64) *
         blocked::kWordsPerBlock;
}
// Protocol 3's position bytes: the digest's bytes 8..16.
HWY_INLINE const std::uint8_t* Q3(const Digest& digest) { return digest.bytes.data() + 8; }

// How many digests ahead of the one tested a protocol-3 loop prefetches:
// 64 for a filter in the LLC, 32 beyond it. Measured on the 2-vCPU Zen 4
// at load average 4.6 (thread CPU time, 4 Mi digests, one process
// alternating the distances, medians of 7), llc absent / present ns a
// digest at 16 / 32 / 48 / 64 / 96 / 128 / 256: 4.1-5.1 / 3.3-3.4 / 3.1 /
// 2.7-3.2 / 3.2 / 3.3 / 4.3-4.5 and 4.5-5.2 / 3.1-3.2 / 2.9 / 2.8-3.1 / 3.1
// / 3.2 / 4.4-4.7 (AVX2 alike); dram at 32 / 64 / 128: 8.8-9.2 / 9.1-9.4 /
// 9.7. Under load 9-13 (the L3 shared with other builds) 16 to 64 were
// within the noise of each other.
inline std::size_t LineDistance(std::uint64_t block_count) {
  return block_count * 64 > (std::uint64_t{32} << 20) ? 32 : 64;
}

// Protocol 3's pipeline: digest i + distance's line prefetched
// (`prefetch`) before digest i is visited, `visit(i, line)`.
template <class Prefetch, class Visit>
HWY_INLINE void LineStream3(std::uint64_t block_count, const Digest* HWY_RESTRICT digests,
                            std::size_t count, const Prefetch& prefetch, const Visit& visit) {
  std::size_t i = 0;
  if (LinePrefetches(block_count)) {
    const std::size_t distance = LineDistance(block_count);
    const std::size_t ahead = count > distance ? count - distance : 0;
    for (; i < std::min(distance, count); ++i) prefetch(Line3(digests[i], block_count));
    for (i = 0; i < ahead; ++i) {
      prefetch(Line3(digests[i + distance], block_count));
      visit(i, Line3(digests[i], block_count));
    }
  }
  for (; i < count; ++i) visit(i, Line3(digests[i], block_count));
}

HWY_NOINLINE void LineQuery3(std::uint64_t block_count, const std::uint64_t* HWY_RESTRICT words,
                             const Digest* HWY_RESTRICT digests, std::size_t count,
                             Answer* HWY_RESTRICT answers) {
  LineStream3(
      block_count, digests, count,
      [&](std::uint64_t line) ABF_INLINE_LAMBDA { hwy::Prefetch(words + line); },
      [&](std::size_t i, std::uint64_t line) ABF_INLINE_LAMBDA {
        answers[i] =
            LineHas(words + line, Q3(digests[i])) ? Answer::kMaybe : Answer::kDefinitelyNot;
      });
}

HWY_NOINLINE void LineInsert3(std::uint64_t block_count, std::uint64_t* HWY_RESTRICT words,
                              const Digest* HWY_RESTRICT digests, std::size_t count) {
  LineStream3(
      block_count, digests, count,
      [&](std::uint64_t line) ABF_INLINE_LAMBDA { detail::prefetch_for_write(words + line); },
      [&](std::size_t i, std::uint64_t line) ABF_INLINE_LAMBDA {
        LineSet(words + line, Q3(digests[i]));
      });
}

// The inserts with the content fingerprint (fingerprint-inl.h) of their
// digests summed in the same pass: each vector step of the fingerprint runs
// on digests the loop sets next, while they are in L1, and its multiplies
// run on the vector ports while the lines' misses (and the scalar block
// index) run beside them, instead of a second pass over the digests after
// the insert. The sum is order-independent (addition mod 2^128), so it
// equals content_fingerprint_one_by_one of the batch.

// Protocol 3: LineStream3 in steps of Lanes(d) digests, one fingerprint
// step each; the digests left over are summed by FingerprintRange.
HWY_NOINLINE void LineInsert3Summed(std::uint64_t block_count, std::uint64_t* HWY_RESTRICT words,
                                    const Digest* HWY_RESTRICT digests, std::size_t count,
                                    ContentFingerprint* sum) {
  const hn::ScalableTag<std::uint64_t> d;
  const std::size_t lanes = hn::Lanes(d);
  FingerprintLanes<decltype(d)> lanes_sum(d);
  const auto set = [&](std::size_t i) ABF_INLINE_LAMBDA {
    LineSet(words + Line3(digests[i], block_count), Q3(digests[i]));
  };
  const auto prefetch = [&](std::size_t i) ABF_INLINE_LAMBDA {
    detail::prefetch_for_write(words + Line3(digests[i], block_count));
  };
  std::size_t i = 0;       // digests set
  std::size_t summed = 0;  // digests [0, summed) in lanes_sum
  if (LinePrefetches(block_count)) {
    const std::size_t distance = LineDistance(block_count);
    const std::size_t ahead = count > distance ? count - distance : 0;
    for (std::size_t k = 0; k < std::min(distance, count); ++k) prefetch(k);
    for (; i + lanes <= ahead; i += lanes) {
      lanes_sum.Add(d, digests + i);
      for (std::size_t k = i; k < i + lanes; ++k) {
        prefetch(k + distance);
        set(k);
      }
    }
    summed = i;
    for (; i < ahead; ++i) {
      prefetch(i + distance);
      set(i);
    }
  } else {
    for (; i + lanes <= count; i += lanes) {
      lanes_sum.Add(d, digests + i);
      for (std::size_t k = i; k < i + lanes; ++k) set(k);
    }
    summed = i;
  }
  for (; i < count; ++i) set(i);
  ContentFingerprint total = lanes_sum.Total(d);
  total += FingerprintRange(digests + summed, count - summed);
  *sum = total;
}

// Protocol 4: the step-1 hash of LineGroups' HashGroup with a fingerprint
// step on the same loaded words (and the library's XXH3-128 for the digests
// HashGroup hashes one by one).
template <class Hash, class Sum>
struct SummingHash {
  const Hash& hash;
  Sum* lanes_sum;
  ContentFingerprint* rest;
  template <class D, class V = hn::VFromD<D>>
  HWY_INLINE void operator()(D d, V w0, V w1, V w2, V w3, V& h, V& q) const {
    lanes_sum->Add(d, w0, w1, w2, w3);
    hash(d, w0, w1, w2, w3, h, q);
  }
  blocked::LineHash operator()(const std::uint8_t* digest) const {
    const XXH128_hash_t one = XXH3_128bits(digest, Digest::kSize);
    *rest += {.low = one.low64, .high = one.high64};
    return hash(digest);
  }
};

template <class Hash>
HWY_NOINLINE void LineInsertBlocksSummed(const Hash& hash, std::uint64_t block_count,
                                         std::uint64_t* words, const Digest* digests,
                                         std::size_t count, ContentFingerprint* sum) {
  const hn::ScalableTag<std::uint64_t> d;
  FingerprintLanes<decltype(d)> lanes_sum(d);
  ContentFingerprint rest;
  const SummingHash<Hash, decltype(lanes_sum)> summing{hash, &lanes_sum, &rest};
  LineInsertBlocks(summing, block_count, words, digests, count);
  rest += lanes_sum.Total(d);
  *sum = rest;
}

// The protocol's one branch, once per batch; each loop is a function of
// its own per hasher (as probe_simd.cc's, for the same reason).
template <class Body>
HWY_INLINE void WithLineHash(const blocked::LineScheme& scheme, Body&& body) {
  if (scheme.protocol == blocked::kProtocolBlockedKeyed) {
    body(LineHash4{KeyedHash{scheme.key}});
  } else {
    body(LineHash3{});
  }
}

void LineQuery(const blocked::LineScheme& scheme, const std::uint64_t* words,
               const Digest* digests, std::size_t count, Answer* answers) {
  if (scheme.protocol == blocked::kProtocolBlocked) {
    return LineQuery3(scheme.block_count, words, digests, count, answers);
  }
  WithLineHash(scheme, [&](const auto& hash) {
    LineQueryBlocks(hash, scheme.block_count, words, digests, count, answers);
  });
}

void LineInsert(const blocked::LineScheme& scheme, std::uint64_t* words, const Digest* digests,
                std::size_t count) {
  if (scheme.protocol == blocked::kProtocolBlocked) {
    return LineInsert3(scheme.block_count, words, digests, count);
  }
  WithLineHash(scheme, [&](const auto& hash) {
    LineInsertBlocks(hash, scheme.block_count, words, digests, count);
  });
}

void LineInsertSummed(const blocked::LineScheme& scheme, std::uint64_t* words,
                      const Digest* digests, std::size_t count, ContentFingerprint* sum) {
  if (scheme.protocol == blocked::kProtocolBlocked) {
    return LineInsert3Summed(scheme.block_count, words, digests, count, sum);
  }
  WithLineHash(scheme, [&](const auto& hash) {
    LineInsertBlocksSummed(hash, scheme.block_count, words, digests, count, sum);
  });
}

void LineHashes(const blocked::LineScheme& scheme, const Digest* digests, std::size_t count,
                std::uint64_t* block, std::uint64_t* q) {
  WithLineHash(scheme, [&](const auto& hash) {
    for (std::size_t begin = 0; begin < count; begin += kLineGroup) {
      const std::size_t n = std::min(kLineGroup, count - begin);
      HashGroup(hash, scheme.block_count, digests + begin, n, block + begin, q + begin);
      for (std::size_t i = 0; i < n; ++i) block[begin + i] /= blocked::kWordsPerBlock;
    }
  });
}

}  // namespace abf::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace abf::simd {

HWY_EXPORT(LineQuery);
HWY_EXPORT(LineInsert);
HWY_EXPORT(LineInsertSummed);
HWY_EXPORT(LineHashes);

void blocked_query_batch(const blocked::LineScheme& scheme, const std::uint64_t* words,
                         const Digest* digests, std::size_t count, Answer* answers) noexcept {
  HWY_DYNAMIC_DISPATCH(LineQuery)(scheme, words, digests, count, answers);
}

void blocked_insert_batch(const blocked::LineScheme& scheme, std::uint64_t* words,
                          const Digest* digests, std::size_t count) noexcept {
  HWY_DYNAMIC_DISPATCH(LineInsert)(scheme, words, digests, count);
}

ContentFingerprint blocked_insert_fingerprinted(const blocked::LineScheme& scheme,
                                                std::uint64_t* words, const Digest* digests,
                                                std::size_t count) noexcept {
  ContentFingerprint sum;
  HWY_DYNAMIC_DISPATCH(LineInsertSummed)(scheme, words, digests, count, &sum);
  return sum;
}

void blocked_hash_batch(const blocked::LineScheme& scheme, const Digest* digests,
                        std::size_t count, std::uint64_t* block, std::uint64_t* q) noexcept {
  HWY_DYNAMIC_DISPATCH(LineHashes)(scheme, digests, count, block, q);
}

}  // namespace abf::simd
#endif  // HWY_ONCE
