#include "common.hpp"

#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>

namespace abf::cli {

namespace {

constexpr std::size_t kStageMemory = std::size_t{1} << 20;

std::string errno_text() { return std::strerror(errno); }

// Writes all of `text` to `fd`; errno is kept for the caller on failure.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t wrote = ::write(fd, text.data(), text.size());
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(wrote));
  }
  return true;
}

// Optimal string alignment distance (Levenshtein plus adjacent swaps), so
// "qurey" is one edit from "query".
std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
  for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

int report(std::string_view command, const Error& error) {
  std::cerr << "abf" << (command.empty() ? "" : " ") << command << ": " << error.describe() << '\n';
  return kExitFailure;
}

std::string usage_text(std::string_view command, std::string_view message) {
  const std::string name = command.empty() ? "abf" : "abf " + std::string(command);
  return name + ": " + std::string(message) + "\nRun '" + name + " --help' for more information.\n";
}

int usage_error(std::string_view command, std::string_view message) {
  std::cerr << usage_text(command, message);
  return kExitUsage;
}

std::optional<std::string> output_overwrites_input(
    const std::string& output,
    std::initializer_list<std::pair<std::string_view, std::string_view>> inputs,
    std::string_view output_option) {
  if (output.empty() || output == "-") return std::nullopt;
  for (const auto& [option, input] : inputs) {
    if (input.empty() || input == "-") continue;
    std::error_code ec;
    if (std::filesystem::equivalent(output, std::filesystem::path(input), ec) && !ec) {
      return std::string(output_option) + " " + output + " is the same file as " +
             std::string(option) + " " + std::string(input) +
             ": writing it would destroy the input; name another file";
    }
  }
  return std::nullopt;
}

std::optional<std::string> unknown_command(const CLI::App& root, int argc,
                                           const char* const* argv) {
  const CLI::App* app = &root;
  std::string path;
  for (int i = 1;; ++i) {
    const auto subcommands = app->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) return std::nullopt;
    // The commands a person is shown: hidden ones (no group) still run.
    std::string names;
    for (const CLI::App* sub : subcommands) {
      if (!sub->get_group().empty()) names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (i == argc) {
      if (app->get_require_subcommand_min() == 0) return std::nullopt;
      return usage_text(path, "a command is required: " + names);
    }
    const std::string_view word = argv[i];
    if (word.starts_with('-')) return std::nullopt;  // --help, --version: CLI11's
    const CLI::App* chosen = nullptr;
    for (const CLI::App* sub : subcommands) {
      if (sub->check_name(std::string(word))) chosen = sub;
    }
    if (chosen != nullptr) {
      app = chosen;
      path += (path.empty() ? "" : " ") + chosen->get_name();
      continue;
    }
    // The closest name: one or two edits away, or one the word begins.
    std::string best;
    std::size_t best_distance = 3;
    for (const CLI::App* sub : subcommands) {
      if (sub->get_group().empty()) continue;
      const std::string& name = sub->get_name();
      std::size_t distance = edit_distance(word, name);
      if (word.size() >= 2 && name.starts_with(word)) distance = std::min<std::size_t>(distance, 1);
      if (distance < best_distance) {
        best_distance = distance;
        best = name;
      }
    }
    std::string message = "unknown command '" + std::string(word) + "'";
    message += best.empty() ? "; the commands are " + names : "; did you mean '" + best + "'?";
    return usage_text(path, message);
  }
}

std::optional<std::string> unknown_option(const CLI::App& root) {
  // The command that was being parsed: the deepest subcommand given.
  const CLI::App* app = &root;
  std::string path;
  for (;;) {
    const auto parsed = app->get_subcommands([](const CLI::App* sub) { return sub->parsed(); });
    if (parsed.empty()) break;
    app = parsed.front();
    path += (path.empty() ? "" : " ") + app->get_name();
  }
  for (const std::string& word : root.remaining(/*recurse=*/true)) {
    if (word.size() < 2 || word[0] != '-') continue;  // "-" is a stream; words are positionals
    if (word[1] != '-' && (std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.')) {
      continue;  // a negative number, a value
    }
    const std::string name = word.substr(0, word.find('='));
    // The options a person is shown, in the command and the commands above
    // it (--help, and abf's --version).
    std::string best;
    std::size_t best_distance = 3;
    for (const CLI::App* owner = app; owner != nullptr; owner = owner->get_parent()) {
      for (const CLI::Option* option : owner->get_options()) {
        std::vector<std::string> names;
        for (const auto& lname : option->get_lnames()) names.push_back("--" + lname);
        for (const auto& sname : option->get_snames()) names.push_back("-" + sname);
        for (const auto& candidate : names) {
          // One letter from every other short option: no guess for "-q".
          if (name.size() == 2 || candidate.size() == 2) continue;
          std::size_t distance = edit_distance(name, candidate);
          if (name.size() >= 4 && candidate.starts_with(name)) {
            distance = std::min<std::size_t>(distance, 1);
          }
          if (distance < best_distance) {
            best_distance = distance;
            best = candidate;
          }
        }
      }
      if (owner == &root) break;
    }
    std::string message = "unknown option '" + name + "'";
    if (!best.empty()) message += "; did you mean '" + best + "'?";
    return usage_text(path, message);
  }
  return std::nullopt;
}

std::optional<std::string> backend_environment_error() {
  const char* forced = std::getenv("ABF_BACKEND");
  if (forced == nullptr || *forced == '\0') return std::nullopt;
  const std::vector<std::string> names = backend_names();
  if (std::ranges::find(names, std::string(forced)) != names.end()) return std::nullopt;
  // CLI::IsMember's words for --backend, so the two read alike.
  std::string list;
  for (const auto& name : names) list += (list.empty() ? "" : ",") + name;
  return "ABF_BACKEND: " + std::string(forced) + " not in {" + list + "}";
}

Result<void> write_stdout(std::string_view text) {
  if (!write_all(STDOUT_FILENO, text)) {
    return fail(ErrorCode::kIo, "<stdout>: write error: " + errno_text());
  }
  return {};
}

Result<void> flush_stdout() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed || std::ferror(stdout) || !std::cout) {
    return fail(ErrorCode::kIo,
                "<stdout>: write error: " +
                    (errno != 0 ? errno_text() : std::string("an earlier write failed")));
  }
  return {};
}

std::optional<std::string> binary_to_terminal(std::string_view output) {
  if (output != "-" || ::isatty(STDOUT_FILENO) != 1) return std::nullopt;
  return "refusing to write binary to a terminal (--output - is a snapshot); redirect or use "
         "-o FILE";
}

Result<void> write_report(std::string_view text, bool stdout_carries_data) {
  if (!stdout_carries_data) return write_stdout(text);
  std::cerr << text;
  std::cerr.flush();
  return {};
}

Error summary_error(std::string_view output, Error error) {
  const std::string name = output == "-" ? "<stdout>" : std::string(output);
  error.message = name + " was written, but printing the summary failed: " + error.message;
  return error;
}

std::string json_text(const nlohmann::ordered_json& json) {
  return json.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

namespace {

// filter_json's keys, and set_json's after them when `as_set`.
nlohmann::ordered_json summary_json(const FilterSummary& s, bool as_set) {
  const auto hex_or_null = [](bool present, const auto& value) {
    return present ? nlohmann::ordered_json(value.hex()) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json json;
  json["inserted_item_count"] = s.inserted_item_count;
  json["expected_item_count"] = s.expected_item_count;
  json["target_fpp"] = s.target_fpp;
  json["bit_count"] = s.bit_count;
  json["hash_count"] = s.hash_count;
  json["fill_ratio"] = s.fill_ratio;
  json["estimated_fpp"] = s.estimated_fpp;
  json["catalog_version"] = s.catalog_version;
  json["catalog_id"] = hex_or_null(!s.catalog_id.is_zero(), s.catalog_id);
  json["hash_protocol_version"] = s.hash_protocol_version;
  // The fingerprint names the key without revealing it.
  json["key_fingerprint"] = hex_or_null(s.keyed, s.key_fingerprint);
  json["content_fingerprint"] =
      s.content_fingerprint ? nlohmann::ordered_json(s.content_fingerprint->hex())
                            : nlohmann::ordered_json(nullptr);
  if (as_set) {
    json["shard_count"] = s.shard_count;
    json["shard_expected_item_count"] = s.shard_expected_item_count;
    json["shard_bit_count"] = s.shard_bit_count;
  }
  return json;
}

// filter_text after its layout: "fill 0.5, estimated false-positive rate ...".
void append_summary_text(std::ostringstream& out, const FilterSummary& s) {
  out << ", fill " << s.fill_ratio << ", estimated false-positive rate " << s.estimated_fpp
      << ", catalog version " << s.catalog_version << ", catalog id "
      << (s.catalog_id.is_zero() ? "none" : s.catalog_id.hex()) << ", hash protocol "
      << s.hash_protocol_version;
  if (s.keyed) out << " (key " << s.key_fingerprint.hex() << ")";
  out << ", content fingerprint " << (s.content_fingerprint ? s.content_fingerprint->hex() : "none");
}

}  // namespace

nlohmann::ordered_json filter_json(const Filter& filter) {
  return summary_json(summarize(filter), false);
}

std::string filter_text(const Filter& filter) {
  const FilterSummary s = summarize(filter);
  std::ostringstream out;
  out << "m = " << with_commas(s.bit_count) << " bits, k = " << s.hash_count;
  append_summary_text(out, s);
  return out.str();
}

nlohmann::ordered_json set_json(const FilterSet& set) {
  return summary_json(summarize(set), true);
}

std::string set_text(const FilterSet& set) {
  const FilterSummary s = summarize(set);
  std::ostringstream out;
  out << s.shard_count << (s.shard_count == 1 ? " shard" : " shards") << " of m = "
      << with_commas(s.shard_bit_count) << " bits (n_i = " << with_commas(s.shard_expected_item_count)
      << " each), k = " << s.hash_count;
  append_summary_text(out, s);
  return out.str();
}

Result<std::vector<std::uint8_t>> read_standard_input(std::uint64_t limit, std::string_view what) {
  std::vector<std::uint8_t> bytes;
  std::vector<std::uint8_t> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(STDIN_FILENO, buffer.data(), buffer.size());
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::kIo, "<stdin>: read error: " + errno_text());
    }
    if (got == 0) break;
    if (bytes.size() + static_cast<std::size_t>(got) > limit) {
      return fail(ErrorCode::kIo, "<stdin>: more than " + with_commas(limit) +
                                      " bytes, more than " + std::string(what) + " can be");
    }
    bytes.insert(bytes.end(), buffer.begin(), buffer.begin() + got);
  }
  return bytes;
}

Result<Filter> load_snapshot_argument(const std::string& path, const LoadOptions& options,
                                      SnapshotHeader* header, std::uint64_t* bytes) {
  if (path != "-") {
    auto filter = load_snapshot(path, options);
    if (!filter) return filter;
    if (header != nullptr) {
      // As stored: a formatVersion-1 file shows its own version and checksums.
      auto stored = read_snapshot_header(path);
      if (!stored) return std::unexpected(stored.error());
      *header = *stored;
    }
    if (bytes != nullptr) {
      std::error_code ec;
      *bytes = std::filesystem::file_size(path, ec);
    }
    return filter;
  }
  // The largest valid snapshot: the header and 2^30 bits. One byte more is
  // read, so a longer input is refused as trailing bytes by the parser.
  constexpr std::uint64_t kLargest = kSnapshotHeaderSize + (std::uint64_t{1} << 27);
  auto input = read_standard_input(kLargest + 1, "a snapshot");
  if (!input) return std::unexpected(input.error());
  auto named = [](Error error) {
    error.message = "<stdin>: " + error.message;
    return error;
  };
  if (input->size() >= 4 && std::memcmp(input->data(), "ABFS", 4) == 0) {
    return fail(ErrorCode::kInvalidArgument,
                "<stdin>: a filter set cannot come from standard input: its manifest names shard "
                "files beside it; give the manifest's path");
  }
  auto filter = parse_snapshot(*input, options.key);
  if (!filter) return std::unexpected(named(filter.error()));
  if (header != nullptr) {
    auto stored = parse_snapshot_header(*input);
    if (!stored) return std::unexpected(named(stored.error()));
    *header = *stored;
  }
  if (bytes != nullptr) *bytes = input->size();
  return filter;
}

Result<FilterSet> load_set_argument(const std::string& path, const LoadOptions& options) {
  if (path != "-") return load_filter_set(path, options);
  auto filter = load_snapshot_argument(path, options);
  if (!filter) return std::unexpected(filter.error());
  return FilterSet(std::move(*filter));
}

Result<bool> names_filter_set(const std::string& path) {
  if (path == "-") return false;
  auto kind = filter_file_kind(path);
  if (!kind) return std::unexpected(kind.error());
  return *kind == FilterFileKind::kManifest;
}

CLI::Validator shards_validator() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        if (value == "auto") return {};
        std::uint64_t count = 0;
        const char* end = value.data() + value.size();
        const auto [at, problem] = std::from_chars(value.data(), end, count);
        if (problem != std::errc() || at != end || count < 1 || count > kMaxShardCount) {
          return value + " is not auto or a shard count in 1..65536";
        }
        return {};
      },
      "S|auto");
}

Result<std::uint32_t> shard_count_from_option(const std::string& shards, const BloomSpec& spec) {
  if (shards == "auto") return choose_shard_count(spec);
  return static_cast<std::uint32_t>(std::stoul(shards));  // checked by shards_validator
}

// ------------------------------------------------------------------ DataOutput

DataOutput::DataOutput(DataOutput&& other) noexcept = default;
DataOutput& DataOutput::operator=(DataOutput&& other) noexcept = default;
DataOutput::~DataOutput() = default;

Result<DataOutput> DataOutput::create(const std::string& path) {
  DataOutput output;
  if (path != "-") {
    auto file = AtomicFile::create(path);
    if (!file) return std::unexpected(file.error());
    output.file_.emplace(std::move(*file));
    return output;
  }
  const char* tmpdir = std::getenv("TMPDIR");
  output.stage_.emplace(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp", "abf-stdout");
  output.buffer_.reserve(kStageMemory);
  return output;
}

Result<void> DataOutput::stage(std::string_view text) {
  auto staged = stage_->append(text);
  if (staged) return {};
  return fail(ErrorCode::kIo, "<stdout>: cannot stage the output in '" + stage_->dir() +
                                  "' (TMPDIR): " +
                                  (staged.error().step == SpillError::Step::kWrite ? "write error: "
                                                                                   : "") +
                                  staged.error().reason());
}

Result<void> DataOutput::write(std::string_view text) {
  if (file_) return file_->write(text);
  if (buffer_.size() + text.size() <= kStageMemory) {
    buffer_.append(text);
    return {};
  }
  if (!buffer_.empty()) {
    if (auto staged = stage(buffer_); !staged) return staged;
    buffer_.clear();
  }
  // A large piece goes to the file as it is, never through the buffer.
  if (text.size() >= kStageMemory) return stage(text);
  buffer_.append(text);
  return {};
}

Result<void> DataOutput::commit() {
  if (file_) return file_->commit();
  if (!stage_->created()) return write_stdout(buffer_);  // it all fit in memory
  if (!buffer_.empty()) {
    if (auto staged = stage(buffer_); !staged) return staged;
    buffer_.clear();
  }
  // The kernel copies the staged file to stdout (sendfile), never through
  // this process; where it refuses stdout (EINVAL: an O_APPEND file, some
  // devices) before copying anything, read and write do it.
  const std::uint64_t staged_bytes = stage_->size();
  off_t offset = 0;
  while (static_cast<std::uint64_t>(offset) < staged_bytes) {
    const std::uint64_t left = staged_bytes - static_cast<std::uint64_t>(offset);
    const ssize_t sent =
        ::sendfile(STDOUT_FILENO, stage_->fd(), &offset,
                   static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)));
    if (sent > 0) continue;
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EINVAL || errno == ENOSYS) && offset == 0) break;
    return fail(ErrorCode::kIo,
                "<stdout>: write error: " +
                    (sent < 0 ? errno_text() : std::string("staged output shrank")));
  }
  if (static_cast<std::uint64_t>(offset) == staged_bytes) return {};
  std::string chunk(kStageMemory, '\0');
  while (static_cast<std::uint64_t>(offset) < staged_bytes) {
    const auto count = static_cast<std::size_t>(
        std::min<std::uint64_t>(chunk.size(), staged_bytes - static_cast<std::uint64_t>(offset)));
    if (auto got = stage_->read(static_cast<std::uint64_t>(offset), std::span(chunk.data(), count));
        !got) {
      return fail(ErrorCode::kIo, "<stdout>: cannot reread the staged output: " +
                                      (got.error().code != 0 ? got.error().reason()
                                                             : std::string("it shrank")));
    }
    if (auto wrote = write_stdout(std::string_view(chunk.data(), count)); !wrote) return wrote;
    offset += static_cast<off_t>(count);
  }
  return {};
}

unsigned hardware_threads() {
  const int cores = tbb::info::default_concurrency();
  return cores > 0 ? static_cast<unsigned>(cores) : 1;
}

void add_backend_option(CLI::App& app, std::string& backend, std::string_view what) {
  const std::vector<std::string> names = backend_names();
  std::string list;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) list += i + 1 == names.size() ? " or " : ", ";
    list += names[i];
  }
  // Only the names here: whether each engine can run (a CUDA device probe)
  // is asked when the command runs, and shown by `abf --version`.
  app.add_option("--backend", backend,
                 std::string(what) + ": " + list +
                     " (default auto). ABF_BACKEND=NAME means\n--backend NAME where this is "
                     "auto, and fails as it does. `abf --version` lists\nwhich can run here")
      ->check(CLI::IsMember(names));
}

Result<Backend> backend_from_option(const std::string& name) {
  auto backend = parse_backend(name);
  if (!backend) return backend;
  // Resolving a batch of 0 asks only whether the request can run: a named
  // engine, or ABF_BACKEND's for auto.
  if (auto resolved = resolve_backend(*backend, 0); !resolved) {
    return std::unexpected(resolved.error());
  }
  return backend;
}

void add_key_file_option(CLI::App& app, std::string& path, std::string_view use) {
  app.add_option("--key-file", path,
                 "Secret key file (abf key generate; 32 hex digits or 16 bytes, mode 0600)\nto " +
                     std::string(use))
      ->check(not_a_stream("a key file, whose mode is checked before it is read"));
}

void add_busy_timeout_option(CLI::App& app, int& milliseconds) {
  app.add_option("--busy-timeout", milliseconds,
                 "Milliseconds to wait for another process's lock on the catalog before\n"
                 "failing with \"database is locked\" (default " +
                     std::to_string(kDefaultBusyTimeoutMs) +
                     "; 0 fails at once). Readers never wait for a writer")
      ->transform(count_validator(0, 24 * 3600 * 1000));
}

Result<std::optional<Key>> key_from_option(const std::string& path) {
  if (path.empty()) return std::optional<Key>();
  auto key = read_key_file(path);
  if (!key) return std::unexpected(key.error());
  return std::optional<Key>(std::move(*key));
}

std::expected<std::uint64_t, std::string> parse_count(std::string_view text, std::uint64_t min,
                                                      std::uint64_t max) {
  const std::string range = "an integer in " + with_commas(min) + ".." + with_commas(max);
  const auto refuse = [&](std::string_view why) {
    return std::unexpected("'" + std::string(text) + "' " + std::string(why) + "; expected " +
                           range + " (1e6 and 2.5e6 are fine)");
  };
  // digits [. digits] [e [+|-] digits], read exactly (never through a
  // double, whose 53 bits would round 2^63 + 1).
  std::size_t at = 0;
  const auto digits = [&] {
    const std::size_t begin = at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
    return text.substr(begin, at - begin);
  };
  const std::string_view whole = digits();
  std::string_view fraction;
  if (at < text.size() && text[at] == '.') {
    ++at;
    fraction = digits();
  }
  if (whole.empty() && fraction.empty()) {
    return refuse(text.starts_with('-') ? "is negative" : "is not a number");
  }
  std::int64_t exponent = 0;
  if (at < text.size() && (text[at] == 'e' || text[at] == 'E')) {
    ++at;
    bool negative = false;
    if (at < text.size() && (text[at] == '+' || text[at] == '-')) negative = text[at++] == '-';
    const std::string_view power = digits();
    if (power.empty()) return refuse("is not a number");
    // Beyond 4 digits of exponent the value is 0 < x < 1 or far beyond max:
    // either way refused below; clamping keeps the arithmetic small.
    for (const char c : power) exponent = std::min<std::int64_t>(exponent * 10 + (c - '0'), 10000);
    if (negative) exponent = -exponent;
  }
  if (at != text.size()) return refuse("is not a number");
  // The value is mantissa * 10^shift, the mantissa the digits without the point.
  std::string mantissa = std::string(whole) + std::string(fraction);
  std::int64_t shift = exponent - static_cast<std::int64_t>(fraction.size());
  const auto first = mantissa.find_first_not_of('0');
  if (first == std::string::npos) {
    mantissa = "0";
    shift = 0;
  } else {
    mantissa.erase(0, first);
  }
  while (shift < 0 && mantissa.size() > 1 && mantissa.back() == '0') {
    mantissa.pop_back();
    ++shift;
  }
  if (shift < 0) return refuse("is not a whole number");
  if (static_cast<std::int64_t>(mantissa.size()) + shift > 20) return refuse("is too large");
  mantissa.append(static_cast<std::size_t>(shift), '0');
  std::uint64_t value = 0;
  const auto [end, problem] =
      std::from_chars(mantissa.data(), mantissa.data() + mantissa.size(), value);
  if (problem != std::errc() || end != mantissa.data() + mantissa.size() || value > max) {
    return refuse("is too large");
  }
  if (value < min) return refuse("is too small");
  return value;
}

CLI::Validator count_validator(std::uint64_t min, std::uint64_t max) {
  return CLI::Validator(
      [min, max](std::string& value) -> std::string {
        auto count = parse_count(value, min, max);
        if (!count) return count.error();
        value = std::to_string(*count);
        return {};
      },
      "");
}

CLI::Validator fpp_validator() {
  return CLI::Validator(
      [](const std::string& value) -> std::string {
        const char* begin = value.c_str();
        char* end = nullptr;
        errno = 0;
        const double p = std::strtod(begin, &end);
        if (value.empty() || end != begin + value.size()) {
          return "'" + value + "' is not a number; expected a rate with 0 < p < 1 (e.g. 0.001)";
        }
        if (!std::isfinite(p) || p <= 0.0 || p >= 1.0) {
          return "'" + value + "' is outside 0 < p < 1 (a false-positive rate, e.g. 0.001)";
        }
        return {};
      },
      "");
}

CLI::Validator real_validator(double min, double max, std::string what) {
  const auto shortest = [](double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%g", x);
    return std::string(text);
  };
  const std::string range = shortest(min) + ".." + shortest(max) + " (" + what + ")";
  return CLI::Validator(
      [min, max, range](const std::string& value) -> std::string {
        const char* begin = value.c_str();
        char* end = nullptr;
        const double x = std::strtod(begin, &end);
        if (value.empty() || end != begin + value.size()) {
          return "'" + value + "' is not a number; expected " + range;
        }
        if (!std::isfinite(x) || x < min || x > max) {
          return "'" + value + "' is outside " + range;
        }
        return {};
      },
      "");
}

bool is_spec_error(ErrorCode code) noexcept {
  return code == ErrorCode::kInvalidExpectedItemCount ||
         code == ErrorCode::kInvalidFalsePositiveRate || code == ErrorCode::kFilterTooLarge;
}

int report_spec(std::string_view command, const Error& error) {
  if (is_spec_error(error.code)) return usage_error(command, error.describe());
  return report(command, error);
}

CLI::Validator not_a_stream(std::string what) {
  return CLI::Validator(
      [what = std::move(what)](const std::string& text) -> std::string {
        return text == "-" ? "- (standard input or output) cannot be " + what : std::string();
      },
      "PATH");
}

CLI::Validator catalog_id_validator() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        auto id = CatalogId::parse_hex(text);
        return id ? std::string() : id.error().message;
      },
      "HEX32");
}

void add_threads_option(CLI::App& app, unsigned& threads, bool reads_ahead) {
  // Never the core count itself: the help text becomes the man pages at build
  // time, which must not carry the build machine's core count.
  std::string help = "Worker threads (default: every core)";
  if (reads_ahead) help += ";\none more thread reads the next input chunk meanwhile";
  app.add_option("--threads", threads, help)->transform(count_validator(1, 4096));
}

unsigned apply_threads(unsigned threads) {
  // One process-wide limit, kept alive until exit.
  static std::unique_ptr<tbb::global_control> control;
  if (threads == 0) threads = hardware_threads();
  control =
      std::make_unique<tbb::global_control>(tbb::global_control::max_allowed_parallelism, threads);
  return threads;
}

Progress::Progress(std::string label, std::uint64_t total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (enabled_) std::fprintf(stderr, "\r\033[K");
}

void Progress::update(std::uint64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (total_ > 0) {
    std::fprintf(stderr, "\r\033[K%s: %5.1f%% (%s / %s %s, %.1fs)", label_.c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total_),
                 with_commas(done).c_str(), with_commas(total_).c_str(), unit_.c_str(), seconds);
  } else {
    std::fprintf(stderr, "\r\033[K%s: %s %s (%.1fs)", label_.c_str(), with_commas(done).c_str(),
                 unit_.c_str(), seconds);
  }
  std::fflush(stderr);
}

std::vector<Digest> generate_digests(std::string_view prefix, std::uint64_t count) {
  std::vector<Digest> digests(count);
  tbb::parallel_for(tbb::blocked_range<std::uint64_t>(0, count, 4096),
                    [&](const tbb::blocked_range<std::uint64_t>& range) {
                      std::string text(prefix);
                      for (auto i = range.begin(); i != range.end(); ++i) {
                        text.resize(prefix.size());
                        text += std::to_string(i);
                        digests[i] = sha256(text);
                      }
                    });
  return digests;
}

// -------------------------------------------------------------------- Activity

struct Activity::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool done = false;
};

Activity::Activity(std::string label) {
  if (::isatty(STDERR_FILENO) != 1) return;
  state_ = std::make_shared<State>();
  thread_ = std::thread([state = state_, label = std::move(label)] {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(state->mutex);
    // The first line after a second: work that ends sooner shows nothing.
    auto next = start + std::chrono::seconds(1);
    while (!state->wake.wait_until(lock, next, [&] { return state->done; })) {
      std::fprintf(stderr, "\r\033[K%s (%.1fs)", label.c_str(), seconds_since(start));
      std::fflush(stderr);
      next = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  });
}

Activity::~Activity() {
  if (!state_) return;
  {
    const std::lock_guard lock(state_->mutex);
    state_->done = true;
  }
  state_->wake.notify_one();
  thread_.join();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string with_commas(std::uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string counted(std::uint64_t count, std::string_view noun) {
  return with_commas(count) + " " + std::string(noun) + (count == 1 ? "" : "s");
}

std::string si_rate(double per_second) {
  char text[32];
  if (per_second >= 1e9) {
    std::snprintf(text, sizeof text, "%.2f G/s", per_second / 1e9);
  } else if (per_second >= 1e6) {
    std::snprintf(text, sizeof text, "%.2f M/s", per_second / 1e6);
  } else if (per_second >= 1e3) {
    std::snprintf(text, sizeof text, "%.2f k/s", per_second / 1e3);
  } else {
    std::snprintf(text, sizeof text, "%.0f /s", per_second);
  }
  return text;
}

}  // namespace abf::cli
