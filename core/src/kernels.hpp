// Internal: the single-threaded batch kernels of the host engines, which the
// engine table (engine.hpp) runs over the arena's threads. Each answers bit
// for bit as the scalar reference. Not installed; includes no Highway, TBB or
// CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"
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

namespace abf::simd {
// The Highway engine (simd/), on the best target this CPU supports, or the
// one a test forced with hwy::SetSupportedTargetsForTest.
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept;
void insert_batch(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                  std::size_t count) noexcept;

// The buckets of one slot of a partitioned build (core/src/partition.hpp):
// bucket b gathers the probe positions of bits [b << range_bits,
// (b + 1) << range_bits), each as its offset within that range.
struct PositionBuckets {
  unsigned range_bits = 20;
  std::uint32_t capacity = 0;           // entries a bucket holds
  std::size_t stride = 0;               // entries from one bucket's start to the next
  std::uint32_t* entries = nullptr;     // bucket b: entries[b * stride + i], i < fill[b]
  std::uint32_t* fill = nullptr;        // per bucket
  std::uint64_t* overflowed = nullptr;  // required: += positions set directly (bucket full)
};
// Appends the k probe positions of every digest to `buckets`. A position
// whose bucket is full is set in `words` right away, with an atomic OR, so
// concurrent scatters into different slots may share `words`.
void scatter_positions(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                       std::size_t count, const PositionBuckets& buckets) noexcept;
// Name of the Highway target query_batch dispatches to now.
std::string target_name();
// Names of every target compiled in and supported by this CPU.
std::vector<std::string> compiled_targets();
}  // namespace abf::simd

namespace abf::cuda_engine {
// Bytes per second of a host-to-device copy from pinned memory (64 MiB,
// median of 5): the ceiling of any query whose digests start in host memory.
// kBackendUnavailable without a CUDA build or device (cuda/).
Result<double> copy_bandwidth();
}  // namespace abf::cuda_engine
