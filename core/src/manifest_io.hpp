// What the two set manifests share (ABFS filter sets, docs/protocol.md
// section 13, in filter_set_io.cpp; ABXS index sets, section 14, in
// index_set.cpp): reading a manifest file, its frame (magic, header and
// body checksums, body length), the table of 32-byte shard entries and
// their names, the shard file names a write gives, loading a shard file
// named by an entry, and loading a set that is replaced meanwhile. Each
// format keeps its own fields and rules; this is the part that is the same.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abf/error.hpp"
#include "binary_format.hpp"

namespace abf::detail {

inline constexpr std::size_t kManifestHeaderSize = 128;
inline constexpr std::size_t kManifestEntrySize = 32;
inline constexpr std::size_t kMaxShardNameLength = 255;  // NAME_MAX
// Loads that meet a replaced set start over at most this many times.
inline constexpr int kMaxManifestLoadAttempts = 8;

// What tells one manifest format from the other where they share code.
struct ManifestFormat {
  const char* magic;            // 4 bytes: "ABFS", "ABXS"
  std::string_view noun;        // "filter-set manifest"
  std::string_view a_noun;      // "a filter-set manifest"
  std::string_view set_noun;    // "a filter set" (whose manifest a save writes)
  std::string_view write_verb;  // "save": "shard 3 of this save"
  std::string_view shard_noun;  // "filter": "asked of the wrong filter"
  std::string_view extension;   // of shard files: ".abf"
  std::size_t header_checksum_offset;
  std::size_t body_length_offset;
  std::size_t body_checksum_offset;
  std::uint64_t max_body_length;
  ErrorCode truncated;
  ErrorCode checksum;
  ErrorCode invalid;
  ErrorCode shard_missing;

  std::uint64_t max_bytes() const noexcept { return kManifestHeaderSize + max_body_length; }
  // ".<16 hex>.<5 digits><extension>" after the manifest's name.
  std::size_t shard_suffix_length() const noexcept { return 1 + 16 + 1 + 5 + extension.size(); }
};

// Whether `bytes` start with the format's magic.
bool has_magic(const ManifestFormat& format, std::span<const std::uint8_t> bytes) noexcept;

// The manifest's bytes: a regular file, at most format.max_bytes(). A file
// that does not start with the magic is not read on: its first (at most
// 128) bytes come back, and the caller, seeing no magic, treats it as what
// it is.
Result<std::vector<std::uint8_t>> read_manifest_bytes(const ManifestFormat& format,
                                                      const std::filesystem::path& path);

// Whether `path` is a regular file of at least 4 bytes that starts with the
// magic (false for anything else, whose own loader says what is wrong).
Result<bool> is_manifest_file(const ManifestFormat& format, const std::filesystem::path& path);

// A manifest's frame, checked: the stored checksums and the body.
struct ManifestFrame {
  std::uint64_t header_checksum = 0;
  std::uint64_t body_checksum = 0;
  ByteReader body;
};

// The rules before the format version: the length holds the header, and
// the magic.
Result<void> check_manifest_start(const ManifestFormat& format, std::span<const std::uint8_t> bytes,
                                  const std::string& where);

// The rules after the format version: the header checksum, the body
// length (and the file's), the body checksum.
Result<ManifestFrame> check_manifest_frame(const ManifestFormat& format,
                                           std::span<const std::uint8_t> bytes,
                                           const std::string& where);

// One 32-byte shard entry: three 64-bit fields, then its name.
struct ManifestEntry {
  std::uint64_t field[3] = {};
  std::string file;
};

// Parses the shard entries and names that fill `table` (the body after any
// format-specific prefix; `body_length` is the whole body's, for messages).
// `check_entry` says what is wrong with an entry's fields (empty: nothing),
// asked after its reserved bytes and before its name. Ends with the rule
// that the names fill the rest exactly; check_distinct_names comes after
// the format's own sum.
Result<std::vector<ManifestEntry>> parse_manifest_entries(
    const ManifestFormat& format, ByteReader table, std::uint32_t shard_count,
    std::uint64_t body_length, std::uint64_t build_id,
    const std::function<std::string(const ManifestEntry&)>& check_entry, const std::string& where);

// No two entries name one file.
Result<void> check_distinct_names(const ManifestFormat& format,
                                  const std::vector<std::string_view>& files,
                                  const std::string& where);

// "<base>.<build id as 16 hex>.<i as 5 digits><extension>".
std::string shard_file_name(const ManifestFormat& format, const std::string& base,
                            std::uint64_t build_id, std::uint32_t i);

// Whether `name` is one that a write of manifest `base` gives (the only
// names a write ever removes).
bool is_shard_name_of(const ManifestFormat& format, std::string_view name, std::string_view base);

// The manifest's folder, with symbolic links followed: where its shards are.
std::filesystem::path manifest_folder(const std::filesystem::path& manifest);

// A nonzero random build id.
Result<std::uint64_t> random_build_id();

// Where a write puts a manifest: the path with links followed, its folder
// and name, and whether a file is there now.
struct ManifestTarget {
  std::filesystem::path path;
  std::filesystem::path folder;
  std::string base;
  bool exists = false;
};
// kIo when something other than a regular file is there; kInvalidArgument
// when the name leaves no room for the shards'.
Result<ManifestTarget> resolve_manifest_target(const ManifestFormat& format,
                                               const std::filesystem::path& path,
                                               const std::string& where);

// Removes the files of `old_files` that the new manifest does not name and
// that are shard names a write of this manifest gives.
void remove_replaced_shards(const ManifestFormat& format, const ManifestTarget& target,
                            const std::vector<std::string>& old_files,
                            const std::vector<std::string_view>& current_files);

// "<where>: shard <i> of <count> (<file>): ", the start of every message
// about one shard of a loading set.
std::string shard_label(const std::string& where, std::uint32_t i, std::uint32_t count,
                        const std::string& file);

// A shard file's load error, told about the shard: `format.shard_missing`
// when the file is not there, else the error with the file's own name
// replaced by `label`.
Error shard_load_error(const ManifestFormat& format, const Error& error,
                       const std::filesystem::path& file, const std::string& label);

// Loads a set from its manifest at `path`, starting over when a shard
// fails to load and the manifest has changed since (a writer replaced the
// set and removed the old shards). `single(path)` loads a file that is no
// (longer a) manifest; `attempt(bytes, shard_failed)` loads the set of one
// manifest's bytes, setting `shard_failed` when its error came from a shard.
template <class T, class Single, class Attempt>
Result<T> load_manifest_set(const ManifestFormat& format, const std::filesystem::path& path,
                            std::atomic<std::uint64_t>& restarts, Single&& single,
                            Attempt&& attempt) {
  for (int tries = 0; tries < kMaxManifestLoadAttempts; ++tries) {
    auto bytes = read_manifest_bytes(format, path);
    if (!bytes) return std::unexpected(bytes.error());
    if (!has_magic(format, *bytes)) return single();  // replaced by a plain file meanwhile
    bool shard_failed = false;
    Result<T> loaded = attempt(*bytes, shard_failed);
    if (loaded || !shard_failed) return loaded;
    // A writer may have replaced the set (and removed these shards) while
    // they were read: then start over with its manifest.
    auto now = read_manifest_bytes(format, path);
    if (!now || *now == *bytes) return loaded;
    restarts.fetch_add(1, std::memory_order_relaxed);
  }
  return fail(format.shard_missing, path.string() + ": the set was replaced " +
                                        std::to_string(kMaxManifestLoadAttempts) +
                                        " times while it was being loaded; try again");
}

}  // namespace abf::detail
