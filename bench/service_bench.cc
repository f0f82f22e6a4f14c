// The bulk dedup job (issue target): 1,000,000 candidates against a SQLite
// catalog of 1,000,000 digests, filter (fpp 0.01) in front vs asking SQLite
// for every candidate, measured side by side in one run. Each iteration runs
// both jobs twice and keeps the faster of each; the job includes reading the
// candidates and formatting the output lines (discarded).
//
//   abf_bench --benchmark_filter=Dedup
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/service.hpp"
#include "abf/service/sqlite_catalog.hpp"

namespace {

namespace fs = std::filesystem;
using namespace abf;
using namespace abf::service;

constexpr std::uint64_t kCatalogSize = 1'000'000;
constexpr std::uint64_t kCandidates = 1'000'000;
constexpr double kFpp = 0.01;

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

// The catalog, its snapshot and a publisher, made once per process.
struct World {
  fs::path dir;
  std::vector<Digest> members;
  std::unique_ptr<SqliteCatalog> catalog;
  SnapshotPublisher publisher;
  std::string error;

  World() {
    std::string pattern = (fs::temp_directory_path() / "abf-bench-dedup-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      error = "cannot create a temporary directory";
      return;
    }
    dir = pattern;
    members = random_digests(kCatalogSize, 1);
    auto created = SqliteCatalog::create(dir / "catalog.db");
    if (!created) {
      error = created.error().describe();
      return;
    }
    catalog = std::make_unique<SqliteCatalog>(std::move(*created));
    auto added = catalog->add(members);
    if (!added) {
      error = added.error().describe();
      return;
    }
    auto filter = build_filter_from_catalog(
        *catalog, added->version, {.expected_item_count = kCatalogSize, .target_fpp = kFpp});
    if (!filter) {
      error = filter.error().describe();
      return;
    }
    if (auto published = publisher.publish(std::move(*filter)); !published) {
      error = published.error().describe();
    }
  }
  ~World() {
    catalog.reset();
    std::error_code ec;
    if (!dir.empty()) fs::remove_all(dir, ec);
  }
};

World& world() {
  static World instance;
  return instance;
}

// Candidates as the binary input file's bytes: `new_percent` % new digests,
// the rest catalog members.
std::string candidates(std::uint64_t new_percent) {
  const auto fresh = random_digests(kCandidates, 2);
  std::string bytes(kCandidates * Digest::kSize, '\0');
  for (std::uint64_t i = 0; i < kCandidates; ++i) {
    const bool known = i % 100 >= new_percent;
    const Digest& digest = known ? world().members[(i * 7919) % kCatalogSize] : fresh[i];
    std::memcpy(bytes.data() + i * Digest::kSize, digest.bytes.data(), Digest::kSize);
  }
  return bytes;
}

Result<DedupReport> run_job(const std::string& input, bool use_filter) {
  const ArtifactExistenceService service(world().publisher, *world().catalog, nullptr,
                                         {.use_filter = use_filter});
  auto reader = DigestReader::from_memory(input, InputFormat::kBinary);
  std::string text;
  return bulk_dedup(service, reader, [&](std::span<const Digest> absent) -> Result<void> {
    text.resize(absent.size() * 65);
    char* out = text.data();
    for (const Digest& digest : absent) {
      write_hex(digest, out);
      out[64] = '\n';
      out += 65;
    }
    benchmark::DoNotOptimize(text.data());
    return {};
  });
}

void BM_DedupSideBySide(benchmark::State& state) {
  if (!world().error.empty()) {
    state.SkipWithError(world().error.c_str());
    return;
  }
  const auto new_percent = static_cast<std::uint64_t>(state.range(0));
  const std::string input = candidates(new_percent);
  double filtered_s = 1e300;
  double exact_s = 1e300;
  BatchCounts filtered_counts;
  BatchCounts exact_counts;
  for (auto _ : state) {
    for (int repetition = 0; repetition < 2; ++repetition) {
      auto filtered = run_job(input, true);
      auto exact = run_job(input, false);
      if (!filtered || !exact) {
        state.SkipWithError((filtered ? exact.error() : filtered.error()).describe().c_str());
        return;
      }
      if (filtered->counts.present != exact->counts.present) {
        state.SkipWithError("the filtered job disagrees with the exact job");
        return;
      }
      filtered_s = std::min(filtered_s, filtered->seconds);
      exact_s = std::min(exact_s, exact->seconds);
      filtered_counts = filtered->counts;
      exact_counts = exact->counts;
    }
  }
  state.counters["filtered_s"] = filtered_s;
  state.counters["sqlite_only_s"] = exact_s;
  state.counters["speedup"] = exact_s / filtered_s;
  state.counters["lookups_pct"] =
      100.0 * static_cast<double>(filtered_counts.exact_lookups) / static_cast<double>(kCandidates);
  state.counters["lookups_avoided"] = static_cast<double>(filtered_counts.lookups_avoided());
  state.counters["observed_fpp"] = filtered_counts.observed_false_positive_rate();
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * 4 * kCandidates));
}
BENCHMARK(BM_DedupSideBySide)
    ->ArgName("new_pct")
    ->Arg(99)
    ->Arg(90)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// The cost of one exact lookup against the 1M-row catalog, batched.
void BM_SqliteBatchLookup(benchmark::State& state) {
  if (!world().error.empty()) {
    state.SkipWithError(world().error.c_str());
    return;
  }
  const auto queries = random_digests(static_cast<std::size_t>(state.range(0)), 3);
  auto answers = std::make_unique<bool[]>(queries.size());
  for (auto _ : state) {
    auto done = world().catalog->exists_at_version(queries, 1, {answers.get(), queries.size()});
    if (!done) state.SkipWithError(done.error().describe().c_str());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations() * queries.size()));
}
BENCHMARK(BM_SqliteBatchLookup)->Arg(1)->Arg(64)->Arg(65536)->Unit(benchmark::kMicrosecond);

}  // namespace
