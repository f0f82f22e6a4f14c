// `abf bench`: the JSON it prints carries every field the issue names, for
// every backend, operation and thread count, with plausible values.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <map>
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

// The table's rows (lines that start with a scenario name), split into words.
std::vector<std::vector<std::string>> table_rows(const std::string& out,
                                                 const std::string& scenario) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(scenario + " ", 0) != 0) continue;
    std::istringstream words(line);
    std::vector<std::string> row;
    for (std::string word; words >> word;) row.push_back(word);
    rows.push_back(row);
  }
  return rows;
}

// Every row names its ceiling in ns and what it counts; the fraction is
// that ceiling over the row's own ns; a row over 100% says so and why.
TEST(SimdBenchCli, EveryRowNamesItsCeilingAndWhyItBeatsIt) {
  const CliRun run =
      run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  double line_ns = 0;
  for (const auto& row : json.at("results")) {
    if (row.at("operation") == "random_line") line_ns = row.at("ns_per_item").get<double>();
  }
  ASSERT_GT(line_ns, 0.0) << run.out;
  int filter_rows = 0;
  for (const auto& row : json.at("results")) {
    const double ceiling = row.at("ceiling_ns").get<double>();
    const double ns = row.at("ns_per_item").get<double>();
    const auto counts = row.at("ceiling_counts").get<std::string>();
    EXPECT_FALSE(counts.empty()) << row.dump();
    if (!row.contains("fill_ratio")) {
      EXPECT_DOUBLE_EQ(ceiling, line_ns) << row.dump();  // the memory rows: one line
    }
    const double fraction = row.at("fraction_of_ceiling").get<double>();
    if (row.at("operation") != "random_load") {
      EXPECT_NEAR(fraction, ceiling / ns, 1e-9 * fraction) << row.dump();
    }
    EXPECT_EQ(row.at("beats_ceiling").get<bool>(), fraction > 1.0) << row.dump();
    EXPECT_EQ(row.contains("beats_ceiling_why"), fraction > 1.0) << row.dump();
    if (!row.contains("fill_ratio")) continue;
    ++filter_rows;
    const double fill = row.at("fill_ratio").get<double>();
    const double k = row.at("hash_count").get<double>();
    if (row.at("operation") == "query_absent") {
      EXPECT_NEAR(ceiling, line_ns / (1.0 - fill), 1e-9 * ceiling) << row.dump();
      EXPECT_NE(counts.find("1/(1-fill)"), std::string::npos) << counts;
    } else {
      EXPECT_NEAR(ceiling, line_ns * k, 1e-9 * ceiling) << row.dump();
      EXPECT_NE(counts.find("k = " + row.at("hash_count").dump() + " random lines"),
                std::string::npos)
          << counts;
    }
  }
  EXPECT_EQ(filter_rows, 3);

  // The table: each row's last column is "<ns> ns (<what>)"; a row over
  // 100% carries ^ and then the footnote is there, one marked row or none.
  const CliRun table = run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1");
  ASSERT_EQ(table.status, 0) << table.err;
  const auto rows = table_rows(table.out, "l2");
  ASSERT_EQ(rows.size(), 5u) << table.out;
  bool any_beats = false;
  for (const auto& row : rows) {
    std::string percent;
    for (const auto& word : row) {
      if (word.find('%') != std::string::npos && percent.empty()) percent = word;
    }
    ASSERT_FALSE(percent.empty()) << table.out;
    const double value = std::stod(percent);
    const bool marked = percent.find('^') != std::string::npos;
    // Printed rounded to a whole percent: 100.4% reads "100%^".
    if (marked) {
      EXPECT_GE(value, 100.0) << percent;
    } else {
      EXPECT_LE(value, 100.0) << percent;
    }
    any_beats = any_beats || marked;
    const auto ns_word = std::ranges::find(row, "ns");
    ASSERT_NE(ns_word, row.end()) << table.out;
    ASSERT_NE(ns_word + 1, row.end()) << table.out;
    EXPECT_EQ((ns_word + 1)->front(), '(') << table.out;
    EXPECT_GT(std::stod(*(ns_word - 1)), 0.0) << table.out;
  }
  EXPECT_EQ(any_beats, table.out.find("over 100% of its ceiling") != std::string::npos)
      << table.out;
}

// Rows whose spread is over 20% are flagged: a JSON boolean, a ! in the
// table, and the footnote when any is.
TEST(SimdBenchCli, RowsWithSpreadOverTwentyPercentAreFlagged) {
  const CliRun run =
      run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 3 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto run_json = nlohmann::json::parse(run.out);
  for (const auto& row : run_json.at("results")) {
    EXPECT_EQ(row.at("high_spread").get<bool>(), row.at("spread").get<double>() > 0.20)
        << row.dump();
  }
  const CliRun one =
      run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1 --json");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto one_json = nlohmann::json::parse(one.out);
  for (const auto& row : one_json.at("results")) {
    EXPECT_FALSE(row.at("high_spread").get<bool>()) << row.dump();  // spread unmeasured
  }
  const CliRun table = run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 3");
  ASSERT_EQ(table.status, 0) << table.err;
  bool any = false;
  for (const auto& row : table_rows(table.out, "l2")) {
    // The spread is the second word holding a %.
    int seen = 0;
    for (const auto& word : row) {
      if (word.find('%') == std::string::npos || ++seen != 2) continue;
      const bool marked = word.find('!') != std::string::npos;
      // Printed rounded to a whole percent: 20.4% reads "20%!".
      if (marked) {
        EXPECT_GE(std::stod(word), 20.0) << word;
      } else {
        EXPECT_LE(std::stod(word), 20.0) << word;
      }
      any = any || marked;
    }
    EXPECT_EQ(seen, 2) << table.out;
  }
  EXPECT_EQ(any, table.out.find("spread over 20%") != std::string::npos) << table.out;
}

// After the run: with one target timed, bench says so and how to time the
// others; with every target timed, it names the fastest by the geometric
// mean of the rows, and when that is not the one in use, how to choose it.
TEST(SimdBenchCli, SaysWhichTargetWasFastestAndHowToChooseIt) {
  const CliRun one =
      run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1 --json");
  ASSERT_EQ(one.status, 0) << one.err;
  const auto single = nlohmann::json::parse(one.out).at("simd_target_advice");
  EXPECT_EQ(single.at("timed").size(), 1u) << single.dump();
  EXPECT_EQ(single.at("chosen_by"), "automatic");
  EXPECT_NE(single.at("message").get<std::string>().find("--simd-target all"), std::string::npos)
      << single.dump();
  const CliRun text = run_abf("bench --scenario l2 --backend simd --threads 1 --repetitions 1");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find(single.at("message").get<std::string>().substr(0, 40)), std::string::npos)
      << text.out;

  const auto targets = version_targets();
  ASSERT_FALSE(targets.empty());
  const CliRun all = run_abf(
      "bench --scenario l2 --backend simd --threads 1 --repetitions 1 --simd-target all --json");
  ASSERT_EQ(all.status, 0) << all.err;
  const auto json = nlohmann::json::parse(all.out);
  const auto advice = json.at("simd_target_advice");
  EXPECT_EQ(advice.at("in_use"), json.at("simd_target"));
  EXPECT_EQ(advice.at("timed").get<std::vector<std::string>>(), targets);
  if (targets.size() < 2) return;
  // The geometric mean of each target's time over the one in use's, row by row.
  std::map<std::string, std::map<std::string, double>> ns;
  for (const auto& row : json.at("results")) {
    if (row.at("backend") != "simd") continue;
    ns[row.at("target").get<std::string>()][row.at("operation").get<std::string>()] =
        row.at("ns_per_item").get<double>();
  }
  const std::string in_use = json.at("simd_target").get<std::string>();
  std::string fastest = in_use;
  double best = 1;
  for (const auto& [target, times] : ns) {
    if (target == in_use) continue;
    double log_sum = 0;
    for (const auto& [operation, time] : times) log_sum += std::log(time / ns[in_use][operation]);
    const double ratio = std::exp(log_sum / static_cast<double>(times.size()));
    if (ratio < best) {
      best = ratio;
      fastest = target;
    }
  }
  EXPECT_EQ(advice.at("fastest"), fastest) << advice.dump();
  EXPECT_EQ(advice.at("faster_than_in_use").get<bool>(), fastest != in_use) << advice.dump();
  const auto message = advice.at("message").get<std::string>();
  if (fastest != in_use) {
    EXPECT_NE(message.find("ABF_SIMD_TARGET=" + fastest), std::string::npos) << message;
    EXPECT_NE(message.find("--simd-target " + fastest), std::string::npos) << message;
    EXPECT_NEAR(advice.at("time_ratio").get<double>(), best, 1e-9) << message;
  } else {
    EXPECT_NE(message.find("was the fastest"), std::string::npos) << message;
  }
}

// --items N: one filter of that n instead of the scenarios; a count that is
// no count, or too large for one filter, is a usage error naming --items.
TEST(SimdBenchCli, ItemsTimesAFilterOfTheChosenSize) {
  const CliRun run =
      run_abf("bench --items 3000 --backend simd --threads 1 --repetitions 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  int filter_rows = 0;
  const auto run_json = nlohmann::json::parse(run.out);
  for (const auto& row : run_json.at("results")) {
    EXPECT_EQ(row.at("scenario"), "custom");
    if (!row.contains("expected_item_count")) continue;
    ++filter_rows;
    EXPECT_EQ(row.at("expected_item_count"), 3000);
    EXPECT_EQ(row.at("items"), 3000);
    EXPECT_NEAR(row.at("bits_per_key").get<double>(), 9.59, 0.05) << row.dump();
  }
  EXPECT_EQ(filter_rows, 3);
  for (const char* bad : {"0", "1.5", "ten", "1e12"}) {
    const CliRun wrong = run_abf(std::string("bench --items ") + bad + " --repetitions 1");
    EXPECT_EQ(wrong.status, 2) << bad;
    EXPECT_NE(wrong.err.find("--items"), std::string::npos) << wrong.err;
    EXPECT_TRUE(wrong.out.empty()) << wrong.out;
  }
  const CliRun both = run_abf("bench --items 3000 --scenario l2");
  EXPECT_EQ(both.status, 2);
  EXPECT_NE(both.err.find("--items"), std::string::npos) << both.err;
}

// Writes `count` digests from `first` on (of the test's member stream) as hex lines.
void write_hex_digests(const std::filesystem::path& path, std::uint64_t first,
                       std::uint64_t count) {
  std::ofstream out(path);
  for (std::uint64_t i = first; i < first + count; ++i) out << test::member_digest(i).hex() << '\n';
}

// --snapshot FILE: the user's own filter, its queries only; with --input,
// the user's digests, whose maybe count is abf query's.
TEST(SimdBenchCli, SnapshotAndInputTimeTheUsersFilterAndDigests) {
  const test::TempDir dir("abf-bench-snapshot");
  write_hex_digests(dir / "members.txt", 0, 4000);
  write_hex_digests(dir / "candidates.txt", 2000, 4000);  // half members
  ASSERT_EQ(test::run_cli(dir.path(), "build -n 4000 -p 0.01 -i members.txt -o s.abf").status, 0);
  const CliRun inspect = test::run_cli(dir.path(), "inspect s.abf --json");
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  const auto info = nlohmann::json::parse(inspect.out);

  const CliRun generated = test::run_cli(
      dir.path(), "bench --snapshot s.abf --backend simd --threads 1 --repetitions 1 --json");
  ASSERT_EQ(generated.status, 0) << generated.err;
  std::set<std::string> operations;
  const auto generated_json = nlohmann::json::parse(generated.out);
  for (const auto& row : generated_json.at("results")) {
    EXPECT_EQ(row.at("scenario"), "snapshot");
    EXPECT_EQ(row.at("bit_count"), info.at("bit_count")) << row.dump();
    if (!row.contains("expected_item_count")) continue;
    operations.insert(row.at("operation").get<std::string>());
    EXPECT_EQ(row.at("expected_item_count"), 4000);
  }
  EXPECT_EQ(operations, (std::set<std::string>{"query_absent", "query_present"}));

  const CliRun mine = test::run_cli(dir.path(),
                                    "bench --snapshot s.abf --input candidates.txt --backend simd "
                                    "--threads 1 --repetitions 1 --json");
  ASSERT_EQ(mine.status, 0) << mine.err;
  const CliRun query =
      test::run_cli(dir.path(), "query -s s.abf -i candidates.txt --summary --json");
  ASSERT_EQ(query.status, 0) << query.err;
  const auto counts = nlohmann::json::parse(query.out);
  int input_rows = 0;
  const auto mine_json = nlohmann::json::parse(mine.out);
  for (const auto& row : mine_json.at("results")) {
    if (!row.contains("expected_item_count")) continue;
    ++input_rows;
    EXPECT_EQ(row.at("operation"), "query_input");
    EXPECT_EQ(row.at("items"), counts.at("total"));
    EXPECT_EQ(row.at("maybe_answers"), counts.at("maybe")) << row.dump();
  }
  EXPECT_EQ(input_rows, 1);

  // Bad files: a specific error naming the file, exit 1, nothing on stdout.
  {
    std::ofstream(dir / "bad.txt") << "not a digest\n";
    std::ofstream(dir / "empty.txt");
  }
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--snapshot missing.abf", "missing.abf"},
      {"--snapshot members.txt", "members.txt"},
      {"--snapshot s.abf --input missing.txt", "missing.txt"},
      {"--snapshot s.abf --input bad.txt", "bad.txt: line 1"},
      {"--snapshot s.abf --input empty.txt", "empty.txt: no digests"}};
  for (const auto& [arguments, named] : bad) {
    const CliRun wrong = test::run_cli(dir.path(), "bench " + arguments + " --repetitions 1");
    EXPECT_EQ(wrong.status, 1) << arguments;
    EXPECT_NE(wrong.err.find(named), std::string::npos) << arguments << ": " << wrong.err;
    EXPECT_TRUE(wrong.out.empty()) << wrong.out;
  }
  for (const char* usage : {"--input candidates.txt", "--snapshot s.abf --scenario l2",
                            "--snapshot s.abf --protocol 2", "--snapshot s.abf --items 10"}) {
    EXPECT_EQ(test::run_cli(dir.path(), std::string("bench ") + usage).status, 2) << usage;
  }
}

// --batch: every query row once per call size; single-digest rows carry
// latency percentiles, the others none; the false positives counted are
// those of the whole set whatever the call size.
TEST(SimdBenchCli, BatchSweepAndSingleDigestLatencies) {
  const CliRun run =
      run_abf("bench --items 2000 --backend simd --threads 1 --repetitions 1 --batch 1,64 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  std::set<std::pair<std::string, std::uint64_t>> seen;
  std::set<std::int64_t> false_positives;
  const auto run_json = nlohmann::json::parse(run.out);
  for (const auto& row : run_json.at("results")) {
    const auto operation = row.at("operation").get<std::string>();
    if (operation.rfind("query", 0) != 0) {
      EXPECT_FALSE(row.contains("batch")) << row.dump();
      continue;
    }
    const auto batch = row.at("batch").get<std::uint64_t>();
    seen.insert({operation, batch});
    if (operation == "query_absent")
      false_positives.insert(row.at("false_positives").get<std::int64_t>());
    EXPECT_EQ(row.contains("latency_p50_ns"), batch == 1) << row.dump();
    if (batch == 1) {
      const double p50 = row.at("latency_p50_ns").get<double>();
      EXPECT_GT(p50, 0.0);
      EXPECT_LE(p50, row.at("latency_p99_ns").get<double>()) << row.dump();
    }
  }
  const std::set<std::pair<std::string, std::uint64_t>> expected = {
      {"query_absent", 1}, {"query_absent", 64}, {"query_present", 1}, {"query_present", 64}};
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(false_positives.size(), 1u);
  const CliRun table =
      run_abf("bench --items 2000 --backend simd --threads 1 --repetitions 1 --batch 1");
  ASSERT_EQ(table.status, 0) << table.err;
  EXPECT_NE(table.out.find("latency p50"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("batch"), std::string::npos) << table.out;
  for (const char* bad : {"0", "1,x", "5000000"}) {
    const CliRun wrong = run_abf(std::string("bench --items 10 --batch ") + bad);
    EXPECT_EQ(wrong.status, 2) << bad;
    EXPECT_NE(wrong.err.find("--batch"), std::string::npos) << wrong.err;
  }
}

TEST(SimdBenchCli, RejectsAnUnknownScenario) {
  const CliRun run = run_abf("bench --scenario l3");
  EXPECT_NE(run.status, 0);
  EXPECT_TRUE(run.out.empty());
}

}  // namespace
}  // namespace abf
