// Errors are values: every fallible call returns abf::Result<T>, a
// std::expected<T, abf::Error>. The code says what kind of failure it was
// (tests and callers branch on it); the message says what and where, in a
// form fit to print on one line.
#pragma once

// Every public header includes this one first: under an older standard the
// compiler's first word is this line, not a page of std::expected errors.
#if (defined(_MSVC_LANG) ? _MSVC_LANG : __cplusplus) < 202100L
#error "abf needs C++23 (-std=c++23 or later): its API returns std::expected"
#endif

#include <cstdint>
#include <expected>
#include <string>
#include <string_view>

namespace abf {

enum class ErrorCode : std::uint8_t {
  // Layout selection (docs/protocol.md section 3).
  kInvalidExpectedItemCount,
  kInvalidFalsePositiveRate,
  kFilterTooLarge,
  // Building (section 6).
  kCapacityExceeded,
  // Digests (section 2): wrong length, non-hex, other prefix, partial record.
  kInvalidDigest,
  // Snapshot loading (section 7): one code per rule, in the order checked.
  kSnapshotTruncated,                // shorter than the 128-byte header
  kSnapshotBadMagic,                 // bytes 0..4 are not "ABF1"
  kSnapshotUnsupportedFormat,        // formatVersion not 1 or 2
  kSnapshotHeaderChecksum,           // headerChecksum does not match the header
  kSnapshotUnsupportedHashProtocol,  // hashProtocolVersion not 1 (format 1), not 1..4 (format 2)
  kSnapshotBadKeyFingerprint,        // unkeyed protocol (1, 3) with a nonzero keyFingerprint
  kSnapshotBadHashCount,             // hashCount outside 1..32 (classic), not 8 (blocked)
  kSnapshotBadBitCount,              // bitCount not a multiple of 64 in 64..2^30 (classic),
                                     // of 512 in 512..2^40 (blocked), or not the layout's
  kSnapshotBadExpectedItemCount,     // expectedItemCount outside 1..2^30 (classic), 1..2^36 (blocked)
  kSnapshotBadInsertedItemCount,     // insertedItemCount > expectedItemCount
  kSnapshotBadTargetFpp,             // targetFpp not in (0, 1)
  kSnapshotLayoutMismatch,           // (bitCount, hashCount) is not section 3's layout for (n, p)
  kSnapshotBadPayloadLength,         // payloadLength != bitCount / 8
  kSnapshotBadContentFingerprint,    // contentFlags has an unknown bit, or a fingerprint
                                     // without its flag (version 2)
  kSnapshotReservedNotZero,          // reserved header bytes not all zero
  kSnapshotPayloadTruncated,         // file shorter than 128 + payloadLength
  kSnapshotTrailingBytes,            // file longer than 128 + payloadLength
  kSnapshotPayloadChecksum,          // payloadChecksum does not match payload
  kSnapshotImplausibleFill,          // the payload's popcount cannot come from
                                     // insertedItemCount insertions of k bits (check_fill)
  // Keys (section 4b).
  kKeyRequired,  // a protocol-2 filter was opened without its key
  kKeyMismatch,  // the key given is not the filter's (fingerprints differ), or a key was
                 // given for an unkeyed filter
  kInvalidKey,   // a key file is malformed or readable by others
  // Catalog identity (section 8).
  kCatalogMismatch,  // a snapshot's catalogId is zero or another catalog's
  // Combining filters.
  kIncompatibleFilters,
  // Environment.
  kIo,                  // a file could not be opened, read, written or renamed
  kInvalidArgument,     // a caller passed something the API does not accept
  kBackendUnavailable,  // the requested backend was not compiled in or has no device
  kCuda,                // a CUDA runtime call failed
  kCatalog,             // the exact store (catalog database) failed
  // Filter sets (section 13): the manifest, then its shards. A shard that
  // fails a snapshot rule answers that rule's own code, naming the shard.
  kSetManifestTruncated,          // shorter than its header, or than the length it records
  kSetManifestUnsupportedFormat,  // manifest formatVersion not 1
  kSetManifestChecksum,           // the manifest's header or body checksum does not match
  kSetManifestInvalid,            // a manifest field breaks a rule (the message names it)
  kSetShardMissing,               // a shard file the manifest names does not exist
  kSetShardMismatch,              // a shard is not the one the manifest names (field named)
  // Exact index files (ABFX, docs/protocol.md): one code per rule, in the
  // order checked.
  kIndexTruncated,            // shorter than the 128-byte header, or than the header promises
  kIndexBadMagic,             // bytes 0..4 are not "ABFX"
  kIndexUnsupportedFormat,    // formatVersion not 1
  kIndexHeaderChecksum,       // headerChecksum does not match the header
  kIndexInvalidHeader,        // a header field breaks a rule (the message names it)
  kIndexTrailingBytes,        // longer than the header promises
  kIndexBlockTableChecksum,   // the block table's checksum does not match
  kIndexBlockChecksum,        // a block's checksum does not match (block named)
  kIndexNotAscending,         // a digest not greater than the one before (duplicate or
                              // out of order; position named)
  // Index sets (ABXS, docs/protocol.md section 14, "Index sets"): the
  // manifest, then its shards. A shard that fails an ABFX rule answers that
  // rule's own code, naming the shard.
  kIndexSetManifestTruncated,          // shorter than its header, or than the length it records
  kIndexSetManifestUnsupportedFormat,  // manifest formatVersion not 1
  kIndexSetManifestChecksum,           // the manifest's header or body checksum does not match
  kIndexSetManifestInvalid,            // a manifest field breaks a rule (the message names it)
  kIndexSetShardMissing,               // a shard file the manifest names does not exist
  kIndexSetShardMismatch,              // a shard is not the one the manifest names (field
                                       // named), or holds a digest of another shard
};

// The snake_case name of a code ("invalid_digest"), as used in the golden
// vectors and in machine-readable output.
std::string_view to_string(ErrorCode code) noexcept;

struct Error {
  ErrorCode code;
  std::string message;

  // "<code name>: <message>".
  std::string describe() const;
};

template <class T>
using Result = std::expected<T, Error>;

// Shorthand for returning an error: `return fail(ErrorCode::kIo, "...")`.
inline std::unexpected<Error> fail(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}

}  // namespace abf
