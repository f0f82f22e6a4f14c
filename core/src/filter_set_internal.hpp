// Internal: what the filter-set sources share (filter_set.cpp,
// filter_set_io.cpp) and the hook release_cached_buffers calls.
#pragma once

#include <algorithm>
#include <cstdint>

#include "abf/digest.hpp"
#include "abf/probe.hpp"

namespace abf::detail {

// Section 13's shard function with a precomputed reciprocal
// (probe::Reducer, exact for any 64-bit value and S < 2^32): four multiplies
// a digest instead of a 64-bit divide. Tests prove it equal to
// probe::shard_of.
class ShardRouter {
 public:
  explicit ShardRouter(std::uint32_t shard_count)
      : reducer_(std::max<std::uint32_t>(shard_count, 1)) {}
  std::uint32_t operator()(const Digest& digest) const noexcept {
    return static_cast<std::uint32_t>(reducer_.reduce(probe::load_be64(digest.bytes.data() + 24)));
  }

 private:
  probe::Reducer reducer_;
};

// Frees the query scratch FilterSet::query keeps for the next call.
void release_filter_set_scratch() noexcept;

// How many times load_filter_set has started over because the set was
// replaced while it was loading, in this process (for tests).
std::uint64_t filter_set_load_restarts() noexcept;

// The same for IndexSet::load (index_set.cpp), which routes by ShardRouter
// too.
std::uint64_t index_set_load_restarts() noexcept;

}  // namespace abf::detail
