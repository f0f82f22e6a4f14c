// The in-process baseline of `abf serve`'s batch throughput
// (docs/performance.md): the same catalog and snapshot the server answers
// from, the same 64 Ki-digest batch file, answered by
// ArtifactExistenceService::exists_batch in this process on `threads`
// threads for `seconds`. Prints one JSON line: digests per second, batches,
// missing per batch.
//
//   abf_serve_inprocess CATALOG.db SNAPSHOT.abf BATCH.bin SECONDS [THREADS]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/service.hpp"
#include "abf/service/sqlite_catalog.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s CATALOG.db SNAPSHOT.abf BATCH.bin SECONDS [THREADS]\n",
                 argv[0]);
    return 2;
  }
  const double seconds = std::atof(argv[4]);
  const int threads = argc > 5 ? std::atoi(argv[5]) : 1;
  abf::service::CatalogOpenOptions open_options;
  open_options.read_only = true;
  auto catalog = abf::service::SqliteCatalog::open(argv[1], open_options);
  if (!catalog) {
    std::fprintf(stderr, "%s\n", catalog.error().describe().c_str());
    return 1;
  }
  abf::service::Metrics metrics;
  abf::service::SnapshotPublisher publisher(&metrics, *catalog);
  auto snapshot = publisher.load_and_publish(argv[2]);
  if (!snapshot) {
    std::fprintf(stderr, "%s\n", snapshot.error().describe().c_str());
    return 1;
  }
  std::ifstream in(argv[3], std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  const std::string data = bytes.str();
  std::vector<abf::Digest> batch(data.size() / 32);
  std::memcpy(batch.data(), data.data(), batch.size() * 32);
  const abf::service::ArtifactExistenceService service(publisher, *catalog, &metrics);
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> missing{0};
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::duration<double>(seconds);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      auto exists = std::make_unique<bool[]>(batch.size());
      while (std::chrono::steady_clock::now() < until) {
        auto counts =
            service.exists_batch(batch, std::span<bool>(exists.get(), batch.size()), **snapshot);
        if (!counts) std::abort();
        // What the server also does: collect the missing ones.
        std::vector<abf::Digest> out;
        out.reserve(batch.size());
        for (std::size_t i = 0; i < batch.size(); ++i) {
          if (!exists[i]) out.push_back(batch[i]);
        }
        missing.store(out.size());
        batches.fetch_add(1);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"threads\":%d,\"batches\":%llu,\"batch\":%zu,\"missing_per_batch\":%llu,"
      "\"seconds\":%.3f,\"digests_per_second\":%.0f}\n",
      threads, static_cast<unsigned long long>(batches.load()), batch.size(),
      static_cast<unsigned long long>(missing.load()), elapsed,
      static_cast<double>(batches.load() * batch.size()) / elapsed);
  return 0;
}
