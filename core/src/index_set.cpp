// Index sets (docs/protocol.md section 14, "Index sets"): the ABXS manifest,
// writing a set (shards first, each a new file; the manifest last, by
// rename; the old shards removed after), loading one (every shard checked
// against the manifest and its routing; a load that meets a replaced set
// starts over) and batched lookups routed by shard.
#include "abf/index_set.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "abf/io.hpp"
#include "binary_format.hpp"
#include "filter_set_internal.hpp"
#include "manifest_io.hpp"

namespace abf {

namespace {

using detail::ByteReader;
using detail::ByteWriter;
using detail::hex64;
using detail::ManifestFormat;

static_assert(kIndexSetHeaderSize == detail::kManifestHeaderSize);
static_assert(kIndexSetEntrySize == detail::kManifestEntrySize);

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

constexpr ManifestFormat kFormat{
    .magic = "ABXS",
    .noun = "index-set manifest",
    .a_noun = "an index-set manifest",
    .set_noun = "an index set",
    .write_verb = "write",
    .shard_noun = "index",
    .extension = ".abfx",
    .header_checksum_offset = kHeaderChecksumOffset,
    .body_length_offset = kBodyLengthOffset,
    .body_checksum_offset = kBodyChecksumOffset,
    .max_body_length =
        std::uint64_t{kIndexSetMaxShardCount} * (kIndexSetEntrySize + detail::kMaxShardNameLength),
    .truncated = ErrorCode::kIndexSetManifestTruncated,
    .checksum = ErrorCode::kIndexSetManifestChecksum,
    .invalid = ErrorCode::kIndexSetManifestInvalid,
    .shard_missing = ErrorCode::kIndexSetShardMissing,
};

std::atomic<std::uint64_t> load_restarts{0};

}  // namespace

// ---------------------------------------------------------------------------
// The manifest.

std::vector<std::uint8_t> encode_index_set_manifest(const IndexSetManifest& manifest) {
  const std::size_t shard_count = manifest.shards.size();
  std::size_t names = 0;
  for (const auto& entry : manifest.shards) names += entry.file.size();
  const std::size_t body = shard_count * kIndexSetEntrySize + names;
  std::vector<std::uint8_t> bytes(kIndexSetHeaderSize + body, 0);
  const ByteWriter p(bytes);
  p.put_bytes(0, kFormat.magic, 4);
  p.put<std::uint32_t>(4, kIndexSetFormatVersion);
  p.put<std::uint32_t>(kShardCountOffset, static_cast<std::uint32_t>(shard_count));
  p.put_bytes(kCatalogIdOffset, manifest.catalog_id.bytes);
  p.put<std::uint64_t>(kCatalogVersionOffset, manifest.catalog_version);
  if (const auto fingerprint = manifest.content_fingerprint()) {
    p.put<std::uint32_t>(kContentFlagsOffset, kContentFlagFingerprint);
    p.put_bytes(kFingerprintOffset, fingerprint->bytes());
  }
  p.put<std::uint64_t>(kDigestCountOffset, manifest.digest_count);
  p.put<std::uint64_t>(kBodyLengthOffset, body);
  p.put<std::uint64_t>(kBuildIdOffset, manifest.build_id);
  std::size_t entry = kIndexSetHeaderSize;
  std::size_t name = entry + shard_count * kIndexSetEntrySize;
  for (const auto& shard : manifest.shards) {
    p.put<std::uint64_t>(entry, shard.digest_count);
    p.put<std::uint64_t>(entry + 8, shard.header_checksum);
    p.put<std::uint64_t>(entry + 16, shard.table_checksum);
    p.put<std::uint32_t>(entry + 24, static_cast<std::uint32_t>(shard.file.size()));
    p.put_bytes(name, shard.file.data(), shard.file.size());
    entry += kIndexSetEntrySize;
    name += shard.file.size();
  }
  p.put<std::uint64_t>(kBodyChecksumOffset, detail::xxh3(p.data() + kIndexSetHeaderSize, body));
  p.put<std::uint64_t>(kHeaderChecksumOffset, detail::header_checksum_zeroed<kIndexSetHeaderSize>(
                                                  p.data(), kHeaderChecksumOffset));
  return bytes;
}

Result<IndexSetManifest> parse_index_set_manifest(std::span<const std::uint8_t> bytes,
                                                  const std::string& where) {
  const auto invalid = [&](const std::string& what) {
    return fail(ErrorCode::kIndexSetManifestInvalid, where + ": " + what);
  };
  if (auto ok = detail::check_manifest_start(kFormat, bytes, where); !ok) {
    return std::unexpected(ok.error());
  }
  const ByteReader p(bytes);
  IndexSetManifest m;
  m.format_version = p.at<std::uint32_t>(4);
  if (m.format_version != kIndexSetFormatVersion) {
    return fail(ErrorCode::kIndexSetManifestUnsupportedFormat,
                where + ": manifest format version " + std::to_string(m.format_version) +
                    " is not supported (this build reads version 1)");
  }
  auto frame = detail::check_manifest_frame(kFormat, bytes, where);
  if (!frame) return std::unexpected(frame.error());
  m.header_checksum = frame->header_checksum;
  m.body_checksum = frame->body_checksum;
  const ByteReader body = frame->body;

  const auto shard_count = p.at<std::uint32_t>(kShardCountOffset);
  m.content_flags = p.at<std::uint32_t>(kContentFlagsOffset);
  p.copy_at(kCatalogIdOffset, m.catalog_id.bytes);
  m.catalog_version = p.at<std::uint64_t>(kCatalogVersionOffset);
  m.content_fingerprint_bytes = ContentFingerprint::from_bytes(p.bytes_at<16>(kFingerprintOffset));
  m.digest_count = p.at<std::uint64_t>(kDigestCountOffset);
  m.build_id = p.at<std::uint64_t>(kBuildIdOffset);
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
    if (!p.zero_at(i, 1)) {
      return invalid("reserved header byte " + std::to_string(i) + " is not zero");
    }
  }
  // Entry fields: digestCount, headerChecksum, tableChecksum.
  auto entries = detail::parse_manifest_entries(
      kFormat, body, shard_count, body.size(), m.build_id,
      [&](const detail::ManifestEntry& e) -> std::string {
        if (e.field[0] <= m.digest_count) return {};
        return "digest count " + std::to_string(e.field[0]) + " exceeds the set's " +
               std::to_string(m.digest_count);
      },
      where);
  if (!entries) return std::unexpected(entries.error());
  std::uint64_t digests = 0;
  std::vector<std::string_view> files;
  m.shards.resize(shard_count);
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    detail::ManifestEntry& e = (*entries)[i];
    IndexSetEntry& shard = m.shards[i];
    shard.digest_count = e.field[0];
    shard.header_checksum = e.field[1];
    shard.table_checksum = e.field[2];
    shard.file = std::move(e.file);
    digests += shard.digest_count;  // each <= 2^40: no overflow over 2^16 entries
    files.push_back(shard.file);
  }
  if (digests != m.digest_count) {
    return invalid("the shards' digest counts sum to " + std::to_string(digests) +
                   ", not the manifest's " + std::to_string(m.digest_count));
  }
  if (auto ok = detail::check_distinct_names(kFormat, files, where); !ok) {
    return std::unexpected(ok.error());
  }
  return m;
}

Result<IndexFileKind> index_file_kind(const std::filesystem::path& path) {
  // Anything but a manifest is an index: Index::load says what is wrong.
  auto manifest = detail::is_manifest_file(kFormat, path);
  if (!manifest) return std::unexpected(manifest.error());
  return *manifest ? IndexFileKind::kManifest : IndexFileKind::kIndex;
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
  auto resolved = detail::resolve_manifest_target(kFormat, path, where);
  if (!resolved) return std::unexpected(resolved.error());
  const detail::ManifestTarget& target = *resolved;
  const std::filesystem::path& folder = target.folder;
  const std::string& base = target.base;
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
  if (target.exists) {
    struct stat info {};
    if (::stat(target.path.c_str(), &info) == 0) permissions = info.st_mode & 07777;
    if (auto bytes = detail::read_manifest_bytes(kFormat, target.path);
        bytes && detail::has_magic(kFormat, *bytes)) {
      if (auto old = parse_index_set_manifest(*bytes, where)) {
        for (const auto& entry : old->shards) old_files.push_back(entry.file);
      }
    }
  }
  std::uint64_t build_id = 0;
  if (options.build_id) {
    build_id = *options.build_id;
  } else {
    auto random = detail::random_build_id();
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
    std::error_code ec;
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
      entry.file = detail::shard_file_name(kFormat, base, build_id, i);
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

  auto out = AtomicFile::create(target.path, {.permissions = permissions});
  Result<void> done = out ? Result<void>() : Result<void>(std::unexpected(out.error()));
  if (done) done = out->write(encode_index_set_manifest(manifest));
  if (done) done = out->commit();
  if (!done) {
    undo();
    return std::unexpected(done.error());
  }
  // The old set's shards, now that no manifest names them. A reader still
  // loading them finds one missing and starts over with the new manifest.
  std::vector<std::string_view> current;
  for (const auto& entry : manifest.shards) current.push_back(entry.file);
  detail::remove_replaced_shards(kFormat, target, old_files, current);
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
  const std::string name = detail::shard_label(where, i, manifest.shard_count(), entry.file);
  auto index = Index::load(file, mode);
  if (!index) return std::unexpected(detail::shard_load_error(kFormat, index.error(), file, name));
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
  const std::filesystem::path folder = detail::manifest_folder(path);
  return detail::load_manifest_set<IndexSet>(
      kFormat, path, load_restarts, single,
      [&](const std::vector<std::uint8_t>& bytes, bool& shard_failed) -> Result<IndexSet> {
        auto manifest = parse_index_set_manifest(bytes, where);
        if (!manifest) return std::unexpected(manifest.error());
        auto state = std::make_shared<State>();
        state->route = detail::ShardRouter(manifest->shard_count());
        state->shards.reserve(manifest->shard_count());
        bool every_fingerprint = true;
        ContentFingerprint sum;
        for (std::uint32_t i = 0; i < manifest->shard_count(); ++i) {
          auto shard = load_shard(*manifest, i, folder, where, mode);
          if (!shard) {
            shard_failed = true;
            return std::unexpected(shard.error());
          }
          if (const auto f = shard->content_fingerprint()) {
            sum += *f;
          } else {
            every_fingerprint = false;
          }
          state->size += shard->size();
          state->shards.push_back(std::move(*shard));
        }
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
      });
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
