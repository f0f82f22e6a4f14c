// The code the ABFS and ABXS manifests share (manifest_io.hpp).
#include "manifest_io.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

namespace abf::detail {

namespace {

Result<void> read_prefix(const ManifestFormat& format, int fd, std::uint8_t* out, std::size_t size,
                         const std::string& where) {
  return read_exact(fd, out, size, 0, where, format.truncated);
}

// A shard file name: a plain name in the manifest's folder.
std::string name_problem(std::string_view name) {
  if (name.empty() || name.size() > kMaxShardNameLength) return "is not 1..255 bytes long";
  if (name == "." || name == "..") return "is not a file name";
  if (name.find('/') != std::string_view::npos)
    return "holds a '/' (a shard is in the manifest's folder)";
  if (name.find('\0') != std::string_view::npos) return "holds a NUL byte";
  return {};
}

// The suffix ".<16 lower-case hex>.<5 digits><extension>", parsed: the
// build id's text and the number. Empty for a name of any other form.
struct SaveSuffix {
  std::string_view build_id;
  std::uint32_t number = 0;
};
std::optional<SaveSuffix> save_suffix(const ManifestFormat& format, std::string_view name) {
  const std::size_t length = format.shard_suffix_length();
  if (name.size() <= length) return std::nullopt;
  const std::string_view rest = name.substr(name.size() - length);
  if (rest[0] != '.' || rest[17] != '.' || !rest.ends_with(format.extension)) return std::nullopt;
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

// A name a write gave (this manifest's buildId in its suffix) carries its
// shard index: it must be the entry's own. Entries reordered after the
// write (a hand edit, a tool's bug) would otherwise route digests to
// another shard, whose "absent" is wrong for them. Names of any other form
// are not read.
std::string shard_number_problem(const ManifestFormat& format, std::string_view name,
                                 std::uint32_t index, std::uint64_t build_id) {
  const auto suffix = save_suffix(format, name);
  if (!suffix || suffix->build_id != plain_hex16(build_id) || suffix->number == index) return {};
  return "file name " + std::string(name) + " is that of shard " + std::to_string(suffix->number) +
         " of this " + std::string(format.write_verb) + ", not of shard " + std::to_string(index) +
         " (entries reordered?): its digests would be asked of the wrong " +
         std::string(format.shard_noun);
}

}  // namespace

bool has_magic(const ManifestFormat& format, std::span<const std::uint8_t> bytes) noexcept {
  return bytes.size() >= 4 && std::memcmp(bytes.data(), format.magic, 4) == 0;
}

Result<std::vector<std::uint8_t>> read_manifest_bytes(const ManifestFormat& format,
                                                      const std::filesystem::path& path) {
  const std::string where = path.string();
  auto file =
      open_regular_file(path, where, "a regular file, so not " + std::string(format.a_noun));
  if (!file) return std::unexpected(file.error());
  const Fd& fd = file->fd;
  const std::uint64_t size = file->size();
  std::vector<std::uint8_t> bytes(
      static_cast<std::size_t>(std::min<std::uint64_t>(size, kManifestHeaderSize)));
  if (auto ok = read_prefix(format, fd.get(), bytes.data(), bytes.size(), where); !ok) {
    return std::unexpected(ok.error());
  }
  if (!has_magic(format, bytes)) return bytes;
  if (size > format.max_bytes()) {
    return fail(format.invalid, where + ": file is " + std::to_string(size) +
                                    " bytes, more than any manifest can be (" +
                                    std::to_string(format.max_bytes()) + ")");
  }
  bytes.resize(static_cast<std::size_t>(size));
  if (auto ok = read_prefix(format, fd.get(), bytes.data(), bytes.size(), where); !ok) {
    return std::unexpected(ok.error());
  }
  return bytes;
}

Result<bool> is_manifest_file(const ManifestFormat& format, const std::filesystem::path& path) {
  auto file = open_for_reading(path, path.string());
  if (!file) return std::unexpected(file.error());
  if (!S_ISREG(file->info.st_mode) || file->size() < 4) return false;
  std::uint8_t magic[4] = {};
  if (auto ok = read_prefix(format, file->fd.get(), magic, 4, path.string()); !ok) {
    return std::unexpected(ok.error());
  }
  return has_magic(format, magic);
}

Result<void> check_manifest_start(const ManifestFormat& format, std::span<const std::uint8_t> bytes,
                                  const std::string& where) {
  if (bytes.size() < kManifestHeaderSize) {
    return fail(format.truncated, where + ": file is " + std::to_string(bytes.size()) +
                                      " bytes, shorter than the 128-byte " +
                                      std::string(format.magic, 4) + " manifest header");
  }
  if (!has_magic(format, bytes)) {
    return fail(format.invalid, where + ": not an " + std::string(format.magic, 4) + " " +
                                    std::string(format.noun) + " (bad magic)");
  }
  return {};
}

Result<ManifestFrame> check_manifest_frame(const ManifestFormat& format,
                                           std::span<const std::uint8_t> bytes,
                                           const std::string& where) {
  const ByteReader p(bytes);
  const std::uint64_t size = bytes.size();
  ManifestFrame frame{p.at<std::uint64_t>(format.header_checksum_offset), 0, p.sub(0, 0)};
  if (const auto actual =
          header_checksum_zeroed<kManifestHeaderSize>(p.data(), format.header_checksum_offset);
      actual != frame.header_checksum) {
    return fail(format.checksum, where + ": manifest header checksum mismatch (stored " +
                                     hex64(frame.header_checksum) + ", computed " + hex64(actual) +
                                     ")");
  }
  const auto body_length = p.at<std::uint64_t>(format.body_length_offset);
  if (body_length > format.max_body_length) {
    return fail(format.invalid, where + ": body length " + std::to_string(body_length) +
                                    " is more than any manifest's (" +
                                    std::to_string(format.max_body_length) + ")");
  }
  const std::uint64_t expected_size = kManifestHeaderSize + body_length;
  if (size < expected_size) {
    return fail(format.truncated, where + ": file is " + std::to_string(size) +
                                      " bytes, the manifest header promises " +
                                      std::to_string(expected_size));
  }
  if (size > expected_size) {
    return fail(format.invalid, where + ": file is " + std::to_string(size) + " bytes, " +
                                    std::to_string(size - expected_size) +
                                    " more than the manifest header promises");
  }
  frame.body = p.sub(kManifestHeaderSize, static_cast<std::size_t>(body_length));
  frame.body_checksum = p.at<std::uint64_t>(format.body_checksum_offset);
  if (const auto actual = xxh3(frame.body.data(), frame.body.size());
      actual != frame.body_checksum) {
    return fail(format.checksum, where + ": manifest body checksum mismatch (stored " +
                                     hex64(frame.body_checksum) + ", computed " + hex64(actual) +
                                     ")");
  }
  return frame;
}

Result<std::vector<ManifestEntry>> parse_manifest_entries(
    const ManifestFormat& format, ByteReader table, std::uint32_t shard_count,
    std::uint64_t body_length, std::uint64_t build_id,
    const std::function<std::string(const ManifestEntry&)>& check_entry, const std::string& where) {
  const auto invalid = [&](const std::string& what) {
    return fail(format.invalid, where + ": " + what);
  };
  const std::uint64_t entries_length = std::uint64_t{shard_count} * kManifestEntrySize;
  if (table.size() < entries_length) {
    return invalid("body of " + std::to_string(body_length) + " bytes cannot hold " +
                   std::to_string(shard_count) + " shard entries of 32 bytes");
  }
  const ByteReader names = table.sub(static_cast<std::size_t>(entries_length),
                                     table.size() - static_cast<std::size_t>(entries_length));
  const std::uint64_t names_length = names.size();
  std::uint64_t name_offset = 0;
  std::vector<ManifestEntry> entries(shard_count);
  for (std::uint32_t i = 0; i < shard_count; ++i) {
    const ByteReader e = table.sub(std::size_t{i} * kManifestEntrySize, kManifestEntrySize);
    const std::string entry = "shard entry " + std::to_string(i);
    ManifestEntry& shard = entries[i];
    for (std::size_t f = 0; f < 3; ++f) shard.field[f] = e.at<std::uint64_t>(8 * f);
    const auto name_length = e.at<std::uint32_t>(24);
    if (e.at<std::uint32_t>(28) != 0) return invalid(entry + ": reserved bytes are not zero");
    if (auto problem = check_entry(shard); !problem.empty()) {
      return invalid(entry + ": " + problem);
    }
    if (name_length < 1 || name_length > kMaxShardNameLength) {
      return invalid(entry + ": name length " + std::to_string(name_length) + " is outside 1..255");
    }
    if (name_offset + name_length > names_length) {
      return invalid(entry + ": its name runs past the end of the manifest");
    }
    shard.file.assign(
        reinterpret_cast<const char*>(names.data() + static_cast<std::size_t>(name_offset)),
        name_length);
    name_offset += name_length;
    if (auto problem = name_problem(shard.file); !problem.empty()) {
      return invalid(entry + ": file name " + problem);
    }
    if (auto problem = shard_number_problem(format, shard.file, i, build_id); !problem.empty()) {
      return invalid(entry + ": " + problem);
    }
  }
  if (name_offset != names_length) {
    return invalid(std::to_string(names_length - name_offset) +
                   " bytes after the last shard's name");
  }
  return entries;
}

Result<void> check_distinct_names(const ManifestFormat& format,
                                  const std::vector<std::string_view>& files,
                                  const std::string& where) {
  std::set<std::string_view> seen;
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (!seen.insert(files[i]).second) {
      return fail(format.invalid, where + ": shard entry " + std::to_string(i) + " names " +
                                      std::string(files[i]) + ", as an earlier shard does");
    }
  }
  return {};
}

std::string shard_file_name(const ManifestFormat& format, const std::string& base,
                            std::uint64_t build_id, std::uint32_t i) {
  char index[16];
  std::snprintf(index, sizeof index, "%05u", i);
  return base + "." + plain_hex16(build_id) + "." + index + std::string(format.extension);
}

bool is_shard_name_of(const ManifestFormat& format, std::string_view name, std::string_view base) {
  return name.size() == base.size() + format.shard_suffix_length() && name.starts_with(base) &&
         save_suffix(format, name).has_value();
}

std::filesystem::path manifest_folder(const std::filesystem::path& manifest) {
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

Result<ManifestTarget> resolve_manifest_target(const ManifestFormat& format,
                                               const std::filesystem::path& path,
                                               const std::string& where) {
  ManifestTarget target;
  std::error_code ec;
  target.path = std::filesystem::weakly_canonical(path, ec);
  if (ec) target.path = path;
  const auto status = std::filesystem::status(target.path, ec);
  target.exists = !ec && std::filesystem::exists(status);
  if (target.exists && !std::filesystem::is_regular_file(status)) {
    return fail(ErrorCode::kIo, where + ": is not a regular file; " + std::string(format.set_noun) +
                                    "'s manifest must be one");
  }
  target.folder = target.path.parent_path();
  target.base = target.path.filename().string();
  const std::size_t suffix = format.shard_suffix_length();
  if (target.base.size() + suffix > kMaxShardNameLength) {
    return fail(ErrorCode::kInvalidArgument,
                where + ": a manifest name of " + std::to_string(target.base.size()) +
                    " bytes leaves no room for its shards' names (at most " +
                    std::to_string(kMaxShardNameLength - suffix) + ")");
  }
  return target;
}

void remove_replaced_shards(const ManifestFormat& format, const ManifestTarget& target,
                            const std::vector<std::string>& old_files,
                            const std::vector<std::string_view>& current_files) {
  const std::set<std::string_view> current(current_files.begin(), current_files.end());
  std::error_code ec;
  for (const auto& file : old_files) {
    if (current.contains(file) || !is_shard_name_of(format, file, target.base)) continue;
    std::filesystem::remove(target.folder / file, ec);
  }
}

std::string shard_label(const std::string& where, std::uint32_t i, std::uint32_t count,
                        const std::string& file) {
  return where + ": shard " + std::to_string(i) + " of " + std::to_string(count) + " (" + file +
         "): ";
}

Error shard_load_error(const ManifestFormat& format, const Error& error,
                       const std::filesystem::path& file, const std::string& label) {
  std::error_code ec;
  if (error.code == ErrorCode::kIo &&
      !std::filesystem::exists(std::filesystem::symlink_status(file, ec))) {
    return Error{format.shard_missing,
                 label + "missing: the manifest names " + file.string() + ", which does not exist"};
  }
  std::string message = error.message;
  const std::string prefix = file.string() + ": ";
  if (message.starts_with(prefix)) message.erase(0, prefix.size());
  return Error{error.code, label + message};
}

}  // namespace abf::detail
