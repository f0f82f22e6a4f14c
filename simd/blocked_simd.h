// Internal to the SIMD engine and its tests and benchmarks: the Highway
// kernels of the one-line protocols 3 and 4 (abf/blocked.hpp,
// docs/protocol.md section 4c), on the best target this CPU supports or the
// one a test forced (hwy::SetSupportedTargetsForTest, simd::use_target).
// Each answers and sets bits exactly as the reference (blocked.hpp's
// might_contain and insert). Includes no Highway header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "abf/blocked.hpp"
#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/fingerprint.hpp"
#include "abf/probe.hpp"

namespace abf::simd {

// The one-line scheme of a protocol-3 or -4 probe::Scheme.
inline blocked::LineScheme line_scheme_of(const probe::Scheme& scheme) {
  return blocked::LineScheme{scheme.bit_count / blocked::kBlockBits, scheme.protocol, scheme.key};
}

// answers[i] = whether all eight bits of digests[i] are set in `words`
// (8 * scheme.block_count words).
void blocked_query_batch(const blocked::LineScheme& scheme, const std::uint64_t* words,
                         const Digest* digests, std::size_t count, Answer* answers) noexcept;
// Sets the eight bits of every digest.
void blocked_insert_batch(const blocked::LineScheme& scheme, std::uint64_t* words,
                          const Digest* digests, std::size_t count) noexcept;
// blocked_insert_batch, and the content fingerprint of the digests
// (ContentFingerprint::of) summed in the same pass.
ContentFingerprint blocked_insert_fingerprinted(const blocked::LineScheme& scheme,
                                                std::uint64_t* words, const Digest* digests,
                                                std::size_t count) noexcept;
// Step 1 and the block: block[i] and q[i] of digests[i] by the vector hash
// and block index of the dispatched target (tails by blocked.hpp). For tests.
void blocked_hash_batch(const blocked::LineScheme& scheme, const Digest* digests,
                        std::size_t count, std::uint64_t* block, std::uint64_t* q) noexcept;

}  // namespace abf::simd
