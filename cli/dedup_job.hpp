// The work of `abf dedup`, from opening the catalog to the new digests
// written (not yet put in place): one function that the command
// (cmd_dedup.cpp) and the demo (dedup_demo.cpp) both call, so what the demo
// times is what the command does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "abf/backend.hpp"
#include "abf/error.hpp"
#include "abf/io.hpp"
#include "abf/service/service.hpp"
#include "abf/snapshot.hpp"
#include "common.hpp"

namespace abf::cli {

// One dedup, as `abf dedup`'s options give it (checked there: this takes
// them as they are).
struct DedupJob {
  std::string snapshot;  // ABF1 snapshot or filter-set manifest, or "-" (standard input)
  std::string index;     // exact index (ABFX); empty: SQLite answers alone
  std::string db;        // the catalog, opened read-only
  std::string input = "-";
  InputFormat format = InputFormat::kHex;
  std::string output = "-";
  Backend backend;
  LoadOptions load_options;  // the snapshot's key, if keyed
  bool exact_only = false;   // ask the exact store about every candidate
  std::uint64_t head_cache_digests = service::kDefaultHeadCacheDigests;
  int busy_timeout_ms = kDefaultBusyTimeoutMs;
};

// What a dedup did. `output` holds the new digests, written but not yet in
// place: the caller commits it (after writing anything that must exist
// first, as dedup's --stats-json does).
struct DedupOutcome {
  service::DedupReport report;
  // The counts, as `abf dedup --json` prints them (its footer names them).
  nlohmann::ordered_json stats;
  std::uint64_t written = 0;                   // new digests written, each once
  std::uint64_t snapshot_version = 0;          // the version of the snapshot used
  std::optional<std::uint64_t> index_version;  // with an index
  DataOutput output;
};

// Opens the catalog (and the index, checked against it), loads and checks
// the snapshot, streams the input through the existence service
// (service::bulk_dedup) and writes each new digest once, at its first
// occurrence, as a lowercase hex line. Uses the thread limit in force
// (apply_threads). The first error stops it and is returned as it is;
// nothing is put in place then.
Result<DedupOutcome> run_dedup_job(DedupJob job);

}  // namespace abf::cli
