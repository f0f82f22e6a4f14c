// The exact index (ABFX, issue 24): lookups alone on one thread, for
// indexes around and beyond the last-level cache, beside SQLite's batch
// lookups of the same digests in a catalog of the same size; and the cost of
// a strict load (checksums, order check, radix table) per GiB.
//
//   abf_bench --benchmark_filter=Index
//
// Queries are 50% present (members in a scattered order), 50% absent, in
// batches of 65,536, as `abf dedup --index` asks them.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/sqlite_catalog.hpp"

namespace {

namespace fs = std::filesystem;
using namespace abf;

constexpr std::size_t kBatch = 65536;
constexpr std::size_t kQueries = std::size_t{1} << 20;

std::uint64_t splitmix(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

std::vector<Digest> random_digests(std::size_t count, std::uint64_t seed) {
  std::vector<Digest> digests(count);
  std::uint64_t state = seed;
  for (Digest& digest : digests) {
    for (std::size_t w = 0; w < 4; ++w) {
      const std::uint64_t value = splitmix(state);
      std::memcpy(digest.bytes.data() + 8 * w, &value, 8);
    }
  }
  return digests;
}

struct TempFolder {
  fs::path path;
  TempFolder() {
    std::string pattern = (fs::temp_directory_path() / "abf-bench-index-XXXXXX").string();
    if (::mkdtemp(pattern.data()) != nullptr) path = pattern;
  }
  ~TempFolder() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// An index of n random digests, and 1 Mi queries, half of them members.
struct IndexWorld {
  std::vector<Digest> members;  // sorted
  Index index;
  std::vector<Digest> queries;
  std::string error;

  explicit IndexWorld(std::size_t n) {
    members = random_digests(n, 1);
    std::sort(members.begin(), members.end());
    auto bytes = serialize_index({}, members);
    if (!bytes) {
      error = bytes.error().describe();
      return;
    }
    auto parsed = Index::parse(*bytes);
    if (!parsed) {
      error = parsed.error().describe();
      return;
    }
    index = std::move(*parsed);
    const auto fresh = random_digests(kQueries, 2);
    queries.resize(kQueries);
    for (std::size_t i = 0; i < kQueries; ++i) {
      queries[i] = i % 2 == 0 ? members[(i * 2654435761u) % n] : fresh[i];
    }
  }
};

IndexWorld& index_world(std::size_t n) {
  static std::map<std::size_t, std::unique_ptr<IndexWorld>> worlds;
  auto& world = worlds[n];
  if (!world) world = std::make_unique<IndexWorld>(n);
  return *world;
}

// Batched, pipelined lookups (Index::contains over a span).
void BM_IndexLookup(benchmark::State& state) {
  const auto& world = index_world(static_cast<std::size_t>(state.range(0)));
  if (!world.error.empty()) {
    state.SkipWithError(world.error.c_str());
    return;
  }
  std::vector<std::uint8_t> out(kBatch);
  std::size_t at = 0;
  std::uint64_t present = 0;
  for (auto _ : state) {
    const std::span<const Digest> batch(world.queries.data() + at, kBatch);
    (void)world.index.contains(batch, out);
    for (std::uint8_t o : out) present += o;
    at = (at + kBatch) % kQueries;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
  state.counters["index_MiB"] = static_cast<double>(world.members.size() * 32) / (1 << 20);
  state.counters["present"] =
      static_cast<double>(present) / static_cast<double>(state.iterations() * kBatch);
}
BENCHMARK(BM_IndexLookup)
    ->ArgName("digests")
    ->Arg(1 << 16)  // 2 MiB: L2/LLC
    ->Arg(1 << 20)  // 32 MiB: the LLC's size here
    ->Arg(1 << 22)  // 128 MiB: 4x LLC
    ->Arg(1 << 23)  // 256 MiB: 8x LLC
    ->Unit(benchmark::kMicrosecond);

// The same lookups one at a time (no pipeline): what the prefetch buys.
void BM_IndexLookupOneByOne(benchmark::State& state) {
  const auto& world = index_world(static_cast<std::size_t>(state.range(0)));
  if (!world.error.empty()) {
    state.SkipWithError(world.error.c_str());
    return;
  }
  std::size_t at = 0;
  std::uint64_t present = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBatch; ++i) present += world.index.contains(world.queries[at + i]);
    at = (at + kBatch) % kQueries;
  }
  benchmark::DoNotOptimize(present);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_IndexLookupOneByOne)->ArgName("digests")->Arg(1 << 22)->Unit(benchmark::kMicrosecond);

// std::binary_search over the same sorted digests, one at a time.
void BM_IndexStdBinarySearch(benchmark::State& state) {
  const auto& world = index_world(static_cast<std::size_t>(state.range(0)));
  std::size_t at = 0;
  std::uint64_t present = 0;
  for (auto _ : state) {
    for (std::size_t i = 0; i < kBatch; ++i) {
      present +=
          std::binary_search(world.members.begin(), world.members.end(), world.queries[at + i]);
    }
    at = (at + kBatch) % kQueries;
  }
  benchmark::DoNotOptimize(present);
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_IndexStdBinarySearch)->ArgName("digests")->Arg(1 << 22)->Unit(benchmark::kMicrosecond);

// SQLite's batch lookups (one read transaction, one prepared statement,
// ascending order) of the same digests, in a catalog of the same members.
void BM_IndexSqliteSameDigests(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto& world = index_world(n);
  static TempFolder folder;
  static std::map<std::size_t, std::unique_ptr<service::SqliteCatalog>> catalogs;
  auto& catalog = catalogs[n];
  if (!catalog) {
    auto created = service::SqliteCatalog::create(folder.path / ("c" + std::to_string(n) + ".db"));
    if (!created) {
      state.SkipWithError(created.error().describe().c_str());
      return;
    }
    catalog = std::make_unique<service::SqliteCatalog>(std::move(*created));
    if (auto added = catalog->add(world.members); !added) {
      state.SkipWithError(added.error().describe().c_str());
      return;
    }
  }
  auto answers = std::make_unique<bool[]>(kBatch);
  std::size_t at = 0;
  for (auto _ : state) {
    const std::span<const Digest> batch(world.queries.data() + at, kBatch);
    auto done = catalog->exists_at_version(batch, 1, {answers.get(), kBatch});
    if (!done) state.SkipWithError(done.error().describe().c_str());
    at = (at + kBatch) % kQueries;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * kBatch));
}
BENCHMARK(BM_IndexSqliteSameDigests)
    ->ArgName("digests")
    ->Arg(1 << 22)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

// A strict load from a file in the page cache: read (or map), the block
// table's and every block's checksum, the order check, the radix table.
void BM_IndexLoad(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0));
  const auto& world = index_world(n);
  static TempFolder folder;
  const fs::path path = folder.path / ("i" + std::to_string(n) + ".abfx");
  if (!fs::exists(path)) {
    if (auto saved = save_index(path, {}, world.members); !saved) {
      state.SkipWithError(saved.error().describe().c_str());
      return;
    }
  }
  const auto mode = state.range(1) == 0 ? LoadMode::kCopy : LoadMode::kMap;
  for (auto _ : state) {
    auto loaded = Index::load(path, mode);
    if (!loaded) state.SkipWithError(loaded.error().describe().c_str());
    benchmark::DoNotOptimize(loaded);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * n * Digest::kSize));
}
BENCHMARK(BM_IndexLoad)
    ->ArgNames({"digests", "map"})
    ->Args({1 << 23, 0})
    ->Args({1 << 23, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace
