// How a subcommand of `abf` plugs in. Each cmd_*.cpp defines a function that
// adds its CLI11 subcommand and returns the code to run when it was chosen,
// and registers it with ABF_REGISTER_COMMAND; main.cpp knows none of them.
#pragma once

#include <functional>
#include <vector>

#include <CLI/CLI.hpp>

namespace abf::cli {

// Runs the parsed subcommand; returns the process exit status.
using Runner = std::function<int()>;

struct Command {
  CLI::App* app = nullptr;
  Runner run;
};

using CommandFactory = Command (*)(CLI::App& root);

struct CommandRegistration {
  int order;  // position in `abf --help`
  CommandFactory factory;
};

std::vector<CommandRegistration>& command_registry();

struct CommandRegistrar {
  CommandRegistrar(int order, CommandFactory factory) {
    command_registry().push_back({order, factory});
  }
};

}  // namespace abf::cli

#define ABF_REGISTER_COMMAND(order, factory) \
  static const ::abf::cli::CommandRegistrar abf_registrar_##factory { order, &factory }
