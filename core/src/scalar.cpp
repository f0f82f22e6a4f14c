// The scalar reference engine: the protocol header's own loops, one digest
// at a time. Every other engine is tested against these two functions.
#include "engines.hpp"

namespace abf::scalar {

void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept {
  for (std::size_t i = 0; i < count; ++i) {
    answers[i] = probe::might_contain(view, digests[i].bytes.data()) ? Answer::kMaybe
                                                                     : Answer::kDefinitelyNot;
  }
}

void insert_batch(std::uint64_t* words, std::uint64_t bit_count, std::uint32_t hash_count,
                  const Digest* digests, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) {
    probe::insert(words, bit_count, hash_count, digests[i].bytes.data());
  }
}

}  // namespace abf::scalar
