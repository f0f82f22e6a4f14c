// The Highway batch probe engine (abf::simd, declared in probe_simd.h): one
// binary, compiled for every target in hwy_targets.h, dispatched at run time
// to the best one this CPU supports. Layout after hwy/examples/skeleton.cc (1.0.3).
#include "hwy_targets.h"  // first: fixes HWY_TARGETS for this file

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "abf/fingerprint.hpp"
#include "blocked_simd.h"
#include "probe_simd.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "probe_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "fingerprint-inl.h"
#include "probe_simd-inl.h"

HWY_BEFORE_NAMESPACE();
namespace abf::HWY_NAMESPACE {

// The vector step 1 of each row of the protocol table (abf/protocol/table.hpp):
// one overload per policy; a row without one does not compile (WithHash).
HWY_INLINE UnkeyedHash VectorHash(probe::Protocol1, const probe::Scheme&) { return {}; }
HWY_INLINE KeyedHash VectorHash(probe::Protocol2, const probe::Scheme& scheme) {
  return KeyedHash{scheme.key};
}

// Runs `body(hash)` with the vector hasher of the scheme's protocol: the
// table's dispatch (probe::with_protocol) over the same rows, once per batch,
// written here rather than called. with_protocol is compiled for the baseline
// target, and a lambda of this target called through it stays out of line:
// the kernels' code changed (QueryBatch split in two) where this keeps it as
// it was. Every row is instantiated, so a new row needs its VectorHash, and
// the kernels below are the vector step 2 of the classic probe kind
// (abf/protocol/classic.hpp): a row of another kind needs its own kernels
// here. A version outside the table (never that of a valid Scheme) traps.
template <class Body, class P, class... Rest>
HWY_INLINE void WithHashOf(const probe::Scheme& scheme, Body& body,
                           probe::ProtocolList<P, Rest...>) {
  if (scheme.protocol == P::kVersion) {
    if constexpr (std::is_same_v<typename P::Probes, probe::ClassicProbes>) {
      body(VectorHash(P{}, scheme));
    } else {
      // The one-line kind has its own kernels (blocked_simd.cc); the entry
      // points below send its schemes there, never here.
      static_assert(std::is_same_v<typename P::Probes, probe::BlockedProbes>,
                    "a probe kind without SIMD kernels");
      probe::unknown_protocol_trap();
    }
    return;
  }
  if constexpr (sizeof...(Rest) == 0) {
    probe::unknown_protocol_trap();
  } else {
    WithHashOf(scheme, body, probe::ProtocolList<Rest...>{});
  }
}
template <class Body>
HWY_INLINE void WithHash(const probe::Scheme& scheme, Body&& body) {
  WithHashOf(scheme, body, probe::Protocols{});
}

// One protocol's query loop, a function of its own per hasher. The three
// batch kernels (this, InsertBlocks, ScatterBlocks) once wrote their loop
// inline in both of WithHash's branches; GCC compiled the protocol-1 loop
// into more instructions there (AVX2, callgrind: the insert 28% more, the
// scatter 39% more than in a function of its own).
template <class Hash>
HWY_NOINLINE void QueryBlocks(const Hash& hash, const probe::FilterView& view,
                              const Digest* digests, std::size_t count, Answer* answers) {
  const auto constants = simd::ModConstants::of(view.bit_count);
  simd::detail::BlockState& block = simd::detail::thread_scratch();
  const simd::CompressForm compress = simd::compress_form();
  bool members = false;  // whether the last block was mostly members
  for (std::size_t begin = 0; begin < count; begin += simd::detail::kBlock) {
    const std::size_t n = std::min(simd::detail::kBlock, count - begin);
    const std::size_t next = std::min(simd::detail::kBlock, count - begin - n);
    QueryBlock(view, hash, constants, digests + begin, n, digests + begin + n, next,
               answers + begin, block, members, compress);
  }
}

void QueryBatch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                Answer* answers) {
  WithHash(view, [&](const auto& hash) { QueryBlocks(hash, view, digests, count, answers); });
}

// One protocol's insert loop, a function of its own per hasher.
template <class Hash>
HWY_NOINLINE void InsertBlocks(const Hash& hash, const probe::Scheme& scheme,
                               std::uint64_t* words, const Digest* digests, std::size_t count) {
  const auto constants = simd::ModConstants::of(scheme.bit_count);
  simd::detail::BlockState& block = simd::detail::thread_scratch();
  for (std::size_t begin = 0; begin < count; begin += simd::detail::kBlock) {
    const std::size_t n = std::min(simd::detail::kBlock, count - begin);
    const std::size_t next = std::min(simd::detail::kBlock, count - begin - n);
    InsertBlock(words, scheme.hash_count, hash, constants, digests + begin, n,
                digests + begin + n, next, block);
  }
}

void InsertBatch(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                 std::size_t count) {
  WithHash(scheme, [&](const auto& hash) { InsertBlocks(hash, scheme, words, digests, count); });
}

// One protocol's scatter loop, a function of its own per hasher (as
// InsertBlocks).
template <class Hash>
HWY_NOINLINE void ScatterBlocks(const Hash& hash, const probe::Scheme& scheme,
                                std::uint64_t* words, const Digest* digests, std::size_t count,
                                const simd::PositionBuckets& buckets) {
  const auto constants = simd::ModConstants::of(scheme.bit_count);
  simd::detail::BlockState& block = simd::detail::thread_scratch();
  for (std::size_t begin = 0; begin < count; begin += simd::detail::kBlock) {
    const std::size_t n = std::min(simd::detail::kBlock, count - begin);
    ScatterBlock(words, scheme.hash_count, hash, constants, digests + begin, n, buckets, block);
  }
}

void ScatterPositions(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                      std::size_t count, const simd::PositionBuckets& buckets) {
  WithHash(scheme, [&](const auto& hash) {
    ScatterBlocks(hash, scheme, words, digests, count, buckets);
  });
}

void ProbeStarts(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                 std::uint64_t* first, std::uint64_t* step) {
  const auto constants = simd::ModConstants::of(scheme.bit_count);
  WithHash(scheme, [&](const auto& hash) {
    for (std::size_t begin = 0; begin < count; begin += simd::detail::kBlock) {
      const std::size_t n = std::min(simd::detail::kBlock, count - begin);
      ComputeStarts(hash, constants, digests + begin, n, step + begin,
                    [out = first + begin](auto dn, std::size_t i, auto v) {
                      hwy::HWY_NAMESPACE::StoreU(v, dn, out + i);
                    });
    }
  });
}

void HashBatch(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
               probe::HashPair* out) {
  using D = hn::ScalableTag<std::uint64_t>;
  const D d;
  const std::size_t lanes = hn::Lanes(d);
  WithHash(scheme, [&](const auto& hash) {
    std::size_t i = 0;
    for (; i + lanes <= count; i += lanes) {
      hn::VFromD<D> w0, w1, w2, w3, h1, h2;
      hn::LoadInterleaved4(d, reinterpret_cast<const std::uint64_t*>(digests + i), w0, w1, w2, w3);
      hash(d, w0, w1, w2, w3, h1, h2);
      hn::StoreInterleaved2(h1, h2, d, reinterpret_cast<std::uint64_t*>(out + i));
    }
    for (; i < count; ++i) out[i] = hash(digests[i].bytes.data());
  });
}

void ReduceBatch(std::uint64_t bit_count, const std::uint64_t* x, std::size_t count,
                 std::uint64_t* out) {
  using D = hn::ScalableTag<std::uint64_t>;
  const D d;
  const ModVectors<D> c(d, simd::ModConstants::of(bit_count));
  std::size_t i = 0;
  for (; i + hn::Lanes(d) <= count; i += hn::Lanes(d)) {
    hn::StoreU(ModM(d, hn::LoadU(d, x + i), c), d, out + i);
  }
  for (; i < count; ++i) out[i] = x[i] % bit_count;
}

// The content fingerprint (abf/fingerprint.hpp), a digest a lane
// (fingerprint-inl.h).
void FingerprintBatch(const Digest* digests, std::size_t count, std::uint64_t* sum) {
  const ContentFingerprint total = FingerprintRange(digests, count);
  sum[0] = total.low;
  sum[1] = total.high;
}

const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace abf::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace abf::simd::detail {

BlockState& thread_scratch() {
  // 80 KiB: on the heap, once per thread, rather than on a caller's stack
  // of unknown size or in every thread's static TLS.
  thread_local const std::unique_ptr<BlockState> scratch = std::make_unique<BlockState>();
  return *scratch;
}

}  // namespace abf::simd::detail

namespace abf::simd {

HWY_EXPORT(QueryBatch);
HWY_EXPORT(InsertBatch);
HWY_EXPORT(ScatterPositions);
HWY_EXPORT(ProbeStarts);
HWY_EXPORT(HashBatch);
HWY_EXPORT(ReduceBatch);
HWY_EXPORT(TargetName);
HWY_EXPORT(FingerprintBatch);

void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept {
  if (blocked::is_blocked_protocol(view.protocol)) {
    return blocked_query_batch(line_scheme_of(view), view.words, digests, count, answers);
  }
  HWY_DYNAMIC_DISPATCH(QueryBatch)(view, digests, count, answers);
}

void insert_batch(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                  std::size_t count) noexcept {
  if (blocked::is_blocked_protocol(scheme.protocol)) {
    return blocked_insert_batch(line_scheme_of(scheme), words, digests, count);
  }
  HWY_DYNAMIC_DISPATCH(InsertBatch)(scheme, words, digests, count);
}

void scatter_positions(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                       std::size_t count, const PositionBuckets& buckets) noexcept {
  HWY_DYNAMIC_DISPATCH(ScatterPositions)(scheme, words, digests, count, buckets);
}

void probe_starts(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                  std::uint64_t* first, std::uint64_t* step) noexcept {
  HWY_DYNAMIC_DISPATCH(ProbeStarts)(scheme, digests, count, first, step);
}

void hash_batch(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                probe::HashPair* out) noexcept {
  if (blocked::is_blocked_protocol(scheme.protocol)) {
    for (std::size_t i = 0; i < count; ++i) out[i] = probe::hashes_of(scheme, digests[i].bytes.data());
    return;
  }
  HWY_DYNAMIC_DISPATCH(HashBatch)(scheme, digests, count, out);
}

void reduce_batch(std::uint64_t bit_count, const std::uint64_t* x, std::size_t count,
                  std::uint64_t* out) noexcept {
  HWY_DYNAMIC_DISPATCH(ReduceBatch)(bit_count, x, count, out);
}

ContentFingerprint content_fingerprint(const Digest* digests, std::size_t count) noexcept {
  std::uint64_t sum[2];
  HWY_DYNAMIC_DISPATCH(FingerprintBatch)(digests, count, sum);
  return {.low = sum[0], .high = sum[1]};
}

std::string target_name() { return HWY_DYNAMIC_DISPATCH(TargetName)(); }

namespace {

// Every target compiled in that this CPU supports, best first (lower bits are
// better targets in Highway): taken once, before any use_target, so the list
// stays whole whichever target runs.
const std::vector<std::int64_t>& supported_targets() {
  static const std::vector<std::int64_t> targets = [] {
    std::vector<std::int64_t> all = hwy::SupportedAndGeneratedTargets();
    std::sort(all.begin(), all.end());
    return all;
  }();
  return targets;
}

}  // namespace

namespace {

// kMemory, kRegister, or kAuto for the CPU's choice (compress_form()).
std::atomic<simd::CompressForm> forced_compress{simd::CompressForm::kAuto};

}  // namespace

CompressForm compress_form() noexcept {
  const CompressForm forced = forced_compress.load(std::memory_order_relaxed);
  if (forced != CompressForm::kAuto) return forced;
  // Zen 4 (AMD family 25; Zen 3, the same family, has no AVX-512) runs
  // vpcompressq to memory in microcode; Zen 5 (family 26) and Intel do not.
  // See VectorRound.
  static const CompressForm by_cpu = [] {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__builtin_cpu_is("amd") || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) {
      return CompressForm::kMemory;
    }
    const unsigned family = ((eax >> 8) & 0xf) + ((eax >> 20) & 0xff);
    return family == 25 ? CompressForm::kRegister : CompressForm::kMemory;
#else
    return CompressForm::kMemory;  // no AVX-512 target: unused
#endif
  }();
  return by_cpu;
}

void force_compress_form(CompressForm form) noexcept {
  forced_compress.store(form, std::memory_order_relaxed);
}

std::vector<std::string> compiled_targets() {
  std::vector<std::string> names;
  for (const std::int64_t target : supported_targets()) names.emplace_back(hwy::TargetName(target));
  return names;
}

bool use_target(std::string_view name) {
  const std::vector<std::int64_t>& targets = supported_targets();
  std::int64_t disabled = 0;
  if (name != "best") {
    const auto it = std::find_if(targets.begin(), targets.end(), [name](std::int64_t target) {
      return name == hwy::TargetName(target);
    });
    if (it == targets.end()) return false;
    disabled = *it - 1;  // every better target
  }
  hwy::DisableTargets(disabled);
  return true;
}

}  // namespace abf::simd
#endif  // HWY_ONCE
