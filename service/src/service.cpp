// ArtifactExistenceService and the bulk dedup job.
#include "abf/service/service.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

namespace abf::service {

// The digests added in (after, upto], as sorted runs (binary search in each;
// a run read when the head moves is merged into the last one while that one
// is at most twice its size, so there are O(log n) runs and each digest is
// copied O(log n) times). Immutable once made: a newer head makes a new
// AddedDigests that shares the older runs.
class AddedDigests {
 public:
  std::uint64_t after = 0;
  std::uint64_t upto = 0;
  VersionChanges changes;   // of (after, upto]
  std::uint64_t held = 0;   // digests in the runs
  bool over_bound = false;  // more than the bound were added: none held
  std::vector<std::shared_ptr<const std::vector<Digest>>> runs;

  bool contains(const Digest& digest) const noexcept {
    return std::any_of(runs.begin(), runs.end(), [&](const auto& run) {
      return std::binary_search(run->begin(), run->end(), digest);
    });
  }
};

bool Head::must_ask(const Digest& digest) const noexcept {
  if (catalog_version == lag.snapshot_version) return false;
  if (over_bound) return true;
  return added != nullptr && added->contains(digest);
}

namespace {

// Whether `digests` holds at most `limit` distinct digests (limit is small:
// abf serve's 1; stops at the first digest past it).
bool at_most_distinct(std::span<const Digest> digests, std::size_t limit) {
  if (digests.size() <= limit) return true;
  std::vector<Digest> seen;
  seen.reserve(limit + 1);
  for (const Digest& digest : digests) {
    if (std::find(seen.begin(), seen.end(), digest) != seen.end()) continue;
    if (seen.size() == limit) return false;
    seen.push_back(digest);
  }
  return true;
}

// Moves the distinct digests of `digests` to its front, in sorted order,
// and returns their count; slot[j] is the position there of the digest that
// was at j.
std::size_t distinct_lookups(std::vector<Digest>& digests, std::vector<std::uint32_t>& slot) {
  std::vector<std::uint32_t> order(digests.size());
  for (std::uint32_t j = 0; j < order.size(); ++j) order[j] = j;
  std::sort(order.begin(), order.end(),
            [&](std::uint32_t a, std::uint32_t b) { return digests[a] < digests[b]; });
  slot.assign(digests.size(), 0);
  std::vector<Digest> distinct;
  distinct.reserve(digests.size());
  for (const std::uint32_t j : order) {
    if (distinct.empty() || distinct.back() != digests[j]) distinct.push_back(digests[j]);
    slot[j] = static_cast<std::uint32_t>(distinct.size() - 1);
  }
  const std::size_t count = distinct.size();
  std::copy(distinct.begin(), distinct.end(), digests.begin());
  return count;
}

// `fresh` (sorted) appended to `runs`, merging while the last run is not
// more than twice the size of the one after it.
void append_run(std::vector<std::shared_ptr<const std::vector<Digest>>>& runs,
                std::vector<Digest> fresh) {
  auto run = std::make_shared<const std::vector<Digest>>(std::move(fresh));
  while (!runs.empty() && runs.back()->size() <= 2 * run->size()) {
    std::vector<Digest> merged;
    merged.reserve(runs.back()->size() + run->size());
    std::merge(runs.back()->begin(), runs.back()->end(), run->begin(), run->end(),
               std::back_inserter(merged));
    runs.pop_back();
    run = std::make_shared<const std::vector<Digest>>(std::move(merged));
  }
  runs.push_back(std::move(run));
}

Error head_behind(std::uint64_t head, std::uint64_t snapshot_version, const std::string& source) {
  return Error{ErrorCode::kCatalog,
               "the catalog's newest version is " + std::to_string(head) + ", older than version " +
                   std::to_string(snapshot_version) + " of snapshot " + source +
                   " (a catalog restored from a backup?): no answer is exact for both"};
}

double ratio(std::uint64_t numerator, std::uint64_t denominator) {
  return denominator == 0 ? 0.0 : static_cast<double>(numerator) / static_cast<double>(denominator);
}

Error no_snapshot() {
  return Error{ErrorCode::kInvalidArgument,
               "existence service: no snapshot has been published yet; there is no catalog "
               "version to answer for"};
}

}  // namespace

double BatchCounts::negative_bypass_ratio() const noexcept { return ratio(negative, total); }
double BatchCounts::observed_false_positive_rate() const noexcept {
  return ratio(false_positive, negative + false_positive);
}
double BatchCounts::false_discovery_ratio() const noexcept { return ratio(false_positive, maybe); }

BatchCounts& BatchCounts::operator+=(const BatchCounts& other) noexcept {
  total += other.total;
  negative += other.negative;
  maybe += other.maybe;
  false_positive += other.false_positive;
  head_lookups += other.head_lookups;
  head_present += other.head_present;
  exact_lookups += other.exact_lookups;
  present += other.present;
  return *this;
}

ArtifactExistenceService::ArtifactExistenceService(const SnapshotPublisher& publisher,
                                                   ArtifactRepository& repository, Metrics* metrics,
                                                   ServiceOptions options)
    : publisher_(publisher),
      repository_(repository),
      metrics_(metrics),
      options_(options),
      binding_(repository.catalog_binding()) {}

Result<void> ArtifactExistenceService::check_snapshot(const Snapshot& snapshot) const {
  if (!binding_) return {};
  if (snapshot.checked_against == &repository_) return {};
  return check_snapshot_binding(snapshot.filter, snapshot.source, repository_);
}

Result<ExistenceAnswer> ArtifactExistenceService::ask_store(const Digest& digest,
                                                            std::uint64_t version) const {
  auto found = repository_.exists_at_version(digest, version);
  if (!found) return std::unexpected(found.error());
  if (metrics_ != nullptr) metrics_->add(Counter::kExactLookup);
  return ExistenceAnswer{.exists = *found, .catalog_version = version};
}

Result<ExistenceAnswer> ArtifactExistenceService::exists(const Digest& digest) const {
  // One snapshot for the whole query: the version and the filter belong
  // together, whatever is published meanwhile; one head, read once.
  const auto snapshot = publisher_.current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  auto at = head(*snapshot);
  if (!at) return std::unexpected(at.error());
  return answer(digest, at->catalog_version, options_.use_filter ? snapshot.get() : nullptr, &*at);
}

Result<ExistenceAnswer> ArtifactExistenceService::exists(std::string_view digest_text) const {
  std::string_view hex = digest_text;
  if (hex.starts_with("sha256:")) hex.remove_prefix(7);
  auto digest = parse_hex_digest(hex);
  if (!digest) {
    if (metrics_ != nullptr) metrics_->add(Counter::kInvalidDigest);
    return fail(ErrorCode::kInvalidDigest, "existence query \"" +
                                               std::string(digest_text.substr(0, 80)) +
                                               "\": " + digest.error().message);
  }
  return exists(*digest);
}

Result<ExistenceAnswer> ArtifactExistenceService::exists_at_version(
    const Digest& digest, std::uint64_t catalog_version) const {
  // One reference for the whole query: a publish meanwhile does not change
  // the snapshot this answer is made with.
  const auto snapshot = options_.use_filter ? publisher_.current() : nullptr;
  if (snapshot != nullptr && snapshot->catalog_version() == catalog_version) {
    if (auto ok = check_snapshot(*snapshot); !ok) return std::unexpected(ok.error());
    return answer(digest, catalog_version, snapshot.get(), nullptr);
  }
  if (snapshot != nullptr && options_.answer_at_head &&
      snapshot->catalog_version() < catalog_version) {
    // A version after the snapshot's, up to the head: the filter with the
    // digests added since (those of (v, head] include those of (v, version]).
    auto latest = read_head(*snapshot);
    if (!latest) return std::unexpected(latest.error());
    if (catalog_version <= *latest) {
      auto at = head_at(*snapshot, catalog_version);
      if (!at) return std::unexpected(at.error());
      return answer(digest, catalog_version, snapshot.get(), &*at);
    }
  }
  return answer(digest, catalog_version, nullptr, nullptr);
}

Result<ExistenceAnswer> ArtifactExistenceService::answer(const Digest& digest,
                                                         std::uint64_t catalog_version,
                                                         const Snapshot* snapshot,
                                                         const Head* head) const {
  const bool filter_applies =
      snapshot != nullptr &&
      (snapshot->catalog_version() == catalog_version ||
       (head != nullptr && head->lag.snapshot_version == snapshot->catalog_version() &&
        snapshot->catalog_version() < catalog_version && catalog_version <= head->catalog_version));
  if (!filter_applies) {
    // No filter for this version: the store decides alone.
    auto answer = ask_store(digest, catalog_version);
    if (!answer) return answer;
    if (metrics_ != nullptr) {
      metrics_->add(Counter::kFilterBypass);
      metrics_->add(Counter::kQuery);
    }
    return answer;
  }
  if (!snapshot->filter.might_contain(digest)) {
    if (snapshot->catalog_version() != catalog_version && head->must_ask(digest)) {
      // Absent at v, but added after v: the store says whether it is still
      // there at the version asked.
      auto answer = ask_store(digest, catalog_version);
      if (!answer) return answer;
      answer->head_lookup = true;
      if (metrics_ != nullptr) {
        metrics_->add(Counter::kHeadLookup);
        if (answer->exists) metrics_->add(Counter::kHeadPresent);
        metrics_->add(Counter::kQuery);
      }
      return answer;
    }
    if (metrics_ != nullptr) {
      metrics_->add(Counter::kNegative);
      metrics_->add(Counter::kQuery);
    }
    return ExistenceAnswer{
        .exists = false, .filter_negative = true, .catalog_version = catalog_version};
  }
  auto answer = ask_store(digest, catalog_version);
  if (!answer) return answer;
  answer->false_positive = !answer->exists;
  if (metrics_ != nullptr) {
    metrics_->add(Counter::kMaybe);
    if (answer->false_positive) metrics_->add(Counter::kFalsePositive);
    metrics_->add(Counter::kQuery);
  }
  return answer;
}

Result<CatalogLag> ArtifactExistenceService::lag_of(std::uint64_t snapshot_version,
                                                    std::uint64_t head_version) const {
  CatalogLag lag{.snapshot_version = snapshot_version, .head_version = head_version};
  if (head_version == snapshot_version) return lag;
  auto changes = repository_.changes_between(snapshot_version, head_version);
  if (!changes) return std::unexpected(changes.error());
  lag.versions_behind = changes->versions;
  lag.digests_added = changes->added;
  lag.digests_removed = changes->removed;
  return lag;
}

Result<CatalogLag> ArtifactExistenceService::lag() const {
  const auto snapshot = publisher_.current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  auto latest = read_head(*snapshot);
  if (!latest) return std::unexpected(latest.error());
  if (*latest < snapshot->catalog_version()) {
    return std::unexpected(head_behind(*latest, snapshot->catalog_version(), snapshot->source));
  }
  return lag_of(snapshot->catalog_version(), *latest);
}

Result<Head> ArtifactExistenceService::head(const Snapshot& snapshot) const {
  if (auto ok = check_snapshot(snapshot); !ok) return std::unexpected(ok.error());
  const std::uint64_t v = snapshot.catalog_version();
  if (!options_.answer_at_head) {
    Head head;
    head.catalog_version = v;
    head.lag = {.snapshot_version = v, .head_version = v};
    return head;
  }
  auto latest = read_head(snapshot);
  if (!latest) return std::unexpected(latest.error());
  return head_at(snapshot, *latest);
}

Result<std::uint64_t> ArtifactExistenceService::read_head(const Snapshot& snapshot) const {
  auto record = repository_.head_record();
  if (!record) return std::unexpected(record.error());
  const std::uint64_t v = snapshot.catalog_version();
  // Nothing to compare: an unbound store, one that records no contents, or
  // a head older than the snapshot (the caller's head_behind error).
  if (!binding_ || !record->content || record->version < v) return record->version;
  const std::uint64_t items = snapshot.filter.inserted_item_count();
  const std::optional<ContentFingerprint>& fingerprint = snapshot.filter.content_fingerprint();
  const std::lock_guard lock(history_mutex_);
  const bool same_snapshot = history_.valid && history_.snapshot_version == v &&
                             history_.snapshot_items == items &&
                             history_.snapshot_fingerprint == fingerprint;
  if (same_snapshot && history_.version == record->version &&
      history_.content == *record->content) {
    return record->version;  // the common case: nothing moved
  }
  // Has a version seen before changed? The head moved back, or holds other
  // contents under the same number, or the version seen last does.
  bool rewritten = false;
  if (history_.valid) {
    if (record->version < history_.version) {
      rewritten = true;
    } else if (record->version == history_.version) {
      rewritten = !(history_.content == *record->content);
    } else {
      auto then = repository_.content_at_version(history_.version);
      if (!then) return std::unexpected(then.error());
      rewritten = !(*then == history_.content);
    }
  }
  if (rewritten || !same_snapshot) {
    auto at_v = repository_.content_at_version(v);
    if (!at_v) return std::unexpected(at_v.error());
    if (at_v->item_count != items || (fingerprint && !(at_v->fingerprint == *fingerprint))) {
      history_.valid = false;
      return fail(ErrorCode::kCatalogMismatch,
                  "snapshot " + snapshot.source + " no longer matches its catalog: version " +
                      std::to_string(v) + " now holds " + std::to_string(at_v->item_count) +
                      " digests (content fingerprint " + at_v->fingerprint.hex() +
                      "), the snapshot " + std::to_string(items) +
                      (fingerprint ? " (" + fingerprint->hex() + ")" : std::string()) +
                      "; the catalog's history was rewritten (a backup restored?); its absent "
                      "answers would be wrong, so none are given: rebuild the snapshot");
    }
  }
  if (rewritten) {
    // The digests held as added after v were read from the old history.
    const std::lock_guard cache_lock(cache_mutex_);
    cache_.reset();
    ++history_generation_;
  }
  history_ = {.valid = true,
              .version = record->version,
              .content = *record->content,
              .snapshot_version = v,
              .snapshot_items = items,
              .snapshot_fingerprint = fingerprint};
  return record->version;
}

Result<Head> ArtifactExistenceService::head_at(const Snapshot& snapshot,
                                               std::uint64_t head_version) const {
  if (auto ok = check_snapshot(snapshot); !ok) return std::unexpected(ok.error());
  const std::uint64_t v = snapshot.catalog_version();
  if (head_version < v) return std::unexpected(head_behind(head_version, v, snapshot.source));
  Head head;
  head.catalog_version = head_version;
  head.lag = {.snapshot_version = v, .head_version = head_version};
  if (head_version == v) return head;
  if (!options_.use_filter) {
    // Every digest goes to the store: nothing to hold, only the lag to tell.
    auto lag = lag_of(v, head_version);
    if (!lag) return std::unexpected(lag.error());
    head.lag = *lag;
    return head;
  }
  auto added = added_since(v, head_version);
  if (!added) return std::unexpected(added.error());
  const AddedDigests& held = **added;
  if (held.upto == head_version) {
    head.lag.versions_behind = held.changes.versions;
    head.lag.digests_added = held.changes.added;
    head.lag.digests_removed = held.changes.removed;
  } else {
    auto lag = lag_of(v, head_version);
    if (!lag) return std::unexpected(lag.error());
    head.lag = *lag;
  }
  head.over_bound = held.over_bound;
  if (!held.over_bound) head.added = std::move(*added);
  return head;
}

Result<std::shared_ptr<const AddedDigests>> ArtifactExistenceService::added_since(
    std::uint64_t after, std::uint64_t upto) const {
  const auto held = [&] {
    const std::lock_guard lock(cache_mutex_);
    return cache_;
  };
  // Those of (after, upto'] for an upto' >= upto answer as well.
  if (auto cached = held(); cached != nullptr && cached->after == after && cached->upto >= upto) {
    return cached;
  }
  const std::lock_guard load(load_mutex_);
  const std::uint64_t generation = [&] {
    const std::lock_guard lock(cache_mutex_);
    return history_generation_;
  }();
  auto base = held();  // another thread may have read them meanwhile
  if (base != nullptr && base->after == after && base->upto >= upto) return base;
  if (base != nullptr && base->after > after) {
    // A request still holding a snapshot older than the one the held digests
    // are for (published meanwhile): it is answered exactly, by asking the
    // store about each filter `absent`, rather than by replacing what the
    // newer snapshot's requests use.
    auto transient = std::make_shared<AddedDigests>();
    transient->after = after;
    transient->upto = upto;
    transient->over_bound = true;
    auto changes = repository_.changes_between(after, upto);
    if (!changes) return std::unexpected(changes.error());
    transient->changes = *changes;
    return transient;
  }
  if (base != nullptr && base->after != after) base = nullptr;  // an older snapshot's
  const std::uint64_t from = base != nullptr ? base->upto : after;
  auto changes = repository_.changes_between(from, upto);
  if (!changes) return std::unexpected(changes.error());
  auto next = std::make_shared<AddedDigests>();
  next->after = after;
  next->upto = upto;
  next->changes = *changes;
  if (base != nullptr) {
    next->changes.versions += base->changes.versions;
    next->changes.added += base->changes.added;
    next->changes.removed += base->changes.removed;
  }
  const std::uint64_t held_before = base != nullptr ? base->held : 0;
  // The bound is checked on the counts the versions recorded, before a
  // digest is read: memory never grows past it.
  next->over_bound = (base != nullptr && base->over_bound) ||
                     changes->added > options_.head_cache_digests -
                                          std::min(held_before, options_.head_cache_digests);
  if (!next->over_bound) {
    if (base != nullptr) next->runs = base->runs;
    std::vector<Digest> fresh;
    fresh.reserve(changes->added);
    auto read = repository_.for_each_digest_added(
        from, upto, [&](std::span<const Digest> part) -> Result<void> {
          fresh.insert(fresh.end(), part.begin(), part.end());
          return {};
        });
    if (!read) return std::unexpected(read.error());
    std::sort(fresh.begin(), fresh.end());
    next->held = held_before + fresh.size();
    if (!fresh.empty()) append_run(next->runs, std::move(fresh));
  }
  const std::lock_guard lock(cache_mutex_);
  // Kept only when no rewrite was noticed while they were read.
  if (history_generation_ == generation) cache_ = next;
  return next;
}

Result<BatchCounts> ArtifactExistenceService::exists_batch(std::span<const Digest> digests,
                                                           std::span<bool> exists) const {
  const auto snapshot = publisher_.current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  return exists_batch(digests, exists, *snapshot);
}

Result<BatchCounts> ArtifactExistenceService::exists_batch(std::span<const Digest> digests,
                                                           std::span<bool> exists,
                                                           const Snapshot& snapshot) const {
  auto at = head(snapshot);
  if (!at) return std::unexpected(at.error());
  return exists_batch(digests, exists, snapshot, *at);
}

Result<BatchCounts> ArtifactExistenceService::exists_batch(std::span<const Digest> digests,
                                                           std::span<bool> exists,
                                                           const Snapshot& snapshot,
                                                           const Head& head) const {
  if (exists.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "existence service: answer span holds " +
                                                 std::to_string(exists.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  return answer_batch(digests, &exists, nullptr, snapshot, head);
}

Result<BatchCounts> ArtifactExistenceService::find_missing(std::span<const Digest> digests,
                                                           const Snapshot& snapshot,
                                                           const Head& head,
                                                           std::vector<std::uint32_t>& missing) const {
  return answer_batch(digests, nullptr, &missing, snapshot, head);
}

Result<BatchCounts> ArtifactExistenceService::answer_batch(std::span<const Digest> digests,
                                                           std::span<bool>* exists,
                                                           std::vector<std::uint32_t>* missing,
                                                           const Snapshot& snapshot,
                                                           const Head& head) const {
  if (auto ok = check_snapshot(snapshot); !ok) return std::unexpected(ok.error());
  if (head.lag.snapshot_version != snapshot.catalog_version()) {
    return fail(ErrorCode::kInvalidArgument,
                "existence service: the head given was read for a snapshot of version " +
                    std::to_string(head.lag.snapshot_version) + ", not for " + snapshot.source +
                    " (version " + std::to_string(snapshot.catalog_version()) + ")");
  }
  const std::uint64_t version = head.catalog_version;
  const bool lagging = version != snapshot.catalog_version();
  BatchCounts counts;
  counts.total = digests.size();
  if (!options_.use_filter) {
    // The store answers every digest, as bools: into `exists`, or into a
    // scratch array turned into the missing indices.
    std::unique_ptr<bool[]> scratch;
    std::span<bool> answers;
    if (exists != nullptr) {
      answers = exists->first(digests.size());
    } else {
      scratch = std::make_unique<bool[]>(std::max<std::size_t>(digests.size(), 1));
      answers = std::span<bool>(scratch.get(), digests.size());
    }
    if (auto asked = repository_.exists_at_version(digests, version, answers); !asked) {
      return std::unexpected(asked.error());
    }
    counts.exact_lookups = digests.size();
    for (std::size_t i = 0; i < digests.size(); ++i) counts.present += answers[i] ? 1 : 0;
    if (missing != nullptr) {
      missing->reserve(missing->size() + digests.size() - counts.present);
      for (std::size_t i = 0; i < digests.size(); ++i) {
        if (!answers[i]) missing->push_back(static_cast<std::uint32_t>(i));
      }
    }
    if (metrics_ != nullptr) {
      metrics_->add(Counter::kExactLookup, counts.exact_lookups);
      metrics_->add(Counter::kFilterBypass, counts.total);
      metrics_->add(Counter::kQuery, counts.total);
    }
    return counts;
  }

  // Precheck the whole batch with the batch engine; only the Maybe digests,
  // and the absent ones that may have been added after the snapshot's
  // version, go to the store, in one batch call at the head.
  std::vector<Answer> answers(digests.size());
  if (auto queried = snapshot.filter.query(digests, answers, options_.backend); !queried) {
    return std::unexpected(queried.error());
  }
  std::vector<std::uint32_t> ask_index;
  std::vector<Digest> ask_digests;
  // A batch of few distinct digests asks about every digest
  // (ServiceOptions::ask_store_up_to): one store lookup each, whatever the
  // filter said. Distinct: one digest repeated is still one digest.
  const bool uniform = options_.ask_store_up_to > 0;
  const bool ask_every = uniform && at_most_distinct(digests, options_.ask_store_up_to);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const bool maybe = answers[i] == Answer::kMaybe;
    if (maybe) ++counts.maybe;
    const bool must = maybe || (lagging && head.must_ask(digests[i]));
    if (must && !maybe) ++counts.head_lookups;
    if (must || ask_every) {
      ask_index.push_back(static_cast<std::uint32_t>(i));
      ask_digests.push_back(digests[i]);
    }
  }
  // found[j]: the verdict for digests[ask_index[j]] (the store's answer,
  // or the filter's `absent` where it stands).
  auto found = std::make_unique<bool[]>(std::max<std::size_t>(ask_digests.size(), 1));
  const std::span<bool> found_span(found.get(), ask_digests.size());
  std::size_t lookups = ask_digests.size();
  if (!ask_digests.empty()) {
    // Where time must not tell the filter's answer, a digest repeated in
    // one batch is looked up once: otherwise N copies of a digest the
    // filter answers maybe cost N lookups and one it answers absent none,
    // a difference one request can time (docs/serve.md, keyed tenants).
    std::vector<std::uint32_t> slot;  // ask j -> its lookup
    if (uniform) lookups = distinct_lookups(ask_digests, slot);
    // The distinct digests' answers, spread to found after (unkeyed: none).
    auto looked = std::make_unique<bool[]>(slot.empty() ? 1 : lookups);
    const std::span<bool> looked_span(looked.get(), slot.empty() ? 0 : lookups);
    if (auto asked = repository_.exists_at_version(std::span(ask_digests.data(), lookups), version,
                                                   slot.empty() ? found_span : looked_span);
        !asked) {
      return std::unexpected(asked.error());
    }
    if (!slot.empty()) {
      for (std::size_t j = 0; j < ask_index.size(); ++j) found_span[j] = looked_span[slot[j]];
    }
    for (std::size_t j = 0; j < ask_index.size(); ++j) {
      const std::uint32_t i = ask_index[j];
      const bool maybe = answers[i] == Answer::kMaybe;
      if (ask_every && !maybe && !(lagging && head.must_ask(digests[i]))) {
        // Asked only for the time it takes: the filter's `absent` stands
        // (the store agrees unless the snapshot is not its catalog's, which
        // check_snapshot rules out).
        found_span[j] = false;
        continue;
      }
      if (found_span[j]) {
        ++counts.present;
        if (!maybe) ++counts.head_present;
      } else if (maybe) {
        ++counts.false_positive;
      }
    }
  }
  // The verdicts in the caller's form: a digest not asked about is absent
  // (the filter said so), digests[ask_index[j]] is found[j].
  if (exists != nullptr) {
    std::fill_n(exists->begin(), digests.size(), false);
    for (std::size_t j = 0; j < ask_index.size(); ++j) (*exists)[ask_index[j]] = found_span[j];
  } else {
    missing->reserve(missing->size() + digests.size() - counts.present);
    std::uint32_t next = 0;  // the first index not yet answered
    for (std::size_t j = 0; j < ask_index.size(); ++j) {
      const std::uint32_t i = ask_index[j];
      for (; next < i; ++next) missing->push_back(next);
      if (!found_span[j]) missing->push_back(i);
      next = i + 1;
    }
    for (; next < digests.size(); ++next) missing->push_back(next);
  }
  counts.negative = counts.total - counts.maybe - counts.head_lookups;
  counts.exact_lookups = lookups;
  if (metrics_ != nullptr) {
    metrics_->add(Counter::kQuery, counts.total);
    metrics_->add(Counter::kNegative, counts.negative);
    metrics_->add(Counter::kMaybe, counts.maybe);
    metrics_->add(Counter::kFalsePositive, counts.false_positive);
    metrics_->add(Counter::kExactLookup, counts.exact_lookups);
    metrics_->add(Counter::kHeadLookup, counts.head_lookups);
    metrics_->add(Counter::kHeadPresent, counts.head_present);
  }
  return counts;
}

Result<DedupReport> bulk_dedup(
    const ArtifactExistenceService& service, DigestReader& input,
    const std::function<Result<void>(std::span<const Digest>)>& emit_absent,
    std::size_t batch_size) {
  const auto start = std::chrono::steady_clock::now();
  if (batch_size == 0) batch_size = 65536;
  // Pinned: every batch of the job answers with this snapshot at this one
  // head, so the whole output is the catalog's answer at one version.
  const auto snapshot = service.publisher().current();
  if (snapshot == nullptr) return std::unexpected(no_snapshot());
  auto head = service.head(*snapshot);
  if (!head) return std::unexpected(head.error());
  DedupReport report;
  report.catalog_version = head->catalog_version;
  report.lag = head->lag;
  std::vector<Digest> batch(batch_size);
  std::vector<Digest> absent;
  absent.reserve(batch_size);
  auto exists = std::make_unique<bool[]>(batch_size);
  for (;;) {
    auto count = input.read(batch);
    if (!count) return std::unexpected(count.error());
    if (*count == 0) break;
    const std::span<const Digest> part(batch.data(), *count);
    auto counts =
        service.exists_batch(part, std::span<bool>(exists.get(), *count), *snapshot, *head);
    if (!counts) return std::unexpected(counts.error());
    report.counts += *counts;
    absent.clear();
    for (std::size_t i = 0; i < part.size(); ++i) {
      if (!exists[i]) absent.push_back(part[i]);
    }
    if (!absent.empty()) {
      if (auto emitted = emit_absent(absent); !emitted) return std::unexpected(emitted.error());
    }
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace abf::service
