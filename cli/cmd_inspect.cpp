// abf inspect: every header field of a validated snapshot, and its statistics.
#include <cstdio>
#include <filesystem>
#include <iostream>
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

int run_inspect(const InspectOptions& options) {
  auto key = key_from_option(options.key_file);
  if (!key) return report("inspect", key.error());
  LoadOptions load_options;
  load_options.key = std::move(*key);
  // Loading checks every rule and the key (a keyed snapshot needs its key
  // here as everywhere); the header is then read as stored, so a
  // formatVersion-1 file shows its own version and checksums.
  auto filter = load_snapshot(options.snapshot, load_options);
  if (!filter) return report("inspect", filter.error());
  auto stored = read_snapshot_header(options.snapshot);
  if (!stored) return report("inspect", stored.error());
  const SnapshotHeader& header = *stored;
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(options.snapshot, ec);
  const auto& h = header;
  const double fill = filter->fill_ratio();
  const double estimated = filter->estimate_false_positive_rate();

  if (options.json) {
    nlohmann::ordered_json out;
    out["path"] = options.snapshot;
    out["file_size"] = file_size;
    out["magic"] = "ABF1";
    out["format_version"] = h.format_version;
    out["hash_protocol_version"] = h.hash_protocol_version;
    out["hash_count"] = h.hash_count;
    out["catalog_version"] = h.catalog_version;
    out["bit_count"] = h.bit_count;
    out["expected_item_count"] = h.expected_item_count;
    out["inserted_item_count"] = h.inserted_item_count;
    out["target_fpp"] = h.target_fpp;
    out["payload_length"] = h.payload_length;
    out["payload_checksum"] = hex64(h.payload_checksum);
    out["header_checksum"] = hex64(h.header_checksum);
    out["catalog_id"] = h.catalog_id.hex();
    out["key_fingerprint"] = h.key_fingerprint.hex();
    out["popcount"] = filter->popcount();
    out["fill_ratio"] = fill;
    out["estimated_fpp"] = estimated;
    std::cout << out.dump(2) << '\n';
    return kExitOk;
  }
  std::printf("snapshot              %s\n", options.snapshot.c_str());
  std::printf("file size             %s bytes\n", with_commas(file_size).c_str());
  std::printf("magic                 ABF1\n");
  std::printf("format version        %u\n", h.format_version);
  std::printf("hash protocol version %u\n", h.hash_protocol_version);
  std::printf("hash count (k)        %u\n", h.hash_count);
  std::printf("catalog version       %llu\n", static_cast<unsigned long long>(h.catalog_version));
  std::printf("bit count (m)         %s (%s bytes)\n", with_commas(h.bit_count).c_str(),
              with_commas(h.bit_count / 8).c_str());
  std::printf("expected items (n)    %s\n", with_commas(h.expected_item_count).c_str());
  std::printf("inserted items        %s\n", with_commas(h.inserted_item_count).c_str());
  std::printf("target fpp            %.17g\n", h.target_fpp);
  std::printf("payload length        %s bytes\n", with_commas(h.payload_length).c_str());
  std::printf("payload checksum      %s (XXH3-64, verified)\n", hex64(h.payload_checksum).c_str());
  std::printf("header checksum       %s (XXH3-64, verified)\n", hex64(h.header_checksum).c_str());
  std::printf("catalog id            %s%s\n", h.catalog_id.hex().c_str(),
              h.catalog_id.is_zero() ? " (none: tied to no catalog)" : "");
  std::printf("key fingerprint       %s%s\n", h.key_fingerprint.hex().c_str(),
              h.key_fingerprint.is_zero() ? " (unkeyed)" : " (keyed; key verified)");
  std::printf("bits set              %s\n", with_commas(filter->popcount()).c_str());
  std::printf("fill ratio            %.6f\n", fill);
  std::printf("estimated fpp         %.6g\n", estimated);
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
      "Example: abf inspect catalog.abf --json");
  app->add_option("snapshot", options->snapshot, "ABF1 snapshot")->required();
  add_key_file_option(*app, options->key_file, "open a keyed (hash protocol 2) snapshot");
  app->add_flag("--json", options->json, "One JSON object instead of text");
  return {app, [options] { return run_inspect(*options); }};
}

}  // namespace

ABF_REGISTER_COMMAND(30, add_inspect_command);

}  // namespace abf::cli
