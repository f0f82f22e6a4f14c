// run_dedup_job: the pipeline of `abf dedup` (dedup_job.hpp).
#include "dedup_job.hpp"

#include <algorithm>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "distinct.hpp"

namespace abf::cli {
namespace {

constexpr std::size_t kHexLine = 65;  // 64 hex digits and '\n'

// The counts. total = new + repeats + present: `new` digests are written
// once each, `repeats` are later occurrences of one already written.
nlohmann::ordered_json stats_json(const service::DedupReport& report, bool filter_used,
                                  std::uint64_t written,
                                  const service::IndexedRepository* indexed) {
  const service::BatchCounts& c = report.counts;
  const std::uint64_t absent = c.total - c.present;
  nlohmann::ordered_json json = {
      {"catalog_version", report.catalog_version},
      {"snapshot_version", report.lag.snapshot_version},
      {"filter", filter_used},
      {"total", c.total},
      {"new", written},
      {"repeats", absent - written},
      {"present", c.present},
      {"negative", c.negative},
      {"maybe", c.maybe},
      {"false_positives", c.false_positive},
      {"lag_versions", report.lag.versions_behind},
      {"lag_digests_added", report.lag.digests_added},
      {"head_lookups", c.head_lookups},
      {"head_present", c.head_present},
      {"exact_lookups", c.exact_lookups},
      {"exact_lookups_avoided", c.lookups_avoided()},
      {"negative_bypass_ratio", c.negative_bypass_ratio()},
      {"observed_false_positive_rate", c.observed_false_positive_rate()},
      {"false_discovery_ratio", c.false_discovery_ratio()},
      {"seconds", report.seconds},
  };
  if (indexed != nullptr) {
    // exact_lookups = index_lookups (answered in memory) + store_lookups (SQLite).
    const auto counts = indexed->counts();
    json["index_version"] = indexed->index().catalog_version();
    json["index_lookups"] = counts.index_lookups;
    json["store_lookups"] = counts.store_lookups;
  }
  return json;
}

}  // namespace

Result<DedupOutcome> run_dedup_job(DedupJob job) {
  service::CatalogOpenOptions open_options;
  open_options.read_only = true;  // dedup never changes the catalog
  open_options.busy_timeout_ms = job.busy_timeout_ms;
  auto catalog = service::SqliteCatalog::open(job.db, open_options);
  if (!catalog) return std::unexpected(catalog.error());
  // The publisher is bound to the catalog: a snapshot of another catalog,
  // or of none, or one that does not hold what the catalog holds at its
  // version (or of a version the catalog lacks), is refused before any input
  // is read or output written (docs/protocol.md section 8).
  // --index: the exact answers come from the index (checked against the
  // catalog like a snapshot, before any input is read), with SQLite behind
  // it for what changed after the index's version. The publisher and the
  // service share that one store, so the snapshot is checked once.
  std::optional<service::IndexedRepository> indexed;
  if (!job.index.empty()) {
    auto index = [&] {
      const Activity activity("loading " + job.index);
      return IndexSet::load(job.index);
    }();
    if (!index) return std::unexpected(index.error());
    if (auto bound = service::check_index_binding(*index, job.index, *catalog); !bound) {
      return std::unexpected(bound.error());
    }
    indexed.emplace(*catalog, std::move(*index), job.head_cache_digests);
  }
  service::ArtifactRepository& store =
      indexed ? static_cast<service::ArtifactRepository&>(*indexed) : *catalog;
  service::Metrics metrics;
  service::SnapshotPublisher publisher(&metrics, store);
  auto snapshot = [&]() -> Result<std::shared_ptr<const service::Snapshot>> {
    if (job.snapshot != "-") return publisher.load_and_publish(job.snapshot, job.load_options);
    auto filter = load_set_argument(job.snapshot, job.load_options);
    if (!filter) return std::unexpected(filter.error());
    return publisher.publish(std::move(*filter), "<stdin>");
  }();
  if (!snapshot) return std::unexpected(snapshot.error());
  const std::uint64_t version = (*snapshot)->catalog_version();
  auto reader = DigestReader::open(job.input, job.format);
  if (!reader) return std::unexpected(reader.error());
  auto output = DataOutput::create(job.output);
  if (!output) return std::unexpected(output.error());

  service::ServiceOptions service_options;
  service_options.use_filter = !job.exact_only;
  service_options.backend = job.backend;
  service_options.head_cache_digests = job.head_cache_digests;
  const service::ArtifactExistenceService service(publisher, store, &metrics, service_options);
  std::string text;  // only grows: never cleared nor filled twice
  // Each new digest once, at its first occurrence: the set holds the
  // digests written so far (never the present ones), in input order, its
  // table sized for the whole input when the input is a file.
  DigestSet written;
  constexpr std::uint64_t kReserveAtMost = std::uint64_t{1} << 24;  // a 256 MiB table
  written.reserve(static_cast<std::size_t>(std::min(
      reader->size_hint() / (job.format == InputFormat::kBinary ? Digest::kSize : kHexLine),
      kReserveAtMost)));
  Progress progress("dedup", reader->size_hint(), "bytes");
  auto result = service::bulk_dedup(service, *reader, [&](std::span<const Digest> absent) {
    const std::size_t first = written.size();
    const std::size_t added = written.insert(absent);
    if (text.size() < added * kHexLine) text.resize(added * kHexLine);
    char* out = text.data();
    for (std::size_t i = first; i < first + added; ++i) out = write_hex_line(written[i], out);
    progress.update(reader->bytes_read());
    return output->write(std::string_view(text.data(), added * kHexLine));
  });
  if (!result) return std::unexpected(result.error());

  auto stats = stats_json(*result, !job.exact_only, written.size(), indexed ? &*indexed : nullptr);
  return DedupOutcome{
      .report = *result,
      .stats = std::move(stats),
      .written = written.size(),
      .snapshot_version = version,
      .index_version =
          indexed ? std::optional<std::uint64_t>(indexed->index().catalog_version()) : std::nullopt,
      .output = std::move(*output),
  };
}

}  // namespace abf::cli
