// `abf bench`: the JSON it prints carries every field the issue names, for
// every backend, operation and thread count, with plausible values.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

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

TEST(SimdBenchCli, RejectsAnUnknownScenario) {
  const CliRun run = run_abf("bench --scenario l3");
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(run.out.empty());
}

}  // namespace
}  // namespace abf
