// Options every command shares (common.hpp): threads, backend, key file,
// busy timeout, shard counts, and the validators of counts, rates and paths.
#include "common.hpp"

#include <tbb/global_control.h>
#include <tbb/info.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

namespace abf::cli {

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

Result<std::uint32_t> shard_count_from_option(const std::string& shards, const BloomSpec& spec,
                                              std::uint32_t protocol) {
  if (shards == "auto") return choose_shard_count(spec, protocol);
  return static_cast<std::uint32_t>(std::stoul(shards));  // checked by shards_validator
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

}  // namespace abf::cli
