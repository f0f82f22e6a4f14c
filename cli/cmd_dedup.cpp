// abf dedup: the bulk dedup job. Prints the input digests that are not in the
// exact store (a catalog at its newest version, or an exact index alone);
// a snapshot's filter in front proves most of them absent, and only its
// `Maybe` answers cost an exact lookup. The job itself is run_dedup_job
// (dedup_job.hpp), which `abf demo` times too.
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/service.hpp"
#include "command.hpp"
#include "common.hpp"
#include "dedup_job.hpp"

namespace abf::cli {
namespace {

struct DedupOptions {
  std::string snapshot;
  std::string index;
  std::string db;
  std::string input = "-";
  std::string input_format = "hex";
  std::string output = "-";
  std::string stats_json;
  std::string backend = "auto";
  std::string key_file;
  bool exact_only = false;
  bool lines = false;
  bool json = false;
  std::uint64_t head_cache_digests = service::kDefaultHeadCacheDigests;
  unsigned threads = 0;
  int busy_timeout_ms = kDefaultBusyTimeoutMs;
};

int run_dedup(const DedupOptions& options) {
  if (options.db.empty() && options.index.empty()) {
    return usage_error("dedup",
                       "no exact store: give --db (a catalog), --index (an exact index, of a "
                       "catalog or of a list: abf index -i LIST), or both");
  }
  if (options.lines && options.input_format == "bin") {
    return usage_error("dedup",
                       "--lines prints the input lines of the new digests; binary input (-f bin) "
                       "has no lines");
  }
  if (options.snapshot == "-" && options.input == "-") {
    return usage_error("dedup",
                       "--snapshot - and --input - both read standard input; give one a file");
  }
  CommandFiles inputs;
  inputs.add_catalog("--db", options.db);
  inputs.add_filter_set("--snapshot", options.snapshot);
  inputs.add_index_set("--index", options.index);
  inputs.add_file("--input", options.input);
  inputs.add_file("--key-file", options.key_file);
  for (const auto& [option, written] :
       {std::pair<std::string_view, const std::string*>{"--output", &options.output},
        {"--stats-json", &options.stats_json}}) {
    if (auto clash = output_overwrites_input(inputs, option, *written)) {
      return usage_error("dedup", *clash);
    }
  }
  if (options.stats_json == "-" && options.output == "-") {
    return usage_error("dedup",
                       "--stats-json - and --output - both write standard output; give one a file");
  }
  apply_threads(options.threads);
  auto format = parse_input_format(options.input_format);
  if (!format) return report("dedup", format.error());
  auto backend = backend_from_option(options.backend);
  if (!backend) return report("dedup", backend.error());
  auto key = key_from_option(options.key_file);
  if (!key) return report("dedup", key.error());

  DedupJob job{
      .snapshot = options.snapshot,
      .index = options.index,
      .db = options.db,
      .input = options.input,
      .format = *format,
      .output = options.output,
      .backend = *backend,
      .load_options = {},
      .exact_only = options.exact_only,
      .lines = options.lines,
      .head_cache_digests = options.head_cache_digests,
      .busy_timeout_ms = options.busy_timeout_ms,
  };
  job.load_options.key = std::move(*key);
  auto outcome = run_dedup_job(std::move(job));
  if (!outcome) return report("dedup", outcome.error());
  const nlohmann::ordered_json& json = outcome->stats;
  const service::DedupReport& result = outcome->report;

  if (!options.stats_json.empty()) {
    auto file = AtomicFile::create(options.stats_json);
    if (!file) return report("dedup", file.error());
    if (auto wrote = file->write(json_text(json)); !wrote) return report("dedup", wrote.error());
    if (auto done = file->commit(); !done) return report("dedup", done.error());
  }
  if (auto committed = outcome->output.commit(); !committed) {
    return report("dedup", committed.error());
  }
  // The counts: on stderr when stdout has the digests (the default).
  const bool stdout_has_data = options.output == "-" || options.stats_json == "-";
  std::string counts;
  if (options.json) {
    counts = json_text(json);
  } else {
    std::ostringstream out;
    out << "abf dedup: ";
    if (outcome->index_only) {
      out << "index " << options.index << " (version " << result.catalog_version
          << ", no catalog)";
    } else {
      out << "catalog version " << result.catalog_version;
    }
    out << ", " << (outcome->filter_used ? "filter in front" : "exact store only")
        << (outcome->index_version && !outcome->index_only
                ? ", index of version " + std::to_string(*outcome->index_version)
                : std::string())
        << ", " << result.seconds << " s\n";
    if (result.lag.versions_behind != 0) {
      out << "  snapshot of version " << outcome->snapshot_version.value_or(0)
          << ", behind the catalog by "
          << counted(result.lag.versions_behind, "version") << " and "
          << counted(result.lag.digests_added, "added digest")
          << ":\n  its absent answers were checked against those (a snapshot"
             " rebuilt with abf build --from-catalog needs no such check)\n";
    }
    for (const auto& [name, value] : json.items()) {
      if (name == "catalog_version" || name == "snapshot_version" || name == "filter" ||
          name == "seconds") {
        continue;
      }
      out << "  " << name << ' ' << value.dump() << '\n';
    }
    counts = out.str();
  }
  if (auto wrote = write_report(counts, stdout_has_data); !wrote) {
    return report("dedup", wrote.error());
  }
  return kExitOk;
}

Command add_dedup_command(CLI::App& root) {
  auto options = std::make_shared<DedupOptions>();
  CLI::App* app = root.add_subcommand(
      "dedup",
      "Print the input digests not in the catalog or index (bulk dedup through the filter)");
  app->footer(
      "Output: one lowercase hex digest per line, in input order: the input digests absent from\n"
      "the catalog at its newest version (read once, at the start). The filter proves most of\n"
      "them absent; each `Maybe` costs one SQLite lookup, so the output always equals the\n"
      "catalog's answer. A snapshot older than the catalog still answers exactly: its `absent`\n"
      "answers are checked against the digests added after its version (held in memory, up to\n"
      "--head-cache-digests; beyond that each is one SQLite lookup), and the counts say how far\n"
      "it lags (lag_versions, lag_digests_added) and what that cost (head_lookups; head_present:\n"
      "those found present, which the snapshot alone would have listed as new).\n"
      "Each new digest is written once, at its first occurrence; later ones count as\n"
      "repeats. The digests written so far are held in memory: 32 bytes each, plus a\n"
      "table of 16-32 bytes each (48 while it doubles); for an input file the table is\n"
      "sized at the start for all its digests, up to 16.7 million (16-32 bytes each).\n"
      "Counts go to stderr (to stdout with --output FILE), as JSON with --json, and with\n"
      "--stats-json to a JSON file: catalog_version (the version the output is exact for),\n"
      "snapshot_version, total = new + repeats + present, negative, maybe, false_positives,\n"
      "lag_versions, lag_digests_added, head_lookups, head_present, exact_lookups,\n"
      "exact_lookups_avoided, negative_bypass_ratio, observed_false_positive_rate,\n"
      "false_discovery_ratio, seconds.\n"
      "Nothing is written on error: files are left as they were, and digests for standard\n"
      "output (the default) are staged (in memory up to 1 MiB, then in an unlinked\n"
      "temporary file in $TMPDIR, default /tmp) and copied to stdout only at the end.\n"
      "The snapshot must be built from this catalog (abf build --from-catalog writes its\n"
      "catalogId and content fingerprint): one of another catalog or of none, one whose\n"
      "fingerprint or item count differs from what the catalog holds at its version (a\n"
      "catalog restored from a backup, a build from other digests), one of a version the\n"
      "catalog lacks, and one without a fingerprint are refused (catalog_mismatch), since\n"
      "its `absent` answers would be wrong. A keyed snapshot needs its --key-file. A filter\n"
      "set (abf build --from-catalog --shards) is given by its manifest, and is verified\n"
      "and used whole.\n"
      "Examples:\n"
      "  abf dedup --snapshot c.abf --db catalog.db --input candidates.txt > new.txt\n"
      "  abf dedup -s c.abf --db catalog.db -f bin -i cand.bin --stats-json stats.json\n"
      "  abf dedup -s c.abf --db catalog.db -i cand.txt --exact-only   (the baseline)\n"
      "  abf dedup -s c.abf --index c.abfx --db catalog.db -f bin -i cand.bin\n"
      "  abf index -i known.txt -o known.abfx && abf dedup --index known.abfx -i cand.txt\n"
      "With --index (abf index writes one), the `Maybe` answers are looked up in that exact\n"
      "index, in memory, instead of SQLite: same output, a lookup of a cache miss or two\n"
      "rather than a B-tree walk. It is checked like the snapshot (catalog id, version,\n"
      "content fingerprint, item count, and its digests against its fingerprint) and refused\n"
      "(catalog_mismatch) if it is not what the catalog holds at its version. Index and\n"
      "snapshot may be of different versions: digests added after the index's version are\n"
      "asked of SQLite (held in memory up to --head-cache-digests), and so are those it holds\n"
      "when digests were removed since. The counts add index_version, index_lookups and\n"
      "store_lookups (exact_lookups = index_lookups + store_lookups).\n"
      "No catalog: --index FILE without --db answers from the index alone (an index of a\n"
      "list, abf index -i LIST, or of a catalog version): the output is the input digests\n"
      "the index lacks. A snapshot in front of it must be of the same catalog id (zero for\n"
      "a list) and version and hold exactly the index's digests (its insertion count and\n"
      "content fingerprint the index's: build it from the same list with --distinct), else\n"
      "catalog_mismatch. Without --snapshot (or with --exact-only) the exact store, the\n"
      "index or SQLite, answers every candidate at its newest version.\n"
      "--lines (text input): print each new digest's whole input line (or -z record) as read,\n"
      "not its hex, so sha256sum-style input keeps its file names:\n"
      "  abf digest -r blobs | abf dedup --index known.abfx --lines    (the new files)");
  app->add_option("--snapshot,-s", options->snapshot,
                  "ABF1 snapshot or filter-set manifest built from the catalog (or the index's\n"
                  "list), or - for a snapshot on standard input (default: none, the exact store\n"
                  "answers every candidate)");
  app->add_option("--db", options->db,
                  "Catalog database (opened read-only); default: none, --index alone answers")
      ->check(not_a_stream("a catalog database, which SQLite opens by name"));
  app->add_option("--index", options->index,
                  "Exact index or index set (abf index) to answer from memory: of the catalog,\n"
                  "SQLite behind it, or, without --db, the exact store itself")
      ->check(not_a_stream("an index file, which is read whole"));
  app->add_option("--input,-i", options->input, "Digest file, or - for standard input (default -)");
  app->add_option("--input-format,-f", options->input_format, "hex or bin (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}));
  app->add_option("--output,-o", options->output,
                  "Where to write the new digests (atomically), - for standard output (default -)");
  app->add_option("--stats-json", options->stats_json,
                  "Also write the counts as JSON to this file (- for standard output)");
  app->add_flag("--json", options->json, "Print the counts as one JSON object instead of text");
  add_key_file_option(*app, options->key_file, "open a keyed (hash protocol 2) snapshot");
  add_backend_option(*app, options->backend, "Filter engine");
  app->add_flag("--exact-only", options->exact_only,
                "Ask the exact store for every candidate, filter unused (the baseline; same\n"
                "output); a --snapshot is then optional");
  app->add_flag("--lines", options->lines,
                "Print each new digest's whole input line (or -z record), file name included,\n"
                "instead of its hex (text input only)");
  app->add_option("--head-cache-digests", options->head_cache_digests,
                  "Most digests added after the snapshot's version to hold in memory (32 bytes\n"
                  "each; default 2097152); beyond it each filter `absent` is a SQLite lookup")
      ->transform(count_validator(0));
  add_threads_option(*app, options->threads);
  add_busy_timeout_option(*app, options->busy_timeout_ms);
  return {app, [options] { return run_dedup(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(65, add_dedup_command);

}  // namespace abf::cli
