// Filter sets on disk (docs/protocol.md section 13): the ABFS manifest, saving a
// set (shards first, each a new file; the manifest last, by rename; the old
// shards removed after) and loading one (every shard checked against the
// manifest; a load that meets a replaced set starts over).
#include <sys/stat.h>

#include <atomic>
#include <bit>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abf/filter_set.hpp"
#include "abf/io.hpp"
#include "abf/layout.hpp"
#include "abf/snapshot.hpp"
#include "abf/summary.hpp"
#include "binary_format.hpp"
#include "filter_set_internal.hpp"
#include "header_rules.hpp"
#include "manifest_io.hpp"

namespace abf {

namespace {

using detail::ByteReader;
using detail::ByteWriter;
using detail::fpp_text;
using detail::hex64;
using detail::ManifestFormat;

static_assert(kSetManifestHeaderSize == detail::kManifestHeaderSize);
static_assert(kSetManifestEntrySize == detail::kManifestEntrySize);

constexpr std::size_t kHeaderChecksumOffset = 72;
constexpr std::size_t kCatalogIdOffset = 80;
constexpr std::size_t kKeyFingerprintOffset = 96;
constexpr std::size_t kBodyLengthOffset = 104;
constexpr std::size_t kBodyChecksumOffset = 112;
constexpr std::size_t kBuildIdOffset = 120;
// Version 2: contentFlags in what version 1 reserves, the set's content
// fingerprint in the first 16 bytes of the body.
constexpr std::size_t kContentFlagsOffset = 68;
constexpr std::size_t kBodyFingerprintSize = 16;

constexpr ManifestFormat kFormat{
    .magic = "ABFS",
    .noun = "filter-set manifest",
    .a_noun = "a filter-set manifest",
    .set_noun = "a filter set",
    .write_verb = "save",
    .shard_noun = "filter",
    .extension = ".abf",
    .header_checksum_offset = kHeaderChecksumOffset,
    .body_length_offset = kBodyLengthOffset,
    .body_checksum_offset = kBodyChecksumOffset,
    // The largest manifest: every shard with the longest name.
    .max_body_length =
        kBodyFingerprintSize +
        std::uint64_t{kMaxShardCount} * (kSetManifestEntrySize + detail::kMaxShardNameLength),
    .truncated = ErrorCode::kSetManifestTruncated,
    .checksum = ErrorCode::kSetManifestChecksum,
    .invalid = ErrorCode::kSetManifestInvalid,
    .shard_missing = ErrorCode::kSetShardMissing,
};

std::atomic<std::uint64_t> load_restarts{0};

}  // namespace

std::vector<std::uint8_t> encode_set_manifest(const SetManifest& manifest) {
  const std::size_t shard_count = manifest.shards.size();
  std::size_t names = 0;
  for (const auto& entry : manifest.shards) names += entry.file.size();
  const std::size_t body = kBodyFingerprintSize + shard_count * kSetManifestEntrySize + names;
  std::vector<std::uint8_t> bytes(kSetManifestHeaderSize + body, 0);
  const ByteWriter p(bytes);
  p.put_bytes(0, kFormat.magic, 4);
  p.put<std::uint32_t>(4, kSetManifestFormatVersion);
  p.put<std::uint32_t>(8, static_cast<std::uint32_t>(shard_count));
  p.put<std::uint32_t>(12, manifest.hash_protocol_version);
  p.put<std::uint64_t>(16, manifest.catalog_version);
  p.put<std::uint64_t>(24, manifest.expected_item_count);
  p.put<std::uint64_t>(32, manifest.inserted_item_count);
  p.put<double>(40, manifest.target_fpp);
  p.put<std::uint64_t>(48, manifest.shard_expected_item_count);
  p.put<std::uint64_t>(56, manifest.shard_bit_count);
  p.put<std::uint32_t>(64, manifest.shard_hash_count);
  if (const auto fingerprint = manifest.content_fingerprint()) {
    p.put<std::uint32_t>(kContentFlagsOffset, kContentFlagFingerprint);
    p.put_bytes(kSetManifestHeaderSize, fingerprint->bytes());
  }
  p.put_bytes(kCatalogIdOffset, manifest.catalog_id.bytes);
  p.put_bytes(kKeyFingerprintOffset, manifest.key_fingerprint.bytes);
  p.put<std::uint64_t>(kBodyLengthOffset, body);
  p.put<std::uint64_t>(kBuildIdOffset, manifest.build_id);
  std::size_t entry = kSetManifestHeaderSize + kBodyFingerprintSize;
  std::size_t name = entry + shard_count * kSetManifestEntrySize;
  for (const auto& shard : manifest.shards) {
    p.put<std::uint64_t>(entry, shard.inserted_item_count);
    p.put<std::uint64_t>(entry + 8, shard.payload_checksum);
    p.put<std::uint64_t>(entry + 16, shard.header_checksum);
    p.put<std::uint32_t>(entry + 24, static_cast<std::uint32_t>(shard.file.size()));
    p.put_bytes(name, shard.file.data(), shard.file.size());
    entry += kSetManifestEntrySize;
    name += shard.file.size();
  }
  p.put<std::uint64_t>(kBodyChecksumOffset, detail::xxh3(p.data() + kSetManifestHeaderSize, body));
  p.put<std::uint64_t>(
      kHeaderChecksumOffset,
      detail::header_checksum_zeroed<kSetManifestHeaderSize>(p.data(), kHeaderChecksumOffset));
  return bytes;
}

Result<SetManifest> parse_set_manifest(std::span<const std::uint8_t> bytes,
                                       const std::string& where) {
  const auto invalid = [&](const std::string& what) {
    return fail(ErrorCode::kSetManifestInvalid, where + ": " + what);
  };
  if (auto ok = detail::check_manifest_start(kFormat, bytes, where); !ok) {
    return std::unexpected(ok.error());
  }
  const ByteReader p(bytes);
  SetManifest m;
  m.format_version = p.at<std::uint32_t>(4);
  if (m.format_version != 1 && m.format_version != 2) {
    return fail(ErrorCode::kSetManifestUnsupportedFormat,
                where + ": manifest format version " + std::to_string(m.format_version) +
                    " is not supported (this build reads versions 1 and 2)");
  }
  auto frame = detail::check_manifest_frame(kFormat, bytes, where);
  if (!frame) return std::unexpected(frame.error());
  m.header_checksum = frame->header_checksum;
  m.body_checksum = frame->body_checksum;
  const ByteReader body = frame->body;
  const std::uint64_t body_length = body.size();

  const auto shard_count = p.at<std::uint32_t>(8);
  m.hash_protocol_version = p.at<std::uint32_t>(12);
  m.catalog_version = p.at<std::uint64_t>(16);
  m.expected_item_count = p.at<std::uint64_t>(24);
  m.inserted_item_count = p.at<std::uint64_t>(32);
  m.target_fpp = p.at<double>(40);
  m.shard_expected_item_count = p.at<std::uint64_t>(48);
  m.shard_bit_count = p.at<std::uint64_t>(56);
  m.shard_hash_count = p.at<std::uint32_t>(64);
  p.copy_at(kCatalogIdOffset, m.catalog_id.bytes);
  p.copy_at(kKeyFingerprintOffset, m.key_fingerprint.bytes);
  m.build_id = p.at<std::uint64_t>(kBuildIdOffset);

  if (shard_count < 1 || shard_count > kMaxShardCount) {
    return invalid("shard count " + std::to_string(shard_count) + " is outside 1..65,536");
  }
  detail::HeaderFacts facts;
  facts.format_version = m.format_version;
  facts.hash_protocol_version = m.hash_protocol_version;
  facts.key_fingerprint = m.key_fingerprint;
  facts.layout = Layout{m.shard_bit_count, m.shard_hash_count};
  facts.expected_item_count = m.expected_item_count;
  facts.inserted_item_count = m.inserted_item_count;
  facts.target_fpp = m.target_fpp;
  facts.shard_count = shard_count;
  facts.shard_expected_item_count = m.shard_expected_item_count;
  if (auto fault = detail::check_header(detail::HeaderKind::kSetManifest, facts)) {
    // A version outside the protocol table is refused as snapshots refuse it.
    if (fault->rule == detail::HeaderRule::kProtocol) {
      return fail(ErrorCode::kSnapshotUnsupportedHashProtocol, where + ": " + fault->problem);
    }
    return invalid(fault->problem);
  }
  // Version 1 reserves bytes 68..72; version 2 keeps contentFlags there and
  // the fingerprint in the body's first 16 bytes.
  const std::uint64_t prefix = m.format_version == 2 ? kBodyFingerprintSize : 0;
  if (m.format_version == 1) {
    if (p.at<std::uint32_t>(kContentFlagsOffset) != 0)
      return invalid("reserved header bytes 68..72 are not zero");
  } else {
    m.content_flags = p.at<std::uint32_t>(kContentFlagsOffset);
    if ((m.content_flags & ~kContentFlagFingerprint) != 0) {
      return invalid("content flags " + hex64(m.content_flags) +
                     " have a bit set besides bit 0 (fingerprint present)");
    }
    if (body_length < prefix) {
      return invalid("body of " + std::to_string(body_length) +
                     " bytes cannot hold the 16-byte content fingerprint");
    }
    m.content_fingerprint_bytes =
        ContentFingerprint::from_bytes(body.bytes_at<kBodyFingerprintSize>(0));
    if ((m.content_flags & kContentFlagFingerprint) == 0 &&
        m.content_fingerprint_bytes != ContentFingerprint{}) {
      return invalid("content fingerprint " + m.content_fingerprint_bytes.hex() +
                     " is stored but content flags bit 0 (fingerprint present) is clear");
    }
  }
  // Entry fields: insertedItemCount, payloadChecksum, headerChecksum.
  auto entries = detail::parse_manifest_entries(
      kFormat, body.sub(prefix, body_length - prefix), shard_count, body_length, m.build_id,
      [&](const detail::ManifestEntry& e) -> std::string {
        if (e.field[0] <= m.shard_expected_item_count) return {};
        return "inserted item count " + std::to_string(e.field[0]) +
               " exceeds the shard expected item count " +
               std::to_string(m.shard_expected_item_count);
      },
      where);
  if (!entries) return std::unexpected(entries.error());
  std::uint64_t inserted = 0;
  std::vector<std::string_view> files;
  m.shards.resize(shard_count);
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    detail::ManifestEntry& e = (*entries)[i];
    SetManifestEntry& shard = m.shards[i];
    shard.inserted_item_count = e.field[0];
    shard.payload_checksum = e.field[1];
    shard.header_checksum = e.field[2];
    shard.file = std::move(e.file);
    inserted += shard.inserted_item_count;
    files.push_back(shard.file);
  }
  if (inserted != m.inserted_item_count) {
    return invalid("the shards' inserted item counts sum to " + std::to_string(inserted) +
                   ", not the manifest's " + std::to_string(m.inserted_item_count));
  }
  if (auto ok = detail::check_distinct_names(kFormat, files, where); !ok) {
    return std::unexpected(ok.error());
  }
  return m;
}

Result<SetManifest> read_set_manifest(const std::filesystem::path& path) {
  auto bytes = detail::read_manifest_bytes(kFormat, path);
  if (!bytes) return std::unexpected(bytes.error());
  if (!detail::has_magic(kFormat, *bytes) && bytes->size() >= 4) {
    return fail(ErrorCode::kSetManifestInvalid,
                path.string() + ": not an ABFS filter-set manifest (bad magic)");
  }
  return parse_set_manifest(*bytes, path.string());
}

std::filesystem::path set_shard_path(const std::filesystem::path& manifest_path,
                                     const SetManifestEntry& entry) {
  return detail::manifest_folder(manifest_path) / entry.file;
}

Result<FilterFileKind> filter_file_kind(const std::filesystem::path& path) {
  // Anything but a manifest is a snapshot: the snapshot loader says what
  // is wrong with it.
  auto manifest = detail::is_manifest_file(kFormat, path);
  if (!manifest) return std::unexpected(manifest.error());
  return *manifest ? FilterFileKind::kManifest : FilterFileKind::kSnapshot;
}

Result<void> save_filter_set(const FilterSet& set, const std::filesystem::path& path) {
  const std::string where = path.string();
  if (where == "-") {
    return fail(ErrorCode::kInvalidArgument,
                "a filter set cannot be written to standard output: it is a manifest and shard "
                "files beside it; name a file");
  }
  auto target = detail::resolve_manifest_target(kFormat, path, where);
  if (!target) return std::unexpected(target.error());
  // The set this one replaces: its shards go once the new manifest is in.
  std::vector<std::string> old_files;
  unsigned permissions = 0666;
  if (target->exists) {
    struct stat info {};
    if (::stat(target->path.c_str(), &info) == 0) permissions = info.st_mode & 07777;
    if (auto old = read_set_manifest(target->path)) {
      for (const auto& entry : old->shards) old_files.push_back(entry.file);
    }
  }
  auto build_id = detail::random_build_id();
  if (!build_id) return std::unexpected(build_id.error());

  // The manifest's fields are the set's summary (no bit count: saving
  // never reads the payload twice).
  const FilterSummary summary = summarize(set, SummaryBits::kSkip);
  SetManifest manifest;
  manifest.hash_protocol_version = summary.hash_protocol_version;
  manifest.catalog_version = summary.catalog_version;
  manifest.expected_item_count = summary.expected_item_count;
  manifest.inserted_item_count = summary.inserted_item_count;
  manifest.target_fpp = summary.target_fpp;
  manifest.shard_expected_item_count = summary.shard_expected_item_count;
  manifest.shard_bit_count = summary.shard_bit_count;
  manifest.shard_hash_count = summary.hash_count;
  manifest.catalog_id = summary.catalog_id;
  manifest.key_fingerprint = summary.key_fingerprint;
  if (const auto& fingerprint = summary.content_fingerprint) {
    manifest.content_flags = kContentFlagFingerprint;
    manifest.content_fingerprint_bytes = *fingerprint;
  }
  manifest.build_id = *build_id;

  std::vector<std::filesystem::path> written;
  const auto undo = [&] {
    std::error_code ec;
    for (const auto& file : written) std::filesystem::remove(file, ec);
  };
  for (std::uint32_t i = 0; i < set.shard_count(); ++i) {
    SetManifestEntry entry;
    entry.file = detail::shard_file_name(kFormat, target->base, *build_id, i);
    const std::filesystem::path file = target->folder / entry.file;
    const Filter& shard = set.shard(i);
    const std::vector<std::uint8_t> header = encode_snapshot_header(shard);
    entry.inserted_item_count = shard.inserted_item_count();
    entry.payload_checksum = ByteReader(header).at<std::uint64_t>(64);
    entry.header_checksum = ByteReader(header).at<std::uint64_t>(72);
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
  auto out = AtomicFile::create(target->path, {.permissions = permissions});
  Result<void> done = out ? Result<void>() : Result<void>(std::unexpected(out.error()));
  if (done) done = out->write(encode_set_manifest(manifest));
  if (done) done = out->commit();
  if (!done) {
    undo();
    return done;
  }
  // The old set's shards, now that no manifest names them. A reader still
  // loading them finds one missing and starts over with the new manifest.
  std::vector<std::string_view> current;
  for (const auto& entry : manifest.shards) current.push_back(entry.file);
  detail::remove_replaced_shards(kFormat, *target, old_files, current);
  return {};
}

namespace {

// Loads shard `index` of `manifest` and checks it against its entry.
Result<Filter> load_shard(const SetManifest& manifest, std::uint32_t index,
                          const std::filesystem::path& folder, const std::string& where,
                          const LoadOptions& options) {
  const SetManifestEntry& entry = manifest.shards[index];
  const std::filesystem::path file = folder / entry.file;
  const std::string name = detail::shard_label(where, index, manifest.shard_count(), entry.file);
  auto filter = load_snapshot(file, options);
  if (!filter) {
    return std::unexpected(detail::shard_load_error(kFormat, filter.error(), file, name));
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
  // A plain snapshot (or, since its first bytes were read, replaced by one).
  const auto single = [&]() -> Result<FilterSet> {
    auto filter = load_snapshot(path, options);
    if (!filter) return std::unexpected(filter.error());
    return FilterSet(std::move(*filter));
  };
  if (*kind == FilterFileKind::kSnapshot) return single();
  const std::string where = path.string();
  const std::filesystem::path folder = detail::manifest_folder(path);
  return detail::load_manifest_set<FilterSet>(
      kFormat, path, load_restarts, single,
      [&](const std::vector<std::uint8_t>& bytes, bool& shard_failed) -> Result<FilterSet> {
        auto manifest = parse_set_manifest(bytes, where);
        if (!manifest) return std::unexpected(manifest.error());
        // The key before any shard is read.
        auto scheme = Scheme::open(Layout{manifest->shard_bit_count, manifest->shard_hash_count},
                                   manifest->hash_protocol_version, manifest->key_fingerprint,
                                   options.key, where);
        if (!scheme) return std::unexpected(scheme.error());
        std::vector<Filter> shards;
        shards.reserve(manifest->shard_count());
        for (std::uint32_t i = 0; i < manifest->shard_count(); ++i) {
          auto shard = load_shard(*manifest, i, folder, where, options);
          if (!shard) {
            shard_failed = true;
            return std::unexpected(shard.error());
          }
          shards.push_back(std::move(*shard));
        }
        auto set = FilterSet::from_shards(std::move(shards), manifest->expected_item_count);
        if (!set) return fail(set.error().code, where + ": " + set.error().message);
        if (auto ok = check_set_fingerprint(*manifest, *set, where); !ok) {
          return std::unexpected(ok.error());
        }
        return set;
      });
}

}  // namespace abf
