// Shared pieces of the `abf` subcommands: error reporting, exit codes,
// progress on a terminal, thread limits.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/scheme.hpp"

namespace abf::cli {

// Exit statuses: 0 success, 1 the command failed (bad input, I/O, ...),
// 2 the command line itself was wrong (CLI11 usage errors also exit 2... see
// main.cpp).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

// Prints "abf <command>: <code>: <message>" on stderr; returns kExitFailure.
int report(std::string_view command, const Error& error);

// Adds `--threads N` (default: all cores). Call apply_threads() in the runner.
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

// A CLI11 check for a 32-hex-digit catalog id (CatalogId::parse_hex).
CLI::Validator catalog_id_validator();

// A progress line on stderr, redrawn at most ten times a second, only when
// stderr is a terminal; silent otherwise. Cleared on destruction.
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

// SHA-256("<prefix><i>") for i < count, computed on every core. The demo's
// deterministic digest sets ("member:", "non-member:", ...).
std::vector<Digest> generate_digests(std::string_view prefix, std::uint64_t count);

// Seconds elapsed since `start`.
double seconds_since(std::chrono::steady_clock::time_point start);

// Human formatting: 1234567 -> "1,234,567"; rates as "12.3 M/s".
std::string with_commas(std::uint64_t value);
std::string si_rate(double per_second);

}  // namespace abf::cli
