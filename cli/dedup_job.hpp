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
  // ABF1 snapshot or filter-set manifest, or "-" (standard input); empty:
  // no filter, the exact store answers every candidate.
  std::string snapshot;
  // Exact index (ABFX) or index set. With `db`: in front of SQLite. Without:
  // the exact store itself (an index of a list, or of a catalog version).
  std::string index;
  std::string db;  // the catalog, opened read-only; empty: `index` alone
  std::string input = "-";
  InputFormat format = InputFormat::kHex;
  std::string output = "-";
  Backend backend;
  LoadOptions load_options;  // the snapshot's key, if keyed
  bool exact_only = false;   // ask the exact store about every candidate
  // Write each new digest's whole input line (or -z record), as read, not
  // its hex: text input only.
  bool lines = false;
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
  std::uint64_t written = 0;                      // new digests written, each once
  std::optional<std::uint64_t> snapshot_version;  // the version of the snapshot used, if any
  std::optional<std::uint64_t> index_version;     // with an index
  // No catalog: the index answered alone (DedupJob::db empty).
  bool index_only = false;
  bool filter_used = false;  // a snapshot's filter was in front
  DataOutput output;
};

// Opens the exact store: the catalog (and the index, checked against it),
// or the index alone; loads and checks the snapshot, if any (against the
// catalog, or against the index: the same catalog id and version, and the
// index's count and content fingerprint); streams the input through the
// existence service (the filter in front, at the head read once), or
// straight to the store without a snapshot or with exact_only, and writes
// each new digest once, at its first occurrence, as a lowercase hex line
// (or its input line, `lines`). Uses the thread limit in force
// (apply_threads). The first error stops it and is returned as it is;
// nothing is put in place then.
Result<DedupOutcome> run_dedup_job(DedupJob job);

}  // namespace abf::cli
