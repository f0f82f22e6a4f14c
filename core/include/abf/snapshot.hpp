// ABF1 snapshot files (PROTOCOL.md section 7): a 128-byte checksummed header
// followed by the payload, m / 8 bytes of bitset. Writers write
// formatVersion 2 (catalogId and keyFingerprint in the header); loaders read
// 1 and 2.
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
};

enum class LoadMode {
  kAuto,  // map files of 64 MiB and more, copy smaller ones
  kCopy,  // read the file into memory owned by the Filter
  kMap,   // mmap the file read-only; the Filter keeps the mapping alive
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
// answers the first failure with its own code; then the key (LoadOptions).
// A snapshot that fails is never used.
Result<SnapshotHeader> parse_snapshot_header(std::span<const std::uint8_t> bytes);
Result<Filter> parse_snapshot(std::span<const std::uint8_t> bytes,
                              const std::optional<Key>& key = std::nullopt);
Result<Filter> load_snapshot(const std::filesystem::path& path, const LoadOptions& options);
Result<Filter> load_snapshot(const std::filesystem::path& path, LoadMode mode = LoadMode::kAuto);

// Validates a whole snapshot, payload checksum included, and returns its
// header (for `abf inspect`). Needs no key: the header names the key by its
// fingerprint only.
Result<SnapshotHeader> read_snapshot_header(const std::filesystem::path& path);

}  // namespace abf
