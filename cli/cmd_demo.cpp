// abf demo: the main job end to end on generated data. Members are
// SHA-256("member:<i>"), absent candidates SHA-256("non-member:<i>"), the
// same sets the golden vectors use, so every run prints the same counts.
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <stdlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/blocked.hpp"
#include "abf/simd/target.hpp"
#include "command.hpp"
#include "common.hpp"
#include "dedup_demo.hpp"

namespace abf::cli {
namespace {

struct DemoOptions {
  std::uint64_t items = 1'000'000;
  double fpp = 0.001;
  std::string output;
  unsigned threads = 0;
  bool skip_dedup = false;
  bool json = false;
};

// printf to stdout, unless the demo prints JSON instead (`quiet`).
__attribute__((format(printf, 2, 3))) void say(bool quiet, const char* format, ...) {
  if (quiet) return;
  std::va_list arguments;
  va_start(arguments, format);
  std::vprintf(format, arguments);
  va_end(arguments);
}

// Median seconds of `repetitions` runs of a batch query.
Result<double> time_query(const Filter& filter, const std::vector<Digest>& digests,
                          std::vector<Answer>& answers, Backend backend) {
  std::vector<double> times;
  for (int repetition = 0; repetition < 3; ++repetition) {
    const auto start = std::chrono::steady_clock::now();
    if (auto done = filter.query(digests, answers, backend); !done) {
      return std::unexpected(done.error());
    }
    times.push_back(seconds_since(start));
  }
  std::ranges::sort(times);
  return times[1];
}

// One layout of the side-by-side table: a filter of `protocol` (1 classic,
// 3 blocked) built from the members three times (the median timed), then
// every absent and present digest asked three times (medians), on the
// automatic engine.
struct LayoutRow {
  std::string layout;
  std::uint32_t protocol = 0;
  std::uint64_t bit_count = 0;
  std::uint32_t hash_count = 0;
  double estimated = 0.0;
  std::uint64_t false_positives = 0;
  std::uint64_t false_negatives = 0;
  double build_seconds = 0.0;
  double absent_seconds = 0.0;
  double present_seconds = 0.0;
};

Result<LayoutRow> measure_layout(const char* name, std::uint32_t protocol, const BloomSpec& spec,
                                 const std::vector<Digest>& members,
                                 const std::vector<Digest>& absent, std::vector<Answer>& answers) {
  BuildOptions build_options;
  build_options.protocol = protocol;
  std::vector<double> times;
  std::optional<Filter> filter;
  for (int repetition = 0; repetition < 3; ++repetition) {
    const auto start = std::chrono::steady_clock::now();
    auto built = build_filter(members, spec, build_options);
    if (!built) return std::unexpected(built.error());
    times.push_back(seconds_since(start));
    filter = std::move(*built);
  }
  std::ranges::sort(times);
  LayoutRow row{name, protocol, filter->bit_count(), filter->hash_count(),
                filter->estimate_false_positive_rate()};
  row.build_seconds = times[1];
  if (auto done = filter->query(members, answers); !done) return std::unexpected(done.error());
  row.false_negatives =
      static_cast<std::uint64_t>(std::ranges::count(answers, Answer::kDefinitelyNot));
  if (auto done = filter->query(absent, answers); !done) return std::unexpected(done.error());
  row.false_positives = static_cast<std::uint64_t>(std::ranges::count(answers, Answer::kMaybe));
  auto absent_time = time_query(*filter, absent, answers, Backend::kAuto);
  if (!absent_time) return std::unexpected(absent_time.error());
  auto present_time = time_query(*filter, members, answers, Backend::kAuto);
  if (!present_time) return std::unexpected(present_time.error());
  row.absent_seconds = *absent_time;
  row.present_seconds = *present_time;
  return row;
}

// Classic (protocol 1) and blocked (protocol 3) side by side: bits per
// digest, modeled and observed false-positive rate, build and query
// throughput. Adds "layouts" to `json`; a false negative in either is an error.
int compare_layouts(bool quiet, const DemoOptions& options, unsigned threads,
                    const std::vector<Digest>& members, const std::vector<Digest>& absent,
                    std::vector<Answer>& answers, nlohmann::ordered_json& json) {
  const BloomSpec spec{options.items, options.fpp};
  const double n = static_cast<double>(members.size());
  const double probes = static_cast<double>(absent.size());
  say(quiet,
      "layouts side by side (--backend auto, %u threads; build and queries median of 3)\n"
      "  %-8s %-9s %-12s %-12s %-13s %-12s %-15s %s\n",
      threads, "layout", "protocol", "bits/digest", "modeled fpp", "observed fpp", "build",
      "absent queries", "present queries");
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& [name, protocol] :
       {std::pair{"classic", probe::kProtocolUnkeyed}, std::pair{"blocked", blocked::kProtocolBlocked}}) {
    auto row = measure_layout(name, protocol, spec, members, absent, answers);
    if (!row) return report("demo", row.error());
    const double bits_per_digest = static_cast<double>(row->bit_count) / n;
    const double observed = static_cast<double>(row->false_positives) / probes;
    say(quiet, "  %-8s %-9u %-12.2f %-12.6f %-13.6f %-12s %-15s %s\n", name, protocol,
        bits_per_digest, row->estimated, observed, si_rate(n / row->build_seconds).c_str(),
        si_rate(probes / row->absent_seconds).c_str(),
        si_rate(n / row->present_seconds).c_str());
    rows.push_back({{"layout", name},
                    {"hash_protocol_version", protocol},
                    {"bit_count", row->bit_count},
                    {"hash_count", row->hash_count},
                    {"bits_per_digest", bits_per_digest},
                    {"estimated_fpp", row->estimated},
                    {"observed_fpp", observed},
                    {"false_positives", row->false_positives},
                    {"false_negatives", row->false_negatives},
                    {"build_seconds", row->build_seconds},
                    {"build_per_second", n / row->build_seconds},
                    {"absent_per_second", probes / row->absent_seconds},
                    {"present_per_second", n / row->present_seconds}});
    if (row->false_negatives != 0) {
      return report("demo", Error{ErrorCode::kInvalidArgument,
                                  std::string("false negatives found in the ") + name +
                                      " layout: the filter is broken"});
    }
  }
  say(quiet,
      "  (digests a second. blocked: all 8 probes in one 64-byte line, one cache miss a\n"
      "  digest, for about 5%% more bits at p = 0.01 and 9%% at 0.001; below about p = 1e-4\n"
      "  classic needs far fewer bits. abf build --layout blocked)\n");
  json["layouts"] = std::move(rows);
  return kExitOk;
}

int run_demo(const DemoOptions& options) {
  // n and p that make no filter are the command line's fault, found before
  // a million digests are generated.
  if (auto layout = choose_layout(BloomSpec{options.items, options.fpp}); !layout) {
    return report_spec("demo", layout.error());
  }
  // It reads no file, but its snapshot may still not be a catalog's -wal.
  if (auto clash = output_overwrites_input(CommandFiles(), "--output", options.output)) {
    return usage_error("demo", *clash);
  }
  const unsigned threads = apply_threads(options.threads);
  const bool quiet = options.json;  // --json: one object at the end, no steps
  say(quiet, "abf demo: %s SHA-256(\"member:<i>\"), n = %s, p = %g\n",
      counted(options.items, "member digest").c_str(), with_commas(options.items).c_str(),
      options.fpp);

  auto start = std::chrono::steady_clock::now();
  const auto members = generate_digests("member:", options.items);
  const auto absent = generate_digests("non-member:", options.items);
  const double generate_seconds = seconds_since(start);
  say(quiet, "generated           %s and %s in %.2f s\n", counted(members.size(), "member").c_str(),
      counted(absent.size(), "absent candidate").c_str(), generate_seconds);

  start = std::chrono::steady_clock::now();
  auto built = build_filter(members, BloomSpec{options.items, options.fpp}, 0);
  if (!built) return report("demo", built.error());
  const double build_seconds = seconds_since(start);
  nlohmann::ordered_json json = {
      {"items", options.items},
      {"fpp", options.fpp},
      {"threads", threads},
      {"simd_target", simd_target_name()},
      {"generate_seconds", generate_seconds},
      {"build_seconds", build_seconds},
  };
  say(quiet, "layout              m = %s bits (%.2f MiB), k = %u\n",
      with_commas(built->bit_count()).c_str(),
      static_cast<double>(built->bit_count()) / 8 / 1048576, built->hash_count());
  say(quiet, "build               %.3f s, %s digests (%s, %u threads)\n", build_seconds,
      si_rate(static_cast<double>(members.size()) / build_seconds).c_str(),
      simd_target_name().c_str(), threads);

  // Save and reload: the queries below run on the validated snapshot.
  std::filesystem::path path = options.output;
  std::filesystem::path temp_dir;
  if (path.empty()) {
    std::string pattern = (std::filesystem::temp_directory_path() / "abf-demo-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return report("demo", Error{ErrorCode::kIo, "cannot create a temporary directory"});
    }
    temp_dir = pattern;
    path = temp_dir / "catalog.abf";
  }
  if (auto saved = save_snapshot(*built, path); !saved) return report("demo", saved.error());
  auto filter = load_snapshot(path);
  if (!filter) return report("demo", filter.error());
  say(quiet,
      "snapshot            %s, %s bytes, saved atomically and reloaded (checksums verified)%s\n",
      path.c_str(), with_commas(std::filesystem::file_size(path)).c_str(),
      temp_dir.empty() ? "" : "; removed at exit");
  say(quiet, "fill ratio          %.4f\n", filter->fill_ratio());
  json["snapshot"] = filter_json(*filter);
  json["snapshot_path"] =
      temp_dir.empty() ? nlohmann::ordered_json(path.string()) : nlohmann::ordered_json(nullptr);
  json["snapshot_bytes"] = std::filesystem::file_size(path);

  std::vector<Answer> answers(options.items);
  if (auto done = filter->query(members, answers); !done) return report("demo", done.error());
  const auto false_negatives =
      static_cast<std::uint64_t>(std::ranges::count(answers, Answer::kDefinitelyNot));
  if (auto done = filter->query(absent, answers); !done) return report("demo", done.error());
  const auto false_positives =
      static_cast<std::uint64_t>(std::ranges::count(answers, Answer::kMaybe));

  const double probes = static_cast<double>(absent.size());
  const double observed = static_cast<double>(false_positives) / probes;
  const double estimated = filter->estimate_false_positive_rate();
  const double sigma = std::sqrt(estimated * (1 - estimated) / probes);
  say(quiet,
      "false positives     estimated %.6f (model), observed %.6f = %s of %s absent "
      "%s\n                    (resolution %.0e per query, model +/- %.6f at one sigma)\n",
      estimated, observed, with_commas(false_positives).c_str(), with_commas(absent.size()).c_str(),
      absent.size() == 1 ? "query" : "queries", 1.0 / probes, sigma);
  say(quiet, "false negatives     %s of %s (must be 0)\n", with_commas(false_negatives).c_str(),
      counted(members.size(), "member").c_str());

  json["absent_queries"] = absent.size();
  json["false_positives"] = false_positives;
  json["observed_fpp"] = observed;
  json["estimated_fpp"] = estimated;
  json["estimated_fpp_sigma"] = sigma;
  json["false_negatives"] = false_negatives;
  say(quiet, "query throughput    median of 3, %u threads\n", threads);
  say(quiet, "  %-8s %-18s %-18s\n", "backend", "absent", "present");
  // Every engine of the library's table that can run here.
  nlohmann::ordered_json throughput = nlohmann::ordered_json::array();
  for (const BackendInfo& engine : list_backends()) {
    if (!engine.available) continue;
    auto absent_time = time_query(*filter, absent, answers, engine.backend);
    auto present_time = time_query(*filter, members, answers, engine.backend);
    if (!absent_time || !present_time) {
      return report("demo", absent_time ? present_time.error() : absent_time.error());
    }
    const std::string name(engine.backend.name());
    say(quiet, "  %-8s %-18s %-18s  %s\n", name.c_str(), si_rate(probes / *absent_time).c_str(),
        si_rate(static_cast<double>(members.size()) / *present_time).c_str(),
        (name + " (" + engine.detail + ")").c_str());
    throughput.push_back(
        {{"backend", name},
         {"detail", engine.detail},
         {"absent_per_second", probes / *absent_time},
         {"present_per_second", static_cast<double>(members.size()) / *present_time}});
  }
  json["query_throughput"] = std::move(throughput);
  if (!temp_dir.empty()) std::filesystem::remove_all(temp_dir);
  if (false_negatives != 0) {
    return report(
        "demo", Error{ErrorCode::kInvalidArgument, "false negatives found: the filter is broken"});
  }
  say(quiet, "\n");
  if (const int status = compare_layouts(quiet, options, threads, members, absent, answers, json);
      status != kExitOk) {
    return status;
  }
  json["dedup"] = nullptr;
  if (!options.skip_dedup) {
    say(quiet, "\n");
    std::fflush(stdout);
    const int status = run_dedup_demo(quiet ? nullptr : &std::cout, json["dedup"],
                                      std::min<std::uint64_t>(options.items, 1'000'000), threads);
    if (status != kExitOk) return status;
  }
  if (!options.json) return kExitOk;
  if (auto wrote = write_report(json_text(json), false); !wrote) {
    return report("demo", wrote.error());
  }
  return kExitOk;
}

Command add_demo_command(CLI::App& root) {
  auto options = std::make_shared<DemoOptions>();
  CLI::App* app =
      root.add_subcommand("demo", "Run the whole job on generated data and print what it measured");
  app->footer(
      "1,000,000 member digests, a filter for n = 1,000,000, p = 0.001 saved as an ABF1\n"
      "snapshot and reloaded, then 1,000,000 absent and 1,000,000 present queries: layout,\n"
      "fill ratio, estimated and observed false-positive rate, throughput per backend.\n"
      "Then the classic layout (hash protocol 1) and the blocked one (protocol 3, abf build\n"
      "--layout blocked) side by side on the same digests: bits per digest, modeled and\n"
      "observed false-positive rate, build and query throughput (medians of 3).\n"
      "Then the service: a SQLite catalog of 1,000,000 digests, its snapshot and its exact\n"
      "index, and a file of 1,000,000 candidates (99% new) deduped three ways by abf dedup's\n"
      "own code, each timed from opening the catalog to the output file in place: SQLite\n"
      "alone (--exact-only), filter + SQLite, filter + index (--index). Each way's wall and\n"
      "CPU time, time per candidate, speedup over SQLite alone and lookups; the three\n"
      "outputs must be equal (--items of fewer makes catalog and candidates that many).\n"
      "--json prints the same figures as one JSON object (snake_case keys) at the end:\n"
      "the first part's, \"layouts\" (one object a layout), then \"dedup\" (null with --skip-dedup), whose \"ways\" each carry\n"
      "wall_seconds, cpu_seconds, ns_per_digest, speedup_over_exact_only and the counts\n"
      "abf dedup --json prints (\"stats\").");
  app->add_option("--items", options->items,
                  "Members and absent candidates, 1..2^30 (default 1,000,000)")
      ->transform(count_validator(1, probe::kMaxExpectedItemCount));
  app->add_option("--fpp", options->fpp, "Target false-positive rate, 0 < p < 1 (default 0.001)")
      ->check(fpp_validator());
  app->add_option("--output,-o", options->output,
                  "Keep the snapshot at this path (default: a temporary file, removed)")
      ->check(not_a_stream("the demo's snapshot: it is reloaded from its path"));
  app->add_flag("--skip-dedup", options->skip_dedup,
                "Skip the second part (bulk dedup against a SQLite catalog)");
  app->add_flag("--json", options->json,
                "Print what it measured as one JSON object at the end instead of the steps");
  add_threads_option(*app, options->threads);
  return {app, [options] { return run_demo(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(5, add_demo_command);

}  // namespace abf::cli
