// The second part of `abf demo` (dedup_demo.hpp): the dedup job as a user
// runs it, three ways, each through run_dedup_job, the code of `abf dedup`.
#include "dedup_demo.hpp"

#include <stdlib.h>
#include <sys/resource.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/service.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "common.hpp"
#include "dedup_job.hpp"

namespace abf::cli {
namespace {

constexpr const char* kCommand = "demo";

std::string fixed(double value, int digits) {
  char text[32];
  std::snprintf(text, sizeof text, "%.*f", digits, value);
  return text;
}

struct TempDir {
  std::filesystem::path path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) std::filesystem::remove_all(path, ec);
  }
};

// User plus system CPU seconds of this process so far, every thread.
double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6;
  };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

Result<std::string> read_whole(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) {
    return std::unexpected(Error{ErrorCode::kIo, path.string() + ": cannot read it back"});
  }
  return bytes;
}

// The three ways, in the order they run and are printed.
struct Way {
  const char* key;    // the row's name in the JSON
  const char* label;  // in the table
  bool exact_only;    // abf dedup --exact-only
  bool index;         // abf dedup --index
};
constexpr std::array<Way, 3> kWays = {{
    {"exact_only", "SQLite only", true, false},
    {"filter_sqlite", "filter + SQLite", false, false},
    {"filter_index", "filter + index", false, true},
}};

struct Timed {
  double wall = 0;
  double cpu = 0;
  nlohmann::ordered_json stats;
  std::uint64_t written = 0;
};

}  // namespace

int run_dedup_demo(std::ostream* text, nlohmann::ordered_json& json, std::uint64_t size,
                   unsigned threads) {
  const std::uint64_t kCatalogSize = size;
  const std::uint64_t kCandidates = size;
  constexpr std::uint64_t kKnownEvery = 100;  // 1% of the candidates are in the catalog
  constexpr double kFpp = 0.01;
  // Candidates i = 0, 100, 200, ... are members; every other one is new.
  const std::uint64_t expected_new = kCandidates - (kCandidates + kKnownEvery - 1) / kKnownEvery;
  std::ostringstream discard;
  std::ostream& out = text != nullptr ? *text : discard;

  TempDir dir;
  {
    std::string pattern = (std::filesystem::temp_directory_path() / "abf-dedup-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      return report(kCommand, Error{ErrorCode::kIo, "cannot create a temporary directory"});
    }
    dir.path = pattern;
  }
  const auto db_path = dir.path / "catalog.db";
  const auto snapshot_path = dir.path / "catalog.abf";
  const auto index_path = dir.path / "catalog.abfx";
  const auto candidates_path = dir.path / "candidates.bin";

  out << "Part 2: bulk dedup, the whole job of abf dedup, against a SQLite catalog\n";
  std::error_code ec;
  {
    // The catalog, its snapshot and its index, then the catalog is closed:
    // each dedup below opens it read-only, as abf dedup does.
    const std::vector<Digest> members = generate_digests("catalog:", kCatalogSize);
    auto start = std::chrono::steady_clock::now();
    auto catalog = service::SqliteCatalog::create(db_path);
    if (!catalog) return report(kCommand, catalog.error());
    auto added = catalog->add(members);
    if (!added) return report(kCommand, added.error());
    const double catalog_seconds = seconds_since(start);
    const std::uint64_t db_bytes = std::filesystem::file_size(db_path, ec);
    out << "  catalog       " << counted(kCatalogSize, "digest")
        << " SHA-256(\"catalog:<i>\") as version " << added->version << ", written in "
        << fixed(catalog_seconds, 2) << " s (" << with_commas(db_bytes) << " bytes of SQLite)\n";

    start = std::chrono::steady_clock::now();
    auto filter = service::build_filter_from_catalog(
        *catalog, added->version,
        BloomSpec{.expected_item_count = kCatalogSize, .target_fpp = kFpp});
    if (!filter) return report(kCommand, filter.error());
    if (auto saved = save_snapshot(*filter, snapshot_path); !saved) {
      return report(kCommand, saved.error());
    }
    const double snapshot_seconds = seconds_since(start);
    out << "  snapshot      catalog version " << filter->catalog_version()
        << ", m = " << with_commas(filter->bit_count()) << " bits, k = " << filter->hash_count()
        << ", fpp " << kFpp << ": built from the catalog and saved in "
        << fixed(snapshot_seconds, 2) << " s\n";

    // What `abf index --db catalog.db -o catalog.abfx` does.
    start = std::chrono::steady_clock::now();
    auto indexed = service::build_index_from_catalog(*catalog, added->version, index_path);
    if (!indexed) return report(kCommand, indexed.error());
    const double index_seconds = seconds_since(start);
    const std::uint64_t index_bytes = std::filesystem::file_size(index_path, ec);
    out << "  index         " << counted(indexed->digest_count, "digest") << " sorted, "
        << with_commas(index_bytes) << " bytes (ABFX, as abf index writes it), in "
        << fixed(index_seconds, 2) << " s\n";

    // Candidates: every 100th is a catalog member, the rest are new.
    std::string candidates(kCandidates * Digest::kSize, '\0');
    {
      const std::vector<Digest> fresh = generate_digests("candidate:", kCandidates);
      for (std::uint64_t i = 0; i < kCandidates; ++i) {
        const Digest& digest =
            i % kKnownEvery == 0 ? members[(i / kKnownEvery * 7919) % kCatalogSize] : fresh[i];
        std::memcpy(candidates.data() + i * Digest::kSize, digest.bytes.data(), Digest::kSize);
      }
    }
    auto file = AtomicFile::create(candidates_path.string());
    if (!file) return report(kCommand, file.error());
    if (auto wrote = file->write(candidates); !wrote) return report(kCommand, wrote.error());
    if (auto done = file->commit(); !done) return report(kCommand, done.error());
    out << "  candidates    " << with_commas(kCandidates) << " in a binary file, of which "
        << with_commas(expected_new) << " new (99%)\n";

    json = {
        {"catalog_digests", kCatalogSize},
        {"catalog_seconds", catalog_seconds},
        {"catalog_bytes", db_bytes},
        {"snapshot_bit_count", filter->bit_count()},
        {"snapshot_hash_count", filter->hash_count()},
        {"snapshot_target_fpp", kFpp},
        {"snapshot_seconds", snapshot_seconds},
        {"index_digests", indexed->digest_count},
        {"index_bytes", index_bytes},
        {"index_seconds", index_seconds},
        {"candidates", kCandidates},
        {"candidates_format", "bin"},
        {"expected_new", expected_new},
    };
  }

  auto backend = backend_from_option("auto");
  if (!backend) return report(kCommand, backend.error());
  double load = 0;
  const bool have_load = ::getloadavg(&load, 1) == 1;
  std::array<Timed, kWays.size()> timed;
  // The answers: each output byte for byte against the first (kept in
  // memory; each file is removed once read, so the folder holds one at most).
  std::optional<std::string> first;
  bool same = true;
  for (std::size_t w = 0; w < kWays.size(); ++w) {
    const Way& way = kWays[w];
    const auto output_path = dir.path / (std::string("new-") + way.key + ".txt");
    DedupJob job{
        .snapshot = snapshot_path.string(),
        .index = way.index ? index_path.string() : std::string(),
        .db = db_path.string(),
        .input = candidates_path.string(),
        .format = InputFormat::kBinary,
        .output = output_path.string(),
        .backend = *backend,
        .load_options = {},
        .exact_only = way.exact_only,
    };
    const double cpu_start = cpu_seconds();
    const auto start = std::chrono::steady_clock::now();
    auto outcome = run_dedup_job(std::move(job));
    if (!outcome) return report(kCommand, outcome.error());
    if (auto committed = outcome->output.commit(); !committed) {
      return report(kCommand, committed.error());
    }
    timed[w] = {.wall = seconds_since(start),
                .cpu = cpu_seconds() - cpu_start,
                .stats = std::move(outcome->stats),
                .written = outcome->written};

    auto bytes = read_whole(output_path);
    if (!bytes) return report(kCommand, bytes.error());
    std::filesystem::remove(output_path, ec);
    if (!first) {
      first = std::move(*bytes);
    } else {
      same = same && *bytes == *first;
    }
  }
  for (const Timed& t : timed) same = same && t.written == expected_new;
  same = same && first->size() == expected_new * 65;

  const double candidates = static_cast<double>(kCandidates);
  const double baseline = timed[0].wall;
  const double cpu_baseline = timed[0].cpu;
  out << "  dedup         abf dedup's own code, run once each way in this order, "
      << counted(threads, "thread");
  if (have_load) out << ", load average " << fixed(load, 2) << " at the start";
  out << ";\n                timed from opening the catalog to the output file in place:"
         " snapshot and index\n                loaded and checked, candidates read, the"
         " filter, the exact lookups, each new\n                digest written once as a"
         " hex line\n";
  out << "  way               wall s  speedup     CPU s  speedup   ns/digest   exact lookups\n";
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (std::size_t w = 0; w < kWays.size(); ++w) {
    const Way& way = kWays[w];
    const Timed& t = timed[w];
    const double ns_per_digest = t.wall / candidates * 1e9;
    const double speedup = baseline / t.wall;
    const double cpu_speedup = t.cpu > 0 ? cpu_baseline / t.cpu : 0.0;
    std::string lookups = with_commas(t.stats["exact_lookups"].get<std::uint64_t>()) + " SQLite";
    if (way.index) {
      lookups = with_commas(t.stats["index_lookups"].get<std::uint64_t>()) + " index, " +
                with_commas(t.stats["store_lookups"].get<std::uint64_t>()) + " SQLite";
    }
    char line[160];
    std::snprintf(line, sizeof line, "  %-16s %7.3f  %6.2fx   %7.3f  %6.2fx  %10.1f   %s\n",
                  way.label, t.wall, speedup, t.cpu, cpu_speedup, ns_per_digest, lookups.c_str());
    out << line;
    rows.push_back({
        {"way", way.key},
        {"filter", !way.exact_only},
        {"index", way.index},
        {"wall_seconds", t.wall},
        {"cpu_seconds", t.cpu},
        {"ns_per_digest", ns_per_digest},
        {"speedup_over_exact_only", speedup},
        {"cpu_speedup_over_exact_only", cpu_speedup},
        {"stats", t.stats},
    });
  }
  out << "                    speedup = SQLite only's time / the way's (CPU time is the"
         " steadier figure\n                    on a busy machine); ns/digest = wall time /"
         " candidates\n";
  const nlohmann::ordered_json& f = timed[1].stats;
  const auto count = [&](const char* key) { return f[key].get<std::uint64_t>(); };
  out << "  filter        " << with_commas(count("negative")) << " proved absent, "
      << with_commas(count("maybe")) << " maybe ("
      << fixed(100.0 * static_cast<double>(count("maybe")) / candidates, 2) << "% of candidates), "
      << with_commas(count("false_positives"))
      << " false positives\n                negative_bypass_ratio "
      << fixed(f["negative_bypass_ratio"].get<double>(), 4) << ", observed_false_positive_rate "
      << fixed(f["observed_false_positive_rate"].get<double>(), 5) << " (resolution ~"
      << fixed(1.0 /
                   std::sqrt(static_cast<double>(count("negative") + count("false_positives")) *
                             kFpp) *
                   100,
               1)
      << "% relative), false_discovery_ratio " << fixed(f["false_discovery_ratio"].get<double>(), 4)
      << "\n";
  out << "  same output   " << (same ? "yes" : "NO") << ": " << with_commas(timed[0].written)
      << ", " << with_commas(timed[1].written) << " and " << with_commas(timed[2].written)
      << " new digests (" << with_commas(expected_new) << " expected), the three files "
      << (same ? "byte for byte equal" : "differ") << '\n';

  json["threads"] = threads;
  json["load_average"] = have_load ? nlohmann::ordered_json(load) : nlohmann::ordered_json(nullptr);
  json["runs_per_way"] = 1;
  json["ways"] = std::move(rows);
  json["same_output"] = same;
  if (!same) {
    return report(kCommand, Error{ErrorCode::kInvalidArgument,
                                  "the three dedups disagree (a bug): their outputs differ, or "
                                  "hold other than the expected count of new digests"});
  }
  return kExitOk;
}

}  // namespace abf::cli
