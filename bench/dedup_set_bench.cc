// The pieces of `abf dedup` beside the filter and the store
// (docs/performance.md, "Bulk dedup, end to end"): the set that writes each
// new digest once, and the hex lines. Run:
//   build/bench/abf_bench --benchmark_filter='DigestSet|HexLine'
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "distinct.hpp"  // cli/: the CLI's own DigestSet, measured without the binary

namespace {

std::vector<abf::Digest> random_digests(std::size_t count, std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<abf::Digest> digests(count);
  for (abf::Digest& digest : digests) {
    for (std::size_t i = 0; i < abf::Digest::kSize; i += 8) {
      const std::uint64_t word = random();
      std::memcpy(digest.bytes.data() + i, &word, 8);
    }
  }
  return digests;
}

constexpr std::size_t kBatch = 65536;  // bulk_dedup's batch

// Every digest new, in batches as `abf dedup` inserts them; the set either
// sized at the start (as dedup does for a file) or doubling on the way.
void BM_DigestSetInsertNew(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const bool reserved = state.range(1) != 0;
  const auto digests = random_digests(count, 1);
  for (auto _ : state) {
    abf::cli::DigestSet set;
    if (reserved) set.reserve(count);
    for (std::size_t begin = 0; begin < count; begin += kBatch) {
      const std::size_t n = std::min(kBatch, count - begin);
      benchmark::DoNotOptimize(set.insert(std::span(digests.data() + begin, n)));
    }
    benchmark::DoNotOptimize(set.size());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BM_DigestSetInsertNew)
    ->ArgsProduct({{1 << 16, 1 << 21}, {0, 1}})
    ->ArgNames({"n", "reserved"})
    ->Unit(benchmark::kMillisecond);

// The same digests once more: every one a repeat (the table and the digests
// held are both read).
void BM_DigestSetInsertRepeats(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto digests = random_digests(count, 2);
  abf::cli::DigestSet set;
  set.insert(digests);
  for (auto _ : state) {
    for (std::size_t begin = 0; begin < count; begin += kBatch) {
      const std::size_t n = std::min(kBatch, count - begin);
      benchmark::DoNotOptimize(set.insert(std::span(digests.data() + begin, n)));
    }
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * count));
}
BENCHMARK(BM_DigestSetInsertRepeats)->Arg(1 << 21)->ArgName("n")->Unit(benchmark::kMillisecond);

// 65-byte lines into one buffer: the SSE2 path against the library's
// table-driven abf::write_hex.
void BM_HexLine(benchmark::State& state) {
  const bool library = state.range(0) != 0;
  const auto digests = random_digests(kBatch, 3);
  std::string text(kBatch * 65, '\0');
  for (auto _ : state) {
    char* out = text.data();
    for (const abf::Digest& digest : digests) {
      if (library) {
        abf::write_hex(digest, out);
        out[64] = '\n';
        out += 65;
      } else {
        out = abf::cli::write_hex_line(digest, out);
      }
    }
    benchmark::DoNotOptimize(text.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_HexLine)->Arg(0)->Arg(1)->ArgName("library");

}  // namespace
