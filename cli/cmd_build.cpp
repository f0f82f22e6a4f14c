// abf build: stream digests into a filter and save it as an ABF1 snapshot.
#include <array>
#include <cstdint>
#include <functional>
#include <future>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "command.hpp"
#include "common.hpp"

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
  std::string catalog_id;  // 32 hex digits; files only (a catalog names its own)
  unsigned threads = 0;
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

void print_summary(const std::string& output, const Filter& filter) {
  std::cout << "wrote " << output << ": " << with_commas(filter.inserted_item_count())
            << " digests, m = " << with_commas(filter.bit_count())
            << " bits, k = " << filter.hash_count() << ", fill " << filter.fill_ratio()
            << ", estimated false-positive rate " << filter.estimate_false_positive_rate()
            << ", catalog version " << filter.catalog_version() << ", catalog id "
            << (filter.catalog_id().is_zero() ? "none" : filter.catalog_id().hex())
            << ", hash protocol " << filter.hash_protocol_version();
  // The fingerprint names the key without revealing it.
  if (filter.scheme().keyed())
    std::cout << " (key " << filter.scheme().key_fingerprint().hex() << ")";
  std::cout << '\n';
}

// --from-catalog: the snapshot of a SQLite catalog at one version.
int run_build_from_catalog(const BuildCommandOptions& options, Backend backend,
                           const std::optional<Key>& key) {
  auto catalog = service::SqliteCatalog::open(options.from_catalog, {.read_only = true});
  if (!catalog) return report("build", catalog.error());
  std::uint64_t version = 0;
  if (options.catalog_version) {
    version = *options.catalog_version;
  } else {
    auto latest = catalog->latest_version();
    if (!latest) return report("build", latest.error());
    version = *latest;
  }
  auto filter = service::build_filter_from_catalog(
      *catalog, version, BloomSpec{options.expected_items, options.fpp}, key, backend);
  if (!filter) return report("build", filter.error());
  if (auto saved = save_snapshot(*filter, options.output); !saved) {
    return report("build", saved.error());
  }
  print_summary(options.output, *filter);
  return kExitOk;
}

int run_build(const BuildCommandOptions& options) {
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
  auto builder = FilterBuilder::create(spec, build_options);
  if (!builder) return report("build", builder.error());
  auto reader = DigestReader::open(options.input, *format);
  if (!reader) return report("build", reader.error());

  // Two input buffers: the next chunk is read on another thread while this
  // one is inserted (reading 4 GiB from the page cache alone takes 0.6 s).
  const std::size_t chunk = chunk_digests(reader->size_hint());
  std::array<std::vector<Digest>, 2> digests{std::vector<Digest>(chunk),
                                             std::vector<Digest>(chunk)};
  Progress progress("building", reader->size_hint(), "bytes");
  auto read_into = [&reader](std::vector<Digest>& buffer) { return reader->read(buffer); };
  Result<std::size_t> got = read_into(digests[0]);
  for (std::size_t current = 0;; current ^= 1) {
    if (!got) return report("build", got.error());
    if (*got == 0) break;
    const std::span batch(digests[current].data(), *got);
    auto next = std::async(std::launch::async, read_into, std::ref(digests[current ^ 1]));
    auto added = builder->add(batch, *backend);
    got = next.get();  // joined before any return: the reader is not left in use
    if (!added) {
      Error error = added.error();
      if (error.code == ErrorCode::kCapacityExceeded) {
        error.message = reader->source_name() + ": more than --expected-items " +
                        std::to_string(options.expected_items) + " digests (detected after " +
                        std::to_string(builder->inserted_item_count()) +
                        " were added); rebuild with a larger --expected-items";
      }
      return report("build", error);
    }
    progress.update(reader->bytes_read());
  }

  auto finished = std::move(*builder).finish();
  if (!finished) return report("build", finished.error());
  const Filter& filter = *finished;
  if (auto saved = save_snapshot(filter, options.output); !saved) {
    return report("build", saved.error());
  }
  print_summary(options.output, filter);
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
      "Examples:\n"
      "  abf digest blobs/* | abf build -n 1000000 -p 0.001 --output catalog.abf\n"
      "  abf build -n 100000000 -p 0.01 -f bin --input digests.bin --output big.abf --threads 8\n"
      "  abf build --from-catalog catalog.db -n 2000000 -p 0.001 --output latest.abf\n"
      "  abf build --from-catalog catalog.db -n 2000000 -p 0.001 --key-file abf.key -o k.abf\n"
      "A snapshot built --from-catalog carries the catalog's id, and `abf dedup` accepts only\n"
      "snapshots of its catalog; one built from files names no catalog unless --catalog-id\n"
      "says which. With --key-file the snapshot is keyed (hash protocol 2): it answers only\n"
      "with that key, which it never contains (only the key's fingerprint).");
  app->add_option("--expected-items,-n", options->expected_items,
                  "Design capacity n (1..2^30); more digests than this is an error")
      ->required();
  app->add_option("--fpp,-p", options->fpp, "Target false-positive rate p, 0 < p < 1 (e.g. 0.001)")
      ->required();
  app->add_option("--catalog-version", options->catalog_version,
                  "Catalog version recorded in the snapshot (default 0; with --from-catalog,\n"
                  "the version of the catalog to build, default its latest)");
  auto* from_catalog = app->add_option(
      "--from-catalog", options->from_catalog,
      "Build from a SQLite catalog (abf catalog) at --catalog-version instead of --input");
  app->add_option("--input,-i", options->input, "Digest file, or - for standard input (default -)")
      ->excludes(from_catalog);
  app->add_option("--input-format,-f", options->input_format,
                  "hex: one digest per line (bare, sha256:<hex> or sha256sum lines);\n"
                  "bin: 32-byte records (default hex)")
      ->check(CLI::IsMember({"hex", "bin"}));
  app->add_option("--output,-o", options->output, "Snapshot to write (atomically)")->required();
  app->add_option("--catalog-id", options->catalog_id,
                  "catalogId recorded in the snapshot: the 32 hex digits of the catalog the\n"
                  "input digests are (default: none); --from-catalog records the catalog's own")
      ->check(catalog_id_validator())
      ->excludes(from_catalog);
  add_key_file_option(*app, options->key_file, "build a keyed (hash protocol 2) snapshot");
  add_backend_option(*app, options->backend, "Build engine");
  add_threads_option(*app, options->threads, /*reads_ahead=*/true);
  return {app, [options] { return run_build(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(10, add_build_command);

}  // namespace abf::cli
