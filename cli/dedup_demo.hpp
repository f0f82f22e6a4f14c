// The second part of `abf demo`: bulk dedup against a SQLite catalog, with
// and without the filter in front (cli/cmd_dedup.cpp).
#pragma once

#include <cstdint>
#include <ostream>

namespace abf::cli {

// Builds a catalog of `size` digests (demo: its --items, at most 1,000,000)
// in a temporary directory, publishes its snapshot (fpp 0.01), dedups `size`
// candidates of which 99% are new,
// once through the filter and once asking SQLite for every candidate, checks
// that both give the same output, and prints the lookups avoided and the time
// saved on `out`. Removes the directory. Returns the process exit status.
int run_dedup_demo(std::ostream& out, std::uint64_t size);

}  // namespace abf::cli
