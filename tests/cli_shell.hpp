// Running the abf binary through a shell script of the test's own, for what
// test::run_cli cannot say: standard input from a file or a pipe, standard
// output to /dev/full, several commands in a pipeline.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_support.hpp"

namespace abf::test {

// Runs `script` with /bin/sh in `directory`, the abf binary in $ABF (ABF_CLI,
// as run_cli finds it). The script's standard output and error are captured
// (unless it redirects them itself); its standard input is /dev/null unless
// it says otherwise.
inline CliRun run_shell(const std::filesystem::path& directory, const std::string& script) {
  const char* from_env = std::getenv("ABF_CLI");
  const std::string binary = from_env != nullptr && *from_env != '\0' ? from_env : ABF_CLI;
  const auto out = directory / ".abf-shell-stdout";
  const auto err = directory / ".abf-shell-stderr";
  const auto file = directory / ".abf-shell-script";
  {
    std::FILE* f = std::fopen(file.c_str(), "w");
    std::fputs(("ABF='" + binary + "'\n" + script + "\n").c_str(), f);
    std::fclose(f);
  }
  const std::string command = "cd '" + directory.string() + "' && /bin/sh '" + file.string() +
                              "' >'" + out.string() + "' 2>'" + err.string() + "' </dev/null";
  const int raw = std::system(command.c_str());
  CliRun run{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(out), read_file(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  std::filesystem::remove(file);
  return run;
}

}  // namespace abf::test
