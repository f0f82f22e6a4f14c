// What both fronts of `abf serve` share (core.hpp).
#include "core.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "abf/filter_set.hpp"
#include "abf/snapshot.hpp"

namespace abf::server {

namespace {

// The starts of two head errors find_missing answers in their own words:
// the index's version rewritten, and a catalog that records no content.
constexpr std::string_view kIndexMismatchPrefix = "index of catalog version ";
constexpr std::string_view kNoContentPrefix = "no answer at the catalog's head: ";

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return text;
}

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

LogLevel parse_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

// A label value in the exposition format: backslash, quote and newline
// escaped.
std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// One metric family of an exposition: its HELP and TYPE lines and samples.
struct Family {
  std::string help, type;
  std::vector<std::string> samples;
};

// Adds the families of `text` (to_prometheus output) with a tenant label on
// every sample, keeping the order families first appear in.
void merge_exposition(std::string_view text, std::string_view tenant,
                      std::vector<std::string>& order, std::map<std::string, Family>& families) {
  std::istringstream in{std::string(text)};
  std::string line;
  const std::string label = "tenant=\"" + label_value(tenant) + "\"";
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.rfind("# ", 0) == 0) {
      std::istringstream words(line.substr(2));
      std::string kind, name;
      words >> kind >> name;
      if (!families.contains(name)) order.push_back(name);
      Family& family = families[name];
      if (kind == "HELP" && family.help.empty()) family.help = line;
      if (kind == "TYPE" && family.type.empty()) family.type = line;
      continue;
    }
    const auto name_end = line.find_first_of(" {");
    const std::string name = line.substr(0, name_end);
    if (!families.contains(name)) order.push_back(name);
    std::string sample;
    if (name_end != std::string::npos && line[name_end] == '{') {
      sample = name + "{" + label + "," + line.substr(name_end + 1);
    } else {
      sample = name + "{" + label + "}" + line.substr(name_end);
    }
    families[name].samples.push_back(std::move(sample));
  }
}

// The counters that follow filter answers: /metrics shows them as of their
// last release (ServerConfig::metrics_release_*).
bool follows_answers(service::Counter counter) {
  using service::Counter;
  switch (counter) {
    case Counter::kQuery:
    case Counter::kNegative:
    case Counter::kMaybe:
    case Counter::kFalsePositive:
    case Counter::kExactLookup:
    case Counter::kFilterBypass:
    case Counter::kHeadLookup:   // a head lookup is a filter absent
    case Counter::kHeadPresent:  // for a digest added after the snapshot
      return true;
    default:
      return false;
  }
}

// A sample value or bucket bound: the shortest form that reads back the same.
std::string format_bound(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  for (int precision = 1; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", precision, value);
    if (std::strtod(shorter, nullptr) == value) return shorter;
  }
  return text;
}

// The standard process metrics of Prometheus' client libraries, from
// /proc/self (Linux): CPU seconds, resident and virtual memory, open and
// maximum file descriptors, start time. A value that cannot be read is
// left out.
std::string process_metrics() {
  std::string out;
  const auto sample = [&](std::string_view name, std::string_view type, std::string_view help,
                          double value) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " +
           std::string(name) + " " + std::string(type) + "\n" + std::string(name) + " " +
           format_bound(value) + "\n";
  };
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis (the command may hold
  // spaces): state is field 3, utime 14, stime 15, starttime 22, vsize 23,
  // rss 24 (proc(5)).
  std::vector<std::string> fields;
  if (const auto paren = stat.rfind(')'); paren != std::string::npos) {
    std::istringstream words(stat.substr(paren + 1));
    for (std::string word; words >> word;) fields.push_back(word);
  }
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const auto field = [&](int number) { return std::strtod(fields[number - 3].c_str(), nullptr); };
  if (fields.size() >= 22 && ticks > 0) {
    sample("process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.", (field(14) + field(15)) / ticks);
    sample("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           field(24) * page);
    sample("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", field(23));
  }
  std::error_code error;
  std::size_t open = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end;
       it.increment(error)) {
    ++open;
  }
  if (!error) sample("process_open_fds", "gauge", "Number of open file descriptors.", open);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    sample("process_max_fds", "gauge", "Maximum number of open file descriptors.",
           static_cast<double>(limit.rlim_cur));
  }
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; fields.size() >= 22 && ticks > 0 && std::getline(proc_stat, line);) {
    if (line.rfind("btime ", 0) == 0) {
      const double boot = std::strtod(line.c_str() + 6, nullptr);
      sample("process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.", boot + field(22) / ticks);
      break;
    }
  }
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------
// LatencyHistogram

void LatencyHistogram::observe(std::chrono::nanoseconds elapsed) noexcept {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  std::size_t bucket = 0;
  while (bucket < kBounds.size() && seconds > kBounds[bucket]) ++bucket;
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed.count(), 0)),
                    std::memory_order_relaxed);
}

LatencyHistogram::Values LatencyHistogram::values() const noexcept {
  Values values;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    values.buckets[b] = buckets_[b].load(std::memory_order_relaxed);
  }
  values.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  return values;
}

// ---------------------------------------------------------------------------
// Logger

Logger::Logger(LogLevel level, std::function<void(std::string_view)> sink)
    : level_(level), sink_(std::move(sink)) {}

void Logger::log(LogLevel level, nlohmann::ordered_json fields) const {
  if (!enabled(level)) return;
  nlohmann::ordered_json line = {{"ts", utc_now()}, {"level", level_name(level)}};
  for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::lock_guard lock(mutex_);
  if (sink_) {
    sink_(text);
    return;
  }
  std::string out = text + "\n";
  const char* p = out.data();
  std::size_t left = out.size();
  while (left > 0) {
    const ssize_t wrote = ::write(STDERR_FILENO, p, left);
    if (wrote <= 0) break;  // a log that cannot be written must not stop the server
    p += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
}

// ---------------------------------------------------------------------------
// RateLimiter

RateLimiter::RateLimiter(const RateLimit& limit, std::size_t buckets) : limit_(limit) {
  buckets_.reserve(buckets);
  for (std::size_t i = 0; i < buckets; ++i) buckets_.push_back(std::make_unique<Bucket>());
}

void RateLimiter::refill(Bucket& bucket, std::chrono::steady_clock::time_point now) {
  const double request_cap = limit_.requests_per_second * limit_.burst_seconds;
  const double digest_cap = limit_.digests_per_second * limit_.burst_seconds;
  if (!bucket.started) {
    bucket.started = true;
    bucket.requests = request_cap;
    bucket.digests = digest_cap;
    bucket.last = now;
    return;
  }
  const double seconds = std::chrono::duration<double>(now - bucket.last).count();
  bucket.last = now;
  bucket.requests = std::min(request_cap, bucket.requests + seconds * limit_.requests_per_second);
  bucket.digests = std::min(digest_cap, bucket.digests + seconds * limit_.digests_per_second);
}

RequestResult<void> RateLimiter::admit_request(std::size_t index) {
  if (limit_.requests_per_second <= 0) return {};
  Bucket& bucket = *buckets_[index];
  const std::lock_guard lock(bucket.mutex);
  refill(bucket, std::chrono::steady_clock::now());
  if (bucket.requests >= 1) {
    bucket.requests -= 1;
    return {};
  }
  const double wait = (1 - bucket.requests) / limit_.requests_per_second;
  return refuse(429, "rate_limited",
                "more than " + std::to_string(limit_.requests_per_second) +
                    " requests per second for this token; retry later",
                std::max(1, static_cast<int>(std::ceil(wait))));
}

RequestResult<void> RateLimiter::admit_digests(std::size_t index, std::size_t digests) {
  if (limit_.digests_per_second <= 0) return {};
  Bucket& bucket = *buckets_[index];
  const std::lock_guard lock(bucket.mutex);
  refill(bucket, std::chrono::steady_clock::now());
  if (bucket.digests > 0) {
    bucket.digests -= static_cast<double>(digests);
    return {};
  }
  const double wait = (1 - bucket.digests) / limit_.digests_per_second;
  return refuse(429, "rate_limited",
                "more than " + std::to_string(limit_.digests_per_second) +
                    " digests per second for this token; retry later",
                std::max(1, static_cast<int>(std::ceil(wait))));
}

// ---------------------------------------------------------------------------
// TenantStore

void TenantStore::set_index(IndexSet index) {
  auto next =
      std::make_shared<service::IndexedRepository>(catalog_, std::move(index), head_cache_digests_);
  const std::lock_guard lock(mutex_);
  if (indexed_ != nullptr) {
    const auto counts = indexed_->counts();
    retired_.index_lookups += counts.index_lookups;
    retired_.store_lookups += counts.store_lookups;
  }
  indexed_ = std::move(next);
  seen_head_.reset();  // the new index is checked at the next head read
}

service::IndexedLookupCounts TenantStore::lookups() const {
  const std::lock_guard lock(mutex_);
  service::IndexedLookupCounts total = retired_;
  if (indexed_ != nullptr) {
    const auto counts = indexed_->counts();
    total.index_lookups += counts.index_lookups;
    total.store_lookups += counts.store_lookups;
  }
  return total;
}

Result<service::HeadRecord> TenantStore::head_record() {
  auto record = catalog_.head_record();
  if (!record) return record;
  if (!record->content) {
    // Without the head's recorded content a history rewritten under the
    // server (a schema-2 backup restored, then advanced to the same version
    // with other digests) looks unchanged, and the filter of the old history
    // would answer the new one's digests missing. No answer at the head,
    // then, until the catalog is upgraded (it is read again at every
    // request, so the upgrade is noticed without a restart).
    return fail(ErrorCode::kCatalog,
                std::string(kNoContentPrefix) +
                    (record->no_content_reason.empty()
                         ? std::string("the catalog records no content per version")
                         : record->no_content_reason));
  }
  const std::lock_guard lock(mutex_);
  if (indexed_ == nullptr) return record;
  const auto same = [](const service::HeadRecord& a, const service::HeadRecord& b) {
    return a.version == b.version && a.content == b.content;
  };
  if (seen_head_ && same(*seen_head_, *record)) return record;
  // The head moved: forward over the same history, or over a rewritten one.
  bool rewritten = false;
  if (seen_head_ && seen_head_->content) {
    if (record->version <= seen_head_->version) {
      rewritten = true;
    } else {
      auto then = catalog_.content_at_version(seen_head_->version);
      if (!then) return std::unexpected(then.error());
      rewritten = !(*then == *seen_head_->content);
    }
  }
  const IndexSet& index = indexed_->index();
  if (index.catalog_version() <= record->version) {
    auto at_w = catalog_.content_at_version(index.catalog_version());
    if (!at_w) return std::unexpected(at_w.error());
    const auto fingerprint = index.content_fingerprint();
    if (at_w->item_count != index.size() || (fingerprint && !(at_w->fingerprint == *fingerprint))) {
      seen_head_.reset();
      return fail(ErrorCode::kCatalogMismatch,
                  std::string(kIndexMismatchPrefix) + std::to_string(index.catalog_version()) +
                      " no longer matches the catalog, whose history was rewritten (a backup "
                      "restored?); rebuild the index and reload");
    }
  }
  if (rewritten) {
    // The added digests the index's store held came from the old history.
    auto fresh = std::make_shared<service::IndexedRepository>(catalog_, index, head_cache_digests_);
    const auto counts = indexed_->counts();
    retired_.index_lookups += counts.index_lookups;
    retired_.store_lookups += counts.store_lookups;
    indexed_ = std::move(fresh);
  }
  seen_head_ = *record;
  return record;
}

std::shared_ptr<service::IndexedRepository> TenantStore::current() const {
  const std::lock_guard lock(mutex_);
  return indexed_;
}

std::shared_ptr<const service::IndexedRepository> TenantStore::indexed() const { return current(); }

Result<bool> TenantStore::exists_at_version(const Digest& digest, std::uint64_t catalog_version) {
  if (const auto indexed = current()) return indexed->exists_at_version(digest, catalog_version);
  return catalog_.exists_at_version(digest, catalog_version);
}

Result<void> TenantStore::exists_at_version(std::span<const Digest> digests,
                                            std::uint64_t catalog_version, std::span<bool> exists) {
  if (const auto indexed = current()) {
    return indexed->exists_at_version(digests, catalog_version, exists);
  }
  return catalog_.exists_at_version(digests, catalog_version, exists);
}

// ---------------------------------------------------------------------------
// Core

Core::Core(const ServerConfig& config, std::unique_ptr<Logger> logger,
           std::vector<TokenEntry> tokens)
    : config_(config),
      logger_(std::move(logger)),
      tokens_(std::move(tokens)),
      limiter_(config.rate_limit, tokens_.size() + 1) {}

Result<std::unique_ptr<Core>> Core::create(const ServerConfig& config,
                                           const ServerOptions& options) {
  if (auto ok = validate(config); !ok) return std::unexpected(ok.error());
  auto backend = Backend::parse(config.backend);
  if (!backend) return std::unexpected(backend.error());
  std::vector<TokenEntry> tokens;
  if (config.token_file) {
    auto read = read_token_file(*config.token_file);
    if (!read) return std::unexpected(read.error());
    tokens = std::move(*read);
  }
  auto logger = std::make_unique<Logger>(parse_level(config.log_level), options.log_sink);
  std::unique_ptr<Core> core(new Core(config, std::move(logger), std::move(tokens)));
  core->backend_ = *backend;
  for (const TenantConfig& tenant_config : config.tenants) {
    auto tenant = std::make_unique<Tenant>();
    tenant->config = tenant_config;
    const std::string where = "tenant " + tenant_config.name + ": ";
    if (tenant_config.key_file) {
      auto key = read_key_file(*tenant_config.key_file);
      if (!key) return fail(key.error().code, where + key.error().message);
      tenant->key = std::move(*key);
    }
    service::CatalogOpenOptions open_options;
    open_options.read_only = true;  // the server never changes a catalog
    auto catalog = service::SqliteCatalog::open(tenant_config.db, open_options);
    if (!catalog) return fail(catalog.error().code, where + catalog.error().message);
    tenant->catalog = std::make_unique<service::SqliteCatalog>(std::move(*catalog));
    if (tenant->catalog->schema_version() < service::kCatalogSchemaVersion) {
      core->logger_->log(
          LogLevel::kWarn,
          {{"event", "catalog_upgrade_needed"},
           {"tenant", tenant_config.name},
           {"db", tenant_config.db.string()},
           {"schema_version", tenant->catalog->schema_version()},
           {"message", "this catalog records no content per version, so a history rewritten "
                       "under the server could not be noticed: the tenant answers 503 "
                       "catalog_upgrade_needed until `abf catalog upgrade --db " +
                           tenant_config.db.string() + "` (noticed without a restart)"}});
    }
    tenant->store = std::make_unique<TenantStore>(*tenant->catalog, config.head.cache_digests);
    tenant->publisher =
        std::make_unique<service::SnapshotPublisher>(&tenant->metrics, *tenant->store);
    service::ServiceOptions service_options;
    service_options.backend = core->backend_;
    service_options.head_cache_digests = config.head.cache_digests;
    // A keyed tenant's single-digest request asks the catalog whatever the
    // filter says: a missing digest then takes as long to answer when the
    // filter says absent as when it says maybe, and the response time no
    // longer reveals the raw answer (docs/serve.md, "Keyed tenants and
    // response time"). Batches keep the filter's savings.
    if (tenant->key) service_options.ask_store_up_to = 1;
    tenant->service = std::make_unique<service::ArtifactExistenceService>(
        *tenant->publisher, *tenant->store, &tenant->metrics, service_options);
    // An index that does not load, or is not what the catalog holds at its
    // version, stops the server here: it was asked for, and serving without
    // it would hide the mistake behind slower answers.
    if (tenant->config.index) {
      if (auto loaded = core->reload_index(*tenant, "start"); !loaded) {
        return fail(loaded.error().code, where + loaded.error().message);
      }
    }
    core->by_name_[tenant_config.name] = tenant.get();
    core->tenants_.push_back(std::move(tenant));
  }
  core->released_.resize(core->tenants_.size());
  core->last_release_ = std::chrono::steady_clock::now();
  core->reload("start", /*indexes=*/false);
  if (config.head.follow) {
    for (const auto& tenant : core->tenants_) {
      service::CatalogOpenOptions open_options;
      open_options.read_only = true;
      auto catalog = service::SqliteCatalog::open(tenant->config.db, open_options);
      if (!catalog) {
        return fail(catalog.error().code,
                    "tenant " + tenant->config.name + ": " + catalog.error().message);
      }
      tenant->follow_catalog = std::make_unique<service::SqliteCatalog>(std::move(*catalog));
    }
    Core* self = core.get();
    core->follower_ = std::jthread([self](std::stop_token stop) { self->follow_loop(stop); });
  }
  return core;
}

RequestResult<Caller> Core::authenticate(std::string_view authorization) const {
  if (!auth_enabled()) return Caller{nullptr, tokens_.size()};
  auto bearer = parse_bearer(authorization);
  if (!bearer) return std::unexpected(bearer.error());
  if (!bearer->has_value()) {
    return refuse(401, "unauthenticated", "this server needs Authorization: Bearer <token>");
  }
  const TokenEntry* entry = find_token(tokens_, **bearer);
  if (entry == nullptr) return refuse(401, "invalid_token", "the bearer token is not valid here");
  return Caller{entry, static_cast<std::size_t>(entry - tokens_.data())};
}

RequestResult<Tenant*> Core::tenant_for(const Caller& caller, std::string_view name) {
  if (caller.token != nullptr && !token_allows(*caller.token, name)) {
    return refuse(403, "forbidden", "token " + caller.token->id + " may not ask about this tenant");
  }
  const auto found = by_name_.find(name);
  if (found == by_name_.end()) {
    return refuse(404, "unknown_tenant", "no tenant \"" + std::string(name) + "\" on this server");
  }
  return found->second;
}

RequestResult<Tenant*> Core::default_tenant(const Caller& caller) {
  const auto refuse_empty = [] {
    return refuse(400, "invalid_request", "instance_name is empty: name the tenant to ask");
  };
  if (caller.token != nullptr && !token_allows(*caller.token, "*")) {
    // Decided from the token's own scopes: the server's tenants beyond them
    // change nothing here.
    if (caller.token->tenants.size() != 1) return refuse_empty();
    return tenant_for(caller, caller.token->tenants.front());
  }
  if (tenants_.size() != 1) return refuse_empty();
  return tenant_for(caller, tenants_.front()->config.name);
}

RequestResult<void> Core::check_admin(const Caller& caller) const {
  if (caller.token != nullptr && !caller.token->admin) {
    return refuse(403, "forbidden", "token " + caller.token->id + " may not reload (no @admin)");
  }
  return {};
}

RequestResult<void> Core::check_operations(const Caller& caller) const {
  if (caller.token != nullptr && !token_may_read_operations(*caller.token)) {
    return refuse(403, "forbidden",
                  "token " + caller.token->id + " may not read operations (no @metrics or @admin)");
  }
  return {};
}

RequestResult<FindMissingOutcome> Core::find_missing(Tenant& tenant,
                                                     std::span<const Digest> digests) {
  // One snapshot for the whole batch, and one catalog head, read once: the
  // answer is exact at the head (docs/protocol.md section 8), the version the
  // answer carries.
  const auto snapshot = tenant.publisher->current();
  if (snapshot == nullptr) {
    return refuse(
        503, "no_snapshot",
        "tenant " + tenant.config.name + " has no verified snapshot yet; retry after a reload", 5);
  }
  auto head = tenant.service->head(*snapshot);
  auto exists = std::make_unique<bool[]>(std::max<std::size_t>(digests.size(), 1));
  auto counts = head ? tenant.service->exists_batch(
                           digests, std::span<bool>(exists.get(), digests.size()), *snapshot, *head)
                     : Result<service::BatchCounts>(std::unexpected(head.error()));
  if (!counts) {
    logger_->log(LogLevel::kError, {{"event", "catalog_error"},
                                    {"tenant", tenant.config.name},
                                    {"error", counts.error().describe()}});
    const std::string_view message = counts.error().message;
    if (counts.error().code == ErrorCode::kCatalogMismatch &&
        message.starts_with(kIndexMismatchPrefix)) {
      // The index's own version no longer holds what the index does.
      return refuse(503, "index_mismatch",
                    "tenant " + tenant.config.name +
                        ": the exact index no longer matches the catalog (its history was "
                        "rewritten); rebuild the index (abf index) and reload",
                    5);
    }
    if (counts.error().code == ErrorCode::kCatalogMismatch) {
      // The catalog's history was rewritten under the snapshot (a backup
      // restored): no answer until a snapshot of the new history is loaded.
      return refuse(503, "snapshot_mismatch",
                    "tenant " + tenant.config.name +
                        ": the snapshot no longer matches the catalog (its history was "
                        "rewritten); rebuild the snapshot and reload",
                    5);
    }
    if (message.starts_with(kNoContentPrefix)) {
      return refuse(503, "catalog_upgrade_needed",
                    "tenant " + tenant.config.name +
                        ": its catalog is older than schema 3 and records no content per "
                        "version, so a rewritten history could not be noticed; no answer is "
                        "given until it is upgraded (abf catalog upgrade --db FILE)",
                    5);
    }
    return refuse(503, "catalog_unavailable",
                  "tenant " + tenant.config.name + ": the catalog could not answer; retry", 1);
  }
  FindMissingOutcome outcome;
  outcome.counts = *counts;
  outcome.catalog_version = head->catalog_version;
  outcome.missing.reserve(digests.size() - counts->present);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    if (!exists[i]) outcome.missing.push_back(static_cast<std::uint32_t>(i));
  }
  // After exists_batch counted the filter answers: a release that sees
  // these missing digests also has their answers.
  tenant.missing_answered.fetch_add(outcome.missing.size(), std::memory_order_release);
  return outcome;
}

Result<void> Core::reload_tenant(Tenant& tenant, std::string_view trigger, TenantReload& report) {
  const std::lock_guard lock(tenant.reload_mutex);
  const auto refuse_load = [&](const Error& error) -> Result<void> {
    tenant.reloads_failed.fetch_add(1, std::memory_order_relaxed);
    const auto serving = tenant.publisher->current();
    report.catalog_version = serving ? serving->catalog_version() : 0;
    report.error = error.describe();
    logger_->log(LogLevel::kWarn, {{"event", "reload_refused"},
                                   {"trigger", trigger},
                                   {"tenant", tenant.config.name},
                                   {"snapshot", tenant.config.snapshot.string()},
                                   {"serving_version", report.catalog_version},
                                   {"error", report.error}});
    return std::unexpected(error);
  };
  LoadOptions options;
  options.key = tenant.key;
  // A plain snapshot, or a filter set's manifest (every shard verified).
  auto filter = load_filter_set(tenant.config.snapshot, options);
  if (!filter) {
    // The publisher counts its own refusals; a load that never reached it
    // is counted here, on the same counter.
    tenant.metrics.add(service::Counter::kSnapshotLoadFailure);
    return refuse_load(filter.error());
  }
  auto latest = tenant.catalog->latest_version();
  if (!latest) {
    tenant.metrics.add(service::Counter::kSnapshotLoadFailure);
    return refuse_load(latest.error());
  }
  if (filter->catalog_version() > *latest) {
    tenant.metrics.add(service::Counter::kSnapshotLoadFailure);
    return refuse_load(
        Error{ErrorCode::kInvalidArgument,
              "snapshot " + tenant.config.snapshot.string() + " is of catalog version " +
                  std::to_string(filter->catalog_version()) + ", but catalog " +
                  tenant.config.db.string() + " only reaches version " + std::to_string(*latest)});
  }
  auto published = tenant.publisher->publish(std::move(*filter), tenant.config.snapshot.string());
  if (!published) return refuse_load(published.error());
  tenant.reloads_ok.fetch_add(1, std::memory_order_relaxed);
  report.ok = true;
  report.catalog_version = (*published)->catalog_version();
  logger_->log(LogLevel::kInfo, {{"event", "snapshot_published"},
                                 {"trigger", trigger},
                                 {"tenant", tenant.config.name},
                                 {"catalog_version", report.catalog_version},
                                 {"generation", (*published)->generation}});
  return {};
}

Result<void> Core::reload_index(Tenant& tenant, std::string_view trigger) {
  const std::lock_guard lock(tenant.reload_mutex);
  const std::string path = tenant.config.index->string();
  auto index = IndexSet::load(*tenant.config.index);
  Result<void> bound = index ? service::check_index_binding(*index, path, *tenant.catalog)
                             : Result<void>(std::unexpected(index.error()));
  if (!bound) {
    tenant.index_reloads_failed.fetch_add(1, std::memory_order_relaxed);
    const auto serving = tenant.store->indexed();
    logger_->log(
        LogLevel::kWarn,
        {{"event", "index_refused"},
         {"trigger", trigger},
         {"tenant", tenant.config.name},
         {"index", path},
         {"serving_version", serving ? nlohmann::ordered_json(serving->index().catalog_version())
                                     : nlohmann::ordered_json(nullptr)},
         {"error", bound.error().describe()}});
    return bound;
  }
  const std::uint64_t version = index->catalog_version();
  const std::uint64_t count = index->size();
  tenant.store->set_index(std::move(*index));
  tenant.index_reloads_ok.fetch_add(1, std::memory_order_relaxed);
  logger_->log(LogLevel::kInfo, {{"event", "index_published"},
                                 {"trigger", trigger},
                                 {"tenant", tenant.config.name},
                                 {"index", path},
                                 {"catalog_version", version},
                                 {"digests", count}});
  return {};
}

std::vector<TenantReload> Core::reload(std::string_view trigger, bool indexes) {
  std::vector<TenantReload> reports;
  for (const auto& tenant : tenants_) {
    TenantReload report;
    report.tenant = tenant->config.name;
    Result<void> index_ok;
    if (indexes && tenant->config.index) index_ok = reload_index(*tenant, trigger);
    (void)reload_tenant(*tenant, trigger, report);
    // The snapshot's outcome stands on its own; a refused index makes the
    // tenant's reload fail too (the old index keeps serving), both named.
    if (!index_ok) {
      report.ok = false;
      report.error = "index refused, the old one keeps serving: " + index_ok.error().describe() +
                     (report.error.empty() ? "; the snapshot reloaded"
                                           : "; snapshot: " + report.error);
    }
    reports.push_back(std::move(report));
  }
  return reports;
}

bool Core::ready() const {
  // Ready: every tenant has a snapshot and can answer with it now, so a
  // catalog whose head fell behind the snapshot, that was rewritten under it
  // or that cannot be read takes the server out of rotation.
  return std::all_of(tenants_.begin(), tenants_.end(), [](const auto& tenant) {
    return tenant->publisher->current() != nullptr && tenant->service->lag().has_value();
  });
}

nlohmann::ordered_json Core::readiness() const {
  nlohmann::ordered_json tenants = nlohmann::ordered_json::object();
  for (const auto& tenant : tenants_) {
    const auto snapshot = tenant->publisher->current();
    nlohmann::ordered_json item = {
        {"ready", snapshot != nullptr},
        {"catalog_version", snapshot ? nlohmann::ordered_json(snapshot->catalog_version())
                                     : nlohmann::ordered_json(nullptr)}};
    if (const auto indexed = tenant->store->indexed(); indexed != nullptr) {
      item["index"] = {{"catalog_version", indexed->index().catalog_version()},
                       {"digests", indexed->index().size()}};
    }
    // How far the snapshot lags the catalog's head: answers stay exact at
    // the head (docs/protocol.md section 8), so a lag is reported, not unready.
    // A head that cannot be answered at (behind the snapshot, rewritten
    // under it, unreadable) is unready, with the reason.
    if (snapshot != nullptr) {
      const auto lag = tenant->service->lag();
      item["lag"] = lag ? nlohmann::ordered_json{{"head_version", lag->head_version},
                                                 {"versions", lag->versions_behind},
                                                 {"digests_added", lag->digests_added}}
                        : nlohmann::ordered_json(nullptr);
      if (!lag) {
        item["ready"] = false;
        item["error"] = lag.error().describe();
      }
    }
    tenants[tenant->config.name] = std::move(item);
  }
  return tenants;
}

void Core::count_request(std::string_view front, std::string_view tenant, int status,
                         std::uint64_t digests, std::uint64_t missing) {
  const std::lock_guard lock(counts_mutex_);
  ++requests_[RequestKey{std::string(front), std::string(tenant), status}];
  if (!tenant.empty() && digests != 0) {
    auto& counts = digests_[std::string(tenant)];
    counts.first += digests;
    counts.second += missing;
  }
}

void Core::observe_latency(Endpoint endpoint, std::chrono::nanoseconds elapsed) noexcept {
  latency_[endpoint].observe(elapsed);
}

void Core::release_metrics() const {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_release_ < std::chrono::seconds(config_.metrics_release_seconds)) return;
  last_release_ = now;
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    const Tenant& tenant = *tenants_[t];
    Release& release = released_[t];
    // Acquire: the filter answers of every missing digest counted here were
    // added to the counters before it (find_missing), so the counters read
    // next include them.
    const std::uint64_t missing = tenant.missing_answered.load(std::memory_order_acquire);
    if (missing - release.missing_mark < config_.metrics_release_min_missing) continue;
    release.missing_mark = missing;
    for (std::size_t i = 0; i < service::kCounterCount; ++i) {
      const auto counter = static_cast<service::Counter>(i);
      if (follows_answers(counter)) release.counters[i] = tenant.metrics.get(counter);
    }
    release.index = tenant.store->lookups();
  }
  for (const auto& labels : kEndpointLabels) {
    released_latency_[labels.endpoint] = latency_[labels.endpoint].values();
  }
}

std::string Core::prometheus() const {
  std::vector<Release> released;
  PerEndpoint<LatencyHistogram::Values> latency;
  {
    const std::lock_guard lock(release_mutex_);
    release_metrics();
    released = released_;
    latency = released_latency_;
  }
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    const Tenant& tenant = *tenants_[t];
    const auto snapshot = tenant.publisher->current();
    service::MetricsSnapshot metrics = tenant.metrics.collect(snapshot.get());
    for (std::size_t i = 0; i < service::kCounterCount; ++i) {
      if (follows_answers(static_cast<service::Counter>(i))) {
        metrics.counters[i] = released[t].counters[i];
      }
    }
    merge_exposition(service::to_prometheus(metrics), tenant.config.name, order, families);
  }
  std::string out;
  for (const std::string& name : order) {
    const Family& family = families[name];
    if (!family.help.empty()) out += family.help + "\n";
    if (!family.type.empty()) out += family.type + "\n";
    for (const std::string& sample : family.samples) out += sample + "\n";
  }
  const auto family = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " +
           std::string(name) + " " + std::string(type) + "\n";
  };
  family("artifact_bloom_serve_snapshot_ready", "gauge",
         "1 when the tenant serves a verified snapshot, else 0.");
  for (const auto& tenant : tenants_) {
    out += "artifact_bloom_serve_snapshot_ready{tenant=\"" + label_value(tenant->config.name) +
           "\"} " + (tenant->publisher->current() ? "1" : "0") + "\n";
  }
  // The lag of each serving snapshot behind its catalog's head, read now
  // (a tenant whose catalog cannot answer, or without a snapshot, has none).
  std::vector<std::pair<std::string, service::CatalogLag>> lags;
  for (const auto& tenant : tenants_) {
    if (tenant->publisher->current() == nullptr) continue;
    if (auto lag = tenant->service->lag()) lags.emplace_back(tenant->config.name, *lag);
  }
  family("artifact_bloom_serve_catalog_head_version", "gauge",
         "The catalog's newest version: the version answers are exact for.");
  for (const auto& [name, lag] : lags) {
    out += "artifact_bloom_serve_catalog_head_version{tenant=\"" + label_value(name) + "\"} " +
           std::to_string(lag.head_version) + "\n";
  }
  family("artifact_bloom_serve_snapshot_lag_versions", "gauge",
         "Catalog versions made after the serving snapshot's version.");
  for (const auto& [name, lag] : lags) {
    out += "artifact_bloom_serve_snapshot_lag_versions{tenant=\"" + label_value(name) + "\"} " +
           std::to_string(lag.versions_behind) + "\n";
  }
  family("artifact_bloom_serve_snapshot_lag_digests", "gauge",
         "Digests the catalog added after the serving snapshot's version (each checked at the "
         "head when the filter answers absent).");
  for (const auto& [name, lag] : lags) {
    out += "artifact_bloom_serve_snapshot_lag_digests{tenant=\"" + label_value(name) + "\"} " +
           std::to_string(lag.digests_added) + "\n";
  }
  if (config_.head.follow) {
    family("artifact_bloom_serve_follow_rebuilds_total", "counter",
           "Snapshots rebuilt and published by --follow, by result.");
    for (const auto& tenant : tenants_) {
      const std::string label = "tenant=\"" + label_value(tenant->config.name) + "\"";
      out += "artifact_bloom_serve_follow_rebuilds_total{" + label + ",result=\"ok\"} " +
             std::to_string(tenant->follow_ok.load()) + "\n";
      out += "artifact_bloom_serve_follow_rebuilds_total{" + label + ",result=\"failed\"} " +
             std::to_string(tenant->follow_failed.load()) + "\n";
    }
  }
  family("artifact_bloom_serve_reloads_total", "counter",
         "Snapshot reloads (start, SIGHUP, POST /admin/reload) by result.");
  for (const auto& tenant : tenants_) {
    const std::string label = "tenant=\"" + label_value(tenant->config.name) + "\"";
    out += "artifact_bloom_serve_reloads_total{" + label + ",result=\"ok\"} " +
           std::to_string(tenant->reloads_ok.load()) + "\n";
    out += "artifact_bloom_serve_reloads_total{" + label + ",result=\"failed\"} " +
           std::to_string(tenant->reloads_failed.load()) + "\n";
  }
  // The exact index in front of each catalog, where one is configured.
  std::vector<std::pair<const Tenant*, std::shared_ptr<const service::IndexedRepository>>> indexes;
  for (const auto& tenant : tenants_) {
    if (tenant->config.index) indexes.emplace_back(tenant.get(), tenant->store->indexed());
  }
  if (!indexes.empty()) {
    family("artifact_bloom_serve_index_reloads_total", "counter",
           "Exact index loads (start, SIGHUP, POST /admin/reload) by result.");
    for (const auto& [tenant, indexed] : indexes) {
      const std::string label = "tenant=\"" + label_value(tenant->config.name) + "\"";
      out += "artifact_bloom_serve_index_reloads_total{" + label + ",result=\"ok\"} " +
             std::to_string(tenant->index_reloads_ok.load()) + "\n";
      out += "artifact_bloom_serve_index_reloads_total{" + label + ",result=\"failed\"} " +
             std::to_string(tenant->index_reloads_failed.load()) + "\n";
    }
    family("artifact_bloom_serve_index_version", "gauge",
           "The catalog version of the exact index serving the filter's maybes.");
    for (const auto& [tenant, indexed] : indexes) {
      out += "artifact_bloom_serve_index_version{tenant=\"" + label_value(tenant->config.name) +
             "\"} " + std::to_string(indexed->index().catalog_version()) + "\n";
    }
    family("artifact_bloom_serve_index_digests", "gauge", "Digests the serving exact index holds.");
    for (const auto& [tenant, indexed] : indexes) {
      out += "artifact_bloom_serve_index_digests{tenant=\"" + label_value(tenant->config.name) +
             "\"} " + std::to_string(indexed->index().size()) + "\n";
    }
    // Exact lookups by who answered them; they follow the filter's answers,
    // so they reach /metrics only as a release, as the filter counters do.
    const auto released_index = [&](const Tenant* tenant) {
      const auto at = std::find_if(tenants_.begin(), tenants_.end(),
                                   [&](const auto& t) { return t.get() == tenant; });
      return released[static_cast<std::size_t>(at - tenants_.begin())].index;
    };
    family("artifact_bloom_serve_index_lookups_total", "counter",
           "Exact lookups answered from the index alone (as of the last metrics release).");
    for (const auto& [tenant, indexed] : indexes) {
      out += "artifact_bloom_serve_index_lookups_total{tenant=\"" +
             label_value(tenant->config.name) + "\"} " +
             std::to_string(released_index(tenant).index_lookups) + "\n";
    }
    family("artifact_bloom_serve_index_store_lookups_total", "counter",
           "Exact lookups the index passed on to the catalog: digests changed after its "
           "version (as of the last metrics release).");
    for (const auto& [tenant, indexed] : indexes) {
      out += "artifact_bloom_serve_index_store_lookups_total{tenant=\"" +
             label_value(tenant->config.name) + "\"} " +
             std::to_string(released_index(tenant).store_lookups) + "\n";
    }
  }
  {
    const std::lock_guard lock(counts_mutex_);
    family("artifact_bloom_serve_requests_total", "counter",
           "Requests answered, by front (http, grpc), tenant (\"\" when none was allowed) and "
           "HTTP status (gRPC: the HTTP status its code maps from).");
    for (const auto& [key, count] : requests_) {
      out += "artifact_bloom_serve_requests_total{front=\"" + label_value(key.front) +
             "\",tenant=\"" + label_value(key.tenant) + "\",status=\"" +
             std::to_string(key.status) + "\"} " + std::to_string(count) + "\n";
    }
    family("artifact_bloom_serve_digests_total", "counter",
           "Digests asked about in answered batches.");
    for (const auto& [tenant, counts] : digests_) {
      out += "artifact_bloom_serve_digests_total{tenant=\"" + label_value(tenant) + "\"} " +
             std::to_string(counts.first) + "\n";
    }
    family("artifact_bloom_serve_missing_digests_total", "counter",
           "Digests answered missing (the exact answer).");
    for (const auto& [tenant, counts] : digests_) {
      out += "artifact_bloom_serve_missing_digests_total{tenant=\"" + label_value(tenant) + "\"} " +
             std::to_string(counts.second) + "\n";
    }
  }
  const std::string histogram = "artifact_bloom_serve_request_duration_seconds";
  family(histogram, "histogram",
         "Seconds from a request's handler start to its answer, by front and endpoint (as of "
         "the last metrics release).");
  for (const auto& [endpoint, front, name] : kEndpointLabels) {
    const std::string labels =
        "front=\"" + std::string(front) + "\",endpoint=\"" + std::string(name) + "\"";
    const LatencyHistogram::Values& values = latency[endpoint];
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < LatencyHistogram::kBounds.size(); ++b) {
      cumulative += values.buckets[b];
      out += histogram + "_bucket{" + labels + ",le=\"" +
             format_bound(LatencyHistogram::kBounds[b]) + "\"} " + std::to_string(cumulative) +
             "\n";
    }
    cumulative += values.buckets.back();
    out += histogram + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(cumulative) + "\n";
    out += histogram + "_sum{" + labels + "} " +
           format_bound(static_cast<double>(values.sum_ns) * 1e-9) + "\n";
    out += histogram + "_count{" + labels + "} " + std::to_string(cumulative) + "\n";
  }
  out += process_metrics();
  return out;
}

}  // namespace abf::server
