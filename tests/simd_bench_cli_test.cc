// `abf bench`: the JSON it prints carries every field the issue names, for
// every backend, operation and thread count, with plausible values.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace abf {
namespace {

using test::CliRun;

CliRun run_abf(const std::string& arguments) {
  const test::TempDir dir("abf-bench");
  return test::run_cli(dir.path(), arguments);
}

TEST(SimdBenchCli, JsonHasEveryFieldBackendAndOperation) {
  const CliRun run = run_abf("bench --scenario l2 --threads 1 --repetitions 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_TRUE(json.at("cpu").is_string());
  EXPECT_FALSE(json.at("simd_target").get<std::string>().empty());
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& row : json.at("results")) {
    for (const char* field :
         {"backend", "target", "threads", "scenario", "items", "bit_count", "hash_count",
          "operation", "items_per_second", "ns_per_item", "fraction_of_ceiling"}) {
      ASSERT_TRUE(row.contains(field)) << field << " missing in " << row.dump();
    }
    EXPECT_EQ(row.at("scenario"), "l2");
    EXPECT_EQ(row.at("threads"), 1);
    EXPECT_EQ(row.at("bit_count"), 959296);  // n = 100,000, p = 0.01
    EXPECT_EQ(row.at("hash_count"), 7);
    EXPECT_GT(row.at("items_per_second").get<double>(), 0.0);
    EXPECT_GT(row.at("ns_per_item").get<double>(), 0.0);
    EXPECT_GT(row.at("fraction_of_ceiling").get<double>(), 0.0);
    seen.insert({row.at("backend").get<std::string>(), row.at("operation").get<std::string>()});
  }
  for (const char* backend : {"scalar", "simd"}) {
    for (const char* operation : {"build", "query_absent", "query_present"}) {
      EXPECT_TRUE(seen.count({backend, operation})) << backend << " " << operation;
    }
  }
  EXPECT_TRUE(seen.count({"memory", "random_load"}));
}

// What scripts/plots draws the false-positive picture from: every filter row
// names its spec and bits per key, every query_absent row the false positives
// it saw, near the target.
TEST(SimdBenchCli, JsonCarriesTheFalsePositiveRateAndBitsPerKey) {
  for (const double fpp : {0.01, 0.001}) {
    const CliRun run = run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1 " +
                               std::string(fpp == 0.01 ? "" : "--fpp 0.001 ") + "--json");
    ASSERT_EQ(run.status, 0) << run.err;
    const auto json = nlohmann::json::parse(run.out);
    EXPECT_GE(json.at("hardware_threads").get<int>(), 1);
    EXPECT_EQ(json.at("repetitions"), 1);
    int absent_rows = 0;
    for (const auto& row : json.at("results")) {
      if (row.at("backend") == "memory") {
        EXPECT_FALSE(row.contains("target_fpp")) << row.dump();
        continue;
      }
      EXPECT_EQ(row.at("expected_item_count"), 100000);
      EXPECT_DOUBLE_EQ(row.at("target_fpp").get<double>(), fpp);
      EXPECT_DOUBLE_EQ(row.at("bits_per_key").get<double>(),
                       row.at("bit_count").get<double>() / 100000.0);
      EXPECT_NEAR(row.at("fill_ratio").get<double>(), 0.5, 0.05);
      EXPECT_NEAR(row.at("estimated_fpp").get<double>(), fpp, fpp * 0.2);
      if (row.at("operation") == "query_absent") {
        ++absent_rows;
        const auto false_positives = row.at("false_positives").get<std::int64_t>();
        EXPECT_DOUBLE_EQ(row.at("observed_fpp").get<double>(),
                         static_cast<double>(false_positives) / 100000.0);
        // 100,000 non-members: 1,000 or 100 false positives expected.
        EXPECT_NEAR(row.at("observed_fpp").get<double>(), fpp, fpp * 0.4) << row.dump();
      } else {
        EXPECT_FALSE(row.contains("observed_fpp")) << row.dump();
      }
    }
    EXPECT_EQ(absent_rows, 1);
    if (fpp == 0.001) {
      EXPECT_EQ(json.at("results").at(0).at("bit_count"), 1437824);  // n = 100,000, p = 0.001
    }
  }
}

// Every row carries the run-to-run spread of its repetitions: null for one
// run, (slowest - fastest) / median for more: never negative, and not zero
// everywhere (three timings of a row agreeing to the nanosecond in every
// row would mean the spread is not computed).
TEST(SimdBenchCli, EveryRowCarriesItsRunToRunSpread) {
  for (const int repetitions : {1, 3}) {
    const CliRun run = run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions " +
                               std::to_string(repetitions) + " --json");
    ASSERT_EQ(run.status, 0) << run.err;
    const auto json = nlohmann::json::parse(run.out);
    ASSERT_FALSE(json.at("results").empty());
    int moved = 0;
    for (const auto& row : json.at("results")) {
      ASSERT_TRUE(row.contains("spread")) << row.dump();
      if (repetitions == 1) {
        EXPECT_TRUE(row.at("spread").is_null()) << row.dump();
      } else {
        const double spread = row.at("spread").get<double>();
        EXPECT_GE(spread, 0.0) << row.dump();
        moved += spread > 0 ? 1 : 0;
      }
    }
    if (repetitions > 1) {
      EXPECT_GT(moved, 0) << run.out;
    }
  }
  const CliRun table = run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1");
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("spread"), std::string::npos) << table.out;
}

TEST(SimdBenchCli, DefaultReportsOneThreadAndAllCores) {
  const CliRun run = run_abf("bench --scenario l2 --backend simd --repetitions 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  std::set<int> threads;
  const auto json = nlohmann::json::parse(run.out);
  for (const auto& row : json.at("results")) {
    threads.insert(row.at("threads").get<int>());
    EXPECT_NE(row.at("backend"), "scalar");
  }
  // One thread, and all cores when there is more than one.
  EXPECT_TRUE(threads.count(1));
  EXPECT_LE(threads.size(), 2u);
  if (threads.size() == 2) {
    EXPECT_GT(*threads.rbegin(), 1);
  }
}

// The targets `abf --version` lists ("simd targets: AVX3_DL AVX3 ..."), best first.
std::vector<std::string> version_targets() {
  const CliRun run = run_abf("--version");
  EXPECT_EQ(run.status, 0) << run.err;
  const std::string label = "simd targets:";
  const auto at = run.out.find(label);
  EXPECT_NE(at, std::string::npos) << run.out;
  if (at == std::string::npos) return {};
  const auto end = run.out.find('\n', at);
  std::istringstream line(run.out.substr(at + label.size(), end - at - label.size()));
  std::vector<std::string> targets;
  for (std::string name; line >> name;) targets.push_back(name);
  return targets;
}

// --simd-target all: the simd rows once per target this CPU runs, each with
// its three operations, every row naming the CPU; the top-level target is
// still the best.
TEST(SimdBenchCli, EveryTargetInOneRunWithTheCpuOnEveryRow) {
  const auto targets = version_targets();
  ASSERT_FALSE(targets.empty());
  const CliRun run = run_abf(
      "bench --scenario l2 --backend simd --threads 1 --repetitions 1 --simd-target all --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json.at("simd_target"), targets.front());
  EXPECT_FALSE(json.at("cpu_family_model").get<std::string>().empty());
  std::set<std::pair<std::string, std::string>> seen;
  for (const auto& row : json.at("results")) {
    EXPECT_EQ(row.at("cpu"), json.at("cpu"));
    EXPECT_EQ(row.at("cpu_family_model"), json.at("cpu_family_model"));
    EXPECT_EQ(row.at("cpu_flags"), json.at("cpu_flags"));
    if (row.at("backend") != "simd") continue;
    seen.insert({row.at("target").get<std::string>(), row.at("operation").get<std::string>()});
  }
  EXPECT_EQ(seen.size(), 3 * targets.size());
  for (const auto& target : targets) {
    for (const char* operation : {"build", "query_absent", "query_present"}) {
      EXPECT_TRUE(seen.count({target, operation})) << target << " " << operation;
    }
  }
}

// ABF_SIMD_TARGET picks the target for any command; a name this CPU does
// not run is a usage error naming the ones it does, as is --simd-target
// without the simd backend.
TEST(SimdBenchCli, TheTargetCanBeChosenAndAWrongOneIsAUsageError) {
  const auto targets = version_targets();
  ASSERT_FALSE(targets.empty());
  const std::string last = targets.back();
  ::setenv("ABF_SIMD_TARGET", last.c_str(), 1);
  const CliRun chosen =
      run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1 --json");
  ::setenv("ABF_SIMD_TARGET", "NO_SUCH_TARGET", 1);
  const CliRun wrong_env = run_abf("bench --scenario l2 --backend simd --repetitions 1");
  ::unsetenv("ABF_SIMD_TARGET");
  ASSERT_EQ(chosen.status, 0) << chosen.err;
  const auto json = nlohmann::json::parse(chosen.out);
  EXPECT_EQ(json.at("simd_target"), last);
  for (const auto& row : json.at("results")) {
    if (row.at("backend") == "simd") {
      EXPECT_EQ(row.at("target"), last);
    }
  }
  EXPECT_EQ(wrong_env.status, 2);
  EXPECT_NE(wrong_env.err.find("ABF_SIMD_TARGET"), std::string::npos) << wrong_env.err;
  EXPECT_NE(wrong_env.err.find(targets.front()), std::string::npos) << wrong_env.err;

  const CliRun wrong = run_abf("bench --scenario l2 --backend simd --simd-target AVX9");
  EXPECT_EQ(wrong.status, 2);
  EXPECT_NE(wrong.err.find("AVX9"), std::string::npos) << wrong.err;
  EXPECT_TRUE(wrong.out.empty());
  const CliRun scalar_only = run_abf("bench --scenario l2 --backend scalar --simd-target " + last);
  EXPECT_EQ(scalar_only.status, 2);
  EXPECT_NE(scalar_only.err.find("simd backend"), std::string::npos) << scalar_only.err;
  const CliRun none = run_abf("bench --scenario l2 --backend simd --simd-target ' , '");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("names no target"), std::string::npos) << none.err;
  const CliRun empty = run_abf("bench --scenario l2 --backend simd --simd-target ''");
  EXPECT_EQ(empty.status, 2) << empty.out;
}

// Names are taken with spaces around them and in any case, "best" is the
// best target by its name, each target is measured once, and the JSON's top
// level lists the targets measured.
TEST(SimdBenchCli, TargetNamesAreForgivingAndRecordedAsRun) {
  const auto targets = version_targets();
  ASSERT_FALSE(targets.empty());
  std::string lower = targets.back();
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const CliRun run =
      run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1 --json "
              "--simd-target ' best , " + lower + " ," + targets.front() + "'");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  std::vector<std::string> expected = {targets.front()};
  if (targets.back() != targets.front()) expected.push_back(targets.back());
  EXPECT_EQ(json.at("simd_targets").get<std::vector<std::string>>(), expected);
  std::set<std::string> seen;
  for (const auto& row : json.at("results")) {
    if (row.at("backend") == "simd") seen.insert(row.at("target").get<std::string>());
  }
  EXPECT_EQ(seen, std::set<std::string>(expected.begin(), expected.end()));
}

// `abf --version` says which target ABF_SIMD_TARGET chose, and why a bad
// name was not taken.
TEST(SimdBenchCli, VersionReportsTheTargetTheEnvironmentChose) {
  const auto targets = version_targets();
  ASSERT_FALSE(targets.empty());
  ::setenv("ABF_SIMD_TARGET", targets.back().c_str(), 1);
  const CliRun chosen = run_abf("--version");
  ::setenv("ABF_SIMD_TARGET", "NO_SUCH_TARGET", 1);
  const CliRun wrong = run_abf("--version");
  ::unsetenv("ABF_SIMD_TARGET");
  ASSERT_EQ(chosen.status, 0) << chosen.err;
  EXPECT_NE(chosen.out.find("simd target in use: " + targets.back() + " (chosen by ABF_SIMD_TARGET)"),
            std::string::npos)
      << chosen.out;
  EXPECT_NE(wrong.out.find("NO_SUCH_TARGET"), std::string::npos) << wrong.out;
}

TEST(SimdBenchCli, RejectsAnUnknownScenario) {
  const CliRun run = run_abf("bench --scenario l3");
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(run.out.empty());
}

}  // namespace
}  // namespace abf
