// abf merge: the OR of snapshots built in pieces, saved as one snapshot.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct MergeCommandOptions {
  std::vector<std::string> inputs;
  std::string output;
  std::optional<std::uint64_t> catalog_version;
  std::string key_file;
  unsigned threads = 0;
  bool json = false;
};

int run_merge(const MergeCommandOptions& options) {
  if (auto refused = binary_to_terminal(options.output)) return usage_error("merge", *refused);
  if (std::ranges::count(options.inputs, "-") > 1) {
    return usage_error("merge", "standard input (-) can be only one of the inputs");
  }
  // Filter sets merge into a set, shard by shard; snapshots into a snapshot.
  bool sets = false;
  for (const auto& input : options.inputs) {
    auto is_set = names_filter_set(input);
    if (!is_set) return report("merge", is_set.error());
    sets = sets || *is_set;
  }
  CommandFiles inputs;
  for (const auto& input : options.inputs) inputs.add_filter_set("input", input);
  inputs.add_file("--key-file", options.key_file);
  CommandFiles outputs;
  if (sets) {
    outputs.add_filter_set("--output", options.output, /*written=*/true);
  } else {
    outputs.add_file("--output", options.output);
  }
  if (auto clash = inputs.overwritten_input(outputs)) return usage_error("merge", *clash);
  if (sets && options.output == "-") {
    return usage_error("merge",
                       "the inputs are filter sets, whose merge is a manifest and shard files, "
                       "which cannot go to standard output; name a file with --output");
  }
  apply_threads(options.threads);
  const auto start = std::chrono::steady_clock::now();
  auto key = key_from_option(options.key_file);
  if (!key) return report("merge", key.error());
  LoadOptions load_options;
  load_options.key = std::move(*key);
  std::vector<FilterSet> filters;
  filters.reserve(options.inputs.size());
  {
    Progress progress("loading", options.inputs.size(), "snapshots");
    for (const auto& input : options.inputs) {
      auto filter = load_set_argument(input, load_options);
      if (!filter) {
        Error error = filter.error();
        // Every error names the input it is about, once.
        if (input != "-" && error.message.find(input) == std::string::npos) {
          error.message = input + ": " + error.message;
        }
        return report("merge", error);
      }
      filters.push_back(std::move(*filter));
      progress.update(filters.size());
    }
  }
  MergeOptions merge_options;
  merge_options.catalog_version = options.catalog_version;
  merge_options.labels = options.inputs;
  std::replace(merge_options.labels.begin(), merge_options.labels.end(), std::string("-"),
               std::string("<stdin>"));
  auto merged = [&] {
    const Activity activity("merging " + counted(filters.size(), "snapshot"));
    return merge_filter_sets(filters, merge_options);
  }();
  if (!merged) return report("merge", merged.error());
  if (auto saved = sets ? save_filter_set(*merged, options.output)
                        : save_snapshot(merged->shard(0), options.output);
      !saved) {
    return report("merge", saved.error());
  }
  // With --output - the snapshot is standard output: the report goes to
  // standard error.
  const bool to_stdout = options.output == "-";
  std::string out;
  if (options.json) {
    nlohmann::ordered_json json;
    json["output"] = options.output;
    json["inputs"] = options.inputs;
    json.update(sets ? set_json(*merged) : filter_json(merged->shard(0)));
    json["seconds"] = seconds_since(start);
    out = json_text(json);
  } else {
    out = "wrote " + (to_stdout ? std::string("<stdout>") : options.output) + ": merged " +
          std::to_string(filters.size()) +
          (sets ? (filters.size() == 1 ? " filter set, " : " filter sets, ")
                : (filters.size() == 1 ? " snapshot, " : " snapshots, ")) +
          counted(merged->inserted_item_count(), "digest") +
          " (the parts' counts summed; a digest in two parts counts twice), " +
          (sets ? set_text(*merged) : filter_text(merged->shard(0))) + "\n";
  }
  if (auto wrote = write_report(out, to_stdout); !wrote) {
    return report("merge", summary_error(options.output, wrote.error()));
  }
  return kExitOk;
}

Command add_merge_command(CLI::App& root) {
  auto options = std::make_shared<MergeCommandOptions>();
  CLI::App* app = root.add_subcommand(
      "merge", "OR snapshots of parts of one catalog into the snapshot of the whole");
  app->footer(
      "Build a large catalog in pieces (one `abf build` per piece, on any machines, all with the\n"
      "same --expected-items and --fpp for the WHOLE catalog) and join them here. The result is\n"
      "byte for byte the snapshot one build of all the digests would give.\n"
      "The inputs must agree on catalogId, bitCount, hashCount, hashProtocolVersion, the key\n"
      "(keyFingerprint), expectedItemCount, targetFpp and catalogVersion; their\n"
      "insertedItemCounts are summed and may not exceed expectedItemCount. Keyed parts need\n"
      "their --key-file; the result is keyed with the same key and keeps the parts' catalogId.\n"
      "--catalog-version relabels parts tied to no catalog (catalogId zero); parts of a\n"
      "catalog keep their version, and --catalog-version must be that version.\n"
      "The result's content fingerprint is the sum of the parts' when every part has one\n"
      "(exact for the union); otherwise it has none, and dedup and serve refuse it.\n"
      "The summary goes to stdout, or to stderr with --output - (stdout is then the snapshot).\n"
      "Filter sets (abf build --shards) merge shard by shard into a set at --output (its\n"
      "manifest): all inputs need the same shard count and --expected-items, and the result\n"
      "cannot go to standard output.\n"
      "Examples:\n"
      "  abf merge part-0.abf part-1.abf part-2.abf --output catalog.abf\n"
      "  abf merge part-*.abf -o - --json > catalog.abf 2> merge.json\n"
      "  abf merge part-0.abfs part-1.abfs -o catalog.abfs");
  app->add_option("inputs", options->inputs,
                  "Snapshots to merge (at least one; one of them may be - for standard input)")
      ->required();
  app->add_option("--output,-o", options->output,
                  "Snapshot to write (atomically), or - for standard output")
      ->required();
  app->add_flag("--json", options->json, "Print the summary as one JSON object");
  app->add_option("--catalog-version", options->catalog_version,
                  "catalogVersion of the result; lets inputs of different versions merge, "
                  "only when they are tied to no catalog")
      ->transform(count_validator(0));
  add_key_file_option(*app, options->key_file, "open keyed (hash protocol 2) parts");
  add_threads_option(*app, options->threads);
  return {app, [options] { return run_merge(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(50, add_merge_command);

}  // namespace abf::cli
