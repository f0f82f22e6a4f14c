// abf inspect: every header field of a validated snapshot, and its statistics.
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "command.hpp"
#include "common.hpp"

namespace abf::cli {
namespace {

struct InspectOptions {
  std::string snapshot;
  std::string key_file;
  bool json = false;
};

std::string hex64(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

// printf into a std::string.
template <class... Args>
void append(std::string& out, const char* format, Args... args) {
  char line[256];
  std::snprintf(line, sizeof line, format, args...);
  out += line;
}

int run_inspect(const InspectOptions& options) {
  auto key = key_from_option(options.key_file);
  if (!key) return report("inspect", key.error());
  LoadOptions load_options;
  load_options.key = std::move(*key);
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
  const auto& h = header;
  const double fill = filter->fill_ratio();
  const double estimated = filter->estimate_false_positive_rate();

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
    json["popcount"] = filter->popcount();
    json["fill_ratio"] = fill;
    json["estimated_fpp"] = estimated;
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
    append(out, "bits set              %s\n", with_commas(filter->popcount()).c_str());
    append(out, "fill ratio            %.6f\n", fill);
    append(out, "estimated fpp         %.6g\n", estimated);
  }
  if (auto wrote = write_stdout(out); !wrote) return report("inspect", wrote.error());
  return kExitOk;
}

Command add_inspect_command(CLI::App& root) {
  auto options = std::make_shared<InspectOptions>();
  CLI::App* app = root.add_subcommand(
      "inspect", "Validate a snapshot and print its header, fill ratio and estimated fpp");
  app->footer(
      "Every rule of the ABF1 format is checked, both checksums included. A keyed snapshot\n"
      "(hash protocol 2) needs its --key-file; the key itself is never shown, only its\n"
      "fingerprint.\n"
      "Examples:\n"
      "  abf inspect catalog.abf --json\n"
      "  abf build -n 1000 -p 0.01 -i digests.txt -o - | abf inspect -");
  app->add_option("snapshot", options->snapshot, "ABF1 snapshot, or - for standard input")
      ->required();
  add_key_file_option(*app, options->key_file, "open a keyed (hash protocol 2) snapshot");
  app->add_flag("--json", options->json, "One JSON object instead of text");
  return {app, [options] { return run_inspect(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(30, add_inspect_command);

}  // namespace abf::cli
