// The `abf` command: subcommands register themselves (command.hpp).
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "abf/backend.hpp"
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

std::string version_text() {
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
  text += "\ncuda: " + abf::cuda_device_description();
  return text;
}

}  // namespace

int main(int argc, char** argv) {
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
  app.set_version_flag("--version", version_text());
  app.footer("Exit status: 0 success, 1 failure (one line on stderr), 2 usage error.");

  auto registry = abf::cli::command_registry();
  std::ranges::sort(registry, {}, &abf::cli::CommandRegistration::order);
  std::vector<abf::cli::Command> commands;
  for (const auto& registration : registry) commands.push_back(registration.factory(app));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    const int status = app.exit(error);
    return status == 0 ? 0 : abf::cli::kExitUsage;
  }
  for (const auto& command : commands) {
    if (command.app->parsed()) return command.run();
  }
  return abf::cli::kExitUsage;
}
