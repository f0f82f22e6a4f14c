// abf catalog: keep the exact store, a versioned SQLite catalog of digests.
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/report_fields.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct CatalogOptions {
  std::string db;
  std::string input = "-";
  std::string input_format = "hex";
  bool json = false;
  int busy_timeout_ms = kDefaultBusyTimeoutMs;
};

// How every command but init opens the catalog.
service::CatalogOpenOptions open_options(const CatalogOptions& options, bool read_only) {
  service::CatalogOpenOptions open;
  open.read_only = read_only;
  open.busy_timeout_ms = options.busy_timeout_ms;
  return open;
}

// The catalog id line that init and upgrade print, or their JSON.
std::string id_report(const CatalogOptions& options, const service::SqliteCatalog& catalog) {
  if (!options.json) return catalog.catalog_id()->hex() + "\n";
  return json_text({{"db", options.db},
                    {"catalog_id", catalog.catalog_id()->hex()},
                    {"schema_version", service::kCatalogSchemaVersion}});
}

int run_init(const CatalogOptions& options) {
  auto catalog = service::SqliteCatalog::create(options.db);
  if (!catalog) return report("catalog init", catalog.error());
  // The new catalog's id on stdout (snapshots built from it carry it).
  if (auto wrote = write_stdout(id_report(options, *catalog)); !wrote) {
    return report(
        "catalog init",
        Error{wrote.error().code,
              "created " + options.db + ", but printing its id failed: " + wrote.error().message});
  }
  if (!options.json) {
    std::cerr << "abf catalog init: created " << options.db
              << " (catalog version 0, empty; catalog id " << catalog->catalog_id()->hex() << ")\n";
  }
  return kExitOk;
}

// Opening for writing upgrades a schema-1 catalog (SqliteCatalog::open); this
// command does only that, so a catalog can get its id without a change.
int run_upgrade(const CatalogOptions& options) {
  std::int64_t schema_before = 0;
  {  // a read-only look first, closed before the writer opens
    auto before = service::SqliteCatalog::open(options.db, open_options(options, true));
    if (!before) return report("catalog upgrade", before.error());
    schema_before = before->schema_version();
  }
  auto catalog = service::SqliteCatalog::open(options.db, open_options(options, false));
  if (!catalog) return report("catalog upgrade", catalog.error());
  if (auto wrote = write_stdout(id_report(options, *catalog)); !wrote) {
    return report("catalog upgrade", wrote.error());
  }
  if (!options.json) {
    std::cerr << "abf catalog upgrade: " << options.db;
    if (schema_before == service::kCatalogSchemaVersion) {
      std::cerr << " is already at schema version " << service::kCatalogSchemaVersion;
    } else {
      std::cerr << " upgraded from schema version " << schema_before << " to "
                << service::kCatalogSchemaVersion;
    }
    std::cerr << "; catalog id " << catalog->catalog_id()->hex() << '\n';
  }
  return kExitOk;
}

int run_change(const CatalogOptions& options, bool adding) {
  const char* name = adding ? "catalog add" : "catalog remove";
  // The catalog's files are written: none may be the input.
  CommandFiles written;
  written.add_catalog("--db", options.db);
  CommandFiles input;
  input.add_file("--input", options.input);
  if (auto clash = input.overwritten_input(written)) return usage_error(name, *clash);
  auto format = parse_input_format(options.input_format);
  if (!format) return report(name, format.error());
  auto catalog = service::SqliteCatalog::open(options.db, open_options(options, false));
  if (!catalog) return report(name, catalog.error());
  auto reader = DigestReader::open(options.input, *format);
  if (!reader) return report(name, reader.error());
  auto change = [&] {
    // One transaction the library runs to its end: no count to show.
    const Activity activity(std::string(adding ? "adding to " : "removing from ") + options.db);
    return adding ? catalog->add(*reader) : catalog->remove(*reader);
  }();
  if (!change) return report(name, change.error());
  std::string out;
  if (options.json) {
    // The names abf.Catalog.add and remove return too (report_fields.hpp).
    namespace f = service::fields;
    const f::ChangeNames& names = adding ? f::kAdd : f::kRemove;
    out = json_text({{f::kDb, options.db},
                     {f::kOperation, names.operation},
                     {f::kCatalogVersion, change->version},
                     {f::kRead, change->requested},
                     {names.changed, change->changed},
                     {names.unchanged, change->unchanged}});
  } else {
    out = std::to_string(change->version) + "\n";
  }
  // The change is committed by now: a lost report says so.
  if (auto wrote = write_stdout(out); !wrote) {
    return report(name,
                  Error{wrote.error().code,
                        "catalog version " + std::to_string(change->version) + " of " + options.db +
                            " was committed, but printing it failed: " + wrote.error().message});
  }
  if (!options.json) {
    std::cerr << "abf " << name << ": catalog version " << change->version << ": "
              << with_commas(change->changed) << (adding ? " added, " : " removed, ")
              << with_commas(change->unchanged) << (adding ? " already present" : " not present")
              << " (of " << with_commas(change->requested) << " read)\n";
  }
  return kExitOk;
}

int run_stats(const CatalogOptions& options) {
  auto catalog = service::SqliteCatalog::open(options.db, open_options(options, true));
  if (!catalog) return report("catalog stats", catalog.error());
  auto stats = catalog->stats();
  if (!stats) return report("catalog stats", stats.error());
  std::ostringstream out;
  if (options.json) {
    const nlohmann::ordered_json json = {
        {"db", options.db},
        {"schema_version", stats->schema_version},
        {"catalog_id", stats->catalog_id ? nlohmann::ordered_json(stats->catalog_id->hex())
                                         : nlohmann::ordered_json(nullptr)},
        {"latest_version", stats->latest_version},
        {"version_count", stats->version_count},
        {"live_artifacts", stats->live_artifacts},
        {"fingerprint", stats->latest_fingerprint.hex()},
        {"artifact_rows", stats->artifact_rows},
        {"removed_rows", stats->removed_rows},
        {"file_bytes", stats->file_bytes},
    };
    out << json_text(json);
  } else {
    out << "catalog          " << options.db << '\n'
        << "schema version   " << stats->schema_version << '\n'
        << "catalog id       "
        << (stats->catalog_id ? stats->catalog_id->hex()
                              : "none yet (schema 1; `abf catalog upgrade` assigns one)")
        << '\n'
        << "latest version   " << stats->latest_version << '\n'
        << "versions         " << with_commas(stats->version_count) << '\n'
        << "live artifacts   " << with_commas(stats->live_artifacts) << '\n'
        << "fingerprint      " << stats->latest_fingerprint.hex() << " (of the latest version)\n"
        << "artifact rows    " << with_commas(stats->artifact_rows) << " ("
        << with_commas(stats->removed_rows) << " closed by a remove)\n"
        << "file size        " << with_commas(stats->file_bytes) << " bytes\n";
  }
  if (auto wrote = write_stdout(out.str()); !wrote) return report("catalog stats", wrote.error());
  return kExitOk;
}

// --db: SQLite opens a database by name, so it is never a stream.
CLI::Option* add_db_option(CLI::App& app, CatalogOptions& options, const std::string& help) {
  return app.add_option("--db", options.db, help)
      ->required()
      ->check(not_a_stream("a catalog database, which SQLite opens by name"));
}

void add_input_options(CLI::App& app, CatalogOptions& options) {
  app.add_option(
      "--input,-i", options.input,
      "Digest file, or - for standard input (default -); text lines as build reads them");
  app.add_option("--input-format,-f", options.input_format, "hex or bin (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}));
}

Command add_catalog_command(CLI::App& root) {
  auto options = std::make_shared<CatalogOptions>();
  CLI::App* app = root.add_subcommand(
      "catalog", "Keep the exact store: a versioned SQLite catalog of artifact digests");
  app->require_subcommand(1);
  app->footer(
      "Every add or remove is one new catalog version (its number printed on stdout, the\n"
      "counts on stderr); nothing is ever deleted, so a snapshot can be built for any\n"
      "version (abf build --from-catalog). --db is a file, never - (SQLite opens it by name).\n"
      "A malformed digest anywhere in the input rolls the whole change back.\n"
      "add and remove read the input in runs of up to 4,194,304 digests (128 MiB), each\n"
      "sorted and written in key order, so a large random input costs about what a sorted\n"
      "one does (docs/performance.md, \"Catalogs at import speed\").\n"
      "Each catalog has a random catalog id, made by init (printed on stdout); snapshots built\n"
      "from it carry the id, and `abf dedup` refuses snapshots of any other catalog. A catalog\n"
      "made before ids (schema 1) gets one when first opened for writing (add, remove, upgrade).\n"
      "Each version also keeps its item count and content fingerprint, which a snapshot built\n"
      "from it carries; catalogs made before that (schema 2) compute them on that first write.\n"
      "Examples:\n"
      "  abf catalog init --db catalog.db\n"
      "  abf catalog add --db catalog.db --input digests.txt\n"
      "  abf catalog remove --db catalog.db -f bin --input gone.bin\n"
      "  abf catalog stats --db catalog.db --json\n"
      "  abf catalog upgrade --db old-catalog.db");
  CLI::App* init = app->add_subcommand("init", "Create a new, empty catalog (version 0)");
  add_db_option(*init, *options, "Catalog database to create (never overwritten)");
  CLI::App* add = app->add_subcommand("add", "Add digests as one new catalog version");
  add_db_option(*add, *options, "Catalog database");
  add_input_options(*add, *options);
  CLI::App* remove = app->add_subcommand("remove", "Remove digests as one new catalog version");
  add_db_option(*remove, *options, "Catalog database");
  add_input_options(*remove, *options);
  CLI::App* stats = app->add_subcommand("stats", "Print the catalog's versions and counts");
  add_db_option(*stats, *options, "Catalog database");
  CLI::App* upgrade = app->add_subcommand(
      "upgrade",
      "Bring a catalog to the current schema (its id, every version's count and fingerprint)");
  add_db_option(*upgrade, *options, "Catalog database");
  for (CLI::App* sub : {init, add, remove, stats, upgrade}) {
    sub->add_flag("--json", options->json,
                  "Print one JSON object instead of text (docs/cli.md lists its keys)");
  }
  for (CLI::App* sub : {add, remove, stats, upgrade}) {
    add_busy_timeout_option(*sub, options->busy_timeout_ms);
  }
  return {app, [options, init, add, remove, stats, upgrade] {
            if (init->parsed()) return run_init(*options);
            if (upgrade->parsed()) return run_upgrade(*options);
            if (add->parsed()) return run_change(*options, true);
            if (remove->parsed()) return run_change(*options, false);
            if (stats->parsed()) return run_stats(*options);
            return kExitUsage;
          }};
}

}  // namespace

ABF_REGISTER_COMMAND(60, add_catalog_command);

}  // namespace abf::cli
