// The `abf` command: subcommands register themselves (command.hpp).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "abf/backend.hpp"
#include "abf/cuda/controls.hpp"
#include "abf/io.hpp"
#include "abf/simd/target.hpp"
#include "abf/version.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
std::vector<CommandRegistration>& command_registry() {
  static std::vector<CommandRegistration> registry;
  return registry;
}
}  // namespace abf::cli

namespace {

// `simd_problem`: why ABF_SIMD_TARGET could not be applied, if it was set
// and could not.
std::string version_text(const std::optional<std::string>& simd_problem) {
  // The engines come from the library's table; each says whether it can run
  // here and on what.
  const auto engines = abf::list_backends();
  std::string text = std::string("abf ") + abf::kVersion + "\nbackends:";
  for (std::size_t i = 0; i < engines.size(); ++i) {
    text += (i == 0 ? " " : ", ") + std::string(engines[i].backend.name());
  }
  for (const auto& engine : engines) {
    text += "\n  " + std::string(engine.backend.name()) + ": " +
            (engine.available ? "available (" : "unavailable (") + engine.detail + "); " +
            engine.summary;
  }
  text += "\nsimd targets:";
  for (const auto& target : abf::simd_compiled_targets()) text += " " + target;
  text += "\nsimd target in use: " + abf::simd_target_name();
  if (const char* forced = std::getenv("ABF_SIMD_TARGET"); forced != nullptr && *forced != '\0') {
    text += simd_problem ? " (" + *simd_problem + ")" : " (chosen by ABF_SIMD_TARGET)";
  }
  text += "\ncuda: " + abf::cuda_device_description();
  return text;
}

// "catalog add": the subcommands CLI11 was parsing when it failed.
std::string parsed_path(const CLI::App& root) {
  std::string path;
  const CLI::App* app = &root;
  for (;;) {
    const auto parsed = app->get_subcommands([](const CLI::App* sub) { return sub->parsed(); });
    if (parsed.empty()) return path;
    app = parsed.front();
    path += (path.empty() ? "" : " ") + app->get_name();
  }
}

}  // namespace

int main(int argc, char** argv) {
  // SIGTERM, SIGHUP and SIGINT remove the temporary files of outputs not yet
  // committed (one held 1.2 GB), then end the process by that signal, so the
  // shell sees 128 + its number. SIGKILL runs nothing; AtomicFile's
  // anonymous temporaries (O_TMPFILE) leave nothing to remove then either.
  abf::remove_temporary_files_on_signal();
  // ABF_SIMD_TARGET runs the SIMD engine on a lesser target (AVX2 on an
  // AVX-512 CPU), for measuring it; every target answers alike. Applied
  // first, so --version reports it; a bad name is a usage error below.
  const std::optional<std::string> simd_problem = abf::cli::apply_simd_target_environment();
  // Whatever goes through stdio (help, version, bench and demo tables)
  // stays in one buffer to the end unless stdout is a terminal, so a failed
  // write surfaces in the final flush with its errno (flush_stdout).
  static char stdout_buffer[1 << 16];
  if (::isatty(STDOUT_FILENO) != 1)
    std::setvbuf(stdout, stdout_buffer, _IOFBF, sizeof stdout_buffer);
  CLI::App app{
      "abf: answers \"is this artifact definitely absent?\" for SHA-256 digests with a Bloom\n"
      "filter over a catalog snapshot. `absent` is a proof; `maybe` means ask the real store.\n\n"
      "Quick start:\n"
      "  abf demo                                  the whole job on generated data\n"
      "  abf digest files... > catalog.txt         SHA-256 of real artifacts\n"
      "  abf build --expected-items 1000000 --fpp 0.001 --input catalog.txt --output c.abf\n"
      "  abf query --snapshot c.abf --input candidates.txt",
      "abf"};
  app.require_subcommand(1);
  app.set_version_flag("--version", version_text(simd_problem));
  app.footer(
      "Exit status, for every command: 0 success; 1 failure, a missing file included (one\n"
      "line on stderr); 2 usage error. `-` is standard input or output on every path that is a\n"
      "stream. docs/cli.md has every command's --json output.");
  // Usage errors name the command they belong to, as usage_error() does.
  app.failure_message([](const CLI::App* root, const CLI::Error& error) {
    return abf::cli::usage_text(parsed_path(*root), error.what());
  });

  auto registry = abf::cli::command_registry();
  std::ranges::sort(registry, {}, &abf::cli::CommandRegistration::order);
  std::vector<abf::cli::Command> commands;
  for (const auto& registration : registry) commands.push_back(registration.factory(app));

  // A misspelt command is named as such, with the closest one, before
  // CLI11 sees it (CLI11 would only say a subcommand is required).
  if (auto unknown = abf::cli::unknown_command(app, argc, argv)) {
    std::fputs(unknown->c_str(), stderr);
    return abf::cli::kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // An unknown option first: CLI11 checks required options (and values)
    // before it looks at the words it did not know, so `--snapshott x`
    // would read as "--snapshot is required".
    const bool asked = dynamic_cast<const CLI::CallForHelp*>(&error) != nullptr ||
                       dynamic_cast<const CLI::CallForAllHelp*>(&error) != nullptr ||
                       dynamic_cast<const CLI::CallForVersion*>(&error) != nullptr;
    if (auto unknown = abf::cli::unknown_option(app); !asked && unknown) {
      std::fputs(unknown->c_str(), stderr);
      return abf::cli::kExitUsage;
    }
    // --help and --version are "errors" that exit 0: their text is the
    // output, and must arrive, so it goes out with write_stdout (which sees
    // the errno of a failed write).
    std::ostringstream text;
    if (app.exit(error, text) != 0) return abf::cli::kExitUsage;
    if (auto wrote = abf::cli::write_stdout(text.str()); !wrote) {
      return abf::cli::report(parsed_path(app), wrote.error());
    }
    return abf::cli::kExitOk;
  }
  for (const auto& command : commands) {
    if (!command.app->parsed()) continue;
    // ABF_BACKEND means what --backend means: an unknown name is a usage
    // error for every command, as it is on the command line.
    if (auto bad = abf::cli::backend_environment_error()) {
      return abf::cli::usage_error(parsed_path(app), *bad);
    }
    if (simd_problem) return abf::cli::usage_error(parsed_path(app), *simd_problem);
    const int status = command.run();
    // Whatever a command printed through std::cout or stdio is flushed
    // here: a lost standard output is a failure, never a success.
    if (auto flushed = abf::cli::flush_stdout(); !flushed) {
      abf::cli::report(parsed_path(app), flushed.error());
      return abf::cli::kExitFailure;
    }
    return status;
  }
  return abf::cli::kExitUsage;
}
