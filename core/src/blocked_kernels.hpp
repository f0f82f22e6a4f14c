// Internal: the scalar reference kernels of the one-line protocols 3 and 4
// (abf/blocked.hpp, docs/protocol.md section 4c): one digest at a time,
// protocol 4's SipHash computed by OpenSSL. Every other engine's one-line
// kernels (simd/blocked_simd.h, the CUDA kernels) are tested against these.
#pragma once

#include <cstddef>
#include <cstdint>

#include "abf/blocked.hpp"
#include "abf/digest.hpp"
#include "abf/filter.hpp"

namespace abf::scalar {

// Step 1 of the reference: protocol 3 reads the digest, protocol 4 is
// OpenSSL's SipHash-2-4-128 (h = its first little-endian word, q its second).
blocked::LineHash blocked_line_hash(const blocked::LineScheme& scheme, const Digest& digest) noexcept;

void blocked_query_batch(const blocked::LineScheme& scheme, const std::uint64_t* words,
                         const Digest* digests, std::size_t count, Answer* answers) noexcept;
void blocked_insert_batch(const blocked::LineScheme& scheme, std::uint64_t* words,
                          const Digest* digests, std::size_t count) noexcept;

}  // namespace abf::scalar
