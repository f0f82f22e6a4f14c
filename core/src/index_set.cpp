// Index sets (docs/protocol.md section 14, "Index sets"): the ABXS manifest,
// writing a set (shards first, each a new file; the manifest last, by
// rename; the old shards removed after), loading one (every shard checked
// against the manifest and its routing; a load that meets a replaced set
// starts over) and batched lookups routed by shard.
#include "abf/index_set.hpp"

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
#include <memory>
#include <set>
#include <string_view>
#include <utility>

#include "abf/io.hpp"
#include "file_read.hpp"
#include "filter_set_internal.hpp"

namespace abf {

namespace {

using detail::Fd;
using detail::hex64;
using detail::plain_hex16;

static_assert(std::endian::native == std::endian::little,
              "manifest integers are little-endian; big-endian hosts need byte swaps here");

constexpr char kMagic[4] = {'A', 'B', 'X', 'S'};
constexpr std::size_t kShardCountOffset = 8;
constexpr std::size_t kContentFlagsOffset = 12;
constexpr std::size_t kCatalogIdOffset = 16;
constexpr std::size_t kCatalogVersionOffset = 32;
constexpr std::size_t kFingerprintOffset = 40;
constexpr std::size_t kDigestCountOffset = 56;
constexpr std::size_t kBodyLengthOffset = 64;
constexpr std::size_t kBodyChecksumOffset = 72;
constexpr std::size_t kHeaderChecksumOffset = 80;  // where ABFX keeps its own
constexpr std::size_t kBuildIdOffset = 88;
constexpr std::size_t kReservedBegin = 96;
constexpr std::size_t kMaxNameLength = 255;  // NAME_MAX
constexpr std::uint64_t kMaxBodyLength =
    std::uint64_t{kIndexSetMaxShardCount} * (kIndexSetEntrySize + kMaxNameLength);
constexpr std::uint64_t kMaxManifestBytes = kIndexSetHeaderSize + kMaxBodyLength;
// ".<16 hex>.<5 digits>.abfx" after the manifest's name.
constexpr std::string_view kShardExtension = ".abfx";
constexpr std::size_t kShardSuffixLength = 1 + 16 + 1 + 5 + kShardExtension.size();
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

std::uint64_t header_checksum(const std::uint8_t* header) {
  std::uint8_t copy[kIndexSetHeaderSize];
  std::memcpy(copy, header, kIndexSetHeaderSize);
  std::memset(copy + kHeaderChecksumOffset, 0, 8);
  return XXH3_64bits(copy, kIndexSetHeaderSize);
}

std::string shard_file_name(const std::string& base, std::uint64_t build_id, std::uint32_t i) {
  char index[16];
  std::snprintf(index, sizeof index, "%05u", i);
  return base + "." + plain_hex16(build_id) + "." + index + std::string(kShardExtension);
}

std::string name_problem(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return "is not 1..255 bytes long";
  if (name == "." || name == "..") return "is not a file name";
  if (name.find('/') != std::string_view::npos)
    return "holds a '/' (a shard is in the manifest's folder)";
  if (name.find('\0') != std::string_view::npos) return "holds a NUL byte";
  return {};
}

// The suffix ".<16 lower-case hex>.<5 digits>.abfx", parsed: the build id's
// text and the number. Empty optional for a name of any other form.
struct SaveSuffix {
  std::string_view build_id;
  std::uint32_t number = 0;
};
std::optional<SaveSuffix> save_suffix(std::string_view name) {
  if (name.size() <= kShardSuffixLength) return std::nullopt;
  const std::string_view rest = name.substr(name.size() - kShardSuffixLength);
  if (rest[0] != '.' || rest[17] != '.' || !rest.ends_with(kShardExtension)) return std::nullopt;
  for (std::size_t i = 1; i <= 16; ++i) {
    const char c = rest[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return std::nullopt;
  }
  SaveSuffix suffix{rest.substr(1, 16), 0};
  for (std::size_t i = 18; i < 23; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return std::nullopt;
    suffix.number = suffix.number * 10 + static_cast<std::uint32_t>(rest[i] - '0');
  }
  return suffix;
}

// The names write_index_set gives, and the only ones it ever removes.
bool is_shard_name_of(std::string_view name, std::string_view base) {
  return name.size() == base.size() + kShardSuffixLength && name.starts_with(base) &&
         save_suffix(name).has_value();
}

// A name a write gave (this manifest's buildId in its suffix) carries its
// shard index: it must be the entry's own, else entries reordered after the
// write would send digests to another shard's index, whose "absent" is
// wrong for them.
std::string shard_number_problem(std::string_view name, std::uint32_t index,
                                 std::uint64_t build_id) {
  const auto suffix = save_suffix(name);
  if (!suffix || suffix->build_id != plain_hex16(build_id) || suffix->number == index) return {};
  return "file name " + std::string(name) + " is that of shard " + std::to_string(suffix->number) +
         " of this write, not of shard " + std::to_string(index) +
         " (entries reordered?): its digests would be asked of the wrong index";
}

Result<void> read_exact(int fd, std::uint8_t* out, std::size_t size, const std::string& where) {
  return detail::read_exact(fd, out, size, 0, where, ErrorCode::kIndexSetManifestTruncated);
}

bool has_magic(const std::vector<std::uint8_t>& bytes) {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), kMagic, 4) == 0;
}

// The manifest's bytes (a regular file, at most kMaxManifestBytes); a file
// without the magic comes back as its first (at most 128) bytes.
Result<std::vector<std::uint8_t>> read_manifest_bytes(const std::filesystem::path& path) {
  const std::string where = path.string();
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return fail(ErrorCode::kIo, where + ": cannot open: " + std::strerror(errno));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    return fail(ErrorCode::kIo, where + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(ErrorCode::kIo, where + ": not a regular file, so not an index-set manifest");
  }
  const auto size = static_cast<std::uint64_t>(info.st_size);
  std::vector<std::uint8_t> bytes(
      static_cast<std::size_t>(std::min<std::uint64_t>(size, kIndexSetHeaderSize)));
  if (auto ok = read_exact(fd.get(), bytes.data(), bytes.size(), where); !ok) {
    return std::unexpected(ok.error());
  }
  if (!has_magic(bytes)) return bytes;
  if (size > kMaxManifestBytes) {
    return fail(ErrorCode::kIndexSetManifestInvalid,
                where + ": file is " + std::to_string(size) +
                    " bytes, more than any manifest can be (" + std::to_string(kMaxManifestBytes) +
                    ")");
  }
  bytes.resize(static_cast<std::size_t>(size));
  if (auto ok = read_exact(fd.get(), bytes.data(), bytes.size(), where); !ok) {
    return std::unexpected(ok.error());
  }
  return bytes;
}

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

// ---------------------------------------------------------------------------
// The manifest.

std::vector<std::uint8_t> encode_index_set_manifest(const IndexSetManifest& manifest) {
  const std::size_t shard_count = manifest.shards.size();
  std::size_t names = 0;
  for (const auto& entry : manifest.shards) names += entry.file.size();
  const std::size_t body = shard_count * kIndexSetEntrySize + names;
  std::vector<std::uint8_t> bytes(kIndexSetHeaderSize + body, 0);
  std::uint8_t* p = bytes.data();
  std::memcpy(p, kMagic, 4);
  store_le<std::uint32_t>(p + 4, kIndexSetFormatVersion);
  store_le<std::uint32_t>(p + kShardCountOffset, static_cast<std::uint32_t>(shard_count));
  std::memcpy(p + kCatalogIdOffset, manifest.catalog_id.bytes.data(), 16);
  store_le<std::uint64_t>(p + kCatalogVersionOffset, manifest.catalog_version);
  if (const auto fingerprint = manifest.content_fingerprint()) {
    store_le<std::uint32_t>(p + kContentFlagsOffset, kContentFlagFingerprint);
    const auto stored = fingerprint->bytes();
    std::memcpy(p + kFingerprintOffset, stored.data(), stored.size());
  }
  store_le<std::uint64_t>(p + kDigestCountOffset, manifest.digest_count);
  store_le<std::uint64_t>(p + kBodyLengthOffset, body);
  store_le<std::uint64_t>(p + kBuildIdOffset, manifest.build_id);
  std::uint8_t* entry = p + kIndexSetHeaderSize;
  std::uint8_t* name = entry + shard_count * kIndexSetEntrySize;
  for (const auto& shard : manifest.shards) {
    store_le<std::uint64_t>(entry, shard.digest_count);
    store_le<std::uint64_t>(entry + 8, shard.header_checksum);
    store_le<std::uint64_t>(entry + 16, shard.table_checksum);
    store_le<std::uint32_t>(entry + 24, static_cast<std::uint32_t>(shard.file.size()));
    std::memcpy(name, shard.file.data(), shard.file.size());
    entry += kIndexSetEntrySize;
    name += shard.file.size();
  }
  store_le<std::uint64_t>(p + kBodyChecksumOffset, XXH3_64bits(p + kIndexSetHeaderSize, body));
  store_le<std::uint64_t>(p + kHeaderChecksumOffset, header_checksum(p));
  return bytes;
}

Result<IndexSetManifest> parse_index_set_manifest(std::span<const std::uint8_t> bytes,
                                                  const std::string& where) {
  const auto error = [&](ErrorCode code, const std::string& what) {
    return fail(code, where + ": " + what);
  };
  const auto invalid = [&](const std::string& what) {
    return error(ErrorCode::kIndexSetManifestInvalid, what);
  };
  const std::uint64_t size = bytes.size();
  if (size < kIndexSetHeaderSize) {
    return error(ErrorCode::kIndexSetManifestTruncated,
                 "file is " + std::to_string(size) +
                     " bytes, shorter than the 128-byte ABXS manifest header");
  }
  const std::uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) return invalid("not an ABXS index-set manifest (bad magic)");
  IndexSetManifest m;
  m.format_version = load_le<std::uint32_t>(p + 4);
  if (m.format_version != kIndexSetFormatVersion) {
    return error(ErrorCode::kIndexSetManifestUnsupportedFormat,
                 "manifest format version " + std::to_string(m.format_version) +
                     " is not supported (this build reads version 1)");
  }
  m.header_checksum = load_le<std::uint64_t>(p + kHeaderChecksumOffset);
  if (const auto actual = header_checksum(p); actual != m.header_checksum) {
    return error(ErrorCode::kIndexSetManifestChecksum,
                 "manifest header checksum mismatch (stored " + hex64(m.header_checksum) +
                     ", computed " + hex64(actual) + ")");
  }
  const auto body_length = load_le<std::uint64_t>(p + kBodyLengthOffset);
  if (body_length > kMaxBodyLength) {
    return invalid("body length " + std::to_string(body_length) + " is more than any manifest's (" +
                   std::to_string(kMaxBodyLength) + ")");
  }
  const std::uint64_t expected_size = kIndexSetHeaderSize + body_length;
  if (size < expected_size) {
    return error(ErrorCode::kIndexSetManifestTruncated,
                 "file is " + std::to_string(size) + " bytes, the manifest header promises " +
                     std::to_string(expected_size));
  }
  if (size > expected_size) {
    return invalid("file is " + std::to_string(size) + " bytes, " +
                   std::to_string(size - expected_size) +
                   " more than the manifest header promises");
  }
  const std::uint8_t* body = p + kIndexSetHeaderSize;
  m.body_checksum = load_le<std::uint64_t>(p + kBodyChecksumOffset);
  if (const auto actual = XXH3_64bits(body, body_length); actual != m.body_checksum) {
    return error(ErrorCode::kIndexSetManifestChecksum,
                 "manifest body checksum mismatch (stored " + hex64(m.body_checksum) +
                     ", computed " + hex64(actual) + ")");
  }

  const auto shard_count = load_le<std::uint32_t>(p + kShardCountOffset);
  m.content_flags = load_le<std::uint32_t>(p + kContentFlagsOffset);
  std::memcpy(m.catalog_id.bytes.data(), p + kCatalogIdOffset, 16);
  m.catalog_version = load_le<std::uint64_t>(p + kCatalogVersionOffset);
  m.content_fingerprint_bytes = ContentFingerprint::from_bytes(
      std::span<const std::uint8_t, 16>(p + kFingerprintOffset, 16));
  m.digest_count = load_le<std::uint64_t>(p + kDigestCountOffset);
  m.build_id = load_le<std::uint64_t>(p + kBuildIdOffset);
  if (shard_count < 1 || shard_count > kIndexSetMaxShardCount) {
    return invalid("shard count " + std::to_string(shard_count) + " is outside 1..65,536");
  }
  if ((m.content_flags & ~kContentFlagFingerprint) != 0) {
    return invalid("content flags " + hex64(m.content_flags) +
                   " have a bit set besides bit 0 (fingerprint present)");
  }
  if ((m.content_flags & kContentFlagFingerprint) == 0 &&
      m.content_fingerprint_bytes != ContentFingerprint{}) {
    return invalid("content fingerprint " + m.content_fingerprint_bytes.hex() +
                   " is stored but content flags bit 0 (fingerprint present) is clear");
  }
  if (m.digest_count > kIndexMaxDigestCount) {
    return invalid("digest count " + std::to_string(m.digest_count) + " exceeds 2^40");
  }
  for (std::size_t i = kReservedBegin; i < kIndexSetHeaderSize; ++i) {
    if (p[i] != 0) return invalid("reserved header byte " + std::to_string(i) + " is not zero");
  }
  if (body_length < std::uint64_t{shard_count} * kIndexSetEntrySize) {
    return invalid("body of " + std::to_string(body_length) + " bytes cannot hold " +
                   std::to_string(shard_count) + " shard entries of 32 bytes");
  }
  const std::uint64_t names_length = body_length - std::uint64_t{shard_count} * kIndexSetEntrySize;
  const std::uint8_t* names = body + std::size_t{shard_count} * kIndexSetEntrySize;
  std::uint64_t name_offset = 0;
  std::uint64_t digests = 0;
  m.shards.resize(shard_count);
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    const std::uint8_t* e = body + std::size_t{i} * kIndexSetEntrySize;
    const std::string entry = "shard entry " + std::to_string(i);
    IndexSetEntry& shard = m.shards[i];
    shard.digest_count = load_le<std::uint64_t>(e);
    shard.header_checksum = load_le<std::uint64_t>(e + 8);
    shard.table_checksum = load_le<std::uint64_t>(e + 16);
    const auto name_length = load_le<std::uint32_t>(e + 24);
    if (load_le<std::uint32_t>(e + 28) != 0) {
      return invalid(entry + ": reserved bytes are not zero");
    }
    if (shard.digest_count > m.digest_count) {
      return invalid(entry + ": digest count " + std::to_string(shard.digest_count) +
                     " exceeds the set's " + std::to_string(m.digest_count));
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
    digests += shard.digest_count;  // each <= 2^40: no overflow over 2^16 entries
  }
  if (name_offset != names_length) {
    return invalid(std::to_string(names_length - name_offset) +
                   " bytes after the last shard's name");
  }
  if (digests != m.digest_count) {
    return invalid("the shards' digest counts sum to " + std::to_string(digests) +
                   ", not the manifest's " + std::to_string(m.digest_count));
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

Result<IndexFileKind> index_file_kind(const std::filesystem::path& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) {
    return fail(ErrorCode::kIo, path.string() + ": cannot open: " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_size < 4) {
    return IndexFileKind::kIndex;  // Index::load says what is wrong
  }
  std::uint8_t magic[4] = {};
  if (auto ok = read_exact(fd.get(), magic, 4, path.string()); !ok) {
    return std::unexpected(ok.error());
  }
  return std::memcmp(magic, kMagic, 4) == 0 ? IndexFileKind::kManifest : IndexFileKind::kIndex;
}

// ---------------------------------------------------------------------------
// Writing.

namespace {

// The per-shard tallies of the first pass.
struct Tally {
  std::vector<std::uint64_t> counts;
  std::vector<ContentFingerprint> fingerprints;
};

// A sink that refuses digests out of strictly ascending order across every
// chunk of one pass.
class AscendingCheck {
 public:
  Result<void> operator()(std::span<const Digest> chunk) {
    for (const Digest& d : chunk) {
      if (seen_ > 0 && !(last_ < d)) {
        return fail(ErrorCode::kInvalidArgument,
                    "index set: digest " + std::to_string(seen_) + " (" + d.hex() + ") " +
                        (d == last_ ? "repeats" : "is less than") + " digest " +
                        std::to_string(seen_ - 1) +
                        "; an index holds distinct digests in strictly ascending byte order");
      }
      last_ = d;
      ++seen_;
    }
    return {};
  }
  std::uint64_t seen() const { return seen_; }

 private:
  Digest last_{};
  std::uint64_t seen_ = 0;
};

}  // namespace

Result<IndexSetWriteReport> write_index_set(const std::filesystem::path& path,
                                            const IndexIdentity& identity,
                                            std::uint32_t shard_count,
                                            const IndexDigestSource& source,
                                            const IndexSetWriteOptions& options) {
  const std::string where = path.string();
  if (shard_count < 1 || shard_count > kIndexSetMaxShardCount) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": shard count " + std::to_string(shard_count) + " is outside 1..65,536");
  }
  if (where == "-") {
    return fail(ErrorCode::kInvalidArgument,
                "an index set cannot be written to standard output: it is a manifest and shard "
                "files beside it; name a file");
  }
  if (options.max_open_shards < 1) {
    return fail(ErrorCode::kInvalidArgument, where + ": max_open_shards must be at least 1");
  }
  if (options.build_id && *options.build_id == 0) {
    return fail(ErrorCode::kInvalidArgument, where + ": a build id must not be zero");
  }
  std::error_code ec;
  std::filesystem::path target = std::filesystem::weakly_canonical(path, ec);
  if (ec) target = path;
  const auto status = std::filesystem::status(target, ec);
  const bool exists = !ec && std::filesystem::exists(status);
  if (exists && !std::filesystem::is_regular_file(status)) {
    return fail(ErrorCode::kIo,
                where + ": is not a regular file; an index set's manifest must be one");
  }
  const std::filesystem::path folder = target.parent_path();
  const std::string base = target.filename().string();
  if (base.size() + kShardSuffixLength > kMaxNameLength) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": a manifest name of " + std::to_string(base.size()) +
                    " bytes leaves no room for its shards' names (at most " +
                    std::to_string(kMaxNameLength - kShardSuffixLength) + ")");
  }
  const detail::ShardRouter route(shard_count);

  // Pass 1: each shard's count and fingerprint (its header precedes it).
  Tally tally{std::vector<std::uint64_t>(shard_count, 0),
              std::vector<ContentFingerprint>(shard_count)};
  IndexSetWriteReport report;
  report.shard_count = shard_count;
  {
    AscendingCheck ascending;
    auto counted = source([&](std::span<const Digest> chunk) -> Result<void> {
      if (auto ok = ascending(chunk); !ok) return ok;
      if (ascending.seen() > kIndexMaxDigestCount) {
        return fail(ErrorCode::kInvalidArgument, "index set: more than 2^40 digests");
      }
      for (const Digest& d : chunk) {
        const std::uint32_t s = route(d);
        ++tally.counts[s];
        tally.fingerprints[s] += ContentFingerprint::of(d);
      }
      return {};
    });
    if (!counted) return std::unexpected(counted.error());
    report.passes = 1;
    report.digest_count = ascending.seen();
  }
  for (const auto& f : tally.fingerprints) report.fingerprint += f;
  if (identity.content_fingerprint && *identity.content_fingerprint != report.fingerprint) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": the " + std::to_string(report.digest_count) +
                    " digests add up to content fingerprint " + report.fingerprint.hex() +
                    ", not the " + identity.content_fingerprint->hex() + " the set is to carry");
  }

  std::vector<std::string> old_files;
  unsigned permissions = 0666;
  if (exists) {
    struct stat info {};
    if (::stat(target.c_str(), &info) == 0) permissions = info.st_mode & 07777;
    if (auto bytes = read_manifest_bytes(target); bytes && has_magic(*bytes)) {
      if (auto old = parse_index_set_manifest(*bytes, where)) {
        for (const auto& entry : old->shards) old_files.push_back(entry.file);
      }
    }
  }
  std::uint64_t build_id = 0;
  if (options.build_id) {
    build_id = *options.build_id;
  } else {
    auto random = random_build_id();
    if (!random) return std::unexpected(random.error());
    build_id = *random;
  }

  IndexSetManifest manifest;
  manifest.catalog_id = identity.catalog_id;
  manifest.catalog_version = identity.catalog_version;
  if (identity.content_fingerprint) {
    manifest.content_flags = kContentFlagFingerprint;
    manifest.content_fingerprint_bytes = report.fingerprint;
  }
  manifest.digest_count = report.digest_count;
  manifest.build_id = build_id;
  manifest.shards.resize(shard_count);

  std::vector<std::filesystem::path> written;
  const auto undo = [&] {
    for (const auto& file : written) std::filesystem::remove(file, ec);
  };
  const auto shard_error = [&](std::uint32_t i, const Error& e) {
    return fail(e.code, where + ": shard " + std::to_string(i) + " of " +
                            std::to_string(shard_count) + ": " + e.message);
  };

  // Then the shards, max_open_shards at a time, one pass each group.
  for (std::uint32_t first = 0; first < shard_count; first += options.max_open_shards) {
    const std::uint32_t end =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(
            shard_count, std::uint64_t{first} + options.max_open_shards));
    std::vector<IndexWriter> writers;
    writers.reserve(end - first);
    for (std::uint32_t i = first; i < end; ++i) {
      IndexSetEntry& entry = manifest.shards[i];
      entry.file = shard_file_name(base, build_id, i);
      entry.digest_count = tally.counts[i];
      IndexIdentity shard_identity = identity;
      shard_identity.block_digests = options.block_digests;
      shard_identity.content_fingerprint = std::nullopt;
      if (identity.content_fingerprint) shard_identity.content_fingerprint = tally.fingerprints[i];
      auto writer = IndexWriter::create(folder / entry.file, shard_identity, tally.counts[i],
                                        {.permissions = permissions, .replace = false});
      if (!writer) {
        undo();
        return shard_error(i, writer.error());
      }
      writers.push_back(std::move(*writer));
    }
    std::vector<ContentFingerprint> again(end - first);
    std::vector<std::vector<Digest>> parts(end - first);
    AscendingCheck ascending;
    auto pass = source([&](std::span<const Digest> chunk) -> Result<void> {
      if (auto ok = ascending(chunk); !ok) return ok;
      for (auto& part : parts) part.clear();
      for (const Digest& d : chunk) {
        const std::uint32_t s = route(d);
        if (s >= first && s < end) parts[s - first].push_back(d);
      }
      for (std::uint32_t j = 0; j < end - first; ++j) {
        if (parts[j].empty()) continue;
        again[j] += ContentFingerprint::of(std::span<const Digest>(parts[j]));
        if (auto added = writers[j].add(parts[j]); !added) {
          return shard_error(first + j, added.error());
        }
      }
      return {};
    });
    ++report.passes;
    if (!pass) {
      undo();
      return std::unexpected(pass.error());
    }
    for (std::uint32_t j = 0; j < end - first; ++j) {
      const std::uint32_t i = first + j;
      if (again[j] != tally.fingerprints[i]) {
        undo();
        return fail(ErrorCode::kInvalidArgument,
                    where + ": shard " + std::to_string(i) +
                        ": the source delivered other digests on a later pass (content "
                        "fingerprint " +
                        again[j].hex() + ", first pass " + tally.fingerprints[i].hex() + ")");
      }
      if (auto committed = writers[j].commit(); !committed) {
        undo();
        return shard_error(i, committed.error());
      }
      written.push_back(folder / manifest.shards[i].file);
      manifest.shards[i].header_checksum = writers[j].header_checksum();
      manifest.shards[i].table_checksum = writers[j].table_checksum();
    }
  }

  auto out = AtomicFile::create(target, {.permissions = permissions});
  Result<void> done = out ? Result<void>() : Result<void>(std::unexpected(out.error()));
  if (done) done = out->write(encode_index_set_manifest(manifest));
  if (done) done = out->commit();
  if (!done) {
    undo();
    return std::unexpected(done.error());
  }
  // The old set's shards, now that no manifest names them. A reader still
  // loading them finds one missing and starts over with the new manifest.
  std::set<std::string> current;
  for (const auto& entry : manifest.shards) current.insert(entry.file);
  for (const auto& file : old_files) {
    if (current.contains(file) || !is_shard_name_of(file, base)) continue;
    std::filesystem::remove(folder / file, ec);
  }
  return report;
}

Result<IndexSetWriteReport> save_index_set(const std::filesystem::path& path,
                                           const IndexIdentity& identity,
                                           std::uint32_t shard_count,
                                           std::span<const Digest> digests,
                                           const IndexSetWriteOptions& options) {
  return write_index_set(
      path, identity, shard_count,
      [digests](const IndexDigestSink& sink) { return sink(digests); }, options);
}

// ---------------------------------------------------------------------------
// The loaded set.

struct IndexSet::State {
  std::vector<Index> shards;
  detail::ShardRouter route{1};
  std::optional<ContentFingerprint> fingerprint;
  std::uint64_t size = 0;

  template <class Out>
  Result<void> contains(std::span<const Digest> digests, std::span<Out> out) const;
};

template <class Out>
Result<void> IndexSet::State::contains(std::span<const Digest> digests,
                                       std::span<Out> out) const {
  if (out.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "index set: answer span holds " +
                                                 std::to_string(out.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  const std::size_t s = shards.size();
  if (s == 1) return shards[0].contains(digests, out);
  // A handful of digests: one at a time, no sort.
  if (digests.size() < 64) {
    for (std::size_t i = 0; i < digests.size(); ++i) {
      out[i] = shards[route(digests[i])].contains(digests[i]);
    }
    return {};
  }
  const std::size_t block =
      std::min<std::size_t>(std::max<std::size_t>(std::size_t{16} << 10, s << 10),
                            std::size_t{1} << 20);
  const std::size_t scratch = std::min(block, digests.size());
  std::vector<std::uint32_t> shard(scratch);
  std::vector<std::uint32_t> position(scratch);
  std::vector<Digest> sorted(scratch);
  const auto answers = std::make_unique<Out[]>(scratch);
  std::vector<std::uint32_t> start(s + 1);
  for (std::size_t begin = 0; begin < digests.size(); begin += block) {
    const std::size_t n = std::min(block, digests.size() - begin);
    std::fill(start.begin(), start.end(), 0);
    for (std::size_t i = 0; i < n; ++i) {
      shard[i] = route(digests[begin + i]);
      ++start[shard[i] + 1];
    }
    for (std::size_t j = 1; j <= s; ++j) start[j] += start[j - 1];
    // start[j] now is shard j's first slot; fill advances a copy.
    std::vector<std::uint32_t> next(start.begin(), start.end() - 1);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint32_t slot = next[shard[i]]++;
      sorted[slot] = digests[begin + i];
      position[slot] = static_cast<std::uint32_t>(i);
    }
    for (std::size_t j = 0; j < s; ++j) {
      const std::size_t count = start[j + 1] - start[j];
      if (count == 0) continue;
      if (auto ok = shards[j].contains(std::span(sorted.data() + start[j], count),
                                       std::span(answers.get() + start[j], count));
          !ok) {
        return ok;
      }
    }
    for (std::size_t k = 0; k < n; ++k) out[begin + position[k]] = answers[k];
  }
  return {};
}

namespace {

std::shared_ptr<IndexSet::State> one_shard_state(Index index) {
  auto state = std::make_shared<IndexSet::State>();
  state->fingerprint = index.content_fingerprint();
  state->size = index.size();
  state->shards.push_back(std::move(index));
  return state;
}

// Loads shard `i` of `manifest` and checks it against its entry and its
// routing.
Result<Index> load_shard(const IndexSetManifest& manifest, std::uint32_t i,
                         const std::filesystem::path& folder, const std::string& where,
                         LoadMode mode) {
  const IndexSetEntry& entry = manifest.shards[i];
  const std::filesystem::path file = folder / entry.file;
  const std::string name = where + ": shard " + std::to_string(i) + " of " +
                           std::to_string(manifest.shard_count()) + " (" + entry.file + "): ";
  auto index = Index::load(file, mode);
  if (!index) {
    std::error_code ec;
    if (index.error().code == ErrorCode::kIo &&
        !std::filesystem::exists(std::filesystem::symlink_status(file, ec))) {
      return fail(ErrorCode::kIndexSetShardMissing,
                  name + "missing: the manifest names " + file.string() + ", which does not exist");
    }
    std::string message = index.error().message;
    const std::string prefix = file.string() + ": ";
    if (message.starts_with(prefix)) message.erase(0, prefix.size());
    return fail(index.error().code, name + message);
  }
  const auto mismatch = [&](std::string_view field, const std::string& shard,
                            const std::string& says) {
    return fail(ErrorCode::kIndexSetShardMismatch,
                name + std::string(field) + " is " + shard + ", the manifest says " + says);
  };
  const Index& x = *index;
  if (x.catalog_id() != manifest.catalog_id) {
    return mismatch("catalogId", x.catalog_id().hex(), manifest.catalog_id.hex());
  }
  if (x.catalog_version() != manifest.catalog_version) {
    return mismatch("catalogVersion", std::to_string(x.catalog_version()),
                    std::to_string(manifest.catalog_version));
  }
  if (x.size() != entry.digest_count) {
    return mismatch("digestCount", std::to_string(x.size()), std::to_string(entry.digest_count));
  }
  if (x.header().header_checksum != entry.header_checksum) {
    return mismatch("headerChecksum", hex64(x.header().header_checksum),
                    hex64(entry.header_checksum));
  }
  if (x.table_checksum() != entry.table_checksum) {
    return mismatch("tableChecksum", hex64(x.table_checksum()), hex64(entry.table_checksum));
  }
  // A digest of another shard would never be asked of this one: its
  // lookups would answer "absent" for a digest the catalog holds.
  const detail::ShardRouter route(manifest.shard_count());
  const auto digests = x.digests();
  for (std::size_t k = 0; k < digests.size(); ++k) {
    if (const std::uint32_t s = route(digests[k]); s != i) {
      return fail(ErrorCode::kIndexSetShardMismatch,
                  name + "digest " + std::to_string(k) + " (" + digests[k].hex() +
                      ") belongs to shard " + std::to_string(s) + " of " +
                      std::to_string(manifest.shard_count()) +
                      " (section 13's rule), so a lookup would never find it here");
    }
  }
  return index;
}

}  // namespace

namespace detail {
std::uint64_t index_set_load_restarts() noexcept {
  return load_restarts.load(std::memory_order_relaxed);
}
}  // namespace detail

IndexSet::IndexSet() : IndexSet(Index()) {}
IndexSet::IndexSet(Index index) : state_(one_shard_state(std::move(index))) {}
IndexSet::IndexSet(std::shared_ptr<const State> state) : state_(std::move(state)) {}

Result<IndexSet> IndexSet::from_shards(std::vector<Index> shards) {
  const std::size_t count = shards.size();
  if (count < 1 || count > kIndexSetMaxShardCount) {
    return fail(ErrorCode::kInvalidArgument,
                "index set: shard count " + std::to_string(count) + " is outside 1..65,536");
  }
  auto state = std::make_shared<State>();
  state->route = detail::ShardRouter(static_cast<std::uint32_t>(count));
  bool every_fingerprint = true;
  ContentFingerprint sum;
  for (std::size_t i = 0; i < count; ++i) {
    const Index& x = shards[i];
    const std::string name = "index set: shard " + std::to_string(i) + " of " +
                             std::to_string(count) + ": ";
    if (x.catalog_id() != shards[0].catalog_id() ||
        x.catalog_version() != shards[0].catalog_version()) {
      return fail(ErrorCode::kInvalidArgument,
                  name + "catalog " + x.catalog_id().hex() + " version " +
                      std::to_string(x.catalog_version()) + ", shard 0's is " +
                      shards[0].catalog_id().hex() + " version " +
                      std::to_string(shards[0].catalog_version()));
    }
    const auto digests = x.digests();
    for (std::size_t k = 0; k < digests.size(); ++k) {
      if (const std::uint32_t s = state->route(digests[k]); s != i) {
        return fail(ErrorCode::kInvalidArgument, name + "digest " + std::to_string(k) + " (" +
                                                     digests[k].hex() + ") belongs to shard " +
                                                     std::to_string(s));
      }
    }
    if (const auto f = x.content_fingerprint()) {
      sum += *f;
    } else {
      every_fingerprint = false;
    }
    state->size += x.size();
  }
  if (every_fingerprint) state->fingerprint = sum;
  state->shards = std::move(shards);
  return IndexSet(std::shared_ptr<const State>(std::move(state)));
}

Result<IndexSet> IndexSet::load(const std::filesystem::path& path, LoadMode mode) {
  auto kind = index_file_kind(path);
  if (!kind) return std::unexpected(kind.error());
  const auto single = [&]() -> Result<IndexSet> {
    auto index = Index::load(path, mode);
    if (!index) return std::unexpected(index.error());
    return IndexSet(std::move(*index));
  };
  if (*kind == IndexFileKind::kIndex) return single();
  const std::string where = path.string();
  const std::filesystem::path folder = folder_of(path);
  for (int attempt = 0; attempt < kMaxLoadAttempts; ++attempt) {
    auto bytes = read_manifest_bytes(path);
    if (!bytes) return std::unexpected(bytes.error());
    if (!has_magic(*bytes)) return single();  // replaced by a plain index meanwhile
    auto manifest = parse_index_set_manifest(*bytes, where);
    if (!manifest) return std::unexpected(manifest.error());
    auto state = std::make_shared<State>();
    state->route = detail::ShardRouter(manifest->shard_count());
    state->shards.reserve(manifest->shard_count());
    std::optional<Error> failed;
    bool every_fingerprint = true;
    ContentFingerprint sum;
    for (std::uint32_t i = 0; i < manifest->shard_count(); ++i) {
      auto shard = load_shard(*manifest, i, folder, where, mode);
      if (!shard) {
        failed = shard.error();
        break;
      }
      if (const auto f = shard->content_fingerprint()) {
        sum += *f;
      } else {
        every_fingerprint = false;
      }
      state->size += shard->size();
      state->shards.push_back(std::move(*shard));
    }
    if (!failed) {
      const std::optional<ContentFingerprint> shards =
          every_fingerprint ? std::optional(sum) : std::nullopt;
      const auto said = manifest->content_fingerprint();
      if (shards != said) {
        const auto text = [](const std::optional<ContentFingerprint>& value) {
          return value ? value->hex() : std::string("none");
        };
        return fail(ErrorCode::kIndexSetShardMismatch,
                    where + ": contentFingerprint: the shards' fingerprints sum to " +
                        text(shards) + (shards ? "" : " (a shard carries none)") +
                        ", the manifest says " + text(said));
      }
      state->fingerprint = said;
      return IndexSet(std::shared_ptr<const State>(std::move(state)));
    }
    // A writer may have replaced the set (and removed these shards) while
    // they were read: then start over with its manifest.
    auto now = read_manifest_bytes(path);
    if (!now || *now == *bytes) return std::unexpected(*failed);
    load_restarts.fetch_add(1, std::memory_order_relaxed);
  }
  return fail(ErrorCode::kIndexSetShardMissing,
              where + ": the set was replaced " + std::to_string(kMaxLoadAttempts) +
                  " times while it was being loaded; try again");
}

std::uint32_t IndexSet::shard_count() const noexcept {
  return static_cast<std::uint32_t>(state_->shards.size());
}
std::span<const Index> IndexSet::shards() const noexcept { return state_->shards; }
const Index& IndexSet::shard(std::uint32_t index) const noexcept { return state_->shards[index]; }
const CatalogId& IndexSet::catalog_id() const noexcept { return state_->shards[0].catalog_id(); }
std::uint64_t IndexSet::catalog_version() const noexcept {
  return state_->shards[0].catalog_version();
}
const std::optional<ContentFingerprint>& IndexSet::content_fingerprint() const noexcept {
  return state_->fingerprint;
}
std::uint64_t IndexSet::size() const noexcept { return state_->size; }

ContentFingerprint IndexSet::digests_fingerprint() const {
  ContentFingerprint sum;
  for (const Index& shard : state_->shards) sum += ContentFingerprint::of(shard.digests());
  return sum;
}

bool IndexSet::contains(const Digest& digest) const noexcept {
  return state_->shards[state_->route(digest)].contains(digest);
}

Result<void> IndexSet::contains(std::span<const Digest> digests,
                                std::span<std::uint8_t> out) const {
  return state_->contains(digests, out);
}

Result<void> IndexSet::contains(std::span<const Digest> digests, std::span<bool> out) const {
  return state_->contains(digests, out);
}

}  // namespace abf
