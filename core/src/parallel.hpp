// Internal: splitting batch work over the cores of the current TBB arena.
// Every function here gives the same result for any thread count and split.
#pragma once

#include <cstddef>
#include <cstdint>

#include "abf/digest.hpp"
#include "abf/filter.hpp"

namespace abf::detail {

// A single-threaded engine entry point (scalar::query_batch, simd::query_batch).
using QueryFn = void (*)(const probe::FilterView&, const Digest*, std::size_t, Answer*) noexcept;
using InsertFn = void (*)(std::uint64_t*, std::uint64_t, std::uint32_t, const Digest*,
                          std::size_t) noexcept;

// Answers digests[i] into answers[i], in chunks spread over the arena. Small
// batches run on the calling thread.
void parallel_query(QueryFn engine, const probe::FilterView& view, const Digest* digests,
                    std::size_t count, Answer* answers);

// Sets the bits of every digest in `words` (bit_count / 64 words). The bitset
// is identical to engine(words, ..., digests, count) run serially: OR is
// commutative, so neither the split nor the order can change it.
void parallel_insert(InsertFn engine, std::uint64_t* words, std::uint64_t bit_count,
                     std::uint32_t hash_count, const Digest* digests, std::size_t count);

}  // namespace abf::detail
