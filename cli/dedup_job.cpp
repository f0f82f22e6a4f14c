// run_dedup_job: the pipeline of `abf dedup` (dedup_job.hpp).
#include "dedup_job.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "distinct.hpp"

namespace abf::cli {
namespace {

constexpr std::size_t kHexLine = 65;  // 64 hex digits and '\n'
constexpr std::size_t kBatch = 65536;

// ------------------------------------------------------------ the index alone

// The exact store of `abf dedup --index FILE` without --db: the index (or
// index set) answers for its own version, exactly, and nothing changed
// after it (there is no catalog to change). Names no catalog to the
// publisher and the service: the snapshot is checked against the index
// itself before it is published (check_snapshot_against_index).
class IndexStore final : public service::ArtifactRepository {
 public:
  IndexStore(IndexSet index, std::string name) : index_(std::move(index)), name_(std::move(name)) {}

  Result<bool> exists_at_version(const Digest& digest, std::uint64_t version) override {
    if (auto ok = check_version(version); !ok) return std::unexpected(ok.error());
    return index_.contains(digest);
  }
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t version,
                                 std::span<bool> exists) override {
    if (auto ok = check_version(version); !ok) return ok;
    return index_.contains(digests, exists);
  }
  Result<std::uint64_t> latest_version() override { return index_.catalog_version(); }
  Result<service::CatalogContent> content_at_version(std::uint64_t version) override {
    if (auto ok = check_version(version); !ok) return std::unexpected(ok.error());
    return service::CatalogContent{.item_count = index_.size(),
                                   .fingerprint = index_.content_fingerprint().value_or(
                                       ContentFingerprint{})};
  }
  Result<service::VersionChanges> changes_between(std::uint64_t after,
                                                  std::uint64_t upto) override {
    if (after > upto) return fail(ErrorCode::kInvalidArgument, name_ + ": no version range");
    if (auto ok = check_version(upto); !ok) return std::unexpected(ok.error());
    return service::VersionChanges{.versions = upto - after, .added = 0, .removed = 0};
  }
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const service::DigestSink&, std::size_t) override {
    if (auto changes = changes_between(after, upto); !changes) {
      return std::unexpected(changes.error());
    }
    return {};  // nothing is ever added after the index's version
  }
  // Digests at random positions of the index (every one when it holds no
  // more than `count`): what the snapshot check probes the filter with.
  Result<std::vector<Digest>> sample_at_version(std::uint64_t version,
                                                std::size_t count) override {
    if (auto ok = check_version(version); !ok) return std::unexpected(ok.error());
    std::vector<Digest> out;
    const std::uint64_t size = index_.size();
    if (size <= count) {
      for (const Index& shard : index_.shards()) {
        out.insert(out.end(), shard.digests().begin(), shard.digests().end());
      }
      return out;
    }
    std::random_device entropy;
    std::mt19937_64 rng((static_cast<std::uint64_t>(entropy()) << 32) | entropy());
    std::uniform_int_distribution<std::uint64_t> pick(0, size - 1);
    for (std::size_t i = 0; i < count; ++i) {
      std::uint64_t at = pick(rng);
      for (const Index& shard : index_.shards()) {
        if (at < shard.size()) {
          out.push_back(shard.digests()[static_cast<std::size_t>(at)]);
          break;
        }
        at -= shard.size();
      }
    }
    return out;
  }

  const IndexSet& index() const noexcept { return index_; }

 private:
  Result<void> check_version(std::uint64_t version) const {
    if (version == index_.catalog_version()) return {};
    return fail(ErrorCode::kInvalidArgument,
                name_ + " answers for version " + std::to_string(index_.catalog_version()) +
                    " only, not " + std::to_string(version));
  }

  IndexSet index_;
  std::string name_;
};

std::string catalog_words(const CatalogId& id) {
  return id.is_zero() ? std::string("no catalog") : "catalog " + id.hex();
}

// Whether the snapshot `filter` (from `source`) may stand in front of the
// index alone: of the same catalog (or, both, of none) and version, and
// holding exactly the index's digests (its insertion count and content
// fingerprint the index's, which its digests add up to), then the
// publisher's content rules (check_snapshot_content: the fill a set of that
// many distinct digests gives, and a sample of the index's digests all
// `maybe`). kCatalogMismatch naming both otherwise: its `absent` answers
// would be wrong there.
Result<void> check_snapshot_against_index(const FilterSet& filter, const std::string& source,
                                          IndexStore& store, const std::string& index_path) {
  const IndexSet& index = store.index();
  const std::string named = "snapshot " + source;
  const std::string theirs = "index " + index_path;
  if (filter.catalog_id() != index.catalog_id() ||
      filter.catalog_version() != index.catalog_version()) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " is of " + catalog_words(filter.catalog_id()) + " version " +
                    std::to_string(filter.catalog_version()) + ", " + theirs + " of " +
                    catalog_words(index.catalog_id()) + " version " +
                    std::to_string(index.catalog_version()) +
                    ": without --db nothing tells what changed between them, so its absent "
                    "answers could be wrong; refused (build both from the same list or catalog "
                    "version, or give --db)");
  }
  const auto& claimed = index.content_fingerprint();
  if (!claimed) {
    return fail(ErrorCode::kCatalogMismatch,
                theirs + " carries no content fingerprint, so nothing shows that " + named +
                    " holds its digests; refused");
  }
  if (const ContentFingerprint actual = index.digests_fingerprint(); actual != *claimed) {
    return fail(ErrorCode::kCatalogMismatch,
                theirs + ": its digests add up to the content fingerprint " + actual.hex() +
                    ", not the " + claimed->hex() + " its header claims; refused");
  }
  const auto& fingerprint = filter.content_fingerprint();
  if (!fingerprint || *fingerprint != *claimed ||
      filter.inserted_item_count() != index.size()) {
    return fail(ErrorCode::kCatalogMismatch,
                named + " does not hold the digests of " + theirs + ": its content fingerprint " +
                    "is " + (fingerprint ? fingerprint->hex() : std::string("absent")) + " over " +
                    std::to_string(filter.inserted_item_count()) + " insertions, the index's " +
                    claimed->hex() + " over " + std::to_string(index.size()) +
                    " distinct digests (a list with repeats needs abf build --distinct; a "
                    "snapshot of other digests?): its absent answers would be wrong; refused");
  }
  return service::check_snapshot_content(filter, source, store, theirs);
}

// ------------------------------------------------------------ input lines

// Reads text as DigestReader reads kHex (the same lines, records, blank
// lines, limits and errors), and keeps each digest's whole line or record,
// its terminator included (one is added to a last line that lacks it), for
// `abf dedup --lines`.
class LineReader {
 public:
  static Result<std::unique_ptr<LineReader>> open(const std::string& path) {
    auto reader = std::unique_ptr<LineReader>(new LineReader);
    if (path == "-") {
      reader->name_ = "<stdin>";
      reader->fd_ = STDIN_FILENO;
    } else {
      reader->name_ = path;
      reader->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
      if (reader->fd_ < 0) {
        return fail(ErrorCode::kIo, path + ": cannot open: " + std::strerror(errno));
      }
      reader->owns_fd_ = true;
    }
    struct stat info {};
    if (::fstat(reader->fd_, &info) != 0) {
      return fail(ErrorCode::kIo, reader->name_ + ": cannot stat: " + std::strerror(errno));
    }
    if (S_ISDIR(info.st_mode)) {
      return fail(ErrorCode::kIo, reader->name_ + ": is a directory, not a file of digests");
    }
    if (S_ISREG(info.st_mode)) {
      reader->regular_ = true;
      reader->size_hint_ = static_cast<std::uint64_t>(info.st_size);
      if (const off_t at = ::lseek(reader->fd_, 0, SEEK_CUR); at > 0) {
        reader->size_hint_ -= std::min(reader->size_hint_, static_cast<std::uint64_t>(at));
      }
    }
    reader->buffer_.resize(DigestReader::kMaxRecordBytes);
    return reader;
  }

  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader() {
    if (owns_fd_) ::close(fd_);
  }

  // Fills the front of `out` (0 at the end); record(i) is the text of
  // out[i] until the next call.
  Result<std::size_t> read(std::span<Digest> out) {
    text_.clear();
    starts_.assign(1, 0);
    std::size_t produced = 0;
    while (produced < out.size()) {
      if (terminator_ == 0) {
        if (!eof_ && end_ - begin_ < DigestReader::kMaxRecordBytes) {
          if (auto filled = fill(); !filled) return std::unexpected(filled.error());
          continue;
        }
        const std::size_t window = std::min(end_ - begin_, DigestReader::kMaxRecordBytes);
        nul_ = window != 0 && std::memchr(buffer_.data() + begin_, '\0', window) != nullptr;
        terminator_ = nul_ ? '\0' : '\n';
      }
      const char* start = buffer_.data() + begin_;
      const auto* found =
          begin_ == end_ ? nullptr
                         : static_cast<const char*>(std::memchr(start, terminator_, end_ - begin_));
      std::size_t length = 0;
      std::size_t advance = 0;
      if (found != nullptr) {
        length = static_cast<std::size_t>(found - start);
        advance = length + 1;
      } else if (eof_) {
        if (begin_ == end_) break;
        length = advance = end_ - begin_;
      } else {
        if (begin_ == 0 && end_ == buffer_.size()) {
          return fail(ErrorCode::kInvalidDigest, name_ + ": " + (nul_ ? "record " : "line ") +
                                                     std::to_string(line_ + 1) +
                                                     " is longer than " +
                                                     std::to_string(buffer_.size()) + " bytes");
        }
        if (auto filled = fill(); !filled) return std::unexpected(filled.error());
        continue;
      }
      const std::string_view text(start, length);
      const std::uint64_t offset = consumed_;
      begin_ += advance;
      consumed_ += advance;
      ++line_;
      Result<Digest> digest;
      if (nul_) {
        if (is_blank_record(text)) continue;
        digest = parse_digest_record(text, line_, offset);
      } else {
        if (const auto* nul = static_cast<const char*>(std::memchr(text.data(), '\0', length));
            nul != nullptr) {
          return fail(ErrorCode::kInvalidDigest,
                      name_ + ": line " + std::to_string(line_) + ": a NUL byte at byte offset " +
                          std::to_string(offset + static_cast<std::uint64_t>(nul - text.data())) +
                          ": NUL ends records only in input whose first MiB holds one (as "
                          "sha256sum -z writes it), and this input's first MiB has none");
        }
        if (is_blank_line(text)) continue;
        digest = parse_digest_line(text, line_);
      }
      if (!digest) return fail(ErrorCode::kInvalidDigest, name_ + ": " + digest.error().message);
      out[produced++] = *digest;
      text_.append(text);
      text_.push_back(terminator_);
      starts_.push_back(text_.size());
    }
    return produced;
  }

  std::string_view record(std::size_t i) const {
    return std::string_view(text_).substr(starts_[i], starts_[i + 1] - starts_[i]);
  }
  std::uint64_t bytes_read() const noexcept { return consumed_; }
  std::uint64_t size_hint() const noexcept { return size_hint_; }

 private:
  LineReader() = default;

  Result<void> fill() {
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    while (end_ < buffer_.size()) {
      const ssize_t got = ::read(fd_, buffer_.data() + end_, buffer_.size() - end_);
      if (got < 0) {
        if (errno == EINTR) continue;
        return fail(ErrorCode::kIo, name_ + ": read error: " + std::strerror(errno));
      }
      if (got == 0) {
        if (regular_ && received_ < size_hint_) {
          return fail(ErrorCode::kIo, name_ + ": the file shrank while being read (it ended at " +
                                          std::to_string(received_) + " of the " +
                                          std::to_string(size_hint_) +
                                          " bytes it had when opened)");
        }
        eof_ = true;
        break;
      }
      end_ += static_cast<std::size_t>(got);
      received_ += static_cast<std::uint64_t>(got);
    }
    return {};
  }

  std::string name_;
  int fd_ = -1;
  bool owns_fd_ = false;
  bool regular_ = false;
  bool eof_ = false;
  char terminator_ = 0;  // 0: undecided (until the first MiB is read)
  bool nul_ = false;     // NUL-terminated records
  std::vector<char> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::uint64_t consumed_ = 0;
  std::uint64_t line_ = 0;
  std::uint64_t size_hint_ = 0;
  std::uint64_t received_ = 0;
  std::string text_;                // this batch's records, one after another
  std::vector<std::size_t> starts_; // record i is text_[starts_[i], starts_[i + 1])
};

// ------------------------------------------------------------ the counts

// The counts. total = new + repeats + present: `new` digests are written
// once each, `repeats` are later occurrences of one already written.
nlohmann::ordered_json stats_json(const service::DedupReport& report, bool filter_used,
                                  std::optional<std::uint64_t> snapshot_version,
                                  std::uint64_t written) {
  const service::BatchCounts& c = report.counts;
  const std::uint64_t absent = c.total - c.present;
  return {
      {"catalog_version", report.catalog_version},
      {"snapshot_version", snapshot_version ? nlohmann::ordered_json(*snapshot_version)
                                            : nlohmann::ordered_json(nullptr)},
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
}

}  // namespace

Result<DedupOutcome> run_dedup_job(DedupJob job) {
  if (job.db.empty() && job.index.empty()) {
    return fail(ErrorCode::kInvalidArgument, "dedup: no exact store (a catalog or an index)");
  }
  // The exact store: the catalog (with the index in front, checked against
  // it like a snapshot, before any input is read), or the index alone.
  std::optional<service::SqliteCatalog> catalog;
  std::optional<service::IndexedRepository> indexed;
  std::optional<IndexStore> index_only;
  std::optional<IndexSet> index;
  if (!job.index.empty()) {
    auto loaded = [&] {
      const Activity activity("loading " + job.index);
      return IndexSet::load(job.index);
    }();
    if (!loaded) return std::unexpected(loaded.error());
    index = std::move(*loaded);
  }
  if (!job.db.empty()) {
    service::CatalogOpenOptions open_options;
    open_options.read_only = true;  // dedup never changes the catalog
    open_options.busy_timeout_ms = job.busy_timeout_ms;
    auto opened = service::SqliteCatalog::open(job.db, open_options);
    if (!opened) return std::unexpected(opened.error());
    catalog.emplace(std::move(*opened));
    if (index) {
      if (auto bound = service::check_index_binding(*index, job.index, *catalog); !bound) {
        return std::unexpected(bound.error());
      }
      indexed.emplace(*catalog, std::move(*index), job.head_cache_digests);
    }
  } else {
    index_only.emplace(std::move(*index), "index " + job.index);
  }
  service::ArtifactRepository& store =
      indexed      ? static_cast<service::ArtifactRepository&>(*indexed)
      : index_only ? static_cast<service::ArtifactRepository&>(*index_only)
                   : static_cast<service::ArtifactRepository&>(*catalog);

  // The snapshot, if any: a publisher bound to the catalog refuses one of
  // another catalog, or of none, or one that does not hold what the catalog
  // holds at its version, before any input is read or output written
  // (docs/protocol.md section 8); in front of the index alone it must hold
  // the index's digests.
  service::Metrics metrics;
  service::SnapshotPublisher publisher(&metrics, store);
  std::shared_ptr<const service::Snapshot> snapshot;
  if (!job.snapshot.empty()) {
    auto published = [&]() -> Result<std::shared_ptr<const service::Snapshot>> {
      const std::string source = job.snapshot == "-" ? "<stdin>" : job.snapshot;
      if (job.snapshot != "-" && !index_only) {
        return publisher.load_and_publish(job.snapshot, job.load_options);
      }
      auto filter = load_set_argument(job.snapshot, job.load_options);
      if (!filter) return std::unexpected(filter.error());
      if (index_only) {
        if (auto ok = check_snapshot_against_index(*filter, source, *index_only, job.index); !ok) {
          return std::unexpected(ok.error());
        }
      }
      return publisher.publish(std::move(*filter), source);
    }();
    if (!published) return std::unexpected(published.error());
    snapshot = std::move(*published);
  }

  std::optional<DigestReader> digests;
  std::unique_ptr<LineReader> lines;
  if (job.lines) {
    auto opened = LineReader::open(job.input);
    if (!opened) return std::unexpected(opened.error());
    lines = std::move(*opened);
  } else {
    auto opened = DigestReader::open(job.input, job.format);
    if (!opened) return std::unexpected(opened.error());
    digests.emplace(std::move(*opened));
  }
  const std::uint64_t size_hint = lines ? lines->size_hint() : digests->size_hint();
  const auto bytes_read = [&] { return lines ? lines->bytes_read() : digests->bytes_read(); };
  auto output = DataOutput::create(job.output);
  if (!output) return std::unexpected(output.error());

  service::ServiceOptions service_options;
  service_options.use_filter = !job.exact_only;
  service_options.backend = job.backend;
  service_options.head_cache_digests = job.head_cache_digests;
  const service::ArtifactExistenceService service(publisher, store, &metrics, service_options);
  // Pinned: every batch answers with this snapshot at this one head (read
  // once, now), so the whole output is the store's answer at one version.
  // Without a snapshot every candidate is asked of the store at its newest
  // version.
  const auto start = std::chrono::steady_clock::now();
  service::DedupReport report;
  std::optional<service::Head> head;
  if (snapshot) {
    auto read = service.head(*snapshot);
    if (!read) return std::unexpected(read.error());
    head = std::move(*read);
    report.catalog_version = head->catalog_version;
    report.lag = head->lag;
  } else {
    auto latest = store.latest_version();
    if (!latest) return std::unexpected(latest.error());
    report.catalog_version = *latest;
  }

  // Each new digest once, at its first occurrence: the set holds the
  // digests written so far (never the present ones), in input order, its
  // table sized for the whole input when the input is a file.
  DigestSet written;
  constexpr std::uint64_t kReserveAtMost = std::uint64_t{1} << 24;  // a 256 MiB table
  written.reserve(static_cast<std::size_t>(std::min(
      size_hint / (job.format == InputFormat::kBinary ? Digest::kSize : kHexLine),
      kReserveAtMost)));
  Progress progress("dedup", size_hint, "bytes");
  std::vector<Digest> batch(kBatch);
  auto exists = std::make_unique<bool[]>(kBatch);
  auto inserted = std::make_unique<bool[]>(kBatch);
  std::vector<Digest> absent;
  std::vector<std::uint32_t> absent_at;  // their positions in the batch
  absent.reserve(kBatch);
  absent_at.reserve(kBatch);
  std::string text;  // only grows: never cleared nor filled twice
  for (;;) {
    auto count = lines ? lines->read(batch) : digests->read(batch);
    if (!count) return std::unexpected(count.error());
    if (*count == 0) break;
    const std::span<const Digest> part(batch.data(), *count);
    const std::span<bool> answers(exists.get(), *count);
    if (snapshot) {
      auto counts = service.exists_batch(part, answers, *snapshot, *head);
      if (!counts) return std::unexpected(counts.error());
      report.counts += *counts;
    } else {
      if (auto asked = store.exists_at_version(part, report.catalog_version, answers); !asked) {
        return std::unexpected(asked.error());
      }
      service::BatchCounts counts;
      counts.total = part.size();
      counts.exact_lookups = part.size();
      counts.present = static_cast<std::uint64_t>(std::count(answers.begin(), answers.end(), true));
      report.counts += counts;
    }
    absent.clear();
    absent_at.clear();
    for (std::size_t i = 0; i < part.size(); ++i) {
      if (!answers[i]) {
        absent.push_back(part[i]);
        absent_at.push_back(static_cast<std::uint32_t>(i));
      }
    }
    progress.update(bytes_read());
    if (absent.empty()) continue;
    const std::size_t first = written.size();
    const std::size_t added =
        written.insert(absent, std::span<bool>(inserted.get(), absent.size()));
    if (added == 0) continue;
    if (lines) {
      std::string out;
      for (std::size_t j = 0; j < absent.size(); ++j) {
        if (inserted[j]) out += lines->record(absent_at[j]);
      }
      if (auto wrote = output->write(out); !wrote) return std::unexpected(wrote.error());
      continue;
    }
    if (text.size() < added * kHexLine) text.resize(added * kHexLine);
    char* out = text.data();
    for (std::size_t i = first; i < first + added; ++i) out = write_hex_line(written[i], out);
    if (auto wrote = output->write(std::string_view(text.data(), added * kHexLine)); !wrote) {
      return std::unexpected(wrote.error());
    }
  }
  report.seconds = seconds_since(start);

  const bool filter_used = snapshot != nullptr && !job.exact_only;
  const std::optional<std::uint64_t> snapshot_version =
      snapshot ? std::optional<std::uint64_t>(snapshot->catalog_version()) : std::nullopt;
  auto stats = stats_json(report, filter_used, snapshot_version, written.size());
  std::optional<std::uint64_t> index_version;
  if (indexed) {
    // exact_lookups = index_lookups (answered in memory) + store_lookups (SQLite).
    const auto counts = indexed->counts();
    index_version = indexed->index().catalog_version();
    stats["index_version"] = *index_version;
    stats["index_lookups"] = counts.index_lookups;
    stats["store_lookups"] = counts.store_lookups;
  } else if (index_only) {
    index_version = index_only->index().catalog_version();
    stats["index_version"] = *index_version;
    stats["index_lookups"] = report.counts.exact_lookups;
    stats["store_lookups"] = 0;
  }
  return DedupOutcome{
      .report = report,
      .stats = std::move(stats),
      .written = written.size(),
      .snapshot_version = snapshot_version,
      .index_version = index_version,
      .index_only = index_only.has_value(),
      .filter_used = filter_used,
      .output = std::move(*output),
  };
}

}  // namespace abf::cli
