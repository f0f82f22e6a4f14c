// abf build: stream digests into a filter and save it as an ABF1 snapshot.
#include <cstdio>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/abf.hpp"
#include "abf/cuda/controls.hpp"
#include "abf/service/catalog_build.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "command.hpp"
#include "common.hpp"
#include "distinct.hpp"

namespace abf::cli {
namespace {

struct BuildCommandOptions {
  std::uint64_t expected_items = 0;
  double fpp = 0.0;
  std::optional<std::uint64_t> catalog_version;
  std::string from_catalog;
  std::string input = "-";
  std::string input_format = "hex";
  std::string output;
  std::string backend = "auto";
  std::string key_file;
  std::string layout = "classic";  // classic (protocols 1, 2) or blocked (3, 4)
  std::string catalog_id;  // 32 hex digits; files only (a catalog names its own)
  std::string shards;      // "S" or "auto": write a filter set; empty: one snapshot
  unsigned threads = 0;
  int busy_timeout_ms = kDefaultBusyTimeoutMs;  // --from-catalog
  bool distinct = false;
  bool json = false;
};

// What a build read, for its report.
struct BuildInput {
  std::string source;  // "file" or "catalog"
  std::string name;    // the file (- for standard input) or the database
  std::uint64_t digests = 0;
  std::optional<std::uint64_t> repeats;  // known exactly, or not checked
};

// Digests per chunk. An input known to hold at least kGpuMinInputBytes is
// read in chunks of kAutoCudaMinBatch (32 MiB), so --backend auto builds it
// on a GPU when there is one; smaller inputs and streams of unknown size in
// 256 Ki-digest chunks (8 MiB), which auto keeps on the CPU. Measured on a
// 16-core H200 host (docs/cuda.md): the GPU built 1 GiB in 1.1 s against
// SIMD's 1.8 s, but starting CUDA and bringing the bits back cost about
// 0.25 s, which SIMD's ~30 ns a digest only repays beyond ~256 MiB of input.
// Memory stays the filter plus a fixed buffer whatever the input size.
constexpr std::size_t kSmallChunk = std::size_t{256} << 10;
constexpr std::uint64_t kGpuMinInputBytes = std::uint64_t{512} << 20;

std::size_t chunk_digests(std::uint64_t input_bytes) {
  return input_bytes >= kGpuMinInputBytes ? kAutoCudaMinBatch : kSmallChunk;
}

// The summary: on stdout, or on stderr when stdout is the snapshot. A set
// (--shards) reports the set and names its shard files.
Result<void> print_summary(const BuildCommandOptions& options, const BuildInput& input,
                           const FilterSet& set, double seconds) {
  const bool to_stdout = options.output == "-";
  const bool as_set = !options.shards.empty();
  std::vector<std::string> shard_files;
  if (as_set) {
    auto manifest = read_set_manifest(options.output);
    if (!manifest) return std::unexpected(manifest.error());
    for (const auto& entry : manifest->shards) shard_files.push_back(entry.file);
  }
  if (options.json) {
    nlohmann::ordered_json json;
    json["output"] = options.output;
    json["source"] = input.source;
    json["input"] = input.name;
    json["input_digests"] = input.digests;
    json["repeats_checked"] = input.repeats.has_value();
    json["repeats"] =
        input.repeats ? nlohmann::ordered_json(*input.repeats) : nlohmann::ordered_json(nullptr);
    if (as_set) {
      json.update(set_json(set));
      json["shard_files"] = shard_files;
    } else {
      json.update(filter_json(set.shard(0)));
    }
    json["seconds"] = seconds;
    return write_report(json_text(json), to_stdout);
  }
  std::string text = "wrote " + (to_stdout ? std::string("<stdout>") : options.output);
  if (as_set) {
    text += " (a filter-set manifest; shard files " + shard_files.front() +
            (shard_files.size() > 1 ? " .. " + shard_files.back() : std::string()) + ")";
  }
  text += ": ";
  const std::uint64_t inserted = set.inserted_item_count();
  if (input.source == "catalog") {
    text += counted(inserted, "digest") + " of catalog " + input.name + " version " +
            std::to_string(set.catalog_version()) +
            " (a catalog version holds each digest once: no repeats)";
  } else if (input.repeats) {
    text += counted(inserted, "distinct digest") + " (" + counted(*input.repeats, "repeat") +
            " among " + with_commas(input.digests) + " read, dropped)";
  } else {
    text += counted(inserted, "digest") + ", repeats included (not checked; --distinct drops them)";
  }
  return write_report(text + ", " + (as_set ? set_text(set) : filter_text(set.shard(0))) + "\n",
                      to_stdout);
}

// Writes the result: a filter set (--shards) or one snapshot.
Result<void> save_output(const BuildCommandOptions& options, const FilterSet& set) {
  if (!options.shards.empty()) return save_filter_set(set, options.output);
  return save_snapshot(set.shard(0), options.output);
}

void note_blocked_rate(const BloomSpec& spec);

// The protocol --layout and --key-file choose: classic 1 or 2, blocked (one
// line a digest) 3 or 4.
std::uint32_t protocol_of(const BuildCommandOptions& options, bool keyed) {
  if (options.layout == "blocked") {
    return keyed ? blocked::kProtocolBlockedKeyed : blocked::kProtocolBlocked;
  }
  return keyed ? probe::kProtocolKeyed : probe::kProtocolUnkeyed;
}

// --from-catalog: the snapshot of a SQLite catalog at one version.
int run_build_from_catalog(const BuildCommandOptions& options, Backend backend,
                           const std::optional<Key>& key) {
  const auto start = std::chrono::steady_clock::now();
  auto catalog = service::SqliteCatalog::open(
      options.from_catalog, {.read_only = true, .busy_timeout_ms = options.busy_timeout_ms});
  if (!catalog) return report("build", catalog.error());
  std::uint64_t version = 0;
  if (options.catalog_version) {
    version = *options.catalog_version;
  } else {
    auto latest = catalog->latest_version();
    if (!latest) return report("build", latest.error());
    version = *latest;
  }
  const BloomSpec spec{options.expected_items, options.fpp};
  const std::uint32_t protocol = protocol_of(options, key.has_value());
  auto shards = options.shards.empty() ? Result<std::uint32_t>(1)
                                       : shard_count_from_option(options.shards, spec, protocol);
  if (!shards) return report_spec("build", shards.error());
  if (options.layout == "blocked") note_blocked_rate(spec);
  auto set = [&]() -> Result<FilterSet> {
    const Activity activity("building from " + options.from_catalog + " version " +
                            std::to_string(version));
    if (options.shards.empty()) {
      auto filter =
          service::build_filter_from_catalog(*catalog, version, spec, key, protocol, backend);
      if (!filter) return std::unexpected(filter.error());
      return FilterSet(std::move(*filter));
    }
    return service::build_filter_set_from_catalog(*catalog, version, spec, *shards, key, protocol,
                                                  backend);
  }();
  if (!set) return report_spec("build", set.error());
  if (auto saved = save_output(options, *set); !saved) return report("build", saved.error());
  const BuildInput input{"catalog", options.from_catalog, set->inserted_item_count(), 0};
  if (auto printed = print_summary(options, input, *set, seconds_since(start)); !printed) {
    return report("build", summary_error(options.output, printed.error()));
  }
  return kExitOk;
}

// The message of a capacity error: where, and how many went in. A shard
// that overflowed before the set did keeps the library's message (it names
// the shard).
Error capacity_error(Error error, const BuildCommandOptions& options, const DigestReader& reader,
                     std::uint64_t inserted, std::size_t chunk) {
  if (error.code == ErrorCode::kCapacityExceeded && inserted + chunk <= options.expected_items) {
    error.message = reader.source_name() + ": " + error.message;
  } else if (error.code == ErrorCode::kCapacityExceeded) {
    error.message =
        reader.source_name() + ": more than --expected-items " +
        counted(options.expected_items, options.distinct ? "distinct digest" : "digest") +
        " (detected after " + std::to_string(inserted) +
        (inserted == 1 ? " was added" : " were added") +
        "); rebuild with a larger --expected-items";
  }
  return error;
}

// --distinct: every input digest through DistinctDigests (an external sort
// of bounded memory), then the distinct ones, ascending, into the builder.
// The filter is the same whatever the order its digests come in.
Result<BuildInput> add_distinct(const BuildCommandOptions& options, DigestReader& reader,
                                FilterSetBuilder& builder, Backend backend) {
  const char* tmpdir = std::getenv("TMPDIR");
  DistinctDigests distinct(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp");
  std::vector<Digest> chunk(kSmallChunk);
  {
    Progress progress("reading", reader.size_hint(), "bytes");
    for (;;) {
      auto got = reader.read(chunk);
      if (!got) return std::unexpected(got.error());
      if (*got == 0) break;
      if (auto added = distinct.add(std::span(chunk.data(), *got)); !added) {
        return std::unexpected(added.error());
      }
      progress.update(reader.bytes_read());
    }
  }
  const Activity activity("sorting " + counted(distinct.input_count(), "digest") + " and building");
  auto finished = distinct.finish(
      [&](std::span<const Digest> digests) -> Result<void> {
        if (auto added = builder.add(digests, backend); !added) {
          return std::unexpected(capacity_error(added.error(), options, reader,
                                                builder.inserted_item_count(), digests.size()));
        }
        return {};
      },
      chunk_digests(reader.size_hint()));
  if (!finished) return std::unexpected(finished.error());
  return BuildInput{"file", options.input, distinct.input_count(),
                    distinct.input_count() - distinct.distinct_count()};
}

// Every input digest into the builder, repeats included.
Result<BuildInput> add_all(const BuildCommandOptions& options, DigestReader& reader,
                           FilterSetBuilder& builder, Backend backend) {
  // Two input buffers: the next chunk is read on another thread while this
  // one is inserted (reading 4 GiB from the page cache alone takes 0.6 s).
  const std::size_t chunk = chunk_digests(reader.size_hint());
  std::array<std::vector<Digest>, 2> digests{std::vector<Digest>(chunk),
                                             std::vector<Digest>(chunk)};
  Progress progress("building", reader.size_hint(), "bytes");
  auto read_into = [&reader](std::vector<Digest>& buffer) { return reader.read(buffer); };
  std::uint64_t total = 0;
  Result<std::size_t> got = read_into(digests[0]);
  for (std::size_t current = 0;; current ^= 1) {
    if (!got) return std::unexpected(got.error());
    if (*got == 0) break;
    const std::span batch(digests[current].data(), *got);
    auto next = std::async(std::launch::async, read_into, std::ref(digests[current ^ 1]));
    auto added = builder.add(batch, backend);
    got = next.get();  // joined before any return: the reader is not left in use
    if (!added) {
      return std::unexpected(capacity_error(added.error(), options, reader,
                                            builder.inserted_item_count(), batch.size()));
    }
    total += batch.size();
    progress.update(reader.bytes_read());
  }
  return BuildInput{"file", options.input, total, std::nullopt};
}

// Below about p = 1e-4 the one-line layout (k fixed at 8) needs more bits
// than the classic one (docs/protocol.md section 12): says so on stderr,
// with both layouts' bits per digest.
void note_blocked_rate(const BloomSpec& spec) {
  if (!(spec.target_fpp < 1e-4)) return;
  const auto blocked = choose_layout(spec, blocked::kProtocolBlocked);
  const auto classic = choose_layout(spec, probe::kProtocolUnkeyed);
  if (!blocked) return;
  const double n = static_cast<double>(spec.expected_item_count);
  std::string line = "abf build: note: at p = " + std::to_string(spec.target_fpp) +
                     " the blocked layout takes " +
                     std::to_string(static_cast<double>(blocked->bit_count) / n).substr(0, 5) +
                     " bits a digest";
  if (classic) {
    line += ", the classic layout " +
            std::to_string(static_cast<double>(classic->bit_count) / n).substr(0, 5) +
            " (k = 8 is fixed: below about p = 1e-4 classic needs fewer bits; blocked stays "
            "one cache line a digest)";
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

int run_build(const BuildCommandOptions& options) {
  if (auto refused = binary_to_terminal(options.output)) return usage_error("build", *refused);
  CommandFiles inputs;
  inputs.add_catalog("--from-catalog", options.from_catalog);
  if (options.from_catalog.empty()) inputs.add_file("--input", options.input);
  inputs.add_file("--key-file", options.key_file);
  CommandFiles outputs;
  if (options.shards.empty()) {
    outputs.add_file("--output", options.output);
  } else {
    outputs.add_filter_set("--output", options.output, /*written=*/true);
  }
  if (auto clash = inputs.overwritten_input(outputs)) return usage_error("build", *clash);
  if (!options.shards.empty() && options.output == "-") {
    return usage_error("build",
                       "--shards writes a filter set, a manifest and shard files beside it, "
                       "which cannot go to standard output; name a file with --output");
  }
  const auto start = std::chrono::steady_clock::now();
  apply_threads(options.threads);
  auto format = parse_input_format(options.input_format);
  if (!format) return report("build", format.error());
  auto backend = backend_from_option(options.backend);
  if (!backend) return report("build", backend.error());
  auto key = key_from_option(options.key_file);
  if (!key) return report("build", key.error());

  if (!options.from_catalog.empty()) return run_build_from_catalog(options, *backend, *key);

  const BloomSpec spec{options.expected_items, options.fpp};
  BuildOptions build_options;
  build_options.catalog_version = options.catalog_version.value_or(0);
  if (!options.catalog_id.empty()) {
    auto id = CatalogId::parse_hex(options.catalog_id);  // checked by the validator already
    if (!id) return report("build", id.error());
    build_options.catalog_id = *id;
  }
  build_options.key = *key;
  // --layout picks the kind, --key-file the keyed protocol of that kind.
  build_options.protocol = protocol_of(options, build_options.key.has_value());
  if (options.layout == "blocked") note_blocked_rate(spec);
  auto shards = options.shards.empty()
                    ? Result<std::uint32_t>(1)
                    : shard_count_from_option(options.shards, spec, build_options.protocol);
  if (!shards) return report_spec("build", shards.error());
  auto builder = FilterSetBuilder::create(spec, *shards, build_options);
  if (!builder) return report_spec("build", builder.error());
  auto reader = DigestReader::open(options.input, *format);
  if (!reader) return report("build", reader.error());

  auto input = options.distinct ? add_distinct(options, *reader, *builder, *backend)
                                : add_all(options, *reader, *builder, *backend);
  if (!input) return report("build", input.error());
  auto finished = [&] {
    const Activity activity(*shards > 1 ? "finishing " + std::to_string(*shards) + " shards"
                                        : std::string("finishing"));
    return std::move(*builder).finish();
  }();
  if (!finished) return report("build", finished.error());
  if (auto saved = save_output(options, *finished); !saved) return report("build", saved.error());
  if (auto printed = print_summary(options, *input, *finished, seconds_since(start)); !printed) {
    return report("build", summary_error(options.output, printed.error()));
  }
  return kExitOk;
}

Command add_build_command(CLI::App& root) {
  auto options = std::make_shared<BuildCommandOptions>();
  CLI::App* app =
      root.add_subcommand("build", "Build a filter from digests and save it as an ABF1 snapshot");
  app->footer(
      "Input streams in chunks, so memory stays the filter plus bounded buffers (two input\n"
      "chunks, and per-thread bitsets or position buckets: at most 320 MiB); more digests\n"
      "than --expected-items is an error (capacity_exceeded), never a silent overfill.\n"
      "Repeats: insertedItemCount counts every input digest, repeats included, and the\n"
      "summary says so; --distinct drops exact repeats first, so it counts each digest once\n"
      "(and the summary says how many repeats there were). --distinct sorts the input in\n"
      "runs of 4 Mi digests (128 MiB of memory, plus at most 64 MiB of buffers when merging);\n"
      "an input of more than one run keeps its sorted runs in an unlinked temporary file in\n"
      "$TMPDIR (default /tmp): 32 bytes per distinct digest of each run. A --from-catalog\n"
      "build has no repeats (a catalog version holds each digest once).\n"
      "The summary goes to stdout, or to stderr with --output - (stdout is then the\n"
      "snapshot, and only the snapshot).\n"
      "Examples:\n"
      "  abf digest blobs/* | abf build -n 1000000 -p 0.001 --output catalog.abf\n"
      "  abf build -n 100000000 -p 0.01 -f bin --input digests.bin --output big.abf --threads 8\n"
      "  abf build --from-catalog catalog.db -n 2000000 -p 0.001 --output latest.abf\n"
      "  abf build --from-catalog catalog.db -n 2000000 -p 0.001 --key-file abf.key -o k.abf\n"
      "  abf digest blobs/* | abf build -n 1000000 -p 0.001 --distinct -o - --json > c.abf\n"
      "  abf build -n 1000000000 -p 0.01 --layout blocked -f bin -i digests.bin -o fast.abf\n"
      "A snapshot built --from-catalog carries the catalog's id, and `abf dedup` accepts only\n"
      "snapshots of its catalog; one built from files names no catalog unless --catalog-id\n"
      "says which. With --key-file the snapshot is keyed (hash protocol 2): it answers only\n"
      "with that key, which it never contains (only the key's fingerprint).\n"
      "Filter sets: --shards S splits the catalog by the digests' last 8 bytes into S shards,\n"
      "each an ABF1 snapshot sized for its share; --output is the set's manifest and the\n"
      "shards are written beside it as <output>.<build id>.<shard>.abf (the manifest last and\n"
      "atomically; the files of the set it replaces are removed after). The input is read\n"
      "once; memory is the shards' bitsets plus 256 MiB of staging and one shard's build\n"
      "buffers. A set cannot be written to standard output. Every command that reads a\n"
      "snapshot reads a set by its manifest.\n"
      "  abf build -n 300000000 -p 0.01 --shards auto -f bin -i digests.bin -o catalog.abfs");
  app->add_option("--expected-items,-n", options->expected_items,
                  "Design capacity n: 1..2^30 (blocked: 1..2^36), or up to 2^46 for a set\n"
                  "(--shards); 1e6 and\n"
                  "2.5e6 are read as integers. More digests than this is an error")
      ->transform(count_validator(1, kMaxSetExpectedItemCount))
      ->required();
  app->add_option("--fpp,-p", options->fpp, "Target false-positive rate p, 0 < p < 1 (e.g. 0.001)")
      ->check(fpp_validator())
      ->required();
  app->add_option("--catalog-version", options->catalog_version,
                  "Catalog version recorded in the snapshot (default 0; with --from-catalog,\n"
                  "the version of the catalog to build, default its latest)")
      ->transform(count_validator(0));
  auto* from_catalog = app->add_option(
      "--from-catalog", options->from_catalog,
      "Build from a SQLite catalog (abf catalog) at --catalog-version instead of --input");
  app->add_option("--input,-i", options->input, "Digest file, or - for standard input (default -)")
      ->excludes(from_catalog);
  app->add_option("--input-format,-f", options->input_format,
                  "hex: one digest per line (bare, sha256:<hex>, or a line of sha256sum,\n"
                  "escaped names and --tag lines included); bin: 32-byte records (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}));
  app->add_option("--output,-o", options->output,
                  "Snapshot to write (atomically), or - for standard output")
      ->required();
  app->add_flag("--distinct", options->distinct,
                "Drop exact repeats before counting (see below for its memory)")
      ->excludes(from_catalog);
  app->add_flag("--json", options->json, "Print the summary as one JSON object");
  app->add_option("--catalog-id", options->catalog_id,
                  "catalogId recorded in the snapshot: the 32 hex digits of the catalog the\n"
                  "input digests are (default: none); --from-catalog records the catalog's own")
      ->check(catalog_id_validator())
      ->excludes(from_catalog);
  app->add_option("--shards", options->shards,
                  "Write a filter set of S shards (1..65536) instead of one snapshot, or auto:\n"
                  "the fewest shards whose filters each fit at --fpp (one classic filter holds\n"
                  "at most 2^30 bits, about 1.1e8 digests at p = 0.01; a blocked one 2^40 bits\n"
                  "and 2^36 digests). Every shard takes the --layout. --output names its manifest")
      ->check(shards_validator());
  add_busy_timeout_option(*app, options->busy_timeout_ms);
  app->get_option("--busy-timeout")->needs(from_catalog);
  app->add_option("--layout", options->layout,
                  "classic (default): k probes anywhere in the bitset (hash protocol 1, or 2\n"
                  "with --key-file); blocked: all 8 probes in one 64-byte line, one cache miss\n"
                  "a query or insert, about 5% more bits at p = 0.01 (hash protocol 3, or 4\n"
                  "with --key-file); up to 2^36 digests and 2^40 bits in one snapshot")
      ->check(CLI::IsMember({"classic", "blocked"}));
  add_key_file_option(*app, options->key_file,
                      "build a keyed snapshot (hash protocol 2; 4 with --layout blocked)");
  add_backend_option(*app, options->backend, "Build engine");
  add_threads_option(*app, options->threads, /*reads_ahead=*/true);
  return {app, [options] { return run_build(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(10, add_build_command);

}  // namespace abf::cli
