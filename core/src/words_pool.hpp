// Internal: the bitset block allocate_words keeps from the last filter freed
// (filter.cpp, words_pool(): a block_pool.hpp BlockPool), for tests and
// release_cached_buffers.
#pragma once

#include <cstddef>

namespace abf::detail {

// Bytes of the kept block (0: none).
std::size_t pooled_words_bytes() noexcept;
// Frees the kept block.
void release_pooled_words() noexcept;

}  // namespace abf::detail
