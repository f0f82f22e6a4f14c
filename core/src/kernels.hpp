// Internal: the single-threaded batch kernels of the scalar reference engine
// (its row: engine_scalar.cpp), which every other engine answers bit for bit
// as; the SIMD engine's are in simd/probe_simd.h. Not installed; includes no
// Highway, TBB or CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/probe.hpp"

namespace abf::scalar {
// The reference (core/src/engine_scalar.cpp): one digest at a time, plain
// `%`; protocol 2's SipHash by OpenSSL.
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept;
void insert_batch(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                  std::size_t count) noexcept;
// Step 1 alone: out[i] = (h1, h2) of digests[i] under the scheme's protocol.
void hash_batch(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                probe::HashPair* out) noexcept;
}  // namespace abf::scalar
