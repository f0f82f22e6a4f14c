// PLACEHOLDER until the Highway engine lands: forwards to the scalar reference.
#include "engines.hpp"

namespace abf::simd {
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept {
  scalar::query_batch(view, digests, count, answers);
}
void insert_batch(std::uint64_t* words, std::uint64_t bit_count, std::uint32_t hash_count,
                  const Digest* digests, std::size_t count) noexcept {
  scalar::insert_batch(words, bit_count, hash_count, digests, count);
}
std::string target_name() { return "none"; }
std::vector<std::string> compiled_targets() { return {}; }
}  // namespace abf::simd
