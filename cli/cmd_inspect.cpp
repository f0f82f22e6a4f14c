// abf inspect: every header field of a validated snapshot, and its statistics.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/report_fields.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct InspectOptions {
  std::string snapshot;
  std::string key_file;
  bool json = false;
};

// As Filter.info shows them too (report_fields.hpp).
std::string hex64(std::uint64_t value) { return service::fields::checksum_hex(value); }

// The content fingerprint as inspect shows it: 32 hex digits, or null /
// "none" for a file that does not carry one.
nlohmann::ordered_json fingerprint_json(const std::optional<ContentFingerprint>& fingerprint) {
  return fingerprint ? nlohmann::ordered_json(fingerprint->hex()) : nlohmann::ordered_json(nullptr);
}
std::string fingerprint_text(const std::optional<ContentFingerprint>& fingerprint) {
  return fingerprint ? fingerprint->hex() + " (of the digests inserted)"
                     : std::string("none (written before fingerprints, or merged from a part "
                                   "without one)");
}

// printf into a std::string.
template <class... Args>
void append(std::string& out, const char* format, Args... args) {
  char line[256];
  std::snprintf(line, sizeof line, format, args...);
  out += line;
}

// A filter set: the manifest's fields, the set's statistics, then each
// shard's header (every shard verified against the manifest by the load).
int inspect_set(const InspectOptions& options, const LoadOptions& load_options) {
  auto set = [&] {
    const Activity activity("verifying " + options.snapshot + " and its shards");
    return load_filter_set(options.snapshot, load_options);
  }();
  if (!set) return report("inspect", set.error());
  auto manifest = read_set_manifest(options.snapshot);
  if (!manifest) return report("inspect", manifest.error());
  const SetManifest& m = *manifest;
  std::error_code ec;
  const std::uint64_t manifest_size = std::filesystem::file_size(options.snapshot, ec);
  const auto shard_size = [&](std::uint32_t i) -> std::uint64_t {
    std::error_code error;
    const auto size =
        std::filesystem::file_size(set_shard_path(options.snapshot, m.shards[i]), error);
    return error ? 0 : size;
  };
  // The manifest shows the header fields as stored; the set's statistics
  // come from its shards.
  const FilterSummary summary = summarize(*set);
  std::string out;
  if (options.json) {
    nlohmann::ordered_json json;
    json["path"] = options.snapshot;
    json["manifest_size"] = manifest_size;
    json["magic"] = "ABFS";
    json["format_version"] = m.format_version;
    json["shard_count"] = m.shard_count();
    json["hash_protocol_version"] = m.hash_protocol_version;
    json["hash_count"] = m.shard_hash_count;
    json["catalog_version"] = m.catalog_version;
    json["expected_item_count"] = m.expected_item_count;
    json["shard_expected_item_count"] = m.shard_expected_item_count;
    json["inserted_item_count"] = m.inserted_item_count;
    json["target_fpp"] = m.target_fpp;
    json["shard_bit_count"] = m.shard_bit_count;
    json["bit_count"] = summary.bit_count;
    json["catalog_id"] = m.catalog_id.hex();
    json["key_fingerprint"] = m.key_fingerprint.hex();
    json["content_fingerprint"] = fingerprint_json(m.content_fingerprint());
    json["build_id"] = hex64(m.build_id);
    json["header_checksum"] = hex64(m.header_checksum);
    json["body_checksum"] = hex64(m.body_checksum);
    json["popcount"] = summary.popcount;
    json["fill_ratio"] = summary.fill_ratio;
    json["estimated_fpp"] = summary.estimated_fpp;
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    for (std::uint32_t i = 0; i < m.shard_count(); ++i) {
      const SnapshotHeader h = snapshot_header(set->shard(i));
      const FilterSummary shard = summarize(set->shard(i));
      shards.push_back({{"index", i},
                        {"file", m.shards[i].file},
                        {"file_size", shard_size(i)},
                        {"inserted_item_count", h.inserted_item_count},
                        {"bit_count", h.bit_count},
                        {"payload_checksum", hex64(h.payload_checksum)},
                        {"header_checksum", hex64(h.header_checksum)},
                        {"content_fingerprint", fingerprint_json(h.content_fingerprint())},
                        {"popcount", shard.popcount},
                        {"fill_ratio", shard.fill_ratio},
                        {"estimated_fpp", shard.estimated_fpp}});
    }
    json["shards"] = std::move(shards);
    out = json_text(json);
  } else {
    append(out, "filter set            %s\n", options.snapshot.c_str());
    append(out, "manifest size         %s bytes\n", with_commas(manifest_size).c_str());
    append(out, "magic                 ABFS\n");
    append(out, "format version        %u\n", m.format_version);
    append(out, "shard count           %u\n", m.shard_count());
    append(out, "hash protocol version %u\n", m.hash_protocol_version);
    append(out, "hash count (k)        %u\n", m.shard_hash_count);
    append(out, "catalog version       %llu\n", static_cast<unsigned long long>(m.catalog_version));
    append(out, "expected items (n)    %s\n", with_commas(m.expected_item_count).c_str());
    append(out, "per shard (n_i)       %s\n", with_commas(m.shard_expected_item_count).c_str());
    append(out, "inserted items        %s\n", with_commas(m.inserted_item_count).c_str());
    append(out, "target fpp            %.17g\n", m.target_fpp);
    append(out, "bit count (m)         %s a shard, %s in all (%s bytes)\n",
           with_commas(m.shard_bit_count).c_str(), with_commas(summary.bit_count).c_str(),
           with_commas(summary.bit_count / 8).c_str());
    append(out, "catalog id            %s%s\n", m.catalog_id.hex().c_str(),
           m.catalog_id.is_zero() ? " (none: tied to no catalog)" : "");
    append(out, "key fingerprint       %s%s\n", m.key_fingerprint.hex().c_str(),
           m.key_fingerprint.is_zero() ? " (unkeyed)" : " (keyed; key verified)");
    append(out, "content fingerprint   %s\n", fingerprint_text(m.content_fingerprint()).c_str());
    append(out, "build id              %s\n", hex64(m.build_id).c_str());
    append(out, "checksums             header %s, body %s (XXH3-64, verified)\n",
           hex64(m.header_checksum).c_str(), hex64(m.body_checksum).c_str());
    append(out, "bits set              %s\n", with_commas(summary.popcount).c_str());
    append(out, "fill ratio            %.6f\n", summary.fill_ratio);
    append(out, "estimated fpp         %.6g (the shards' mean)\n", summary.estimated_fpp);
    for (std::uint32_t i = 0; i < m.shard_count(); ++i) {
      const FilterSummary shard = summarize(set->shard(i));
      append(out, "shard %-5u           %s: %s items, %s bytes, fill %.6f, estimated fpp %.6g\n", i,
             m.shards[i].file.c_str(), with_commas(shard.inserted_item_count).c_str(),
             with_commas(shard_size(i)).c_str(), shard.fill_ratio, shard.estimated_fpp);
    }
  }
  if (auto wrote = write_stdout(out); !wrote) return report("inspect", wrote.error());
  return kExitOk;
}

// Whether `path` starts with the ABFX magic (an exact index) or the ABXS
// magic (an index set).
bool names_index(const std::string& path, std::string_view magic_wanted = "ABFX") {
  if (path == "-") return false;
  // Only a regular file is peeked at: opening a FIFO would wait for a
  // writer (the snapshot loader then refuses anything else at once).
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == magic_wanted;
}

// An index set (abf index --shards): the manifest and every shard verified
// (IndexSet::load), the set, then each shard.
int inspect_index_set(const InspectOptions& options) {
  auto set = [&] {
    const Activity activity("verifying " + options.snapshot);
    return IndexSet::load(options.snapshot);
  }();
  if (!set) return report("inspect", set.error());
  // The names, for the listing (the load checked this manifest).
  const std::string text = [&] {
    std::ifstream in(options.snapshot, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  auto manifest = parse_index_set_manifest(
      std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()),
      options.snapshot);
  if (!manifest) return report("inspect", manifest.error());
  const auto recorded = set->content_fingerprint();
  const ContentFingerprint actual = set->digests_fingerprint();
  const bool matches = !recorded || *recorded == actual;
  std::string out;
  if (options.json) {
    nlohmann::ordered_json json;
    json["path"] = options.snapshot;
    json["magic"] = "ABXS";
    json["format_version"] = manifest->format_version;
    json["shard_count"] = set->shard_count();
    json["catalog_id"] = set->catalog_id().hex();
    json["catalog_version"] = set->catalog_version();
    json["content_fingerprint"] = fingerprint_json(recorded);
    json["digests_fingerprint"] = actual.hex();
    json["digest_count"] = set->size();
    json["build_id"] = hex64(manifest->build_id);
    nlohmann::ordered_json shards = nlohmann::ordered_json::array();
    for (std::uint32_t i = 0; i < set->shard_count(); ++i) {
      const IndexHeader& h = set->shard(i).header();
      shards.push_back({{"index", i},
                        {"file", manifest->shards[i].file},
                        {"file_size", h.file_size()},
                        {"digest_count", h.digest_count},
                        {"content_fingerprint", fingerprint_json(h.content_fingerprint())},
                        {"block_digests", h.block_digests},
                        {"header_checksum", hex64(h.header_checksum)},
                        {"table_checksum", hex64(set->shard(i).table_checksum())}});
    }
    json["shards"] = std::move(shards);
    out = json_text(json);
  } else {
    const std::string fingerprint =
        !recorded ? std::string("none")
                  : recorded->hex() + (matches ? " (the digests add up to it)"
                                               : " (the digests add up to " + actual.hex() +
                                                     " instead)");
    append(out, "index set             %s\n", options.snapshot.c_str());
    append(out, "magic                 ABXS (exact index set)\n");
    append(out, "format version        %u\n", manifest->format_version);
    append(out, "shards                %u (shard = big-endian u64 of bytes 24..32 mod %u)\n",
           set->shard_count(), set->shard_count());
    append(out, "catalog id            %s%s\n", set->catalog_id().hex().c_str(),
           set->catalog_id().is_zero() ? " (none: tied to no catalog)" : "");
    append(out, "catalog version       %llu\n",
           static_cast<unsigned long long>(set->catalog_version()));
    append(out, "digests               %s (every shard verified and routed)\n",
           with_commas(set->size()).c_str());
    append(out, "content fingerprint   %s\n", fingerprint.c_str());
    for (std::uint32_t i = 0; i < set->shard_count(); ++i) {
      const IndexHeader& h = set->shard(i).header();
      append(out, "shard %-5u           %s: %s digests, %s bytes\n", i,
             manifest->shards[i].file.c_str(), with_commas(h.digest_count).c_str(),
             with_commas(h.file_size()).c_str());
    }
  }
  if (auto wrote = write_stdout(out); !wrote) return report("inspect", wrote.error());
  if (!matches) {
    return report("inspect",
                  Error{ErrorCode::kCatalogMismatch,
                        options.snapshot + ": the digests add up to content fingerprint " +
                            actual.hex() + ", not the " + recorded->hex() +
                            " the manifest records"});
  }
  return kExitOk;
}

// An exact index (abf index): loaded (every rule verified), its header, and
// whether its digests add up to the fingerprint it records.
int inspect_index(const InspectOptions& options) {
  auto index = [&] {
    const Activity activity("verifying " + options.snapshot);
    return Index::load(options.snapshot);
  }();
  if (!index) return report("inspect", index.error());
  const IndexHeader& h = index->header();
  const auto recorded = h.content_fingerprint();
  const ContentFingerprint actual = ContentFingerprint::of(index->digests());
  const bool matches = !recorded || *recorded == actual;
  std::string out;
  if (options.json) {
    nlohmann::ordered_json json;
    json["path"] = options.snapshot;
    json["file_size"] = h.file_size();
    json["magic"] = "ABFX";
    json["format_version"] = h.format_version;
    json["catalog_id"] = h.catalog_id.hex();
    json["catalog_version"] = h.catalog_version;
    json["content_fingerprint"] = fingerprint_json(recorded);
    json["digests_fingerprint"] = actual.hex();
    json["digest_count"] = h.digest_count;
    json["block_digests"] = h.block_digests;
    json["block_count"] = h.block_count;
    json["header_checksum"] = hex64(h.header_checksum);
    out = json_text(json);
  } else {
    const std::string fingerprint =
        !recorded ? std::string("none")
                  : recorded->hex() + (matches ? " (the digests add up to it)"
                                               : " (the digests add up to " + actual.hex() +
                                                     " instead)");
    append(out, "index                 %s\n", options.snapshot.c_str());
    append(out, "file size             %s bytes\n", with_commas(h.file_size()).c_str());
    append(out, "magic                 ABFX (exact index)\n");
    append(out, "format version        %u\n", h.format_version);
    append(out, "catalog id            %s%s\n", h.catalog_id.hex().c_str(),
           h.catalog_id.is_zero() ? " (none: tied to no catalog)" : "");
    append(out, "catalog version       %llu\n", static_cast<unsigned long long>(h.catalog_version));
    append(out, "digests               %s (strictly ascending, verified)\n",
           with_commas(h.digest_count).c_str());
    append(out, "content fingerprint   %s\n", fingerprint.c_str());
    append(out, "blocks                %s of %u digests (XXH3-64 each, verified)\n",
           with_commas(h.block_count).c_str(), h.block_digests);
    append(out, "header checksum       %s (XXH3-64, verified)\n", hex64(h.header_checksum).c_str());
  }
  if (auto wrote = write_stdout(out); !wrote) return report("inspect", wrote.error());
  if (!matches) {
    return report("inspect",
                  Error{ErrorCode::kCatalogMismatch,
                        options.snapshot + ": the digests add up to content fingerprint " +
                            actual.hex() + ", not the " + recorded->hex() + " the header records"});
  }
  return kExitOk;
}

int run_inspect(const InspectOptions& options) {
  if (names_index(options.snapshot)) return inspect_index(options);
  if (names_index(options.snapshot, "ABXS")) return inspect_index_set(options);
  auto key = key_from_option(options.key_file);
  if (!key) return report("inspect", key.error());
  LoadOptions load_options;
  load_options.key = std::move(*key);
  auto is_set = names_filter_set(options.snapshot);
  if (!is_set) return report("inspect", is_set.error());
  if (*is_set) return inspect_set(options, load_options);
  // Loading checks every rule and the key (a keyed snapshot needs its key
  // here as everywhere); the header is then read as stored, so a
  // formatVersion-1 file shows its own version and checksums.
  SnapshotHeader header;
  std::uint64_t file_size = 0;
  auto filter = [&] {
    const Activity activity("verifying " + options.snapshot);
    return load_snapshot_argument(options.snapshot, load_options, &header, &file_size);
  }();
  if (!filter) return report("inspect", filter.error());
  // The header's fields as stored; the statistics, the filter's.
  const auto& h = header;
  const FilterSummary summary = summarize(*filter);

  std::string out;
  if (options.json) {
    nlohmann::ordered_json json;
    json["path"] = options.snapshot;
    json["file_size"] = file_size;
    json["magic"] = "ABF1";
    json["format_version"] = h.format_version;
    json["hash_protocol_version"] = h.hash_protocol_version;
    json["hash_count"] = h.hash_count;
    json["catalog_version"] = h.catalog_version;
    json["bit_count"] = h.bit_count;
    json["expected_item_count"] = h.expected_item_count;
    json["inserted_item_count"] = h.inserted_item_count;
    json["target_fpp"] = h.target_fpp;
    json["payload_length"] = h.payload_length;
    json["payload_checksum"] = hex64(h.payload_checksum);
    json["header_checksum"] = hex64(h.header_checksum);
    json["catalog_id"] = h.catalog_id.hex();
    json["key_fingerprint"] = h.key_fingerprint.hex();
    json["content_fingerprint"] = fingerprint_json(h.content_fingerprint());
    json["popcount"] = summary.popcount;
    json["fill_ratio"] = summary.fill_ratio;
    json["estimated_fpp"] = summary.estimated_fpp;
    out = json_text(json);
  } else {
    append(out, "snapshot              %s\n",
           options.snapshot == "-" ? "<stdin>" : options.snapshot.c_str());
    append(out, "file size             %s bytes\n", with_commas(file_size).c_str());
    append(out, "magic                 ABF1\n");
    append(out, "format version        %u\n", h.format_version);
    append(out, "hash protocol version %u\n", h.hash_protocol_version);
    append(out, "hash count (k)        %u\n", h.hash_count);
    append(out, "catalog version       %llu\n", static_cast<unsigned long long>(h.catalog_version));
    append(out, "bit count (m)         %s (%s bytes)\n", with_commas(h.bit_count).c_str(),
           with_commas(h.bit_count / 8).c_str());
    append(out, "expected items (n)    %s\n", with_commas(h.expected_item_count).c_str());
    append(out, "inserted items        %s\n", with_commas(h.inserted_item_count).c_str());
    append(out, "target fpp            %.17g\n", h.target_fpp);
    append(out, "payload length        %s bytes\n", with_commas(h.payload_length).c_str());
    append(out, "payload checksum      %s (XXH3-64, verified)\n",
           hex64(h.payload_checksum).c_str());
    append(out, "header checksum       %s (XXH3-64, verified)\n", hex64(h.header_checksum).c_str());
    append(out, "catalog id            %s%s\n", h.catalog_id.hex().c_str(),
           h.catalog_id.is_zero() ? " (none: tied to no catalog)" : "");
    append(out, "key fingerprint       %s%s\n", h.key_fingerprint.hex().c_str(),
           h.key_fingerprint.is_zero() ? " (unkeyed)" : " (keyed; key verified)");
    append(out, "content fingerprint   %s\n", fingerprint_text(h.content_fingerprint()).c_str());
    append(out, "bits set              %s\n", with_commas(summary.popcount).c_str());
    append(out, "fill ratio            %.6f\n", summary.fill_ratio);
    append(out, "estimated fpp         %.6g\n", summary.estimated_fpp);
  }
  if (auto wrote = write_stdout(out); !wrote) return report("inspect", wrote.error());
  return kExitOk;
}

Command add_inspect_command(CLI::App& root) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* app = root.add_subcommand(
      "inspect",
      "Validate a snapshot, filter set or exact index and print its header, fill ratio and fpp");
  app->footer(
      "Every rule of the ABF1 format is checked, both checksums included. A keyed snapshot\n"
      "(hash protocol 2) needs its --key-file; the key itself is never shown, only its\n"
      "fingerprint. A filter set (a manifest, abf build --shards) is checked whole: the\n"
      "manifest, then every shard against it; the set is shown, then each shard. An exact\n"
      "index (abf index, magic ABFX) is checked whole too: header, block checksums, order,\n"
      "and whether its digests add up to the content fingerprint it records; an index set\n"
      "(abf index --shards, magic ABXS) likewise, the manifest and every shard.\n"
      "Examples:\n"
      "  abf inspect catalog.abf --json\n"
      "  abf inspect catalog.abfs\n"
      "  abf inspect catalog.abfx\n"
      "  abf build -n 1000 -p 0.01 -i digests.txt -o - | abf inspect -");
  app->add_option("snapshot", options->snapshot,
                  "ABF1 snapshot or filter-set manifest, or - for a snapshot on standard input")
      ->required();
  add_key_file_option(*app, options->key_file, "open a keyed (hash protocol 2) snapshot");
  app->add_flag("--json", options->json, "One JSON object instead of text");
  return {app, [options] { return run_inspect(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(30, add_inspect_command);

}  // namespace abf::cli
