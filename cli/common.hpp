// Shared pieces of the `abf` subcommands: error reporting, exit codes,
// standard streams, progress on a terminal, thread limits. Defined by
// concern: diagnostics.cpp (errors, exit statuses, unknown commands and
// options), same_file.cpp (CommandFiles: an output never overwrites an
// input), output.cpp (standard output, reports, DataOutput), format.cpp
// (a filter's summary in words and JSON, counts, rates), input.cpp
// (standard input, snapshot and set arguments, generated digests),
// options.cpp (shared options and validators), progress.cpp (Progress,
// Activity); spill.hpp is DataOutput's staging file.
#pragma once

#include <chrono>
#include <cstdint>
#include <expected>
#include <initializer_list>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/io.hpp"
#include "abf/scheme.hpp"
#include "abf/simd/target.hpp"
#include "abf/snapshot.hpp"
#include "abf/summary.hpp"
#include "spill.hpp"

namespace abf::cli {

// Exit statuses, one rule for every command: 0 success; 1 the command failed
// at run time (bad input, a missing or unreadable file, I/O, a backend that
// cannot run here); 2 the command line itself was wrong (an unknown command
// or option, a missing or malformed value, options that cannot go together;
// CLI11's errors and usage_error(), see main.cpp).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints "abf <command>: <code>: <message>" on stderr; returns kExitFailure.
int report(std::string_view command, const Error& error);

// Prints a usage error found after parsing, in the form main.cpp gives
// CLI11's ("abf <command>: <message>", then a line pointing at --help), on
// stderr; returns kExitUsage.
int usage_error(std::string_view command, std::string_view message);

// The same-file rule, one for every command: no file a command writes may
// be a file it reads or holds, since writing it would destroy that input
// (an attacker's review destroyed a catalog with `abf build --from-catalog
// c.db -o c.db`, a filter set with `abf query -s c.abfs -o <one of its
// shards>`, committed catalog versions with `-o c.db-wal`). A command lists
// what it reads in one CommandFiles and what it writes in another, each
// file under the option that named it, and asks overwritten_input() before
// anything is written; a clash is a usage error (exit 2) that names both.
//
// What a file added here stands for:
//   add_file         the path itself;
//   add_filter_set   a snapshot, or a filter-set (ABFS) manifest and every
//                    shard file it names;
//   add_index_set    an exact index, or an index-set (ABXS) manifest and
//                    every shard file it names;
//   add_catalog      a SQLite catalog P and the files SQLite keeps beside it
//                    (https://sqlite.org/tempfiles.html): P-wal, P-shm,
//                    P-journal and its super-journals P-mjXXXXXX9XX (X a
//                    hex digit), whether they exist yet or not.
// add_filter_set and add_index_set with `written` = true describe an output
// that writes a set: its manifest, and the shards of the set now there,
// which the write removes once the new manifest is in.
// Apart from the inputs, no output may be a file SQLite keeps beside any
// existing SQLite database (P-wal, P-shm, P-journal, P-mjXXXXXX9XX beside a
// file that starts "SQLite format 3"), read by the command or not: writing
// one loses what the database keeps there (`abf query -o c.db-wal` with a
// server holding c.db lost committed versions).
// Files are compared by identity (device and inode) where both exist, and
// by canonical path otherwise, symbolic links followed as AtomicFile
// follows them (a dangling link to its target): a hard link, `./c.db`, a
// link to a -wal that does not exist yet are all caught. "-" (a stream) and
// empty paths are never files. An output that exists and is not a regular
// file (/dev/null, a terminal, a FIFO) is written in place and replaces
// nothing, so it never clashes.
class CommandFiles {
 public:
  CommandFiles();
  ~CommandFiles();
  CommandFiles(CommandFiles&&) noexcept;
  CommandFiles& operator=(CommandFiles&&) noexcept;

  void add_file(std::string_view option, const std::string& path);
  void add_filter_set(std::string_view option, const std::string& path, bool written = false);
  void add_index_set(std::string_view option, const std::string& path, bool written = false);
  void add_catalog(std::string_view option, const std::string& path);

  // The usage error's message for the first file of `outputs` that is a
  // file of this set: "--output c.abfs.<id>.00001.abf is the same file as
  // shard 1 of 3 of --snapshot c.abfs (c.abfs.<id>.00001.abf): writing it
  // would destroy the input; name another file". None when nothing clashes.
  std::optional<std::string> overwritten_input(const CommandFiles& outputs) const;

  struct Entry;

 private:
  std::vector<Entry> entries_;
};

// The common case: one output file against a command's inputs.
std::optional<std::string> output_overwrites_input(const CommandFiles& inputs,
                                                   std::string_view output_option,
                                                   const std::string& output);

// The usage error text for `command` ("catalog add"; "" for abf itself).
std::string usage_text(std::string_view command, std::string_view message);

// An unknown subcommand in argv (checked before CLI11 parses): the message
// "abf[ <parent>]: unknown command 'qurey'; did you mean 'query'?" (or the
// list of commands when none is close), or nothing when every word that
// names a subcommand names one. Stops at the first option.
std::optional<std::string> unknown_command(const CLI::App& root, int argc, const char* const* argv);

// An unknown option CLI11 left over after parsing (`--snapshott`), which
// it would otherwise report as something else ("--snapshot is required"):
// "abf <command>: unknown option '--snapshott'; did you mean '--snapshot'?"
// (the nearest option of that command by edit distance: one or two edits,
// or one the word begins), or nothing when every option was known. main.cpp
// asks it first whenever parsing failed, so a typo is named as one.
std::optional<std::string> unknown_option(const CLI::App& root);

// "ABF_BACKEND: <name> not in {auto,scalar,...}" when ABF_BACKEND is set to
// a name the library does not know (the message --backend gives for the
// same name), else nothing. Every command checks it (main.cpp): the two
// mean the same thing and fail the same way.
std::optional<std::string> backend_environment_error();
// Applies ABF_SIMD_TARGET (a Highway target name, or "best") to the SIMD
// engine; the usage error when it names no target this CPU and build run.
std::optional<std::string> apply_simd_target_environment();
// A SIMD target's name as abf::use_simd_target takes it: Highway's names are
// upper case, "best" lower; what users type may be either.
std::string simd_target_spelling(std::string name);

// ---------------------------------------------------------------------------
// Standard streams. `-` is standard input or output on every path argument
// that is a stream (digest input, snapshots, answers, stats); a command
// refuses two uses of one stream (usage_error), and paths that cannot be a
// stream (a catalog database, a key file) refuse `-` with the reason.

// Writes all of `text` to standard output (file descriptor 1, unbuffered);
// kIo "<stdout>: write error: ..." when it fails (a full disk, /dev/full, a
// closed pipe).
Result<void> write_stdout(std::string_view text);

// Flushes std::cout and C's stdout; kIo if anything written through them
// was lost. main.cpp calls it after every command, so no output is ever
// lost silently.
Result<void> flush_stdout();

// For an output of binary data (a snapshot) named "-": when standard output
// is a terminal, the usage error's message ("refusing to write binary to a
// terminal; redirect or use -o FILE", as gzip refuses), else nothing. Piped
// or redirected, "-" is fine.
std::optional<std::string> binary_to_terminal(std::string_view output);

// Writes a command's report (its summary, counts or JSON): to standard
// output, where a failed write is the command's failure, or, when standard
// output carries the command's data (an output of "-"), to standard error,
// so the data stays exactly the data.
Result<void> write_report(std::string_view text, bool stdout_carries_data);

// The error of a report (a summary) that could not be printed after the
// command's output was written: "<output> was written, but printing the
// summary failed: <why>" (the output stays: it is whole and in place).
Error summary_error(std::string_view output, Error error);

// A report as JSON: two-space indent, snake_case keys, a final newline.
// Names that are not UTF-8 have their bad bytes replaced by U+FFFD.
std::string json_text(const nlohmann::ordered_json& json);

// The fields every report of a snapshot has (build, merge): its layout, its
// counts, the modeled rate, what it belongs to (abf::summarize). catalog_id,
// key_fingerprint and content_fingerprint are null when the snapshot has none.
nlohmann::ordered_json filter_json(const Filter& filter);

// The same in words, for the human summary: "m = 9,585,059 bits, k = 7, ...".
std::string filter_text(const Filter& filter);

// The report of a filter set written as a set (a manifest and its shards):
// filter_json's keys, for the set as a whole (counts and bits summed,
// fill and estimated rate over the set), then shard_count,
// shard_expected_item_count and shard_bit_count.
nlohmann::ordered_json set_json(const FilterSet& set);

// The same in words: "3 shards of m = 959,296,064 bits (n_i = ...), k = 7, ...".
std::string set_text(const FilterSet& set);

// Everything on standard input, at most `limit` bytes (kIo beyond, naming
// the limit and `what`).
Result<std::vector<std::uint8_t>> read_standard_input(std::uint64_t limit, std::string_view what);

// A snapshot named on the command line: a file (load_snapshot), or "-",
// standard input read whole (at most the largest valid snapshot) and parsed
// with every rule of the format. `header` receives the header as stored and
// `bytes` the file's size, when given.
Result<Filter> load_snapshot_argument(const std::string& path, const LoadOptions& options,
                                      SnapshotHeader* header = nullptr,
                                      std::uint64_t* bytes = nullptr);

// A filter or filter set named on the command line (every command that
// reads a snapshot takes a set): a path is load_filter_set (a manifest, or a
// plain snapshot as a one-shard set); "-" is a snapshot on standard input,
// as load_snapshot_argument reads it. A manifest on standard input is
// refused (kInvalidArgument): it names shard files beside it, which a
// stream has not.
Result<FilterSet> load_set_argument(const std::string& path, const LoadOptions& options);

// Whether `path` names a filter-set manifest ("-" never does). kIo if it
// cannot be read.
Result<bool> names_filter_set(const std::string& path);

// "--shards S|auto": the validator (1..65,536 or auto) and the count it
// means for `spec` under hashProtocolVersion `protocol` (choose_shard_count
// for auto, which may fail).
CLI::Validator shards_validator();
Result<std::uint32_t> shard_count_from_option(const std::string& shards, const BloomSpec& spec,
                                              std::uint32_t protocol = 1);

// A data output: `path` written atomically (AtomicFile), or "-", standard
// output, staged first: the data is kept in memory up to 1 MiB and beyond
// that in an unlinked temporary file in $TMPDIR (default /tmp), and copied
// to standard output only by commit(). So a command that fails writes
// nothing to standard output either, at the price of temporary space as
// large as the output and of nothing appearing before the command ends.
// A write of 1 MiB or more goes to the staging file as it is, and commit()
// has the kernel copy the file to standard output (sendfile; read and write
// where stdout refuses it, as an O_APPEND file does).
class DataOutput {
 public:
  static Result<DataOutput> create(const std::string& path);

  DataOutput(DataOutput&&) noexcept;
  DataOutput& operator=(DataOutput&&) noexcept;
  ~DataOutput();

  Result<void> write(std::string_view text);
  // Puts the output in place: renames the file, or copies what was staged
  // to standard output.
  Result<void> commit();

 private:
  DataOutput() = default;
  // Appends `text` to the staging file (created at the first call).
  Result<void> stage(std::string_view text);

  std::optional<AtomicFile> file_;
  std::optional<SpillFile> stage_;  // for "-": beyond buffer_, in $TMPDIR
  std::string buffer_;
};

// Adds `--threads N` (default: all cores; the help says "every core", never
// a count, so man pages made from it do not depend on the build machine).
// Call apply_threads() in the runner.
// `reads_ahead`: the command reads its next input chunk on one more thread,
// beside the N workers; the help says so.
void add_threads_option(CLI::App& app, unsigned& threads, bool reads_ahead = false);

// Limits TBB to `threads` workers for the rest of the process (0 = all cores).
// Returns the thread count in force.
unsigned apply_threads(unsigned threads);

// The number of hardware threads.
unsigned hardware_threads();

// Adds `--backend NAME`, accepting exactly abf::backend_names() (the
// library's engine table, so a new engine needs no change here); `what` starts
// the help ("Probe engine"). Default "auto".
void add_backend_option(CLI::App& app, std::string& backend, std::string_view what);

// The backend named on the command line, checked to run here: a named engine
// that cannot (cuda without a device) is kBackendUnavailable saying why, and
// so is an ABF_BACKEND naming one for "auto".
Result<Backend> backend_from_option(const std::string& name);

// Adds `--key-file PATH`: the secret key of keyed (protocol 2) snapshots.
// `use` says what the command does with it ("build a keyed snapshot").
void add_key_file_option(CLI::App& app, std::string& path, std::string_view use);

// The key of --key-file (abf::read_key_file: 32 hex digits and a newline, or
// 16 raw bytes; refused when group or others may read it), or none when the
// option was not given. The key itself never reaches any output.
Result<std::optional<Key>> key_from_option(const std::string& path);

// Adds `--busy-timeout MS` (default kDefaultBusyTimeoutMs): how long a command
// that opens a catalog waits for another process's lock before failing
// with "database is locked". In WAL mode (every catalog once a writer has
// opened it) readers never wait for a writer, so this bounds a writer
// waiting for another writer, or any connection waiting for a catalog
// being switched to WAL or recovered.
inline constexpr int kDefaultBusyTimeoutMs = 60'000;
void add_busy_timeout_option(CLI::App& app, int& milliseconds);

// A count given on the command line: decimal digits, or a decimal or
// scientific number that denotes a whole one ("1e6", "2.5e6", "1000.0").
// "1.5" (not whole), "-3", "1e30" (beyond `max`) are refused with the
// reason. The value, or the message a usage error gives.
std::expected<std::uint64_t, std::string> parse_count(std::string_view text, std::uint64_t min,
                                                      std::uint64_t max);

// A CLI11 transform for a count option in min..max (parse_count): rewrites
// the value as its integer, so "-n 1e6" reads as 1000000. Use with
// ->transform(), never ->check() (check copies the value it checks).
CLI::Validator count_validator(std::uint64_t min,
                               std::uint64_t max = std::numeric_limits<std::uint64_t>::max());

// A CLI11 check for a false-positive rate: a finite number with 0 < p < 1.
CLI::Validator fpp_validator();

// A CLI11 check for a real option in min..max (both included), in the
// words of fpp_validator: "'0.9' is outside 1e-09..0.5 (<what>)", or "is not
// a number". `what` says what the value is ("a false-positive rate").
CLI::Validator real_validator(double min, double max, std::string what);

// Whether `code` says the filter's n or p cannot be built (out of range, or a
// filter larger than 2^30 bits): the command line was wrong, so the command
// exits kExitUsage (usage_error) rather than kExitFailure.
bool is_spec_error(ErrorCode code) noexcept;

// Reports `error` as report() does, but as a usage error (exit 2) when it is
// is_spec_error: the n and p of the command line cannot make a filter.
int report_spec(std::string_view command, const Error& error);

// A CLI11 check refusing "-" for a path that cannot be a stream (a usage
// error, exit 2): "- (standard input or output) cannot be <what>".
CLI::Validator not_a_stream(std::string what);

// A CLI11 check for a 32-hex-digit catalog id (CatalogId::parse_hex).
CLI::Validator catalog_id_validator();

// A progress line on stderr, redrawn at most ten times a second, only when
// stderr is a terminal; silent otherwise. Cleared on destruction.
// Every command that can take more than a second shows one: a Progress
// where the work is counted (bytes read, snapshots loaded), an Activity
// where it is not.
class Progress {
 public:
  // `total` in `unit`s (0 = unknown); `label` e.g. "building".
  Progress(std::string label, std::uint64_t total, std::string unit);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void update(std::uint64_t done);

 private:
  std::string label_;
  std::string unit_;
  std::uint64_t total_;
  bool enabled_;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_;
};

// A progress line for work the command cannot count as it goes (a SQLite
// transaction, hashing a file): the label and the seconds elapsed, redrawn
// ten times a second by a thread of its own, only when stderr is a
// terminal; silent otherwise. Cleared on destruction.
class Activity {
 public:
  explicit Activity(std::string label);
  ~Activity();
  Activity(const Activity&) = delete;
  Activity& operator=(const Activity&) = delete;

 private:
  struct State;
  std::shared_ptr<State> state_;
  std::thread thread_;
};

// SHA-256("<prefix><i>") for i < count, computed on every core. The demo's
// deterministic digest sets ("member:", "non-member:", ...).
std::vector<Digest> generate_digests(std::string_view prefix, std::uint64_t count);

// Seconds elapsed since `start`.
double seconds_since(std::chrono::steady_clock::time_point start);

// "1 digest", "2 digests", "1,000 digests": a count and its noun, the noun
// plural (a trailing s) unless the count is 1.
std::string counted(std::uint64_t count, std::string_view noun);

// Human formatting: 1234567 -> "1,234,567"; rates as "12.3 M/s".
std::string with_commas(std::uint64_t value);
std::string si_rate(double per_second);

}  // namespace abf::cli
