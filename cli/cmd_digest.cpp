// abf digest: SHA-256 of files, printed exactly as GNU sha256sum prints them
// (escaped names included, --tag lines too), so real artifacts feed straight
// into `abf build` and `abf query`, and `sha256sum -c` checks the output;
// `abf digest -c` checks it too, as sha256sum -c does.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <set>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct DigestOptions {
  std::vector<std::string> files;
  bool zero = false;
  bool json = false;
  bool tag = false;
  bool check = false;
  bool quiet = false;
  bool status = false;
  bool recursive = false;    // -r: the files under each directory named
  bool dereference = false;  // -L: follow symbolic links met in the walk
};

// The walk of `abf digest -r`: calls `visit` for every regular file under
// `dir`, in sorted order (each folder's names bytewise, a folder's files and
// subfolders together, depth first), as "<dir>/<name>". Symbolic links met
// are skipped unless `follow` (then a link to a folder is walked, and one
// that leads back to a folder being walked is reported as a loop);
// FIFOs, sockets and devices are skipped (hashing a FIFO would wait for a
// writer). A folder that cannot be read is reported and the walk goes on;
// the result is then false.
bool walk(const std::string& dir, bool follow, std::set<std::pair<dev_t, ino_t>>& open_dirs,
          const std::function<void(const std::string&)>& visit) {
  DIR* handle = ::opendir(dir.c_str());
  if (handle == nullptr) {
    report("digest", Error{ErrorCode::kIo, dir + ": cannot read the folder: " +
                                               std::strerror(errno)});
    return false;
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(handle)) {
    const std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  const int read_errno = errno;
  ::closedir(handle);
  bool ok = true;
  if (read_errno != 0) {
    report("digest", Error{ErrorCode::kIo, dir + ": cannot read the folder: " +
                                               std::strerror(read_errno)});
    ok = false;
  }
  std::ranges::sort(names);
  const std::string prefix = dir.ends_with('/') ? dir : dir + "/";
  for (const std::string& name : names) {
    const std::string path = prefix + name;
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0) {
      report("digest", Error{ErrorCode::kIo, path + ": " + std::strerror(errno)});
      ok = false;
      continue;
    }
    if (S_ISLNK(info.st_mode)) {
      if (!follow) continue;
      if (::stat(path.c_str(), &info) != 0) {
        report("digest", Error{ErrorCode::kIo, path + ": a broken symbolic link: " +
                                                   std::strerror(errno)});
        ok = false;
        continue;
      }
    }
    if (S_ISDIR(info.st_mode)) {
      const std::pair<dev_t, ino_t> id{info.st_dev, info.st_ino};
      if (!open_dirs.insert(id).second) {
        report("digest", Error{ErrorCode::kIo,
                               path + ": a symbolic link back to a folder being walked "
                                      "(a file system loop); not followed"});
        ok = false;
        continue;
      }
      ok = walk(path, follow, open_dirs, visit) && ok;
      open_dirs.erase(id);
    } else if (S_ISREG(info.st_mode)) {
      visit(path);
    }
  }
  return ok;
}

// The record `sha256sum -z` prints: the name as it is (never escaped, so
// it may hold newlines), then a NUL; build, query and the others read it
// back (parse_digest_record).
std::string sha256sum_zero_record(const Digest& digest, std::string_view name) {
  std::string record = digest.hex();
  record += "  ";
  record += name;
  record += '\0';
  return record;
}

// A name as GNU coreutils 9.1 prints it in a line: with \\, \n and \r for a
// backslash, newline and carriage return, and whether it needed that (the
// line then starts with a backslash).
std::pair<std::string, bool> escaped_name(std::string_view name) {
  const bool escape = name.find_first_of("\\\n\r") != std::string_view::npos;
  if (!escape) return {std::string(name), false};
  std::string out;
  for (const char c : name) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return {out, true};
}

// The line `sha256sum --tag` prints, `SHA256 (<name>) = <hex>`: escaped as
// sha256sum_line is, or, with -z, the name as it is and a NUL at the end.
std::string tag_line(const Digest& digest, std::string_view name, bool zero) {
  if (zero) return "SHA256 (" + std::string(name) + ") = " + digest.hex() + '\0';
  const auto [text, escaped] = escaped_name(name);
  return (escaped ? "\\" : "") + ("SHA256 (" + text + ") = " + digest.hex()) + "\n";
}

int run_digest(const DigestOptions& options) {
  // No files: standard input, named "-" as sha256sum names it.
  const std::vector<std::string> files =
      options.files.empty() ? std::vector<std::string>{"-"} : options.files;
  int status = kExitOk;
  nlohmann::ordered_json listed = nlohmann::ordered_json::array();
  std::optional<Error> write_failed;
  // Hashes one file and prints its line; false once a write failed.
  const auto hash = [&](const std::string& file) -> bool {
    Result<Digest> digest;
    {
      const Activity activity("hashing " + file);
      digest = sha256_file(file == "-" ? "/dev/stdin" : file);
    }
    if (!digest) {
      std::string& message = digest.error().message;
      if (file == "-" && message.starts_with("/dev/stdin")) message.replace(0, 10, "<stdin>");
      status = report("digest", digest.error());  // go on with the others, like sha256sum
      return true;
    }
    if (options.json) {
      listed.push_back({{"file", file}, {"sha256", digest->hex()}});
      return true;
    }
    // Each line as soon as its file is hashed, as sha256sum does; a failed
    // write ends the command.
    const std::string line = options.tag    ? tag_line(*digest, file, options.zero)
                             : options.zero ? sha256sum_zero_record(*digest, file)
                                            : sha256sum_line(*digest, file);
    if (auto wrote = write_stdout(line); !wrote) {
      write_failed = wrote.error();
      return false;
    }
    return true;
  };
  for (const auto& file : files) {
    struct stat info {};
    const bool is_dir = file != "-" && ::stat(file.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
    if (!is_dir) {
      if (!hash(file)) return report("digest", *write_failed);
      continue;
    }
    if (!options.recursive) {
      status = report("digest", Error{ErrorCode::kIo, file + ": is a directory (abf digest -r "
                                                             "hashes the files under it)"});
      continue;
    }
    // A folder named on the command line is walked even through a link.
    std::set<std::pair<dev_t, ino_t>> open_dirs{{info.st_dev, info.st_ino}};
    bool writing = true;
    const bool walked = walk(file, options.dereference, open_dirs, [&](const std::string& path) {
      if (writing) writing = hash(path);
    });
    if (!writing) return report("digest", *write_failed);
    if (!walked) status = kExitFailure;
  }
  if (options.json) {
    const nlohmann::ordered_json json = {{"files", listed}};
    if (auto wrote = write_stdout(json_text(json)); !wrote) return report("digest", wrote.error());
  }
  return status;
}

// ------------------------------------------------------------------ --check

// One line of a checksum file: the file it names and the digest it should
// have, or why it is not such a line.
struct CheckLine {
  std::string name;
  Digest digest;
};

// Undoes escaped_name: only \\, \n and \r (GNU's filename_unescape).
std::optional<std::string> unescape_name(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) return std::nullopt;
    if (text[i] == '\\') {
      out += '\\';
    } else if (text[i] == 'n') {
      out += '\n';
    } else if (text[i] == 'r') {
      out += '\r';
    } else {
      return std::nullopt;
    }
  }
  return out;
}

// `<hex>  <name>`, `<hex> *<name>` or `SHA256 (<name>) = <hex>`, escaped
// (a leading backslash) in a line, as they are in a NUL-terminated record.
// Nothing when the line is none of those.
std::optional<CheckLine> parse_check_line(std::string_view line, bool record) {
  if (!record && line.ends_with('\r')) line.remove_suffix(1);
  const bool escaped = !record && line.starts_with('\\');
  if (escaped) line.remove_prefix(1);
  std::string_view name;
  std::string_view hex;
  if (line.starts_with("SHA256 (") || line.starts_with("SHA256(")) {
    line.remove_prefix(line.find('(') + 1);
    const auto close = line.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    name = line.substr(0, close);
    std::string_view rest = line.substr(close + 1);
    if (rest.starts_with(' ')) rest.remove_prefix(1);
    if (!rest.starts_with('=')) return std::nullopt;
    rest.remove_prefix(1);
    if (rest.starts_with(' ')) rest.remove_prefix(1);
    hex = rest;
  } else {
    if (line.size() < 2 * Digest::kSize + 3 || line[2 * Digest::kSize] != ' ' ||
        (line[2 * Digest::kSize + 1] != ' ' && line[2 * Digest::kSize + 1] != '*')) {
      return std::nullopt;
    }
    hex = line.substr(0, 2 * Digest::kSize);
    name = line.substr(2 * Digest::kSize + 2);
  }
  auto digest = parse_hex_digest(hex);
  if (!digest || name.empty()) return std::nullopt;
  CheckLine parsed{std::string(name), *digest};
  if (escaped) {
    auto unescaped = unescape_name(name);
    if (!unescaped) return std::nullopt;
    parsed.name = std::move(*unescaped);
  }
  return parsed;
}

// Verifies the files one checksum file lists, as `sha256sum -c` does:
// "<name>: OK" or "<name>: FAILED" on stdout (--quiet: failures only;
// --status: nothing), then the warnings on stderr. Returns false when any
// file failed or could not be read, or any line was not a checksum line.
Result<bool> check_file(const std::string& list, const DigestOptions& options) {
  std::string text;
  if (list == "-") {
    auto bytes = read_standard_input(std::uint64_t{1} << 30, "a checksum list");
    if (!bytes) return std::unexpected(bytes.error());
    text.assign(bytes->begin(), bytes->end());
  } else {
    std::ifstream in(list, std::ios::binary);
    if (!in) return fail(ErrorCode::kIo, list + ": cannot open: " + std::strerror(errno));
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    if (in.bad()) return fail(ErrorCode::kIo, list + ": read error");
  }
  const std::string shown = list == "-" ? "<stdin>" : list;
  // NUL-terminated records (sha256sum -z, abf digest -z) where the list
  // holds a NUL, or -z says so; lines otherwise.
  const bool records = options.zero || text.find('\0') != std::string::npos;
  const char end = records ? '\0' : '\n';
  std::uint64_t mismatched = 0;
  std::uint64_t unreadable = 0;
  std::uint64_t improper = 0;
  std::uint64_t proper = 0;
  std::uint64_t number = 0;
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t stop = std::min(text.find(end, at), text.size());
    std::string_view line(text.data() + at, stop - at);
    at = stop + 1;
    ++number;
    if (records) {
      while (!line.empty() && (line.front() == '\n' || line.front() == '\r')) line.remove_prefix(1);
      while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
    }
    if (is_blank_record(line)) continue;
    const auto parsed = parse_check_line(line, records);
    if (!parsed) {
      ++improper;
      if (!options.status) {
        std::cerr << "abf digest: " << shown << ": " << (records ? "record " : "line ") << number
                  << ": not a SHA-256 checksum line (<hex>  <name>, or SHA256 (<name>) = <hex>)\n";
      }
      continue;
    }
    ++proper;
    // The name as sha256sum -c (coreutils 9.1) prints it: escaped, behind a
    // backslash, only when it holds a newline.
    const auto [printed, escaped] = parsed->name.find('\n') == std::string::npos
                                        ? std::pair<std::string, bool>{parsed->name, false}
                                        : escaped_name(parsed->name);
    const std::string prefix = (escaped ? "\\" : "") + printed + ": ";
    Result<Digest> actual;
    {
      const Activity activity("hashing " + parsed->name);
      actual = sha256_file(parsed->name == "-" ? "/dev/stdin" : parsed->name);
    }
    std::string verdict;
    if (!actual) {
      ++unreadable;
      if (!options.status) report("digest", actual.error());
      verdict = prefix + "FAILED open or read\n";
    } else if (*actual != parsed->digest) {
      ++mismatched;
      verdict = prefix + "FAILED\n";
    } else if (!options.quiet) {
      verdict = prefix + "OK\n";
    }
    if (!options.status && !verdict.empty()) {
      if (auto wrote = write_stdout(verdict); !wrote) return std::unexpected(wrote.error());
    }
  }
  if (!options.status) {
    if (proper == 0) {
      std::cerr << "abf digest: " << shown
                << ": no properly formatted SHA-256 checksum lines found\n";
    }
    if (improper != 0) {
      std::cerr << "abf digest: WARNING: " << counted(improper, "line")
                << (improper == 1 ? " is" : " are") << " improperly formatted\n";
    }
    if (unreadable != 0) {
      std::cerr << "abf digest: WARNING: " << counted(unreadable, "listed file")
                << " could not be read\n";
    }
    if (mismatched != 0) {
      std::cerr << "abf digest: WARNING: " << counted(mismatched, "computed checksum")
                << " did NOT match\n";
    }
  }
  return proper != 0 && improper == 0 && unreadable == 0 && mismatched == 0;
}

int run_check(const DigestOptions& options) {
  const std::vector<std::string> lists =
      options.files.empty() ? std::vector<std::string>{"-"} : options.files;
  if (std::ranges::count(lists, "-") > 1) {
    return usage_error("digest", "standard input (-) can be only one of the checksum lists");
  }
  bool all_ok = true;
  for (const auto& list : lists) {
    auto ok = check_file(list, options);
    if (!ok) {
      if (!options.status) report("digest", ok.error());
      all_ok = false;
      continue;
    }
    all_ok = all_ok && *ok;
  }
  return all_ok ? kExitOk : kExitFailure;
}

Command add_digest_command(CLI::App& root) {
  auto options = std::make_shared<DigestOptions>();
  CLI::App* app =
      root.add_subcommand("digest", "Print the SHA-256 of files, exactly as sha256sum prints it");
  app->footer(
      "Output lines `<hex>  <name>` feed straight into build and query, and `sha256sum -c`\n"
      "checks them: a name holding a backslash, newline or carriage return is written as\n"
      "GNU sha256sum writes it (the line starts with '\\', and those characters become \\\\,\n"
      "\\n and \\r). With no files, or a file -, standard input is hashed, named -.\n"
      "A file that cannot be read is reported on stderr and the others are still hashed;\n"
      "the exit status is then 1.\n"
      "-z ends each line with a NUL instead of a newline and writes names as they are\n"
      "(sha256sum -z): build, query, dedup and catalog add read it back, names with\n"
      "newlines included.\n"
      "--tag prints BSD-style lines, SHA256 (<name>) = <hex>, which every command reads too.\n"
      "-r (--recursive) hashes the regular files under each folder named, walked in sorted\n"
      "order (each folder's names bytewise, depth first), named <folder>/<path>; symbolic\n"
      "links met in the walk are skipped unless -L (--dereference) follows them (a link back\n"
      "to a folder being walked is reported as a loop); FIFOs, sockets and devices are\n"
      "skipped. Without -r a folder is an error (exit 1; the other files are still hashed).\n"
      "--check (-c) reads lists of either form (or -z records; a list holding a NUL is read\n"
      "as records) and hashes each file named: `<name>: OK` or `<name>: FAILED` (`FAILED\n"
      "open or read` for a file that cannot be read, reported on stderr), then warnings\n"
      "on stderr with the counts. Exit 1 if any file failed or could not be read, or any\n"
      "non-blank line is not a checksum line (sha256sum -c --strict), or a list has none.\n"
      "Examples:\n"
      "  abf digest blobs/* > catalog.txt\n"
      "  abf digest -r blobs | abf dedup --index known.abfx --lines   (the new files)\n"
      "  tar -cf - dir | abf digest\n"
      "  abf digest a.bin b.bin --json\n"
      "  abf digest -z blobs/* | abf build -n 1000000 -p 0.001 -o c.abf\n"
      "  abf digest --tag blobs/* > SHA256SUMS && abf digest -c --quiet SHA256SUMS");
  app->add_option("files", options->files,
                  "Files to hash, or with --check the checksum lists (- for standard input;\n"
                  "default: standard input)");
  CLI::Option* zero = app->add_flag(
      "-z,--zero", options->zero,
      "End each line with NUL, not newline, and leave names unescaped (sha256sum -z);\n"
      "with --check, the lists hold NUL-terminated records");
  CLI::Option* tag = app->add_flag("--tag", options->tag,
                                   "BSD-style lines, SHA256 (<name>) = <hex> (sha256sum --tag)");
  CLI::Option* check =
      app->add_flag("-c,--check", options->check,
                    "Read checksum lists (the files, or standard input) and verify the files they\n"
                    "name: <name>: OK or <name>: FAILED; exit 1 on any failure (sha256sum -c)");
  app->add_flag("--json", options->json,
                "One JSON object, {\"files\": [{\"file\", \"sha256\"}...]}, instead of lines")
      ->excludes(zero)
      ->excludes(tag)
      ->excludes(check);
  tag->excludes(check);
  CLI::Option* recursive =
      app->add_flag("-r,--recursive", options->recursive,
                    "Hash the regular files under each folder named, in sorted order")
          ->excludes(check);
  app->add_flag("-L,--dereference", options->dereference,
                "With -r: follow symbolic links met in the walk (default: skip them)")
      ->needs(recursive);
  app->add_flag("--quiet", options->quiet, "With --check: print no OK lines, only failures")
      ->needs(check);
  app->add_flag("--status", options->status,
                "With --check: print nothing; the exit status says whether all matched")
      ->needs(check);
  return {app, [options] { return options->check ? run_check(*options) : run_digest(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(40, add_digest_command);

}  // namespace abf::cli
