// Parallel batch query and build with oneTBB.
#include "parallel.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

namespace abf::detail {

namespace {
// Below this many digests a batch runs on the calling thread: a task costs
// about a microsecond to spawn, ~100 absent probes' worth at L2.
constexpr std::size_t kQueryGrain = 16 * 1024;
}  // namespace

void parallel_query(QueryFn engine, const probe::FilterView& view, const Digest* digests,
                    std::size_t count, Answer* answers) {
  if (count <= kQueryGrain) {
    engine(view, digests, count, answers);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::size_t>(0, count, kQueryGrain),
                    [&](const tbb::blocked_range<std::size_t>& range) {
                      engine(view, digests + range.begin(), range.size(), answers + range.begin());
                    });
}

void parallel_insert(InsertFn engine, std::uint64_t* words, std::uint64_t bit_count,
                     std::uint32_t hash_count, const Digest* digests, std::size_t count) {
  // Serial for now; the sharded build replaces this.
  engine(words, bit_count, hash_count, digests, count);
}

}  // namespace abf::detail
