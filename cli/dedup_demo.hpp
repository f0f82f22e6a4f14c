// The second part of `abf demo`: bulk dedup against a SQLite catalog, timed
// as `abf dedup` runs it (run_dedup_job, dedup_job.hpp), three ways.
#pragma once

#include <cstdint>
#include <ostream>

#include <nlohmann/json.hpp>

namespace abf::cli {

// In a temporary directory (removed at the end): builds a SQLite catalog of
// `size` digests SHA-256("catalog:<i>") (demo: its --items, at most
// 1,000,000), its snapshot (fpp 0.01, as build --from-catalog writes it) and
// its exact index (as abf index writes it), and a file of `size` binary
// candidates of which 99% are new. Then runs the whole dedup job on that
// file three times, each from opening the catalog to the output file in
// place: SQLite alone (--exact-only), filter + SQLite, filter + exact index
// (--index), on the thread limit in force (`threads`, for the report).
// Checks that the three outputs are byte for byte equal and hold the
// expected count of new digests. Prints its steps and the table of wall time,
// CPU time, nanoseconds per candidate and speedup over SQLite alone on
// `text` (nothing when null), and puts the same figures in `json` (demo
// --json's "dedup"). Returns the process exit status (errors reported on
// stderr as "abf demo: ...").
int run_dedup_demo(std::ostream* text, nlohmann::ordered_json& json, std::uint64_t size,
                   unsigned threads);

}  // namespace abf::cli
