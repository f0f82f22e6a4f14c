#include "common.hpp"

#include <unistd.h>

#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/info.h>
#include <tbb/parallel_for.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

namespace abf::cli {

int report(std::string_view command, const Error& error) {
  std::cerr << "abf " << command << ": " << error.describe() << '\n';
  return kExitFailure;
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
                     " (default auto; ABF_BACKEND overrides auto;\n`abf --version` lists which "
                     "can run here)")
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
                     std::string(use));
}

Result<std::optional<Key>> key_from_option(const std::string& path) {
  if (path.empty()) return std::optional<Key>();
  auto key = read_key_file(path);
  if (!key) return std::unexpected(key.error());
  return std::optional<Key>(std::move(*key));
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
  std::string help =
      "Worker threads (default: all " + std::to_string(hardware_threads()) + " cores)";
  if (reads_ahead) help += ";\none more thread reads the next input chunk meanwhile";
  app.add_option("--threads", threads, help)->check(CLI::Range(1u, 4096u));
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
