// Filter sets on disk (docs/protocol.md section 13): the ABFS manifest, saving a
// set (shards first, each a new file; the manifest last, by rename; the old
// shards removed after) and loading one (every shard checked against the
// manifest; a load that meets a replaced set starts over).
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abf/filter_set.hpp"
#include "abf/io.hpp"
#include "abf/layout.hpp"
#include "abf/snapshot.hpp"
#include "file_read.hpp"
#include "filter_set_internal.hpp"

namespace abf {

namespace {

using detail::Fd;
using detail::hex64;
using detail::plain_hex16;

static_assert(std::endian::native == std::endian::little,
              "manifest integers are little-endian; big-endian hosts need byte swaps here");

constexpr char kManifestMagic[4] = {'A', 'B', 'F', 'S'};
constexpr std::size_t kHeaderChecksumOffset = 72;
constexpr std::size_t kCatalogIdOffset = 80;
constexpr std::size_t kKeyFingerprintOffset = 96;
// Version 2: contentFlags in what version 1 reserves, the set's content
// fingerprint in the first 16 bytes of the body.
constexpr std::size_t kContentFlagsOffset = 68;
constexpr std::size_t kBodyFingerprintSize = 16;
constexpr std::size_t kMaxNameLength = 255;  // NAME_MAX
// The largest manifest: every shard with the longest name.
constexpr std::uint64_t kMaxBodyLength =
    kBodyFingerprintSize + std::uint64_t{kMaxShardCount} * (kSetManifestEntrySize + kMaxNameLength);
constexpr std::uint64_t kMaxManifestBytes = kSetManifestHeaderSize + kMaxBodyLength;
// ".<16 hex>.<5 digits>.abf" after the manifest's name.
constexpr std::size_t kShardSuffixLength = 1 + 16 + 1 + 5 + 4;
// Loads that meet a replaced set start over at most this many times.
constexpr int kMaxLoadAttempts = 8;

std::atomic<std::uint64_t> load_restarts{0};

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

std::uint64_t xxh3(const std::uint8_t* bytes, std::size_t size) { return XXH3_64bits(bytes, size); }

std::uint64_t header_checksum(const std::uint8_t* header) {
  std::uint8_t copy[kSetManifestHeaderSize];
  std::memcpy(copy, header, kSetManifestHeaderSize);
  std::memset(copy + kHeaderChecksumOffset, 0, 8);
  return xxh3(copy, kSetManifestHeaderSize);
}

std::string fpp_text(double p) {
  std::ostringstream out;
  out.precision(17);
  out << p;
  return out.str();
}

// A shard file name: a plain name in the manifest's folder.
std::string name_problem(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return "is not 1..255 bytes long";
  if (name == "." || name == "..") return "is not a file name";
  if (name.find('/') != std::string_view::npos)
    return "holds a '/' (a shard is in the manifest's folder)";
  if (name.find('\0') != std::string_view::npos) return "holds a NUL byte";
  return {};
}

// "<manifest name>.<16 hex>.<5 digits>.abf": the names save_filter_set
// gives, and the only ones it ever removes.
bool is_shard_name_of(std::string_view name, std::string_view base) {
  if (name.size() != base.size() + kShardSuffixLength || !name.starts_with(base)) return false;
  const std::string_view rest = name.substr(base.size());
  if (rest[0] != '.' || rest[17] != '.' || !rest.ends_with(".abf")) return false;
  for (std::size_t i = 1; i <= 16; ++i) {
    const char c = rest[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  for (std::size_t i = 18; i < 23; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return false;
  }
  return true;
}

// A name save_filter_set gave (".<buildId as 16 hex>.<5 digits>.abf" after
// the manifest's name, with this manifest's buildId) carries its shard
// index: it must be the entry's own. Entries reordered after the save (a
// hand edit, a tool's bug) would otherwise route digests to another
// shard's filter, whose `absent` is wrong for them. Names of any other
// form are not read.
std::string shard_number_problem(std::string_view name, std::uint32_t index,
                                 std::uint64_t build_id) {
  if (name.size() <= kShardSuffixLength) return {};
  const std::string_view rest = name.substr(name.size() - kShardSuffixLength);
  if (rest[0] != '.' || rest[17] != '.' || !rest.ends_with(".abf")) return {};
  if (rest.substr(1, 16) != plain_hex16(build_id)) return {};
  std::uint32_t number = 0;
  for (std::size_t i = 18; i < 23; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return {};
    number = number * 10 + static_cast<std::uint32_t>(rest[i] - '0');
  }
  if (number == index) return {};
  return "file name " + std::string(name) + " is that of shard " + std::to_string(number) +
         " of this save, not of shard " + std::to_string(index) +
         " (entries reordered?): its digests would be asked of the wrong filter";
}

Result<void> read_exact(int fd, std::uint8_t* out, std::size_t size, const std::string& where) {
  return detail::read_exact(fd, out, size, 0, where, ErrorCode::kSetManifestTruncated);
}

// The manifest's bytes: a regular file, at most kMaxManifestBytes. A file
// that does not start with the magic is not read on: its first (at most
// 128) bytes come back, and the caller, seeing no magic, treats it as what
// it is.
Result<std::vector<std::uint8_t>> read_manifest_bytes(const std::filesystem::path& path) {
  const std::string where = path.string();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return fail(ErrorCode::kIo, where + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return fail(ErrorCode::kIo, where + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(ErrorCode::kIo, where + ": not a regular file, so not a filter-set manifest");
  }
  const auto size = static_cast<std::uint64_t>(info.st_size);
  std::vector<std::uint8_t> bytes(
      static_cast<std::size_t>(std::min<std::uint64_t>(size, kSetManifestHeaderSize)));
  if (auto ok = read_exact(fd.get(), bytes.data(), bytes.size(), where); !ok) {
    return std::unexpected(ok.error());
  }
  if (bytes.size() < 4 || std::memcmp(bytes.data(), kManifestMagic, 4) != 0) return bytes;
  if (size > kMaxManifestBytes) {
    return fail(ErrorCode::kSetManifestInvalid, where + ": file is " + std::to_string(size) +
                                                    " bytes, more than any manifest can be (" +
                                                    std::to_string(kMaxManifestBytes) + ")");
  }
  bytes.resize(static_cast<std::size_t>(size));
  if (auto ok = read_exact(fd.get(), bytes.data(), bytes.size(), where); !ok) {
    return std::unexpected(ok.error());
  }
  return bytes;
}

bool has_manifest_magic(const std::vector<std::uint8_t>& bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kManifestMagic, 4) == 0;
}

// The manifest's folder, with symbolic links followed: where its shards are.
std::filesystem::path folder_of(const std::filesystem::path& manifest) {
  std::error_code ec;
  std::filesystem::path real = std::filesystem::weakly_canonical(manifest, ec);
  if (ec) real = manifest;
  return real.parent_path();
}

Result<std::uint64_t> random_build_id() {
  for (;;) {
    std::uint64_t id = 0;
    const ssize_t got = ::getrandom(&id, sizeof id, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got != static_cast<ssize_t>(sizeof id)) {
      return fail(ErrorCode::kIo, std::string("getrandom failed: ") + std::strerror(errno));
    }
    if (id != 0) return id;
  }
}

}  // namespace

std::vector<std::uint8_t> encode_set_manifest(const SetManifest& manifest) {
  const std::size_t shard_count = manifest.shards.size();
  std::size_t names = 0;
  for (const auto& entry : manifest.shards) names += entry.file.size();
  const std::size_t body = kBodyFingerprintSize + shard_count * kSetManifestEntrySize + names;
  std::vector<std::uint8_t> bytes(kSetManifestHeaderSize + body, 0);
  std::uint8_t* p = bytes.data();
  std::memcpy(p, kManifestMagic, 4);
  store_le<std::uint32_t>(p + 4, kSetManifestFormatVersion);
  store_le<std::uint32_t>(p + 8, static_cast<std::uint32_t>(shard_count));
  store_le<std::uint32_t>(p + 12, manifest.hash_protocol_version);
  store_le<std::uint64_t>(p + 16, manifest.catalog_version);
  store_le<std::uint64_t>(p + 24, manifest.expected_item_count);
  store_le<std::uint64_t>(p + 32, manifest.inserted_item_count);
  store_le<double>(p + 40, manifest.target_fpp);
  store_le<std::uint64_t>(p + 48, manifest.shard_expected_item_count);
  store_le<std::uint64_t>(p + 56, manifest.shard_bit_count);
  store_le<std::uint32_t>(p + 64, manifest.shard_hash_count);
  if (const auto fingerprint = manifest.content_fingerprint()) {
    store_le<std::uint32_t>(p + kContentFlagsOffset, kContentFlagFingerprint);
    const auto stored = fingerprint->bytes();
    std::memcpy(p + kSetManifestHeaderSize, stored.data(), stored.size());
  }
  std::memcpy(p + kCatalogIdOffset, manifest.catalog_id.bytes.data(), 16);
  std::memcpy(p + kKeyFingerprintOffset, manifest.key_fingerprint.bytes.data(), 8);
  store_le<std::uint64_t>(p + 104, body);
  store_le<std::uint64_t>(p + 120, manifest.build_id);
  std::uint8_t* entry = p + kSetManifestHeaderSize + kBodyFingerprintSize;
  std::uint8_t* name = entry + shard_count * kSetManifestEntrySize;
  for (const auto& shard : manifest.shards) {
    store_le<std::uint64_t>(entry, shard.inserted_item_count);
    store_le<std::uint64_t>(entry + 8, shard.payload_checksum);
    store_le<std::uint64_t>(entry + 16, shard.header_checksum);
    store_le<std::uint32_t>(entry + 24, static_cast<std::uint32_t>(shard.file.size()));
    std::memcpy(name, shard.file.data(), shard.file.size());
    entry += kSetManifestEntrySize;
    name += shard.file.size();
  }
  store_le<std::uint64_t>(p + 112, xxh3(p + kSetManifestHeaderSize, body));
  store_le<std::uint64_t>(p + kHeaderChecksumOffset, header_checksum(p));
  return bytes;
}

Result<SetManifest> parse_set_manifest(std::span<const std::uint8_t> bytes,
                                       const std::string& where) {
  const auto error = [&](ErrorCode code, const std::string& what) {
    return fail(code, where + ": " + what);
  };
  const auto invalid = [&](const std::string& what) {
    return error(ErrorCode::kSetManifestInvalid, what);
  };
  const std::uint64_t size = bytes.size();
  if (size < kSetManifestHeaderSize) {
    return error(ErrorCode::kSetManifestTruncated,
                 "file is " + std::to_string(size) +
                     " bytes, shorter than the 128-byte ABFS manifest header");
  }
  const std::uint8_t* p = bytes.data();
  if (std::memcmp(p, kManifestMagic, 4) != 0) {
    return invalid("not an ABFS filter-set manifest (bad magic)");
  }
  SetManifest m;
  m.format_version = load_le<std::uint32_t>(p + 4);
  if (m.format_version != 1 && m.format_version != 2) {
    return error(ErrorCode::kSetManifestUnsupportedFormat,
                 "manifest format version " + std::to_string(m.format_version) +
                     " is not supported (this build reads versions 1 and 2)");
  }
  m.header_checksum = load_le<std::uint64_t>(p + kHeaderChecksumOffset);
  if (const auto actual = header_checksum(p); actual != m.header_checksum) {
    return error(ErrorCode::kSetManifestChecksum, "manifest header checksum mismatch (stored " +
                                                      hex64(m.header_checksum) + ", computed " +
                                                      hex64(actual) + ")");
  }
  const auto body_length = load_le<std::uint64_t>(p + 104);
  if (body_length > kMaxBodyLength) {
    return invalid("body length " + std::to_string(body_length) + " is more than any manifest's (" +
                   std::to_string(kMaxBodyLength) + ")");
  }
  const std::uint64_t expected_size = kSetManifestHeaderSize + body_length;
  if (size < expected_size) {
    return error(ErrorCode::kSetManifestTruncated, "file is " + std::to_string(size) +
                                                       " bytes, the manifest header promises " +
                                                       std::to_string(expected_size));
  }
  if (size > expected_size) {
    return invalid("file is " + std::to_string(size) + " bytes, " +
                   std::to_string(size - expected_size) +
                   " more than the manifest header promises");
  }
  const std::uint8_t* body_start = p + kSetManifestHeaderSize;
  m.body_checksum = load_le<std::uint64_t>(p + 112);
  if (const auto actual = xxh3(body_start, body_length); actual != m.body_checksum) {
    return error(ErrorCode::kSetManifestChecksum, "manifest body checksum mismatch (stored " +
                                                      hex64(m.body_checksum) + ", computed " +
                                                      hex64(actual) + ")");
  }

  const auto shard_count = load_le<std::uint32_t>(p + 8);
  m.hash_protocol_version = load_le<std::uint32_t>(p + 12);
  m.catalog_version = load_le<std::uint64_t>(p + 16);
  m.expected_item_count = load_le<std::uint64_t>(p + 24);
  m.inserted_item_count = load_le<std::uint64_t>(p + 32);
  m.target_fpp = load_le<double>(p + 40);
  m.shard_expected_item_count = load_le<std::uint64_t>(p + 48);
  m.shard_bit_count = load_le<std::uint64_t>(p + 56);
  m.shard_hash_count = load_le<std::uint32_t>(p + 64);
  std::memcpy(m.catalog_id.bytes.data(), p + kCatalogIdOffset, 16);
  std::memcpy(m.key_fingerprint.bytes.data(), p + kKeyFingerprintOffset, 8);
  m.build_id = load_le<std::uint64_t>(p + 120);

  if (shard_count < 1 || shard_count > kMaxShardCount) {
    return invalid("shard count " + std::to_string(shard_count) + " is outside 1..65,536");
  }
  if (m.hash_protocol_version != probe::kProtocolUnkeyed &&
      m.hash_protocol_version != probe::kProtocolKeyed) {
    return invalid("hash protocol version " + std::to_string(m.hash_protocol_version) +
                   " is not 1 or 2");
  }
  if (m.hash_protocol_version == probe::kProtocolUnkeyed && !m.key_fingerprint.is_zero()) {
    return invalid("an unkeyed (protocol 1) set carries a key fingerprint " +
                   m.key_fingerprint.hex() + "; it must be zero");
  }
  if (m.expected_item_count < 1 || m.expected_item_count > kMaxSetExpectedItemCount) {
    return invalid("expected item count " + std::to_string(m.expected_item_count) +
                   " is outside 1..2^46");
  }
  if (!(m.target_fpp > 0.0 && m.target_fpp < 1.0)) {
    return invalid("target false-positive rate " + fpp_text(m.target_fpp) + " is not in (0, 1)");
  }
  if (const auto rule = shard_expected_item_count(m.expected_item_count, shard_count);
      m.shard_expected_item_count != rule) {
    return invalid("shard expected item count " + std::to_string(m.shard_expected_item_count) +
                   " is not the split of n = " + std::to_string(m.expected_item_count) + " over " +
                   std::to_string(shard_count) + " shards (" + std::to_string(rule) + ")");
  }
  const Layout layout{m.shard_bit_count, m.shard_hash_count};
  if (auto chosen = choose_layout({m.shard_expected_item_count, m.target_fpp});
      !chosen || *chosen != layout) {
    return invalid("shard bit count " + std::to_string(m.shard_bit_count) + " and hash count " +
                   std::to_string(m.shard_hash_count) + " are not the layout of n_i = " +
                   std::to_string(m.shard_expected_item_count) + ", p = " + fpp_text(m.target_fpp) +
                   (chosen ? " (m = " + std::to_string(chosen->bit_count) +
                                 ", k = " + std::to_string(chosen->hash_count) + ")"
                           : " (" + chosen.error().message + ")"));
  }
  if (m.inserted_item_count > m.expected_item_count) {
    return invalid("inserted item count " + std::to_string(m.inserted_item_count) +
                   " exceeds the expected item count " + std::to_string(m.expected_item_count));
  }
  // Version 1 reserves bytes 68..72; version 2 keeps contentFlags there and
  // the fingerprint in the body's first 16 bytes.
  const std::uint64_t prefix = m.format_version == 2 ? kBodyFingerprintSize : 0;
  if (m.format_version == 1) {
    if (load_le<std::uint32_t>(p + kContentFlagsOffset) != 0)
      return invalid("reserved header bytes 68..72 are not zero");
  } else {
    m.content_flags = load_le<std::uint32_t>(p + kContentFlagsOffset);
    if ((m.content_flags & ~kContentFlagFingerprint) != 0) {
      return invalid("content flags " + hex64(m.content_flags) +
                     " have a bit set besides bit 0 (fingerprint present)");
    }
    if (body_length < prefix) {
      return invalid("body of " + std::to_string(body_length) +
                     " bytes cannot hold the 16-byte content fingerprint");
    }
    m.content_fingerprint_bytes = ContentFingerprint::from_bytes(
        std::span<const std::uint8_t, 16>(body_start, kBodyFingerprintSize));
    if ((m.content_flags & kContentFlagFingerprint) == 0 &&
        m.content_fingerprint_bytes != ContentFingerprint{}) {
      return invalid("content fingerprint " + m.content_fingerprint_bytes.hex() +
                     " is stored but content flags bit 0 (fingerprint present) is clear");
    }
  }
  const std::uint8_t* body = body_start + prefix;
  if (body_length - prefix < std::uint64_t{shard_count} * kSetManifestEntrySize) {
    return invalid("body of " + std::to_string(body_length) + " bytes cannot hold " +
                   std::to_string(shard_count) + " shard entries of 32 bytes");
  }
  const std::uint64_t names_length =
      body_length - prefix - std::uint64_t{shard_count} * kSetManifestEntrySize;
  const std::uint8_t* names = body + std::size_t{shard_count} * kSetManifestEntrySize;
  std::uint64_t name_offset = 0;
  std::uint64_t inserted = 0;
  m.shards.resize(shard_count);
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    const std::uint8_t* e = body + std::size_t{i} * kSetManifestEntrySize;
    const std::string entry = "shard entry " + std::to_string(i);
    SetManifestEntry& shard = m.shards[i];
    shard.inserted_item_count = load_le<std::uint64_t>(e);
    shard.payload_checksum = load_le<std::uint64_t>(e + 8);
    shard.header_checksum = load_le<std::uint64_t>(e + 16);
    const auto name_length = load_le<std::uint32_t>(e + 24);
    if (load_le<std::uint32_t>(e + 28) != 0)
      return invalid(entry + ": reserved bytes are not zero");
    if (shard.inserted_item_count > m.shard_expected_item_count) {
      return invalid(entry + ": inserted item count " + std::to_string(shard.inserted_item_count) +
                     " exceeds the shard expected item count " +
                     std::to_string(m.shard_expected_item_count));
    }
    if (name_length < 1 || name_length > kMaxNameLength) {
      return invalid(entry + ": name length " + std::to_string(name_length) + " is outside 1..255");
    }
    if (name_offset + name_length > names_length) {
      return invalid(entry + ": its name runs past the end of the manifest");
    }
    shard.file.assign(reinterpret_cast<const char*>(names + name_offset), name_length);
    name_offset += name_length;
    if (auto problem = name_problem(shard.file); !problem.empty()) {
      return invalid(entry + ": file name " + problem);
    }
    if (auto problem = shard_number_problem(shard.file, i, m.build_id); !problem.empty()) {
      return invalid(entry + ": " + problem);
    }
    inserted += shard.inserted_item_count;
  }
  if (name_offset != names_length) {
    return invalid(std::to_string(names_length - name_offset) +
                   " bytes after the last shard's name");
  }
  if (inserted != m.inserted_item_count) {
    return invalid("the shards' inserted item counts sum to " + std::to_string(inserted) +
                   ", not the manifest's " + std::to_string(m.inserted_item_count));
  }
  std::set<std::string_view> seen;
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    if (!seen.insert(m.shards[i].file).second) {
      return invalid("shard entry " + std::to_string(i) + " names " + m.shards[i].file +
                     ", as an earlier shard does");
    }
  }
  return m;
}

Result<SetManifest> read_set_manifest(const std::filesystem::path& path) {
  auto bytes = read_manifest_bytes(path);
  if (!bytes) return std::unexpected(bytes.error());
  if (!has_manifest_magic(*bytes) && bytes->size() >= 4) {
    return fail(ErrorCode::kSetManifestInvalid,
                path.string() + ": not an ABFS filter-set manifest (bad magic)");
  }
  return parse_set_manifest(*bytes, path.string());
}

std::filesystem::path set_shard_path(const std::filesystem::path& manifest_path,
                                     const SetManifestEntry& entry) {
  return folder_of(manifest_path) / entry.file;
}

Result<FilterFileKind> filter_file_kind(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    return fail(ErrorCode::kIo, path.string() + ": cannot open: " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_size < 4) {
    return FilterFileKind::kSnapshot;  // the snapshot loader says what is wrong
  }
  std::uint8_t magic[4] = {};
  if (auto ok = read_exact(fd.get(), magic, 4, path.string()); !ok) {
    return std::unexpected(ok.error());
  }
  return std::memcmp(magic, kManifestMagic, 4) == 0 ? FilterFileKind::kManifest
                                                    : FilterFileKind::kSnapshot;
}

Result<void> save_filter_set(const FilterSet& set, const std::filesystem::path& path) {
  const std::string where = path.string();
  if (where == "-") {
    return fail(ErrorCode::kInvalidArgument,
                "a filter set cannot be written to standard output: it is a manifest and shard "
                "files beside it; name a file");
  }
  std::error_code ec;
  std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  if (ec) target = path;
  const auto status = std::filesystem::status(target, ec);
  const bool exists = !ec && std::filesystem::exists(status);
  if (exists && !std::filesystem::is_regular_file(status)) {
    return fail(ErrorCode::kIo,
                where + ": is not a regular file; a filter set's manifest must be one");
  }
  const std::filesystem::path folder = target.parent_path();
  const std::string base = target.filename().string();
  if (base.size() + kShardSuffixLength > kMaxNameLength) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": a manifest name of " + std::to_string(base.size()) +
                    " bytes leaves no room for its shards' names (at most 228)");
  }
  // The set this one replaces: its shards go once the new manifest is in.
  std::vector<std::string> old_files;
  unsigned permissions = 0666;
  if (exists) {
    struct stat info {};
    if (::stat(target.c_str(), &info) == 0) permissions = info.st_mode & 07777;
    if (auto old = read_set_manifest(target)) {
      for (const auto& entry : old->shards) old_files.push_back(entry.file);
    }
  }
  auto build_id = random_build_id();
  if (!build_id) return std::unexpected(build_id.error());

  SetManifest manifest;
  manifest.hash_protocol_version = set.hash_protocol_version();
  manifest.catalog_version = set.catalog_version();
  manifest.expected_item_count = set.expected_item_count();
  manifest.inserted_item_count = set.inserted_item_count();
  manifest.target_fpp = set.target_fpp();
  manifest.shard_expected_item_count = set.shard_expected_item_count();
  manifest.shard_bit_count = set.shard_bit_count();
  manifest.shard_hash_count = set.hash_count();
  manifest.catalog_id = set.catalog_id();
  manifest.key_fingerprint = set.scheme().key_fingerprint();
  if (const auto& fingerprint = set.content_fingerprint()) {
    manifest.content_flags = kContentFlagFingerprint;
    manifest.content_fingerprint_bytes = *fingerprint;
  }
  manifest.build_id = *build_id;

  std::vector<std::filesystem::path> written;
  const auto undo = [&] {
    for (const auto& file : written) std::filesystem::remove(file, ec);
  };
  const std::string id = plain_hex16(*build_id);
  for (std::uint32_t i = 0; i < set.shard_count(); ++i) {
    char index[16];
    std::snprintf(index, sizeof index, "%05u", i);
    SetManifestEntry entry;
    entry.file = base + "." + id + "." + index + ".abf";
    const std::filesystem::path file = folder / entry.file;
    const Filter& shard = set.shard(i);
    const std::vector<std::uint8_t> header = encode_snapshot_header(shard);
    entry.inserted_item_count = shard.inserted_item_count();
    entry.payload_checksum = load_le<std::uint64_t>(header.data() + 64);
    entry.header_checksum = load_le<std::uint64_t>(header.data() + 72);
    auto out = AtomicFile::create(file, {.permissions = permissions, .replace = false});
    Result<void> done = out ? Result<void>() : Result<void>(std::unexpected(out.error()));
    if (done) done = out->write(header);
    if (done) done = out->write(shard.payload());
    if (done) done = out->commit();
    if (!done) {
      undo();
      return fail(done.error().code, where + ": shard " + std::to_string(i) + " of " +
                                         std::to_string(set.shard_count()) + ": " +
                                         done.error().message);
    }
    written.push_back(file);
    manifest.shards.push_back(std::move(entry));
  }
  auto out = AtomicFile::create(target, {.permissions = permissions});
  Result<void> done = out ? Result<void>() : Result<void>(std::unexpected(out.error()));
  if (done) done = out->write(encode_set_manifest(manifest));
  if (done) done = out->commit();
  if (!done) {
    undo();
    return done;
  }
  // The old set's shards, now that no manifest names them. A reader still
  // loading them finds one missing and starts over with the new manifest.
  std::set<std::string> current;
  for (const auto& entry : manifest.shards) current.insert(entry.file);
  for (const auto& file : old_files) {
    if (current.contains(file) || !is_shard_name_of(file, base)) continue;
    std::filesystem::remove(folder / file, ec);
  }
  return {};
}

namespace {

// Loads shard `index` of `manifest` and checks it against its entry.
Result<Filter> load_shard(const SetManifest& manifest, std::uint32_t index,
                          const std::filesystem::path& folder, const std::string& where,
                          const LoadOptions& options) {
  const SetManifestEntry& entry = manifest.shards[index];
  const std::filesystem::path file = folder / entry.file;
  const std::string name = where + ": shard " + std::to_string(index) + " of " +
                           std::to_string(manifest.shard_count()) + " (" + entry.file + "): ";
  auto filter = load_snapshot(file, options);
  if (!filter) {
    std::error_code ec;
    if (filter.error().code == ErrorCode::kIo &&
        !std::filesystem::exists(std::filesystem::symlink_status(file, ec))) {
      return fail(ErrorCode::kSetShardMissing,
                  name + "missing: the manifest names " + file.string() + ", which does not exist");
    }
    std::string message = filter.error().message;
    const std::string prefix = file.string() + ": ";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    return fail(filter.error().code, name + message);
  }
  const auto mismatch = [&](std::string_view field, const std::string& shard,
                            const std::string& says) {
    return fail(ErrorCode::kSetShardMismatch,
                name + std::string(field) + " is " + shard + ", the manifest says " + says);
  };
  const Filter& f = *filter;
  if (f.catalog_id() != manifest.catalog_id) {
    return mismatch("catalogId", f.catalog_id().hex(), manifest.catalog_id.hex());
  }
  if (f.catalog_version() != manifest.catalog_version) {
    return mismatch("catalogVersion", std::to_string(f.catalog_version()),
                    std::to_string(manifest.catalog_version));
  }
  if (f.hash_protocol_version() != manifest.hash_protocol_version) {
    return mismatch("hashProtocolVersion", std::to_string(f.hash_protocol_version()),
                    std::to_string(manifest.hash_protocol_version));
  }
  if (f.scheme().key_fingerprint() != manifest.key_fingerprint) {
    return mismatch("keyFingerprint", f.scheme().key_fingerprint().hex(),
                    manifest.key_fingerprint.hex());
  }
  if (std::bit_cast<std::uint64_t>(f.target_fpp()) !=
      std::bit_cast<std::uint64_t>(manifest.target_fpp)) {
    return mismatch("targetFpp", fpp_text(f.target_fpp()), fpp_text(manifest.target_fpp));
  }
  if (f.expected_item_count() != manifest.shard_expected_item_count) {
    return mismatch("expectedItemCount", std::to_string(f.expected_item_count()),
                    std::to_string(manifest.shard_expected_item_count));
  }
  if (f.inserted_item_count() != entry.inserted_item_count) {
    return mismatch("insertedItemCount", std::to_string(f.inserted_item_count()),
                    std::to_string(entry.inserted_item_count));
  }
  if (f.bit_count() != manifest.shard_bit_count || f.hash_count() != manifest.shard_hash_count) {
    return mismatch(
        "the layout",
        "m = " + std::to_string(f.bit_count()) + ", k = " + std::to_string(f.hash_count()),
        "m = " + std::to_string(manifest.shard_bit_count) +
            ", k = " + std::to_string(manifest.shard_hash_count));
  }
  // Of the bits loaded, not of the file: what answers is what was written.
  const SnapshotHeader header = snapshot_header(f);
  if (header.payload_checksum != entry.payload_checksum) {
    return mismatch("payloadChecksum", hex64(header.payload_checksum),
                    hex64(entry.payload_checksum));
  }
  if (header.header_checksum != entry.header_checksum) {
    return mismatch("headerChecksum", hex64(header.header_checksum), hex64(entry.header_checksum));
  }
  return filter;
}

// A version-2 manifest's content fingerprint must be the sum of its
// shards' (each bound to its entry by the shard's header checksum), and
// present exactly when every shard has one.
Result<void> check_set_fingerprint(const SetManifest& manifest, const FilterSet& set,
                                   const std::string& where) {
  if (manifest.format_version < 2) return {};
  const auto& shards = set.content_fingerprint();
  const auto said = manifest.content_fingerprint();
  if (shards == said) return {};
  const auto text = [](const std::optional<ContentFingerprint>& value) {
    return value ? value->hex() : std::string("none");
  };
  return fail(ErrorCode::kSetShardMismatch,
              where + ": contentFingerprint: the shards' fingerprints sum to " + text(shards) +
                  (shards ? "" : " (a shard carries none)") + ", the manifest says " + text(said));
}

}  // namespace

namespace detail {
std::uint64_t filter_set_load_restarts() noexcept {
  return load_restarts.load(std::memory_order_relaxed);
}
}  // namespace detail

Result<FilterSet> load_filter_set(const std::filesystem::path& path, const LoadOptions& options) {
  auto kind = filter_file_kind(path);
  if (!kind) return std::unexpected(kind.error());
  if (*kind == FilterFileKind::kSnapshot) {
    auto filter = load_snapshot(path, options);
    if (!filter) return std::unexpected(filter.error());
    return FilterSet(std::move(*filter));
  }
  const std::string where = path.string();
  const std::filesystem::path folder = folder_of(path);
  for (int attempt = 0; attempt < kMaxLoadAttempts; ++attempt) {
    auto bytes = read_manifest_bytes(path);
    if (!bytes) return std::unexpected(bytes.error());
    if (!has_manifest_magic(*bytes)) {
      // Replaced by a plain snapshot since its first bytes were read.
      auto filter = load_snapshot(path, options);
      if (!filter) return std::unexpected(filter.error());
      return FilterSet(std::move(*filter));
    }
    auto manifest = parse_set_manifest(*bytes, where);
    if (!manifest) return std::unexpected(manifest.error());
    // The key before any shard is read.
    auto scheme = Scheme::open(Layout{manifest->shard_bit_count, manifest->shard_hash_count},
                               manifest->hash_protocol_version, manifest->key_fingerprint,
                               options.key, where);
    if (!scheme) return std::unexpected(scheme.error());
    std::vector<Filter> shards;
    shards.reserve(manifest->shard_count());
    std::optional<Error> failed;
    for (std::uint32_t i = 0; i < manifest->shard_count(); ++i) {
      auto shard = load_shard(*manifest, i, folder, where, options);
      if (!shard) {
        failed = shard.error();
        break;
      }
      shards.push_back(std::move(*shard));
    }
    if (!failed) {
      auto set = FilterSet::from_shards(std::move(shards), manifest->expected_item_count);
      if (!set) return fail(set.error().code, where + ": " + set.error().message);
      if (auto ok = check_set_fingerprint(*manifest, *set, where); !ok) {
        return std::unexpected(ok.error());
      }
      return set;
    }
    // A writer may have replaced the set (and removed these shards) while
    // they were read: then start over with its manifest.
    auto now = read_manifest_bytes(path);
    if (!now || *now == *bytes) return std::unexpected(*failed);
    load_restarts.fetch_add(1, std::memory_order_relaxed);
  }
  return fail(ErrorCode::kSetShardMissing, where + ": the set was replaced " +
                                               std::to_string(kMaxLoadAttempts) +
                                               " times while it was being loaded; try again");
}

}  // namespace abf
