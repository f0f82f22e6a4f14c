// abf merge: the OR of snapshots built in pieces, saved as one snapshot.
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
};

int run_merge(const MergeCommandOptions& options) {
  apply_threads(options.threads);
  auto key = key_from_option(options.key_file);
  if (!key) return report("merge", key.error());
  LoadOptions load_options;
  load_options.key = std::move(*key);
  std::vector<Filter> filters;
  filters.reserve(options.inputs.size());
  for (const auto& input : options.inputs) {
    // Large snapshots are mapped, not copied: resident memory stays about
    // the result's size plus the page cache.
    auto filter = load_snapshot(input, load_options);
    if (!filter) {
      Error error = filter.error();
      error.message = input + ": " + error.message;
      return report("merge", error);
    }
    filters.push_back(std::move(*filter));
  }
  MergeOptions merge_options;
  merge_options.catalog_version = options.catalog_version;
  merge_options.labels = options.inputs;
  auto merged = merge_filters(filters, merge_options);
  if (!merged) return report("merge", merged.error());
  if (auto saved = save_snapshot(*merged, options.output); !saved) {
    return report("merge", saved.error());
  }
  std::cout << "wrote " << options.output << ": " << filters.size() << " snapshots, "
            << with_commas(merged->inserted_item_count())
            << " digests, m = " << with_commas(merged->bit_count())
            << " bits, k = " << merged->hash_count() << ", fill " << merged->fill_ratio()
            << ", estimated false-positive rate " << merged->estimate_false_positive_rate()
            << ", catalog version " << merged->catalog_version() << '\n';
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
      "(keyFingerprint), expectedItemCount, targetFpp and catalogVersion (unless\n"
      "--catalog-version names the result's); their insertedItemCounts are summed and may\n"
      "not exceed expectedItemCount. Keyed parts need their --key-file; the result is keyed\n"
      "with the same key and keeps the parts' catalogId.\n"
      "Example:\n"
      "  abf merge part-0.abf part-1.abf part-2.abf --output catalog.abf");
  app->add_option("inputs", options->inputs, "Snapshots to merge (at least one)")
      ->required()
      ->check(CLI::ExistingFile);
  app->add_option("--output,-o", options->output, "Snapshot to write (atomically)")->required();
  app->add_option("--catalog-version", options->catalog_version,
                  "catalogVersion of the result; lets inputs of different versions merge");
  add_key_file_option(*app, options->key_file, "open keyed (hash protocol 2) parts");
  add_threads_option(*app, options->threads);
  return {app, [options] { return run_merge(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(50, add_merge_command);

}  // namespace abf::cli
