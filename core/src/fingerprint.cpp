#include "abf/fingerprint.hpp"

// Inlined: a build sums XXH3-128 over every digest it inserts, and the call
// into libxxhash costs about as much as the hash of 32 bytes itself
// (docs/performance.md, "The content fingerprint's cost").
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <cstring>

#include "abf/scheme.hpp"
#include "engine.hpp"

namespace abf {
namespace {

std::uint64_t load_le64(const std::uint8_t* bytes) noexcept {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = value << 8 | bytes[i];
  return value;
}

void store_le64(std::uint64_t value, std::uint8_t* bytes) noexcept {
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<std::uint8_t>(value >> (8 * i));
}

}  // namespace

ContentFingerprint ContentFingerprint::of(const Digest& digest) noexcept {
  const XXH128_hash_t hash = XXH3_128bits(digest.bytes.data(), Digest::kSize);
  return {.low = hash.low64, .high = hash.high64};
}

ContentFingerprint ContentFingerprint::of(std::span<const Digest> digests) noexcept {
  // The vector engine's, where it has one: a digest a lane (AVX2: 27
  // instructions a digest against 51 here, callgrind; docs/performance.md).
  if (const auto fingerprint = detail::fallback_fingerprint()) return fingerprint(digests);
  return detail::content_fingerprint_one_by_one(digests);
}

namespace detail {

ContentFingerprint content_fingerprint_one_by_one(std::span<const Digest> digests) noexcept {
  ContentFingerprint sum;
  for (const Digest& digest : digests) sum += ContentFingerprint::of(digest);
  return sum;
}

}  // namespace detail

std::array<std::uint8_t, 16> ContentFingerprint::bytes() const noexcept {
  std::array<std::uint8_t, 16> out{};
  store_le64(low, out.data());
  store_le64(high, out.data() + 8);
  return out;
}

ContentFingerprint ContentFingerprint::from_bytes(std::span<const std::uint8_t, 16> bytes) noexcept {
  return {.low = load_le64(bytes.data()), .high = load_le64(bytes.data() + 8)};
}

// The same 16-byte hex form as a catalog id; CatalogId owns the hex helpers.
std::string ContentFingerprint::hex() const { return CatalogId{bytes()}.hex(); }

Result<ContentFingerprint> ContentFingerprint::parse_hex(std::string_view hex) {
  auto parsed = CatalogId::parse_hex(hex);
  if (!parsed) {
    return fail(ErrorCode::kInvalidArgument,
                "a content fingerprint is exactly 32 hex digits; got '" + std::string(hex) + "'");
  }
  return from_bytes(parsed->bytes);
}

}  // namespace abf
