// The same-file rule (common.hpp, CommandFiles): the files a command reads
// or holds, the files it writes, and the first clash between them.
#include <sys/stat.h>

#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "abf/filter_set.hpp"
#include "abf/index_set.hpp"
#include "common.hpp"

namespace abf::cli {

namespace fs = std::filesystem;

struct CommandFiles::Entry {
  // How a message names it: "--snapshot c.abf", "shard 1 of 3 of --snapshot
  // c.abfs (c.abfs.<id>.00001.abf)", "the write-ahead log of the catalog
  // --db c.db (c.db-wal)".
  std::string label;
  // The canonical paths it has or will have (two for a catalog's companion
  // named through a symbolic link: beside the link and beside its target).
  std::vector<std::string> paths;
  // The path as named, absolute, its folder canonical but the name itself
  // not followed: where SQLite would look for a database's companion.
  std::string named;
  // Device and inode, when it exists as a regular file.
  std::optional<std::pair<dev_t, ino_t>> identity;
  // `paths` are catalogs: the entry is every super-journal name beside them.
  bool super_journal = false;
  // A shard that writing a set removes (an output), not one it writes.
  bool removed = false;
  // One of the files SQLite keeps beside a catalog (add_catalog).
  bool companion = false;
};

namespace {

// The file a read or an AtomicFile write of `path` reaches: symbolic links
// followed (at most 40, as the kernel does; a dangling one to its target),
// then absolute and canonical as far as it exists.
std::string resolve(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec) p = path;
  for (int links = 0; links < 40; ++links) {
    const fs::file_status status = fs::symlink_status(p, ec);
    if (ec || !fs::is_symlink(status)) break;
    const fs::path target = fs::read_symlink(p, ec);
    if (ec) break;
    p = target.is_absolute() ? target : p.parent_path() / target;
  }
  fs::path canonical = fs::weakly_canonical(p, ec);
  return (ec ? p.lexically_normal() : canonical).string();
}

// Whether `path` is `base` followed by a super-journal suffix, as SQLite
// names them (vdbeaux.c: "-mj%06X9%02X"): "-mj", six hex digits, "9", two.
bool is_super_journal_of(std::string_view path, std::string_view base) {
  constexpr std::string_view kStart = "-mj";
  if (path.size() != base.size() + kStart.size() + 9 || !path.starts_with(base)) return false;
  path.remove_prefix(base.size());
  if (!path.starts_with(kStart)) return false;
  path.remove_prefix(kStart.size());
  const auto hex = [](char c) {
    return std::isdigit(static_cast<unsigned char>(c)) != 0 || (c >= 'A' && c <= 'F');
  };
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (i == 6 ? path[i] != '9' : !hex(path[i])) return false;
  }
  return true;
}

// The files SQLite keeps beside a database P, by suffix
// (https://sqlite.org/tempfiles.html).
constexpr std::pair<std::string_view, std::string_view> kCompanions[] = {
    {"-wal", "the write-ahead log"},
    {"-shm", "the shared-memory index"},
    {"-journal", "the rollback journal"},
};

// Whether `path` is a regular file that starts as an SQLite database does.
bool is_sqlite_database(const std::string& path) {
  constexpr std::string_view kMagic{"SQLite format 3\0", 16};
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode)) return false;
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  return in.read(head, sizeof head) && std::string_view(head, sizeof head) == kMagic;
}

// When `path` is a companion of an SQLite database that exists (P-wal,
// P-shm, P-journal, P-mjXXXXXX9XX beside a database P): what it is, "the
// write-ahead log of the SQLite database c.db". Writing one loses what the
// database keeps there (committed versions, a rollback), whatever command
// writes it: so no output may be one, database read or not.
std::optional<std::string> sqlite_companion(const std::string& path) {
  std::optional<std::pair<std::string, std::string>> found;  // database, what
  for (const auto& [suffix, what] : kCompanions) {
    if (path.size() > suffix.size() && path.ends_with(suffix)) {
      found = std::pair(path.substr(0, path.size() - suffix.size()), std::string(what));
    }
  }
  const std::size_t mj = path.rfind("-mj");
  if (!found && mj != std::string::npos && mj > 0 &&
      is_super_journal_of(path, std::string_view(path).substr(0, mj))) {
    found = std::pair(path.substr(0, mj), std::string("a super-journal"));
  }
  if (!found || !is_sqlite_database(found->first)) return std::nullopt;
  return found->second + " of the SQLite database " + found->first;
}

bool same_file(const CommandFiles::Entry& a, const CommandFiles::Entry& b) {
  if (a.identity && b.identity && *a.identity == *b.identity) return true;
  if (a.super_journal && b.super_journal) return false;  // two name patterns: never one file
  for (const std::string& x : a.paths) {
    for (const std::string& y : b.paths) {
      if (a.super_journal   ? is_super_journal_of(y, x)
          : b.super_journal ? is_super_journal_of(x, y)
                            : x == y) {
        return true;
      }
    }
  }
  return false;
}

// An entry for `path`; false when there is nothing to compare: "-" or "",
// or `written` and an existing file that is not a regular one.
bool make_entry(std::string label, const std::string& path, bool written,
                CommandFiles::Entry& entry) {
  if (path.empty() || path == "-") return false;
  entry.label = std::move(label);
  entry.paths = {resolve(path)};
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec);
  if (ec) {
    entry.named = entry.paths.front();
  } else {
    const fs::path folder = fs::weakly_canonical(absolute.parent_path(), ec);
    entry.named = (ec ? absolute.lexically_normal() : folder / absolute.filename()).string();
  }
  struct stat info {};
  if (::stat(entry.paths.front().c_str(), &info) == 0) {
    if (S_ISREG(info.st_mode)) {
      entry.identity = std::pair(info.st_dev, info.st_ino);
    } else if (written) {
      return false;  // written in place (a device, a FIFO): it replaces nothing
    }
  }
  return true;
}

std::string option_and_path(std::string_view option, const std::string& path) {
  return std::string(option) + " " + path;
}

}  // namespace

CommandFiles::CommandFiles() = default;
CommandFiles::~CommandFiles() = default;
CommandFiles::CommandFiles(CommandFiles&&) noexcept = default;
CommandFiles& CommandFiles::operator=(CommandFiles&&) noexcept = default;

void CommandFiles::add_file(std::string_view option, const std::string& path) {
  Entry entry;
  if (make_entry(option_and_path(option, path), path, false, entry)) {
    entries_.push_back(std::move(entry));
  }
}

void CommandFiles::add_filter_set(std::string_view option, const std::string& path, bool written) {
  Entry entry;
  if (!make_entry(option_and_path(option, path), path, written, entry)) return;
  entries_.push_back(std::move(entry));
  // A manifest names its shards; anything else is a snapshot (or will be
  // refused by its loader, before anything is written).
  if (!entries_.back().identity) return;  // no regular file: no manifest (and no FIFO opened)
  auto kind = filter_file_kind(path);
  if (!kind || *kind != FilterFileKind::kManifest) return;
  auto manifest = read_set_manifest(path);
  if (!manifest) return;
  const std::uint32_t count = manifest->shard_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    const SetManifestEntry& shard = manifest->shards[i];
    Entry file;
    const std::string name = set_shard_path(path, shard).string();
    const std::string label = "shard " + std::to_string(i) + " of " + std::to_string(count) +
                              " of " + option_and_path(option, path) + " (" + shard.file + ")";
    if (!make_entry(label, name, written, file)) continue;
    if (written && !file.identity) continue;  // not there: removing it destroys nothing
    file.removed = written;
    entries_.push_back(std::move(file));
  }
}

void CommandFiles::add_index_set(std::string_view option, const std::string& path, bool written) {
  Entry entry;
  if (!make_entry(option_and_path(option, path), path, written, entry)) return;
  entries_.push_back(std::move(entry));
  if (!entries_.back().identity) return;
  auto kind = index_file_kind(path);
  if (!kind || *kind != IndexFileKind::kManifest) return;
  // Its bytes, as many as a manifest can have (65,536 entries of 287 bytes
  // at most); a larger file is no manifest, and its loader says so.
  std::vector<std::uint8_t> bytes;
  {
    constexpr std::uintmax_t kMaxManifestBytes = std::uintmax_t{32} << 20;
    std::error_code ec;
    const std::uintmax_t size = fs::file_size(entries_.back().paths.front(), ec);
    if (ec || size > kMaxManifestBytes) return;
    std::ifstream in(entries_.back().paths.front(), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto manifest = parse_index_set_manifest(bytes, path);
  if (!manifest) return;
  // The shards are beside the manifest (its target, for a link).
  const fs::path folder = fs::path(entries_.back().paths.front()).parent_path();
  const std::uint32_t count = manifest->shard_count();
  for (std::uint32_t i = 0; i < count; ++i) {
    const IndexSetEntry& shard = manifest->shards[i];
    Entry file;
    const std::string name = (folder / shard.file).string();
    const std::string label = "shard " + std::to_string(i) + " of " + std::to_string(count) +
                              " of " + option_and_path(option, path) + " (" + shard.file + ")";
    if (!make_entry(label, name, written, file)) continue;
    if (written && !file.identity) continue;
    file.removed = written;
    entries_.push_back(std::move(file));
  }
}

void CommandFiles::add_catalog(std::string_view option, const std::string& path) {
  Entry entry;
  if (!make_entry(option_and_path(option, path), path, false, entry)) return;
  // SQLite names its files after the database's full path; where that path
  // is a symbolic link, after the link's target (unix VFS) or the link
  // itself (older versions): both count.
  std::vector<std::string> bases = entry.paths;
  if (entry.named != bases.front()) bases.push_back(entry.named);
  entries_.push_back(std::move(entry));
  const std::string named = option_and_path(option, path);
  for (const auto& [suffix, what] : kCompanions) {
    Entry file;
    file.companion = true;
    file.label =
        std::string(what) + " of the catalog " + named + " (" + path + std::string(suffix) + ")";
    for (const std::string& base : bases) file.paths.push_back(base + std::string(suffix));
    for (const std::string& name : file.paths) {
      struct stat info {};
      if (::stat(name.c_str(), &info) == 0 && S_ISREG(info.st_mode)) {
        file.identity = std::pair(info.st_dev, info.st_ino);
        break;
      }
    }
    entries_.push_back(std::move(file));
  }
  Entry super;
  super.label = "a super-journal of the catalog " + named + " (" + path + "-mjXXXXXX9XX)";
  super.paths = bases;
  super.super_journal = true;
  super.companion = true;
  entries_.push_back(std::move(super));
}

std::optional<std::string> CommandFiles::overwritten_input(const CommandFiles& outputs) const {
  // Every output against every input first (the message names both), then
  // against the companions of any SQLite database.
  for (const Entry& output : outputs.entries_) {
    for (const Entry& input : entries_) {
      if (!same_file(output, input)) continue;
      if (output.removed) {
        return output.label + ", which writing a set there removes, is the same file as " +
               input.label + ": removing it would destroy the input; name another file";
      }
      return output.label + " is the same file as " + input.label +
             ": writing it would destroy the input; name another file";
    }
  }
  for (const Entry& output : outputs.entries_) {
    if (output.companion) continue;  // a catalog's own, written by SQLite
    for (const std::string& name : {output.paths.front(), output.named}) {
      if (auto companion = sqlite_companion(name)) {
        return output.label + " is " + *companion + ": " +
               (output.removed ? "removing" : "writing") +
               " it would lose what the database keeps there; name another file";
      }
    }
  }
  return std::nullopt;
}

std::optional<std::string> output_overwrites_input(const CommandFiles& inputs,
                                                   std::string_view output_option,
                                                   const std::string& output) {
  CommandFiles outputs;
  outputs.add_file(output_option, output);
  return inputs.overwritten_input(outputs);
}

}  // namespace abf::cli
