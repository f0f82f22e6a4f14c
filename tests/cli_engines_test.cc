// What `abf --version` and --backend / ABF_BACKEND say about the engines,
// checked against the library the binary was linked with (list_backends):
// compiled in every build, the sanitizer builds too, since it compares the
// binary with its own build's library (tests/CMakeLists.txt's
// ABF_BINARY_TESTS run the Release build's executables against a sanitized
// binary, which these checks could not).
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>

#include "abf/abf.hpp"
#include "cli_shell.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("abf-cli-engines"); }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& content) const {
    std::ofstream(dir_ / name, std::ios::binary) << content;
  }

  CliRun abf(const std::string& arguments) const { return test::run_cli(dir_, arguments); }

  static std::string hex_lines(std::uint64_t count, std::uint64_t seed) {
    std::string text;
    for (const auto& d : test::random_digests(count, seed)) text += d.hex() + "\n";
    return text;
  }

  // Asserts a failure: non-zero exit, one line naming `code` on stderr.
  static void expect_failure(const CliRun& run, const std::string& code) {
    EXPECT_NE(run.status, 0);
    EXPECT_NE(run.err.find(code), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }

  fs::path dir_;
};

TEST_F(CliTest, VersionNamesBackendsAndTargets) {
  const CliRun run = abf("--version");
  EXPECT_EQ(run.status, 0);
  EXPECT_NE(run.out.find("backends: scalar, simd"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("simd target in use:"), std::string::npos) << run.out;
  // One line per engine of the library's table, saying whether it runs here.
  for (const BackendInfo& engine : list_backends()) {
    const std::string line = "\n  " + std::string(engine.backend.name()) + ": " +
                             (engine.available ? "available (" : "unavailable (") + engine.detail +
                             ")";
    EXPECT_NE(run.out.find(line), std::string::npos) << line << "\n" << run.out;
  }
}

// ABF_BACKEND means what --backend means, and fails the same way: an unknown
// name is a usage error in both, an engine that cannot run here a runtime
// error (backend_unavailable) in both.
TEST_F(CliTest, BackendEnvironmentFailsLikeTheOption) {
  write("members.txt", hex_lines(10, 55));
  ASSERT_EQ(abf("build -n 10 -p 0.01 -i members.txt -o c.abf").status, 0);
  const std::string query = "query -s c.abf -i members.txt --summary";
  const CliRun option = abf(query + " --backend quantum");
  const CliRun env = test::run_shell(dir_, "ABF_BACKEND=quantum $ABF " + query);
  EXPECT_EQ(option.status, 2);
  EXPECT_EQ(env.status, 2);
  EXPECT_NE(option.err.find("--backend: quantum not in {auto,scalar,simd,cuda}"), std::string::npos)
      << option.err;
  EXPECT_NE(env.err.find("ABF_BACKEND: quantum not in {auto,scalar,simd,cuda}"), std::string::npos)
      << env.err;
  for (const std::string command : {"build -n 10 -p 0.01 -i members.txt -o b.abf", "demo"}) {
    EXPECT_EQ(test::run_shell(dir_, "ABF_BACKEND=quantum $ABF " + command).status, 2) << command;
  }
  for (const BackendInfo& engine : list_backends()) {
    const std::string name(engine.backend.name());
    const CliRun by_option = abf(query + " --backend " + name);
    const CliRun by_env = test::run_shell(dir_, "ABF_BACKEND=" + name + " $ABF " + query);
    EXPECT_EQ(by_option.status, by_env.status) << name;
    EXPECT_EQ(by_option.out, by_env.out) << name;
    if (engine.available) {
      EXPECT_EQ(by_env.status, 0) << name << ": " << by_env.err;
    } else {
      expect_failure(by_option, "backend_unavailable: backend " + name + " cannot run here");
      expect_failure(by_env, "backend_unavailable: ABF_BACKEND=" + name + ": backend " + name +
                                 " cannot run here");
    }
  }
  // The option wins over the environment.
  EXPECT_EQ(test::run_shell(dir_, "ABF_BACKEND=quantum $ABF " + query + " --backend scalar").status,
            2);
  EXPECT_EQ(test::run_shell(dir_, "ABF_BACKEND=simd $ABF " + query + " --backend scalar").status,
            0);
}

}  // namespace
}  // namespace abf
