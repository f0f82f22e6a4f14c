// The content fingerprint of a catalog version (docs/protocol.md, section 8
// and "Content fingerprint"): a 128-bit, order-independent digest of the
// multiset of SHA-256 digests a filter was built from, so that a snapshot can
// be tied to what its catalog version *holds*, not only to its number.
//
//   element(d)     = XXH3-128 (seed 0) of the 32 bytes of d, as an unsigned
//                    128-bit integer (high 64 bits * 2^64 + low 64 bits)
//   fingerprint(S) = sum of element(d) over the multiset S, mod 2^128
//   stored as      16 bytes: low 64 bits, then high 64 bits, each little-endian
//
// Addition mod 2^128 is commutative and invertible, so the fingerprint is the
// same for every insertion order and every partition of S (shards, Dask
// partitions, merged parts: add their fingerprints), and a catalog keeps it
// per version by adding each digest it adds and subtracting each it removes.
// Duplicates count as often as they are inserted (like insertedItemCount); a
// catalog version holds each digest once. The empty set's fingerprint is 0.
//
// What it is for: telling apart two catalog states that carry the same
// (catalogId, catalogVersion), such as a catalog restored from a backup and
// advanced again. It is not a cryptographic commitment: a party that
// controls which digests enter the catalog could search for two sets with
// equal sums. The catalog binding also compares the item count.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "abf/digest.hpp"
#include "abf/error.hpp"

namespace abf {

struct ContentFingerprint {
  // The sum mod 2^128, as two 64-bit halves.
  std::uint64_t low = 0;
  std::uint64_t high = 0;

  // element(d) of one digest.
  static ContentFingerprint of(const Digest& digest) noexcept;
  // The fingerprint of a multiset given as a span (the sum of its elements).
  static ContentFingerprint of(std::span<const Digest> digests) noexcept;

  // Adds (inserts) or subtracts (removes) another fingerprint, mod 2^128.
  ContentFingerprint& operator+=(const ContentFingerprint& other) noexcept {
    const std::uint64_t sum_low = low + other.low;
    high += other.high + (sum_low < low ? 1 : 0);
    low = sum_low;
    return *this;
  }
  ContentFingerprint& operator-=(const ContentFingerprint& other) noexcept {
    const std::uint64_t borrow = low < other.low ? 1 : 0;
    low -= other.low;
    high -= other.high + borrow;
    return *this;
  }
  friend ContentFingerprint operator+(ContentFingerprint a, const ContentFingerprint& b) noexcept {
    return a += b;
  }
  friend ContentFingerprint operator-(ContentFingerprint a, const ContentFingerprint& b) noexcept {
    return a -= b;
  }

  // The 16 stored bytes (low little-endian, then high little-endian).
  std::array<std::uint8_t, 16> bytes() const noexcept;
  static ContentFingerprint from_bytes(std::span<const std::uint8_t, 16> bytes) noexcept;
  // 32 lowercase hex digits of bytes(), as inspect and error messages print it.
  std::string hex() const;
  // Exactly 32 hex digits (bytes() order); kInvalidArgument otherwise.
  static Result<ContentFingerprint> parse_hex(std::string_view hex);

  friend constexpr bool operator==(const ContentFingerprint&,
                                   const ContentFingerprint&) = default;
};

}  // namespace abf
