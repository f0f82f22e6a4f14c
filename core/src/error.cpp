#include "abf/error.hpp"

namespace abf {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::kInvalidExpectedItemCount:
      return "invalid_expected_item_count";
    case ErrorCode::kInvalidFalsePositiveRate:
      return "invalid_false_positive_rate";
    case ErrorCode::kFilterTooLarge:
      return "filter_too_large";
    case ErrorCode::kCapacityExceeded:
      return "capacity_exceeded";
    case ErrorCode::kInvalidDigest:
      return "invalid_digest";
    case ErrorCode::kSnapshotTruncated:
      return "snapshot_truncated";
    case ErrorCode::kSnapshotBadMagic:
      return "snapshot_bad_magic";
    case ErrorCode::kSnapshotUnsupportedFormat:
      return "snapshot_unsupported_format";
    case ErrorCode::kSnapshotHeaderChecksum:
      return "snapshot_header_checksum";
    case ErrorCode::kSnapshotUnsupportedHashProtocol:
      return "snapshot_unsupported_hash_protocol";
    case ErrorCode::kSnapshotBadKeyFingerprint:
      return "snapshot_bad_key_fingerprint";
    case ErrorCode::kSnapshotBadHashCount:
      return "snapshot_bad_hash_count";
    case ErrorCode::kSnapshotBadBitCount:
      return "snapshot_bad_bit_count";
    case ErrorCode::kSnapshotBadExpectedItemCount:
      return "snapshot_bad_expected_item_count";
    case ErrorCode::kSnapshotBadInsertedItemCount:
      return "snapshot_bad_inserted_item_count";
    case ErrorCode::kSnapshotBadTargetFpp:
      return "snapshot_bad_target_fpp";
    case ErrorCode::kSnapshotLayoutMismatch:
      return "snapshot_layout_mismatch";
    case ErrorCode::kSnapshotBadPayloadLength:
      return "snapshot_bad_payload_length";
    case ErrorCode::kSnapshotBadContentFingerprint:
      return "snapshot_bad_content_fingerprint";
    case ErrorCode::kSnapshotReservedNotZero:
      return "snapshot_reserved_not_zero";
    case ErrorCode::kSnapshotPayloadTruncated:
      return "snapshot_payload_truncated";
    case ErrorCode::kSnapshotTrailingBytes:
      return "snapshot_trailing_bytes";
    case ErrorCode::kSnapshotPayloadChecksum:
      return "snapshot_payload_checksum";
    case ErrorCode::kSnapshotImplausibleFill:
      return "snapshot_implausible_fill";
    case ErrorCode::kKeyRequired:
      return "key_required";
    case ErrorCode::kKeyMismatch:
      return "key_mismatch";
    case ErrorCode::kInvalidKey:
      return "invalid_key";
    case ErrorCode::kCatalogMismatch:
      return "catalog_mismatch";
    case ErrorCode::kIncompatibleFilters:
      return "incompatible_filters";
    case ErrorCode::kIo:
      return "io_error";
    case ErrorCode::kInvalidArgument:
      return "invalid_argument";
    case ErrorCode::kBackendUnavailable:
      return "backend_unavailable";
    case ErrorCode::kCuda:
      return "cuda_error";
    case ErrorCode::kCatalog:
      return "catalog_error";
    case ErrorCode::kSetManifestTruncated:
      return "set_manifest_truncated";
    case ErrorCode::kSetManifestUnsupportedFormat:
      return "set_manifest_unsupported_format";
    case ErrorCode::kSetManifestChecksum:
      return "set_manifest_checksum";
    case ErrorCode::kSetManifestInvalid:
      return "set_manifest_invalid";
    case ErrorCode::kSetShardMissing:
      return "set_shard_missing";
    case ErrorCode::kSetShardMismatch:
      return "set_shard_mismatch";
    case ErrorCode::kIndexTruncated:
      return "index_truncated";
    case ErrorCode::kIndexBadMagic:
      return "index_bad_magic";
    case ErrorCode::kIndexUnsupportedFormat:
      return "index_unsupported_format";
    case ErrorCode::kIndexHeaderChecksum:
      return "index_header_checksum";
    case ErrorCode::kIndexInvalidHeader:
      return "index_invalid_header";
    case ErrorCode::kIndexTrailingBytes:
      return "index_trailing_bytes";
    case ErrorCode::kIndexBlockTableChecksum:
      return "index_block_table_checksum";
    case ErrorCode::kIndexBlockChecksum:
      return "index_block_checksum";
    case ErrorCode::kIndexNotAscending:
      return "index_not_ascending";
  }
  return "unknown_error";
}

std::string Error::describe() const { return std::string(to_string(code)) + ": " + message; }

}  // namespace abf
