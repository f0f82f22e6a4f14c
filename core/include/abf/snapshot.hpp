// ABF1 snapshot files (PROTOCOL.md section 7): a 128-byte checksummed header
// followed by the payload, m / 8 bytes of bitset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <vector>

#include "abf/error.hpp"
#include "abf/filter.hpp"

namespace abf {

inline constexpr std::size_t kSnapshotHeaderSize = 128;
inline constexpr std::uint32_t kSnapshotFormatVersion = 1;

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
  std::uint64_t header_checksum = 0;   // XXH3-64, seed 0, of bytes 0..72
};

enum class LoadMode {
  kAuto,  // map files of 64 MiB and more, copy smaller ones
  kCopy,  // read the file into memory owned by the Filter
  kMap,   // mmap the file read-only; the Filter keeps the mapping alive
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
// answers the first failure with its own code. A snapshot that fails is
// never used.
Result<SnapshotHeader> parse_snapshot_header(std::span<const std::uint8_t> bytes);
Result<Filter> parse_snapshot(std::span<const std::uint8_t> bytes);
Result<Filter> load_snapshot(const std::filesystem::path& path, LoadMode mode = LoadMode::kAuto);

// Loads and validates a snapshot and returns its header (for `abf inspect`).
Result<SnapshotHeader> read_snapshot_header(const std::filesystem::path& path);

}  // namespace abf
