// ABF1 snapshot encoding, validation and loading (docs/protocol.md section 7).
#include "abf/snapshot.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abf/io.hpp"
#include "abf/layout.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"
#include "file_read.hpp"

namespace abf {

namespace {

using detail::Fd;
using detail::hex64;

static_assert(std::endian::native == std::endian::little,
              "snapshot integers are little-endian; big-endian hosts need byte swaps here");

constexpr char kMagic[4] = {'A', 'B', 'F', '1'};
constexpr std::size_t kHeaderChecksumOffset = 72;
constexpr std::size_t kCatalogIdOffset = 80;
constexpr std::size_t kKeyFingerprintOffset = 96;
constexpr std::size_t kContentFingerprintOffset = 104;
constexpr std::size_t kContentFlagsOffset = 120;
// Where the reserved (all zero) bytes start in each format version.
constexpr std::size_t kReservedOffsetV1 = 80;
constexpr std::size_t kReservedOffsetV2 = 124;

template <class T>
T load_le(const std::uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

template <class T>
void store_le(std::uint8_t* p, T value) {
  std::memcpy(p, &value, sizeof(T));
}

std::uint64_t xxh3(std::span<const std::uint8_t> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// The header fields at their offsets (section 7), unchecked.
SnapshotHeader decode_fields(const std::uint8_t* bytes) {
  SnapshotHeader h;
  h.format_version = load_le<std::uint32_t>(bytes + 4);
  h.hash_protocol_version = load_le<std::uint32_t>(bytes + 8);
  h.hash_count = load_le<std::uint32_t>(bytes + 12);
  h.catalog_version = load_le<std::uint64_t>(bytes + 16);
  h.bit_count = load_le<std::uint64_t>(bytes + 24);
  h.expected_item_count = load_le<std::uint64_t>(bytes + 32);
  h.inserted_item_count = load_le<std::uint64_t>(bytes + 40);
  h.target_fpp = load_le<double>(bytes + 48);
  h.payload_length = load_le<std::uint64_t>(bytes + 56);
  h.payload_checksum = load_le<std::uint64_t>(bytes + 64);
  h.header_checksum = load_le<std::uint64_t>(bytes + kHeaderChecksumOffset);
  if (h.format_version == 2) {
    std::memcpy(h.catalog_id.bytes.data(), bytes + kCatalogIdOffset, h.catalog_id.bytes.size());
    std::memcpy(h.key_fingerprint.bytes.data(), bytes + kKeyFingerprintOffset,
                h.key_fingerprint.bytes.size());
    h.content_fingerprint_bytes = ContentFingerprint::from_bytes(
        std::span<const std::uint8_t, 16>(bytes + kContentFingerprintOffset, 16));
    h.content_flags = load_le<std::uint32_t>(bytes + kContentFlagsOffset);
  }
  return h;
}

// The header checksum of format `version` over the 128 header bytes.
std::uint64_t header_checksum(const std::uint8_t* bytes, std::uint32_t version) {
  if (version == 1) return xxh3({bytes, kHeaderChecksumOffset});
  std::uint8_t copy[kSnapshotHeaderSize];
  std::memcpy(copy, bytes, kSnapshotHeaderSize);
  std::memset(copy + kHeaderChecksumOffset, 0, 8);
  return xxh3({copy, kSnapshotHeaderSize});
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
  const bool known_protocol =
      h.hash_protocol_version == probe::kProtocolUnkeyed ||
      (h.format_version == 2 && h.hash_protocol_version == probe::kProtocolKeyed);
  if (!known_protocol) {
    return error(ErrorCode::kSnapshotUnsupportedHashProtocol,
                 "hash protocol version " + std::to_string(h.hash_protocol_version) +
                     " is not supported in format version " + std::to_string(h.format_version) +
                     (h.format_version == 1 ? " (which has protocol 1 only)"
                                            : " (this build implements protocols 1 and 2)"));
  }
  if (h.hash_protocol_version == probe::kProtocolUnkeyed && !h.key_fingerprint.is_zero()) {
    return error(ErrorCode::kSnapshotBadKeyFingerprint,
                 "an unkeyed (protocol 1) snapshot carries a key fingerprint " +
                     h.key_fingerprint.hex() + "; it must be zero");
  }
  const Layout layout{h.bit_count, h.hash_count};
  if (check_layout(layout) == LayoutFault::kHashCount) {
    return error(ErrorCode::kSnapshotBadHashCount, describe_layout_fault(layout));
  }
  if (check_layout(layout) == LayoutFault::kBitCount) {
    return error(ErrorCode::kSnapshotBadBitCount, describe_layout_fault(layout));
  }
  if (h.expected_item_count < 1 || h.expected_item_count > probe::kMaxExpectedItemCount) {
    return error(
        ErrorCode::kSnapshotBadExpectedItemCount,
        "expected item count " + std::to_string(h.expected_item_count) + " is outside 1..2^30");
  }
  if (h.inserted_item_count > h.expected_item_count) {
    return error(ErrorCode::kSnapshotBadInsertedItemCount,
                 "inserted item count " + std::to_string(h.inserted_item_count) +
                     " exceeds the expected item count " + std::to_string(h.expected_item_count));
  }
  if (!(h.target_fpp > 0.0 && h.target_fpp < 1.0)) {
    return error(
        ErrorCode::kSnapshotBadTargetFpp,
        "target false-positive rate " + std::to_string(h.target_fpp) + " is not in (0, 1)");
  }
  // The layout must be the one section 3 chooses: a hashCount changed (and
  // checksums recomputed) would otherwise make members answer Definitely Not.
  if (auto chosen = choose_layout({h.expected_item_count, h.target_fpp});
      !chosen || *chosen != layout) {
    char fpp[32];
    std::snprintf(fpp, sizeof fpp, "%.17g", h.target_fpp);
    return error(ErrorCode::kSnapshotLayoutMismatch,
                 "bit count " + std::to_string(h.bit_count) + " and hash count " +
                     std::to_string(h.hash_count) + " are not the layout of n = " +
                     std::to_string(h.expected_item_count) + ", p = " + fpp +
                     (chosen ? " (m = " + std::to_string(chosen->bit_count) +
                                   ", k = " + std::to_string(chosen->hash_count) + ")"
                             : " (" + chosen.error().message + ")"));
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
  for (std::size_t i = h.format_version == 1 ? kReservedOffsetV1 : kReservedOffsetV2;
       i < kSnapshotHeaderSize; ++i) {
    if (bytes[i] != 0) {
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
                                         popcount, FillCheck::kAnyInsertions);
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
  if (const auto actual = xxh3({payload, h.payload_length}); actual != h.payload_checksum) {
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
  std::uint8_t* p = header.data();
  std::memcpy(p, kMagic, 4);
  store_le<std::uint32_t>(p + 4, kSnapshotFormatVersion);
  store_le<std::uint32_t>(p + 8, filter.hash_protocol_version());
  store_le<std::uint32_t>(p + 12, filter.hash_count());
  store_le<std::uint64_t>(p + 16, filter.catalog_version());
  store_le<std::uint64_t>(p + 24, filter.bit_count());
  store_le<std::uint64_t>(p + 32, filter.expected_item_count());
  store_le<std::uint64_t>(p + 40, filter.inserted_item_count());
  store_le<double>(p + 48, filter.target_fpp());
  store_le<std::uint64_t>(p + 56, filter.bit_count() / 8);
  store_le<std::uint64_t>(p + 64, xxh3(filter.payload()));
  std::memcpy(p + kCatalogIdOffset, filter.catalog_id().bytes.data(), 16);
  std::memcpy(p + kKeyFingerprintOffset, filter.scheme().key_fingerprint().bytes.data(), 8);
  if (const auto& fingerprint = filter.content_fingerprint()) {
    const auto stored = fingerprint->bytes();
    std::memcpy(p + kContentFingerprintOffset, stored.data(), stored.size());
    store_le<std::uint32_t>(p + kContentFlagsOffset, kContentFlagFingerprint);
  }
  store_le<std::uint64_t>(p + kHeaderChecksumOffset, header_checksum(p, kSnapshotFormatVersion));
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
std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// An open snapshot file, known to be a regular file, and its validated
// header (every rule of section 7 but the payload checksum).
struct OpenedFile {
  Fd fd;
  std::uint64_t size = 0;
  SnapshotHeader header;
};

Result<OpenedFile> open_snapshot_file(const std::filesystem::path& path, const std::string& where) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a
  // writer, forever; fstat then tells what it is before anything is read.
  OpenedFile file{Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)), 0, {}};
  if (file.fd.get() < 0) {
    return fail(ErrorCode::kIo, where + ": cannot open: " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(file.fd.get(), &info) != 0) {
    return fail(ErrorCode::kIo, where + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(ErrorCode::kIo,
                where + ": is " + file_kind(info.st_mode) + ", not a regular snapshot file");
  }
  file.size = static_cast<std::uint64_t>(info.st_size);
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
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state || XXH3_64bits_reset(state.get()) != XXH_OK) {
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
    XXH3_64bits_update(state.get(), piece.data(), size);
    popcount += popcount_of(piece.data(), size);
    done += size;
  }
  if (const auto actual = XXH3_64bits_digest(state.get()); actual != h.payload_checksum) {
    return fail(ErrorCode::kSnapshotPayloadChecksum,
                where + ": payload checksum mismatch (stored " + hex64(h.payload_checksum) +
                    ", computed " + hex64(actual) + ")");
  }
  if (auto ok = check_popcount(h, popcount, where); !ok) return std::unexpected(ok.error());
  return file->header;
}

}  // namespace abf
