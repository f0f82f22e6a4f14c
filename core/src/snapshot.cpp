// ABF1 snapshot encoding, validation and loading (docs/protocol.md section 7).
#include "abf/snapshot.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abf/io.hpp"
#include "abf/layout.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"
#include "binary_format.hpp"
#include "header_rules.hpp"

namespace abf {

namespace {

using detail::ByteReader;
using detail::ByteWriter;
using detail::Fd;
using detail::hex64;
using detail::load_le;
using detail::open_regular_file;
using detail::xxh3;

constexpr char kMagic[4] = {'A', 'B', 'F', '1'};
constexpr std::size_t kHeaderChecksumOffset = 72;
constexpr std::size_t kCatalogIdOffset = 80;
constexpr std::size_t kKeyFingerprintOffset = 96;
constexpr std::size_t kContentFingerprintOffset = 104;
constexpr std::size_t kContentFlagsOffset = 120;
// Where the reserved (all zero) bytes start in each format version.
constexpr std::size_t kReservedOffsetV1 = 80;
constexpr std::size_t kReservedOffsetV2 = 124;

// The header fields at their offsets (section 7), unchecked.
SnapshotHeader decode_fields(const std::uint8_t* bytes) {
  const ByteReader p(bytes, kSnapshotHeaderSize);
  SnapshotHeader h;
  h.format_version = p.at<std::uint32_t>(4);
  h.hash_protocol_version = p.at<std::uint32_t>(8);
  h.hash_count = p.at<std::uint32_t>(12);
  h.catalog_version = p.at<std::uint64_t>(16);
  h.bit_count = p.at<std::uint64_t>(24);
  h.expected_item_count = p.at<std::uint64_t>(32);
  h.inserted_item_count = p.at<std::uint64_t>(40);
  h.target_fpp = p.at<double>(48);
  h.payload_length = p.at<std::uint64_t>(56);
  h.payload_checksum = p.at<std::uint64_t>(64);
  h.header_checksum = p.at<std::uint64_t>(kHeaderChecksumOffset);
  if (h.format_version == 2) {
    p.copy_at(kCatalogIdOffset, h.catalog_id.bytes);
    p.copy_at(kKeyFingerprintOffset, h.key_fingerprint.bytes);
    h.content_fingerprint_bytes =
        ContentFingerprint::from_bytes(p.bytes_at<16>(kContentFingerprintOffset));
    h.content_flags = p.at<std::uint32_t>(kContentFlagsOffset);
  }
  return h;
}

// The header checksum of format `version` over the 128 header bytes.
std::uint64_t header_checksum(const std::uint8_t* bytes, std::uint32_t version) {
  if (version == 1) return xxh3(bytes, kHeaderChecksumOffset);
  return detail::header_checksum_zeroed<kSnapshotHeaderSize>(bytes, kHeaderChecksumOffset);
}

// Each header rule's error code (section 7).
ErrorCode code_of(detail::HeaderRule rule) {
  switch (rule) {
    case detail::HeaderRule::kProtocol:
      return ErrorCode::kSnapshotUnsupportedHashProtocol;
    case detail::HeaderRule::kKeyFingerprint:
      return ErrorCode::kSnapshotBadKeyFingerprint;
    case detail::HeaderRule::kHashCount:
      return ErrorCode::kSnapshotBadHashCount;
    case detail::HeaderRule::kBitCount:
      return ErrorCode::kSnapshotBadBitCount;
    case detail::HeaderRule::kExpectedItemCount:
      return ErrorCode::kSnapshotBadExpectedItemCount;
    case detail::HeaderRule::kInsertedItemCount:
      return ErrorCode::kSnapshotBadInsertedItemCount;
    case detail::HeaderRule::kTargetFpp:
      return ErrorCode::kSnapshotBadTargetFpp;
    case detail::HeaderRule::kShardSplit:
    case detail::HeaderRule::kLayoutChoice:
      break;
  }
  return ErrorCode::kSnapshotLayoutMismatch;
}

// Checks the 128 header bytes against every rule, in order. `file_size` is
// the whole snapshot's length.
Result<SnapshotHeader> validate_header(const std::uint8_t* bytes, std::uint64_t file_size,
                                       const std::string& where) {
  auto error = [&](ErrorCode code, const std::string& what) {
    return fail(code, where + ": " + what);
  };
  if (file_size < kSnapshotHeaderSize) {
    return error(
        ErrorCode::kSnapshotTruncated,
        "file is " + std::to_string(file_size) + " bytes, shorter than the 128-byte ABF1 header");
  }
  if (std::memcmp(bytes, kMagic, 4) != 0) {
    return error(ErrorCode::kSnapshotBadMagic, "not an ABF1 snapshot (bad magic)");
  }
  const SnapshotHeader h = decode_fields(bytes);

  if (h.format_version != 1 && h.format_version != 2) {
    return error(ErrorCode::kSnapshotUnsupportedFormat,
                 "format version " + std::to_string(h.format_version) +
                     " is not supported (this build reads versions 1 and 2)");
  }
  // The checksum before the fields: a corrupt header is not interpreted.
  if (const auto actual = header_checksum(bytes, h.format_version); actual != h.header_checksum) {
    return error(ErrorCode::kSnapshotHeaderChecksum, "header checksum mismatch (stored " +
                                                         hex64(h.header_checksum) + ", computed " +
                                                         hex64(actual) + ")");
  }
  detail::HeaderFacts facts;
  facts.format_version = h.format_version;
  facts.hash_protocol_version = h.hash_protocol_version;
  facts.key_fingerprint = h.key_fingerprint;
  facts.layout = Layout{h.bit_count, h.hash_count};
  facts.expected_item_count = h.expected_item_count;
  facts.inserted_item_count = h.inserted_item_count;
  facts.target_fpp = h.target_fpp;
  if (auto fault = detail::check_header(detail::HeaderKind::kSnapshot, facts)) {
    return error(code_of(fault->rule), fault->problem);
  }
  if (h.payload_length != h.bit_count / 8) {
    return error(ErrorCode::kSnapshotBadPayloadLength,
                 "payload length " + std::to_string(h.payload_length) +
                     " is not bit count / 8 = " + std::to_string(h.bit_count / 8));
  }
  if (h.format_version == 2) {
    if ((h.content_flags & ~kContentFlagFingerprint) != 0) {
      return error(ErrorCode::kSnapshotBadContentFingerprint,
                   "content flags " + hex64(h.content_flags) +
                       " have a bit set besides bit 0 (fingerprint present)");
    }
    if ((h.content_flags & kContentFlagFingerprint) == 0 &&
        h.content_fingerprint_bytes != ContentFingerprint{}) {
      return error(ErrorCode::kSnapshotBadContentFingerprint,
                   "content fingerprint " + h.content_fingerprint_bytes.hex() +
                       " is stored but content flags bit 0 (fingerprint present) is clear");
    }
  }
  const ByteReader p(bytes, kSnapshotHeaderSize);
  for (std::size_t i = h.format_version == 1 ? kReservedOffsetV1 : kReservedOffsetV2;
       i < kSnapshotHeaderSize; ++i) {
    if (!p.zero_at(i, 1)) {
      return error(ErrorCode::kSnapshotReservedNotZero,
                   "reserved header byte " + std::to_string(i) + " is not zero");
    }
  }
  const std::uint64_t expected_size = kSnapshotHeaderSize + h.payload_length;
  if (file_size < expected_size) {
    return error(ErrorCode::kSnapshotPayloadTruncated, "file is " + std::to_string(file_size) +
                                                           " bytes, the header promises " +
                                                           std::to_string(expected_size));
  }
  if (file_size > expected_size) {
    return error(ErrorCode::kSnapshotTrailingBytes,
                 "file is " + std::to_string(file_size) + " bytes, " +
                     std::to_string(file_size - expected_size) + " more than the header promises");
  }
  return h;
}

// The popcount rule (after the checksum: a payload that is what was written
// can still be one no build of insertedItemCount digests writes).
Result<void> check_popcount(const SnapshotHeader& h, std::uint64_t popcount,
                            const std::string& where) {
  const auto fault = describe_fill_fault(Layout{h.bit_count, h.hash_count}, h.inserted_item_count,
                                         popcount, FillCheck::kAnyInsertions, h.hash_protocol_version);
  if (fault.empty()) return {};
  return fail(ErrorCode::kSnapshotImplausibleFill, where + ": " + fault);
}

std::uint64_t popcount_of(const std::uint8_t* bytes, std::size_t size) {
  std::uint64_t total = 0;
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) total += std::popcount(load_le<std::uint64_t>(bytes + i));
  for (; i < size; ++i) total += std::popcount(bytes[i]);
  return total;
}

Result<void> check_payload(const SnapshotHeader& h, const std::uint8_t* payload,
                           const std::string& where) {
  if (const auto actual = xxh3(payload, h.payload_length); actual != h.payload_checksum) {
    return fail(ErrorCode::kSnapshotPayloadChecksum,
                where + ": payload checksum mismatch (stored " + hex64(h.payload_checksum) +
                    ", computed " + hex64(actual) + ")");
  }
  return check_popcount(h, popcount_of(payload, h.payload_length), where);
}

// The filter a validated header describes, opened with `key`.
Result<FilterInfo> info_of(const SnapshotHeader& h, const std::optional<Key>& key,
                           const std::string& where) {
  auto scheme = Scheme::open(Layout{h.bit_count, h.hash_count}, h.hash_protocol_version,
                             h.key_fingerprint, key, where);
  if (!scheme) return std::unexpected(scheme.error());
  return FilterInfo{BloomSpec{h.expected_item_count, h.target_fpp}, *scheme, h.inserted_item_count,
                    h.catalog_version, h.catalog_id, h.content_fingerprint()};
}

Result<void> read_exact(int fd, std::uint8_t* out, std::size_t size, std::uint64_t offset,
                        const std::string& where) {
  return detail::read_exact(fd, out, size, offset, where, ErrorCode::kSnapshotPayloadTruncated);
}

}  // namespace

std::vector<std::uint8_t> encode_snapshot_header(const Filter& filter) {
  std::vector<std::uint8_t> header(kSnapshotHeaderSize, 0);
  const ByteWriter p(header);
  p.put_bytes(0, kMagic, 4);
  p.put<std::uint32_t>(4, kSnapshotFormatVersion);
  p.put<std::uint32_t>(8, filter.hash_protocol_version());
  p.put<std::uint32_t>(12, filter.hash_count());
  p.put<std::uint64_t>(16, filter.catalog_version());
  p.put<std::uint64_t>(24, filter.bit_count());
  p.put<std::uint64_t>(32, filter.expected_item_count());
  p.put<std::uint64_t>(40, filter.inserted_item_count());
  p.put<double>(48, filter.target_fpp());
  p.put<std::uint64_t>(56, filter.bit_count() / 8);
  p.put<std::uint64_t>(64, xxh3(filter.payload()));
  p.put_bytes(kCatalogIdOffset, filter.catalog_id().bytes);
  p.put_bytes(kKeyFingerprintOffset, filter.scheme().key_fingerprint().bytes);
  if (const auto& fingerprint = filter.content_fingerprint()) {
    p.put_bytes(kContentFingerprintOffset, fingerprint->bytes());
    p.put<std::uint32_t>(kContentFlagsOffset, kContentFlagFingerprint);
  }
  p.put<std::uint64_t>(kHeaderChecksumOffset, header_checksum(p.data(), kSnapshotFormatVersion));
  return header;
}

std::vector<std::uint8_t> serialize_snapshot(const Filter& filter) {
  auto bytes = encode_snapshot_header(filter);
  const auto payload = filter.payload();
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  return bytes;
}

Result<void> save_snapshot(const Filter& filter, const std::filesystem::path& path) {
  auto file = AtomicFile::create(path);
  if (!file) return std::unexpected(file.error());
  if (auto wrote = file->write(encode_snapshot_header(filter)); !wrote) return wrote;
  if (auto wrote = file->write(filter.payload()); !wrote) return wrote;
  return file->commit();
}

Result<SnapshotHeader> parse_snapshot_header(std::span<const std::uint8_t> bytes) {
  return validate_header(bytes.data(), bytes.size(), "snapshot");
}

Result<Filter> parse_snapshot(std::span<const std::uint8_t> bytes, const std::optional<Key>& key) {
  const std::string where = "snapshot";
  auto header = validate_header(bytes.data(), bytes.size(), where);
  if (!header) return std::unexpected(header.error());
  const std::uint8_t* payload = bytes.data() + kSnapshotHeaderSize;
  if (auto ok = check_payload(*header, payload, where); !ok) return std::unexpected(ok.error());
  auto info = info_of(*header, key, where);
  if (!info) return std::unexpected(info.error());
  const std::size_t word_count = header->bit_count / 64;
  auto words = allocate_words(word_count);
  std::memcpy(words.get(), payload, header->payload_length);
  return Filter::from_words(*info, std::move(words), word_count);
}

namespace {

// The kind of a non-regular file, for the message that refuses it.
// An open snapshot file, known to be a regular file, and its validated
// header (every rule of section 7 but the payload checksum).
struct OpenedFile {
  Fd fd;
  std::uint64_t size = 0;
  SnapshotHeader header;
};

Result<OpenedFile> open_snapshot_file(const std::filesystem::path& path, const std::string& where) {
  auto opened = open_regular_file(path, where, "a regular snapshot file");
  if (!opened) return std::unexpected(opened.error());
  OpenedFile file{std::move(opened->fd), opened->size(), {}};
  std::uint8_t header_bytes[kSnapshotHeaderSize] = {};
  const std::size_t header_read =
      static_cast<std::size_t>(std::min<std::uint64_t>(file.size, kSnapshotHeaderSize));
  if (auto ok = read_exact(file.fd.get(), header_bytes, header_read, 0, where); !ok) {
    return std::unexpected(ok.error());
  }
  // Every header rule, the file's length included, holds before any
  // payload memory is taken.
  auto header = validate_header(header_bytes, file.size, where);
  if (!header) return std::unexpected(header.error());
  file.header = *header;
  return file;
}

// A snapshot file whose every rule of section 7 holds, payload checksum
// included: its header and its payload's words (copied, or mapped).
struct ValidatedFile {
  SnapshotHeader header;
  std::shared_ptr<const std::uint64_t> words;
};

Result<ValidatedFile> validate_file(const std::filesystem::path& path, LoadMode mode) {
  const std::string where = path.string();
  auto file = open_snapshot_file(path, where);
  if (!file) return std::unexpected(file.error());
  const std::uint64_t file_size = file->size;
  const std::size_t word_count = file->header.bit_count / 64;

  // Only on request: a mapping serves whatever the file holds later (see
  // LoadMode::kMap), so the default copies.
  if (mode == LoadMode::kMap) {
    void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, file->fd.get(), 0);
    if (mapping == MAP_FAILED) {
      return fail(ErrorCode::kIo, where + ": cannot map: " + std::strerror(errno));
    }
    ::madvise(mapping, file_size, MADV_WILLNEED);
    auto* base = static_cast<std::uint8_t*>(mapping);
    std::shared_ptr<const std::uint8_t> owner(base, [file_size](const std::uint8_t* p) {
      ::munmap(const_cast<std::uint8_t*>(p), file_size);
    });
    // Re-validate from the mapping itself: the header we checked was read
    // separately, and the bytes the filter serves must be the checked ones.
    auto mapped_header = validate_header(base, file_size, where);
    if (!mapped_header) return std::unexpected(mapped_header.error());
    const std::uint8_t* payload = base + kSnapshotHeaderSize;
    if (auto ok = check_payload(*mapped_header, payload, where); !ok) {
      return std::unexpected(ok.error());
    }
    return ValidatedFile{*mapped_header,
                         std::shared_ptr<const std::uint64_t>(
                             owner, reinterpret_cast<const std::uint64_t*>(payload))};
  }

  auto words = allocate_words(word_count);
  if (auto ok = read_exact(file->fd.get(), reinterpret_cast<std::uint8_t*>(words.get()),
                           file->header.payload_length, kSnapshotHeaderSize, where);
      !ok) {
    return std::unexpected(ok.error());
  }
  if (auto ok =
          check_payload(file->header, reinterpret_cast<const std::uint8_t*>(words.get()), where);
      !ok) {
    return std::unexpected(ok.error());
  }
  return ValidatedFile{file->header, std::move(words)};
}

}  // namespace

Result<Filter> load_snapshot(const std::filesystem::path& path, const LoadOptions& options) {
  auto file = validate_file(path, options.mode);
  if (!file) return std::unexpected(file.error());
  auto info = info_of(file->header, options.key, path.string());
  if (!info) return std::unexpected(info.error());
  return Filter::from_words(*info, std::move(file->words), file->header.bit_count / 64);
}

Result<Filter> load_snapshot(const std::filesystem::path& path, LoadMode mode) {
  LoadOptions options;
  options.mode = mode;
  return load_snapshot(path, options);
}

SnapshotHeader snapshot_header(const Filter& filter) {
  return decode_fields(encode_snapshot_header(filter).data());
}

Result<SnapshotHeader> read_snapshot_header(const std::filesystem::path& path) {
  const std::string where = path.string();
  auto file = open_snapshot_file(path, where);
  if (!file) return std::unexpected(file.error());
  const SnapshotHeader& h = file->header;
  detail::Xxh3Stream checksum;
  if (!checksum.ok()) {
    return fail(ErrorCode::kIo, where + ": out of memory for the payload checksum");
  }
  std::vector<std::uint8_t> piece(std::min<std::uint64_t>(h.payload_length, 1u << 20));
  std::uint64_t popcount = 0;
  for (std::uint64_t done = 0; done < h.payload_length;) {
    const std::size_t size =
        static_cast<std::size_t>(std::min<std::uint64_t>(piece.size(), h.payload_length - done));
    if (auto ok = read_exact(file->fd.get(), piece.data(), size, kSnapshotHeaderSize + done, where);
        !ok) {
      return std::unexpected(ok.error());
    }
    checksum.update(piece.data(), size);
    popcount += popcount_of(piece.data(), size);
    done += size;
  }
  if (const auto actual = checksum.digest(); actual != h.payload_checksum) {
    return fail(ErrorCode::kSnapshotPayloadChecksum,
                where + ": payload checksum mismatch (stored " + hex64(h.payload_checksum) +
                    ", computed " + hex64(actual) + ")");
  }
  if (auto ok = check_popcount(h, popcount, where); !ok) return std::unexpected(ok.error());
  return file->header;
}

}  // namespace abf
