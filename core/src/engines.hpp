// Internal: the single-threaded probe engines the dispatcher in query.cpp and
// the builder in filter.cpp choose between. Each engine answers bit for bit
// as the scalar reference. Not installed; includes no Highway, TBB or CUDA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/probe.hpp"

namespace abf::scalar {
// The reference: plain `%`, one digest at a time (core/src/scalar.cpp).
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept;
void insert_batch(std::uint64_t* words, std::uint64_t bit_count, std::uint32_t hash_count,
                  const Digest* digests, std::size_t count) noexcept;
}  // namespace abf::scalar

namespace abf::simd {
// The Highway engine (simd/), on the best target this CPU supports, or the
// one a test forced with hwy::SetSupportedTargetsForTest.
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept;
void insert_batch(std::uint64_t* words, std::uint64_t bit_count, std::uint32_t hash_count,
                  const Digest* digests, std::size_t count) noexcept;

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
void scatter_positions(std::uint64_t* words, std::uint64_t bit_count, std::uint32_t hash_count,
                       const Digest* digests, std::size_t count,
                       const PositionBuckets& buckets) noexcept;
// Name of the Highway target query_batch dispatches to now.
std::string target_name();
// Names of every target compiled in and supported by this CPU.
std::vector<std::string> compiled_targets();
}  // namespace abf::simd

namespace abf::cuda_engine {
// The CUDA backend (cuda/). Without a CUDA build these answer
// kBackendUnavailable (cuda/src/unavailable.cpp).
bool compiled() noexcept;
bool device_present() noexcept;
std::string device_description();
// Batch query from host memory: uploads the filter (cached per filter), then
// streams the digests through pinned staging buffers.
Result<void> query_batch(const Filter& filter, const Digest* digests, std::size_t count,
                         Answer* answers);
// A bitset on the device that a FilterBuilder building with CUDA inserts
// into: opened at its first CUDA add, ORed into the builder's own bits once,
// in finish(). A streamed build so moves the filter across the bus once, not
// once per chunk.
class DeviceLane {
 public:
  virtual ~DeviceLane() = default;
  // Inserts host digests with the GPU build kernel (the pipelined path).
  virtual Result<void> insert(const Digest* digests, std::size_t count) = 0;
  // words[i] |= the lane's word i, for all bit_count / 64 words.
  virtual Result<void> fold_into(std::uint64_t* words) = 0;
};
Result<std::unique_ptr<DeviceLane>> open_lane(std::uint64_t bit_count, std::uint32_t hash_count);
// Frees the device copy of the last queried filter and the spare lane kept
// for the next build (abf::release_cached_buffers).
void release_caches() noexcept;
// Bytes per second of a host-to-device copy from pinned memory (64 MiB,
// median of 5): the ceiling of any query whose digests start in host memory.
Result<double> copy_bandwidth();
}  // namespace abf::cuda_engine
