// ABF1 snapshot files (docs/protocol.md section 7): a 128-byte checksummed header
// followed by the payload, m / 8 bytes of bitset. Writers write
// formatVersion 2 (catalogId, keyFingerprint and the content fingerprint in
// the header); loaders read 1 and 2.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <vector>

#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/scheme.hpp"

namespace abf {

inline constexpr std::size_t kSnapshotHeaderSize = 128;
// The version writers write; loaders also read version 1.
inline constexpr std::uint32_t kSnapshotFormatVersion = 2;
// contentFlags bit 0: bytes 104..120 hold the content fingerprint. Every
// other bit is reserved (a loader refuses it).
inline constexpr std::uint32_t kContentFlagFingerprint = 1;

// Every header field, as stored.
struct SnapshotHeader {
  std::uint32_t format_version = 0;
  std::uint32_t hash_protocol_version = 0;
  std::uint32_t hash_count = 0;
  std::uint64_t catalog_version = 0;
  std::uint64_t bit_count = 0;
  std::uint64_t expected_item_count = 0;
  std::uint64_t inserted_item_count = 0;
  double target_fpp = 0.0;
  std::uint64_t payload_length = 0;
  std::uint64_t payload_checksum = 0;  // XXH3-64, seed 0, of the payload
  // XXH3-64, seed 0: version 1 of bytes 0..72; version 2 of all 128 header
  // bytes with 72..80 taken as zero.
  std::uint64_t header_checksum = 0;
  CatalogId catalog_id{};            // version 2; zero in version 1 (unknown)
  KeyFingerprint key_fingerprint{};  // version 2, protocol 2; zero otherwise
  // Version 2, bytes 104..120 as stored: the content fingerprint when
  // content_flags has kContentFlagFingerprint, zero otherwise.
  ContentFingerprint content_fingerprint_bytes{};
  std::uint32_t content_flags = 0;  // version 2, bytes 120..124

  // The content fingerprint, when the header carries one.
  std::optional<ContentFingerprint> content_fingerprint() const noexcept {
    if ((content_flags & kContentFlagFingerprint) == 0) return std::nullopt;
    return content_fingerprint_bytes;
  }
};

enum class LoadMode {
  // Today kCopy, for every size: the filter is verified once and must stay
  // what was verified, which only a copy guarantees.
  kAuto,
  // Reads the file into memory owned by the Filter. Nothing done to the
  // file afterwards (rewritten, truncated, removed) changes its answers.
  kCopy,
  // mmaps the file (MAP_PRIVATE, read-only); the Filter keeps the mapping
  // alive and serves the file's pages. An explicit opt-in for large
  // snapshots that are only ever replaced by rename (save_snapshot,
  // AtomicFile): the payload is verified once, at load, and then trusted.
  // The file must never be modified or truncated in place while a Filter
  // mapped from it lives: a write changes its answers (zeroed bits answer
  // Definitely Not for members), and truncation kills the process with
  // SIGBUS at the next query that touches a lost page.
  kMap,
};

struct LoadOptions {
  LoadMode mode = LoadMode::kAuto;
  // The key of a keyed (protocol 2) snapshot: without it such a snapshot is
  // kKeyRequired, with another key kKeyMismatch; a key given for an unkeyed
  // snapshot is kKeyMismatch too (Scheme::open).
  std::optional<Key> key;
};

// The header a snapshot of `filter` has, checksums computed.
SnapshotHeader snapshot_header(const Filter& filter);

// The 128 header bytes for a filter, checksums filled in.
std::vector<std::uint8_t> encode_snapshot_header(const Filter& filter);

// The whole snapshot as bytes (header and payload).
std::vector<std::uint8_t> serialize_snapshot(const Filter& filter);

// Writes a snapshot atomically: a temporary file in the same directory,
// fsync, then rename over `path`. On any error `path` is left as it was.
Result<void> save_snapshot(const Filter& filter, const std::filesystem::path& path);

// Validates every rule of section 7, in the order of the ErrorCode list, and
// answers the first failure with its own code: the header, the payload
// checksum, then the payload's population count against insertedItemCount
// and k (check_fill with FillCheck::kAnyInsertions:
// kSnapshotImplausibleFill); then the key (LoadOptions). A snapshot that
// fails is never used. parse_snapshot_header checks the header only.
Result<SnapshotHeader> parse_snapshot_header(std::span<const std::uint8_t> bytes);
Result<Filter> parse_snapshot(std::span<const std::uint8_t> bytes,
                              const std::optional<Key>& key = std::nullopt);
// Loads a snapshot file. Only a regular file is read: a FIFO, device or
// directory is kIo at once (the file is opened non-blocking, so a FIFO
// without a writer cannot hang the caller). A header that fails a rule is
// refused before any payload memory is allocated, so a hostile header (a
// claimed 2^40-byte payload, a sparse 5 GB file) costs a 128-byte read;
// the memory a load can take is bounded by its valid payload, at most
// 128 MiB (m <= 2^30). A file that shrinks while it is read is
// kSnapshotPayloadTruncated.
Result<Filter> load_snapshot(const std::filesystem::path& path, const LoadOptions& options);
Result<Filter> load_snapshot(const std::filesystem::path& path, LoadMode mode = LoadMode::kAuto);

// Validates a whole snapshot, payload checksum and population count
// included, and returns its header (for `abf inspect`). Needs no key: the header names the key by its
// fingerprint only. Streams the payload through the checksum in 1 MiB
// pieces rather than holding it.
Result<SnapshotHeader> read_snapshot_header(const std::filesystem::path& path);

}  // namespace abf
