// The scalar reference of the one-line protocols (blocked_kernels.hpp):
// blocked.hpp's own loops, one digest at a time.
#include "blocked_kernels.hpp"

#include "keyed_hash.hpp"

namespace abf::scalar {

blocked::LineHash blocked_line_hash(const blocked::LineScheme& scheme,
                                    const Digest& digest) noexcept {
  if (scheme.protocol == blocked::kProtocolBlockedKeyed) {
    const probe::HashPair tag = detail::openssl_keyed_hashes(scheme.key, digest.bytes.data());
    return blocked::LineHash{tag.h1, tag.h2};
  }
  return blocked::unkeyed_line_hash(digest.bytes.data());
}

void blocked_query_batch(const blocked::LineScheme& scheme, const std::uint64_t* words,
                         const Digest* digests, std::size_t count, Answer* answers) noexcept {
  for (std::size_t i = 0; i < count; ++i) {
    answers[i] = blocked::might_contain_hash(words, scheme.block_count,
                                             blocked_line_hash(scheme, digests[i]))
                     ? Answer::kMaybe
                     : Answer::kDefinitelyNot;
  }
}

void blocked_insert_batch(const blocked::LineScheme& scheme, std::uint64_t* words,
                          const Digest* digests, std::size_t count) noexcept {
  for (std::size_t i = 0; i < count; ++i) {
    blocked::insert_hash(words, scheme.block_count, blocked_line_hash(scheme, digests[i]));
  }
}

}  // namespace abf::scalar
