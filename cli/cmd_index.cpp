// abf index: writes the exact index (ABFX) of a catalog at one version, or of
// a plain list of digests (a file or standard input, no catalog), the
// in-memory exact answer `abf dedup --index` asks instead of SQLite (or
// alone, with no catalog at all).
#include <tbb/parallel_sort.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct IndexOptions {
  std::string db;
  std::string input;  // a list of digests instead of a catalog
  std::string input_format = "hex";
  std::string output;
  std::optional<std::uint64_t> version;
  std::uint32_t block_digests = kIndexDefaultBlockDigests;
  std::uint32_t shards = 1;
  bool json = false;
  unsigned threads = 0;
  int busy_timeout_ms = kDefaultBusyTimeoutMs;
};

// The size of the index file, or of a set's shard files (the manifest
// left out), from the counts written: each shard is an ABFX of its own n_i.
std::uint64_t index_bytes(const IndexOptions& options, std::uint64_t digest_count) {
  const auto file_size = [&](std::uint64_t n) {
    return IndexHeader{.digest_count = n,
                       .block_digests = options.block_digests,
                       .block_count = (n + options.block_digests - 1) / options.block_digests}
        .file_size();
  };
  if (options.shards <= 1) return file_size(digest_count);
  std::ifstream in(options.output, std::ios::binary);
  const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                        std::istreambuf_iterator<char>());
  auto manifest = parse_index_set_manifest(bytes, options.output);
  if (!manifest) return 0;  // just written and checked by its writer; 0 if it vanished since
  std::uint64_t total = 0;
  for (const IndexSetEntry& entry : manifest->shards) total += file_size(entry.digest_count);
  return total;
}

// The digests of a list, each once, ascending: what an index of it holds.
struct ListDigests {
  std::vector<Digest> digests;
  std::uint64_t read = 0;  // digests read, repeats included
  ContentFingerprint fingerprint;
};

// Reads the whole list into memory (32 bytes a digest: the memory
// `abf dedup --index` needs to load the index anyway), then sorts it on
// every core and drops the repeats.
Result<ListDigests> read_list(const IndexOptions& options, InputFormat format) {
  auto reader = DigestReader::open(options.input, format);
  if (!reader) return std::unexpected(reader.error());
  ListDigests list;
  const std::uint64_t record = format == InputFormat::kBinary ? Digest::kSize : 65;
  list.digests.reserve(static_cast<std::size_t>(reader->size_hint() / record));
  {
    Progress progress("reading " + reader->source_name(), reader->size_hint(), "bytes");
    constexpr std::size_t kChunk = 65536;
    for (;;) {
      const std::size_t at = list.digests.size();
      list.digests.resize(at + kChunk);
      auto got = reader->read(std::span(list.digests).subspan(at));
      if (!got) return std::unexpected(got.error());
      list.digests.resize(at + *got);
      if (*got == 0) break;
      progress.update(reader->bytes_read());
    }
  }
  list.read = list.digests.size();
  const Activity activity("sorting " + counted(list.read, "digest"));
  tbb::parallel_sort(list.digests.begin(), list.digests.end());
  list.digests.erase(std::unique(list.digests.begin(), list.digests.end()), list.digests.end());
  list.fingerprint = ContentFingerprint::of(list.digests);
  return list;
}

// abf index -i LIST: the index of the list's distinct digests, of no catalog
// (catalogId zero, version 0), with their content fingerprint.
int run_list_index(const IndexOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  auto format = parse_input_format(options.input_format);
  if (!format) return report("index", format.error());
  auto list = read_list(options, *format);
  if (!list) return report("index", list.error());
  const IndexIdentity identity{.catalog_id = CatalogId{},
                               .catalog_version = 0,
                               .content_fingerprint = list->fingerprint,
                               .block_digests = options.block_digests};
  {
    const Activity activity("writing " + options.output);
    if (options.shards > 1) {
      const std::span<const Digest> all(list->digests);
      const auto source = [&](const IndexDigestSink& sink) -> Result<void> {
        for (std::size_t at = 0; at < all.size(); at += 65536) {
          if (auto ok = sink(all.subspan(at, std::min<std::size_t>(65536, all.size() - at)));
              !ok) {
            return ok;
          }
        }
        return {};
      };
      auto wrote = write_index_set(options.output, identity, options.shards, source,
                                   {.block_digests = options.block_digests, .build_id = {}});
      if (!wrote) return report("index", wrote.error());
    } else if (auto wrote = save_index(options.output, identity, list->digests); !wrote) {
      return report("index", wrote.error());
    }
  }
  const double seconds = seconds_since(start);
  const std::uint64_t count = list->digests.size();
  const std::string source = options.input == "-" ? "<stdin>" : options.input;
  std::string text;
  if (options.json) {
    const nlohmann::ordered_json json = {
        {"output", options.output},
        {"input", source},
        {"catalog_id", nullptr},
        {"catalog_version", 0},
        {"read", list->read},
        {"repeats", list->read - count},
        {"digest_count", count},
        {"content_fingerprint", list->fingerprint.hex()},
        {"block_digests", options.block_digests},
        {"shards", options.shards},
        {"bytes", index_bytes(options, count)},
        {"seconds", seconds},
    };
    text = json_text(json);
  } else {
    std::ostringstream out;
    out << "abf index: wrote " << options.output << ": " << with_commas(count)
        << " distinct digests of " << source << ", of no catalog ("
        << counted(list->read - count, "repeat") << " dropped; content fingerprint "
        << list->fingerprint.hex() << ") in " << seconds << " s\n";
    text = out.str();
  }
  if (auto wrote = write_report(text, options.output == "-"); !wrote) {
    return report("index", wrote.error());
  }
  return kExitOk;
}

int run_index(const IndexOptions& options) {
  if (options.block_digests == 0 || (options.block_digests & (options.block_digests - 1)) != 0 ||
      options.block_digests > kIndexMaxBlockDigests) {
    return usage_error("index", "--block-digests " + std::to_string(options.block_digests) +
                                    " is not a power of two in 1..1048576");
  }
  if (options.shards < 1 || options.shards > kIndexSetMaxShardCount) {
    return usage_error("index", "--shards " + std::to_string(options.shards) +
                                    " is outside 1..65536");
  }
  if (options.shards > 1 && options.output == "-") {
    return usage_error("index",
                       "an index set (--shards > 1) is a manifest and shard files beside it; "
                       "-o must name a file, not standard output");
  }
  CommandFiles inputs;
  inputs.add_catalog("--db", options.db);
  inputs.add_file("--input", options.input);
  CommandFiles outputs;
  if (options.shards > 1) {
    outputs.add_index_set("--output", options.output, /*written=*/true);
  } else {
    outputs.add_file("--output", options.output);
  }
  if (auto clash = inputs.overwritten_input(outputs)) return usage_error("index", *clash);
  if (options.db.empty() == options.input.empty()) {
    return usage_error("index",
                       "give either --db (index a catalog version) or --input (index a list of "
                       "digests), not " + std::string(options.db.empty() ? "neither" : "both"));
  }
  if (!options.input.empty()) {
    if (options.version) {
      return usage_error("index",
                         "--version names a catalog version; an index of a list (--input) is of "
                         "no catalog");
    }
    apply_threads(options.threads);
    return run_list_index(options);
  }
  const auto start = std::chrono::steady_clock::now();
  auto catalog = service::SqliteCatalog::open(
      options.db, {.read_only = true, .busy_timeout_ms = options.busy_timeout_ms});
  if (!catalog) return report("index", catalog.error());
  std::uint64_t version = 0;
  if (options.version) {
    version = *options.version;
  } else {
    auto latest = catalog->latest_version();
    if (!latest) return report("index", latest.error());
    version = *latest;
  }
  auto built = [&] {
    const Activity activity("indexing " + options.db + " version " + std::to_string(version));
    if (options.shards > 1) {
      return service::build_index_set_from_catalog(*catalog, version, options.output,
                                                   options.shards,
                                                   {.block_digests = options.block_digests,
                                                    .build_id = std::nullopt});
    }
    return service::build_index_from_catalog(*catalog, version, options.output,
                                             options.block_digests);
  }();
  if (!built) return report("index", built.error());
  const double seconds = seconds_since(start);
  const bool stdout_has_data = options.output == "-";
  std::string text;
  if (options.json) {
    const nlohmann::ordered_json json = {
        {"output", options.output},
        {"catalog_id", catalog->catalog_id()->hex()},
        {"catalog_version", built->catalog_version},
        {"digest_count", built->digest_count},
        {"content_fingerprint", built->fingerprint.hex()},
        {"block_digests", options.block_digests},
        {"shards", options.shards},
        {"bytes", index_bytes(options, built->digest_count)},
        {"seconds", seconds},
    };
    text = json_text(json);
  } else {
    std::ostringstream out;
    out << "abf index: wrote " << options.output << ": " << with_commas(built->digest_count)
        << " digests of catalog " << catalog->catalog_id()->hex() << " at version "
        << built->catalog_version << " (content fingerprint " << built->fingerprint.hex() << ") in "
        << seconds << " s\n";
    text = out.str();
  }
  if (auto wrote = write_report(text, stdout_has_data); !wrote) {
    return report("index", wrote.error());
  }
  return kExitOk;
}

Command add_index_command(CLI::App& root) {
  auto options = std::make_shared<IndexOptions>();
  CLI::App* app = root.add_subcommand(
      "index",
      "Write the exact index (ABFX) of a catalog version or of a digest list, for abf dedup "
      "--index");
  app->footer(
      "An exact index is every digest the catalog holds at one version, sorted, in one\n"
      "checksummed file (docs/protocol.md, \"Exact index (ABFX)\"): 32 bytes a digest plus\n"
      "a 128-byte header naming the catalog, the version and its content fingerprint.\n"
      "`abf dedup --index` loads it into memory and asks it, not SQLite, about the filter's\n"
      "`Maybe` answers: a lookup costs one or two cache misses instead of a B-tree walk.\n"
      "The digests stream from the catalog in order, so memory stays small for a catalog of\n"
      "any size; the output appears only when whole (a temporary file renamed into place).\n"
      "The digests must add up to the count and content fingerprint the catalog records for\n"
      "the version, else nothing is written (a damaged catalog). The index answers for its\n"
      "version; dedup at a newer head checks what was added since against SQLite.\n"
      "--shards S (1..65536) writes an index set instead (manifest magic ABXS): S ABFX\n"
      "files beside -o, shard i holding the digests whose bytes 24..32 (big-endian) mod S\n"
      "are i, as a filter set of S shards splits them. The catalog is read once to count\n"
      "each shard, then once per 64 shards to write them (64 files open at a time); the\n"
      "shards appear first, the manifest last, by rename; the old set's shards go after.\n"
      "--input (-i) FILE|- indexes a list of digests instead of a catalog, read as build\n"
      "reads it (-f hex: lines or sha256sum output, -z records; -f bin: 32-byte records):\n"
      "its distinct digests (repeats dropped), of no catalog (catalogId zero, version 0),\n"
      "with their content fingerprint, so `abf dedup --index FILE` with no --db answers\n"
      "from it alone, exactly. The list is held in memory while it is sorted (32 bytes a\n"
      "digest, what dedup needs to load the index anyway).\n"
      "Examples:\n"
      "  abf index --db catalog.db -o catalog.abfx                 (the latest version)\n"
      "  abf index --db catalog.db --version 41 -o catalog-41.abfx\n"
      "  abf index --db catalog.db --shards 3 -o catalog.abxs        (3 shards + manifest)\n"
      "  abf dedup --snapshot c.abf --index catalog.abfx --db catalog.db -i cand.txt\n"
      "  abf index -i known.txt -o known.abfx                       (a list, no catalog)\n"
      "  abf dedup --index known.abfx -i cand.txt > new.txt\n"
      "  abf inspect catalog.abfx                                  (verify and describe)");
  CLI::Option* db = app->add_option("--db", options->db, "Catalog database (opened read-only)")
                        ->check(not_a_stream("a catalog database, which SQLite opens by name"));
  CLI::Option* input =
      app->add_option("--input,-i", options->input,
                      "A list of digests to index instead of a catalog (a file, or - for "
                      "standard input)")
          ->excludes(db);
  app->add_option("--input-format,-f", options->input_format, "With --input: hex or bin (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}))
      ->needs(input);
  app->add_option("--output,-o", options->output, "Index file to write (atomically), - for stdout")
      ->required();
  app->add_option("--version", options->version, "Catalog version to index (default: the latest)")
      ->transform(count_validator(0));
  app->add_option("--block-digests", options->block_digests,
                  "Digests per checksummed block, a power of two (default 4096)")
      ->transform(count_validator(1, kIndexMaxBlockDigests));
  app->add_option("--shards", options->shards,
                  "Write an index set of this many shards (1..65536; default 1: one ABFX file)")
      ->transform(count_validator(1, kIndexSetMaxShardCount));
  app->add_flag("--json", options->json, "Print the summary as one JSON object");
  add_threads_option(*app, options->threads);
  add_busy_timeout_option(*app, options->busy_timeout_ms);
  return {app, [options] { return run_index(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(62, add_index_command);

}  // namespace abf::cli
