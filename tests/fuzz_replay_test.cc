// The committed fuzz corpora (fuzz/corpus/<target>/, minimized by
// scripts/fuzz) replayed through the very property checks the libFuzzer
// targets run, so every CI run re-checks every input that ever found new
// coverage, or a bug, without clang.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <ostream>
#include <string>
#include <vector>

#include "checks.hpp"
#include "test_support.hpp"

namespace abf {
namespace fuzz {
// Test names and messages show the target's name.
void PrintTo(const Target& target, std::ostream* out) { *out << target.name; }
}  // namespace fuzz

namespace {

namespace fs = std::filesystem;

fs::path corpus_root() {
  const char* value = std::getenv("ABF_FUZZ_CORPUS");
  return value != nullptr && *value != '\0' ? value : ABF_FUZZ_CORPUS;
}

// The targets of checks.cc, and serve_request where abf_server_request is
// built (tests/CMakeLists.txt then compiles fuzz/serve_request_fuzz.cc in).
std::vector<fuzz::Target> replayed_targets() {
  std::vector<fuzz::Target> targets(fuzz::targets().begin(), fuzz::targets().end());
#ifdef ABF_FUZZ_SERVE_REQUEST
  targets.push_back({"serve_request", fuzz::check_serve_request});
#endif
  return targets;
}

class FuzzReplay : public ::testing::TestWithParam<fuzz::Target> {};

TEST_P(FuzzReplay, EveryCorpusInputKeepsItsProperties) {
  const fs::path dir = corpus_root() / GetParam().name;
  ASSERT_TRUE(fs::is_directory(dir)) << dir << " is missing: run scripts/fuzz " << GetParam().name;
  std::size_t inputs = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const std::string bytes = test::read_file(entry.path());
    const std::string problem =
        GetParam().check({reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size()});
    EXPECT_EQ(problem, "") << entry.path();
    ++inputs;
  }
  EXPECT_GT(inputs, 0u) << "an empty corpus replays nothing: " << dir;
}

INSTANTIATE_TEST_SUITE_P(fuzz_replay, FuzzReplay,
                         ::testing::ValuesIn(replayed_targets()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace abf
