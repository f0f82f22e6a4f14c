// abf dedup: the bulk dedup job. Prints the input digests that are not in the
// catalog at the snapshot's version; the filter proves most of them absent,
// and only its `Maybe` answers cost a SQLite lookup. Also the second part of
// `abf demo` (dedup_demo.hpp).
#include <stdlib.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/service.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "command.hpp"
#include "common.hpp"
#include "dedup_demo.hpp"
#include "distinct.hpp"

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
  bool json = false;
  std::uint64_t head_cache_digests = service::kDefaultHeadCacheDigests;
  unsigned threads = 0;
  int busy_timeout_ms = kDefaultBusyTimeoutMs;
};

constexpr std::size_t kHexLine = 65;  // 64 hex digits and '\n'

// The counts. total = new + repeats + present: `new` digests are written
// once each, `repeats` are later occurrences of one already written.
nlohmann::ordered_json stats_json(const service::DedupReport& report, bool filter_used,
                                  std::uint64_t written,
                                  const service::IndexedRepository* indexed) {
  const service::BatchCounts& c = report.counts;
  const std::uint64_t absent = c.total - c.present;
  nlohmann::ordered_json json = {
      {"catalog_version", report.catalog_version},
      {"snapshot_version", report.lag.snapshot_version},
      {"filter", filter_used},
      {"total", c.total},
      {"new", written},
      {"repeats", absent - written},
      {"present", c.present},
      {"negative", c.negative},
      {"maybe", c.maybe},
      {"false_positives", c.false_positive},
      {"lag_versions", report.lag.versions_behind},
      {"lag_digests_added", report.lag.digests_added},
      {"head_lookups", c.head_lookups},
      {"head_present", c.head_present},
      {"exact_lookups", c.exact_lookups},
      {"exact_lookups_avoided", c.lookups_avoided()},
      {"negative_bypass_ratio", c.negative_bypass_ratio()},
      {"observed_false_positive_rate", c.observed_false_positive_rate()},
      {"false_discovery_ratio", c.false_discovery_ratio()},
      {"seconds", report.seconds},
  };
  if (indexed != nullptr) {
    // exact_lookups = index_lookups (answered in memory) + store_lookups (SQLite).
    const auto counts = indexed->counts();
    json["index_version"] = indexed->index().catalog_version();
    json["index_lookups"] = counts.index_lookups;
    json["store_lookups"] = counts.store_lookups;
  }
  return json;
}

int run_dedup(const DedupOptions& options) {
  if (options.snapshot == "-" && options.input == "-") {
    return usage_error("dedup",
                       "--snapshot - and --input - both read standard input; give one a file");
  }
  for (const auto& [option, written] :
       {std::pair<std::string_view, const std::string*>{"--output", &options.output},
        {"--stats-json", &options.stats_json}}) {
    if (auto clash = output_overwrites_input(*written,
                                             {{"--db", options.db},
                                              {"--snapshot", options.snapshot},
                                              {"--index", options.index},
                                              {"--input", options.input}},
                                             option)) {
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

  service::CatalogOpenOptions open_options;
  open_options.read_only = true;  // dedup never changes the catalog
  open_options.busy_timeout_ms = options.busy_timeout_ms;
  auto catalog = service::SqliteCatalog::open(options.db, open_options);
  if (!catalog) return report("dedup", catalog.error());
  // The publisher is bound to the catalog: a snapshot of another catalog,
  // or of none, or one that does not hold what the catalog holds at its
  // version (or of a version the catalog lacks), is refused before any input
  // is read or output written (PROTOCOL.md section 8).
  // --index: the exact answers come from the index (checked against the
  // catalog like a snapshot, before any input is read), with SQLite behind
  // it for what changed after the index's version. The publisher and the
  // service share that one store, so the snapshot is checked once.
  std::optional<service::IndexedRepository> indexed;
  if (!options.index.empty()) {
    auto index = [&] {
      const Activity activity("loading " + options.index);
      return IndexSet::load(options.index);
    }();
    if (!index) return report("dedup", index.error());
    if (auto bound = service::check_index_binding(*index, options.index, *catalog); !bound) {
      return report("dedup", bound.error());
    }
    indexed.emplace(*catalog, std::move(*index), options.head_cache_digests);
  }
  service::ArtifactRepository& store =
      indexed ? static_cast<service::ArtifactRepository&>(*indexed) : *catalog;
  service::Metrics metrics;
  service::SnapshotPublisher publisher(&metrics, store);
  LoadOptions load_options;
  load_options.key = std::move(*key);
  auto snapshot = [&]() -> Result<std::shared_ptr<const service::Snapshot>> {
    if (options.snapshot != "-") return publisher.load_and_publish(options.snapshot, load_options);
    auto filter = load_set_argument(options.snapshot, load_options);
    if (!filter) return std::unexpected(filter.error());
    return publisher.publish(std::move(*filter), "<stdin>");
  }();
  if (!snapshot) return report("dedup", snapshot.error());
  const std::uint64_t version = (*snapshot)->catalog_version();
  auto reader = DigestReader::open(options.input, *format);
  if (!reader) return report("dedup", reader.error());
  auto output = DataOutput::create(options.output);
  if (!output) return report("dedup", output.error());

  service::ServiceOptions service_options;
  service_options.use_filter = !options.exact_only;
  service_options.backend = *backend;
  service_options.head_cache_digests = options.head_cache_digests;
  const service::ArtifactExistenceService service(publisher, store, &metrics, service_options);
  std::string text;  // only grows: never cleared nor filled twice
  // Each new digest once, at its first occurrence: the set holds the
  // digests written so far (never the present ones), in input order, its
  // table sized for the whole input when the input is a file.
  DigestSet written;
  constexpr std::uint64_t kReserveAtMost = std::uint64_t{1} << 24;  // a 256 MiB table
  written.reserve(static_cast<std::size_t>(
      std::min(reader->size_hint() / (*format == InputFormat::kBinary ? Digest::kSize : kHexLine),
               kReserveAtMost)));
  Progress progress("dedup", reader->size_hint(), "bytes");
  auto result = service::bulk_dedup(service, *reader, [&](std::span<const Digest> absent) {
    const std::size_t first = written.size();
    const std::size_t added = written.insert(absent);
    if (text.size() < added * kHexLine) text.resize(added * kHexLine);
    char* out = text.data();
    for (std::size_t i = first; i < first + added; ++i) out = write_hex_line(written[i], out);
    progress.update(reader->bytes_read());
    return output->write(std::string_view(text.data(), added * kHexLine));
  });
  if (!result) return report("dedup", result.error());

  const auto json =
      stats_json(*result, !options.exact_only, written.size(), indexed ? &*indexed : nullptr);
  if (!options.stats_json.empty()) {
    auto file = AtomicFile::create(options.stats_json);
    if (!file) return report("dedup", file.error());
    if (auto wrote = file->write(json_text(json)); !wrote) return report("dedup", wrote.error());
    if (auto done = file->commit(); !done) return report("dedup", done.error());
  }
  if (auto committed = output->commit(); !committed) return report("dedup", committed.error());
  // The counts: on stderr when stdout has the digests (the default).
  const bool stdout_has_data = options.output == "-" || options.stats_json == "-";
  std::string counts;
  if (options.json) {
    counts = json_text(json);
  } else {
    std::ostringstream out;
    out << "abf dedup: catalog version " << result->catalog_version << ", "
        << (options.exact_only ? "exact store only" : "filter in front")
        << (indexed ? ", index of version " + std::to_string(indexed->index().catalog_version())
                    : std::string())
        << ", " << result->seconds << " s\n";
    if (result->lag.versions_behind != 0) {
      out << "  snapshot of version " << version << ", behind the catalog by "
          << counted(result->lag.versions_behind, "version") << " and "
          << counted(result->lag.digests_added, "added digest")
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
      "dedup", "Print the input digests not in the catalog (bulk dedup through the filter)");
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
      "With --index (abf index writes one), the `Maybe` answers are looked up in that exact\n"
      "index, in memory, instead of SQLite: same output, a lookup of a cache miss or two\n"
      "rather than a B-tree walk. It is checked like the snapshot (catalog id, version,\n"
      "content fingerprint, item count, and its digests against its fingerprint) and refused\n"
      "(catalog_mismatch) if it is not what the catalog holds at its version. Index and\n"
      "snapshot may be of different versions: digests added after the index's version are\n"
      "asked of SQLite (held in memory up to --head-cache-digests), and so are those it holds\n"
      "when digests were removed since. The counts add index_version, index_lookups and\n"
      "store_lookups (exact_lookups = index_lookups + store_lookups).");
  app->add_option("--snapshot,-s", options->snapshot,
                  "ABF1 snapshot or filter-set manifest built from the catalog, or - for a\n"
                  "snapshot on standard input")
      ->required();
  app->add_option("--db", options->db, "Catalog database (opened read-only)")
      ->required()
      ->check(not_a_stream("a catalog database, which SQLite opens by name"));
  app->add_option("--index", options->index,
                  "Exact index or index set of the catalog (abf index) to answer the filter's\n"
                  "`Maybe`s from memory, SQLite behind it (default: SQLite only)")
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
                "Ask SQLite for every candidate, filter unused (the baseline; same output)");
  app->add_option("--head-cache-digests", options->head_cache_digests,
                  "Most digests added after the snapshot's version to hold in memory (32 bytes\n"
                  "each; default 2097152); beyond it each filter `absent` is a SQLite lookup")
      ->transform(count_validator(0));
  add_threads_option(*app, options->threads);
  add_busy_timeout_option(*app, options->busy_timeout_ms);
  return {app, [options] { return run_dedup(*options); }};
}

// ---------------------------------------------------------------------------
// The demo.

std::string fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

struct TempDir {
  std::filesystem::path path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

}  // namespace

int run_dedup_demo(std::ostream& out, std::uint64_t size) {
  const std::uint64_t kCatalogSize = size;
  const std::uint64_t kCandidates = size;
  constexpr std::uint64_t kKnownEvery = 100;  // 1% of the candidates are in the catalog
  constexpr double kFpp = 0.01;
  const char* command = "demo";

  TempDir dir;
  {
    std::string pattern = (std::filesystem::temp_directory_path() / "abf-dedup-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return report(command, Error{ErrorCode::kIo, "cannot create a temporary directory"});
    }
    dir.path = pattern;
  }
  const auto db_path = dir.path / "catalog.db";
  const auto snapshot_path = dir.path / "catalog.abf";

  out << "\nPart 2: bulk dedup against the exact store, a SQLite catalog\n";
  const std::vector<Digest> members = generate_digests("catalog:", kCatalogSize);
  auto start = std::chrono::steady_clock::now();
  auto catalog = service::SqliteCatalog::create(db_path);
  if (!catalog) return report(command, catalog.error());
  auto added = catalog->add(members);
  if (!added) return report(command, added.error());
  std::error_code ec;
  out << "  catalog       " << counted(kCatalogSize, "digest")
      << " SHA-256(\"catalog:<i>\") as version " << added->version << ", written in "
      << fixed(seconds_since(start), 2) << " s ("
      << with_commas(std::filesystem::file_size(db_path, ec)) << " bytes of SQLite)\n";

  start = std::chrono::steady_clock::now();
  auto filter = service::build_filter_from_catalog(
      *catalog, added->version, BloomSpec{.expected_item_count = kCatalogSize, .target_fpp = kFpp});
  if (!filter) return report(command, filter.error());
  if (auto saved = save_snapshot(*filter, snapshot_path); !saved)
    return report(command, saved.error());
  service::Metrics metrics;
  service::SnapshotPublisher publisher(&metrics, *catalog);
  auto published = publisher.load_and_publish(snapshot_path);
  if (!published) return report(command, published.error());
  out << "  snapshot      catalog version " << filter->catalog_version()
      << ", m = " << with_commas(filter->bit_count()) << " bits, k = " << filter->hash_count()
      << ", fpp " << kFpp << ": built from the catalog, saved and published in "
      << fixed(seconds_since(start), 2) << " s\n";

  // Candidates: every 100th is a catalog member, the rest are new.
  std::string candidates(kCandidates * Digest::kSize, '\0');
  {
    const std::vector<Digest> fresh = generate_digests("candidate:", kCandidates);
    for (std::uint64_t i = 0; i < kCandidates; ++i) {
      const Digest& digest =
          i % kKnownEvery == 0 ? members[(i / kKnownEvery * 7919) % kCatalogSize] : fresh[i];
      std::memcpy(candidates.data() + i * Digest::kSize, digest.bytes.data(), Digest::kSize);
    }
  }
  out << "  candidates    " << with_commas(kCandidates) << ", of which "
      << with_commas(kCandidates - kCandidates / kKnownEvery) << " new (99%)\n";

  struct Run {
    service::DedupReport report;
    std::vector<Digest> absent;
  };
  const auto run = [&](bool use_filter) -> Result<Run> {
    service::ServiceOptions options;
    options.use_filter = use_filter;
    const service::ArtifactExistenceService service(publisher, *catalog, &metrics, options);
    auto reader = DigestReader::from_memory(candidates, InputFormat::kBinary, "candidates");
    Run result;
    result.absent.reserve(kCandidates);
    auto report =
        service::bulk_dedup(service, reader, [&](std::span<const Digest> absent) -> Result<void> {
          result.absent.insert(result.absent.end(), absent.begin(), absent.end());
          return {};
        });
    if (!report) return std::unexpected(report.error());
    result.report = *report;
    return result;
  };
  auto filtered = run(true);
  if (!filtered) return report(command, filtered.error());
  auto exact = run(false);
  if (!exact) return report(command, exact.error());

  const service::BatchCounts& f = filtered->report.counts;
  const service::BatchCounts& e = exact->report.counts;
  out << "  with filter   " << fixed(filtered->report.seconds, 3)
      << " s: " << with_commas(f.negative) << " proved absent by the filter, "
      << with_commas(f.maybe) << " maybe -> " << with_commas(f.exact_lookups) << " SQLite lookups ("
      << fixed(100.0 * static_cast<double>(f.exact_lookups) / static_cast<double>(f.total), 2)
      << "% of candidates), " << with_commas(f.false_positive) << " false positives\n";
  out << "                negative_bypass_ratio " << fixed(f.negative_bypass_ratio(), 4)
      << ", observed_false_positive_rate " << fixed(f.observed_false_positive_rate(), 5)
      << " (resolution ~"
      << fixed(1.0 / std::sqrt(static_cast<double>(f.negative + f.false_positive) * kFpp) * 100, 1)
      << "% relative), false_discovery_ratio " << fixed(f.false_discovery_ratio(), 4) << "\n";
  out << "  SQLite only   " << fixed(exact->report.seconds, 3)
      << " s: " << with_commas(e.exact_lookups) << " SQLite lookups\n";
  const bool same = filtered->absent == exact->absent;
  out << "  same output   " << (same ? "yes" : "NO") << ": " << with_commas(filtered->absent.size())
      << " new digests either way\n";
  const double saved_seconds = exact->report.seconds - filtered->report.seconds;
  out << "  saved         " << with_commas(e.exact_lookups - f.exact_lookups)
      << " SQLite lookups avoided, " << fixed(saved_seconds, 3) << " s saved ("
      << fixed(exact->report.seconds / filtered->report.seconds, 1) << "x faster)\n";
  if (!same) {
    return report(command, Error{ErrorCode::kInvalidArgument,
                                 "the filtered dedup disagrees with the exact store (a bug)"});
  }
  return kExitOk;
}

ABF_REGISTER_COMMAND(65, add_dedup_command);

}  // namespace abf::cli
