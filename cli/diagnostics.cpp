// Errors and exit statuses (common.hpp): report, usage errors, unknown
// commands and options.
#include "common.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

namespace abf::cli {

namespace {

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

std::optional<std::string> apply_simd_target_environment() {
  const char* forced = std::getenv("ABF_SIMD_TARGET");
  if (forced == nullptr || *forced == '\0') return std::nullopt;
  // One name, in any case, as --simd-target takes them ("best" too).
  if (auto used = use_simd_target(simd_target_spelling(forced)); !used) {
    return "ABF_SIMD_TARGET: " + used.error().message;
  }
  return std::nullopt;
}

std::string simd_target_spelling(std::string name) {
  std::ranges::transform(name, name.begin(),
                         [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  return name == "BEST" ? "best" : name;
}

bool is_spec_error(ErrorCode code) noexcept {
  return code == ErrorCode::kInvalidExpectedItemCount ||
         code == ErrorCode::kInvalidFalsePositiveRate || code == ErrorCode::kFilterTooLarge;
}

int report_spec(std::string_view command, const Error& error) {
  if (is_spec_error(error.code)) return usage_error(command, error.describe());
  return report(command, error);
}

}  // namespace abf::cli
