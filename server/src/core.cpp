// What both fronts of `abf serve` share (core.hpp).
#include "core.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <sstream>

#include "abf/filter_set.hpp"
#include "abf/snapshot.hpp"

namespace abf::server {

namespace {

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

}  // namespace

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
    const auto binding = tenant->catalog->catalog_binding();
    tenant->publisher =
        std::make_unique<service::SnapshotPublisher>(&tenant->metrics, binding->id, binding->name);
    service::ServiceOptions service_options;
    service_options.backend = core->backend_;
    tenant->service = std::make_unique<service::ArtifactExistenceService>(
        *tenant->publisher, *tenant->catalog, &tenant->metrics, service_options);
    core->by_name_[tenant_config.name] = tenant.get();
    core->tenants_.push_back(std::move(tenant));
  }
  core->reload("start");
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
  if (tenants_.size() != 1) {
    return refuse(400, "invalid_request",
                  "instance_name is empty and this server has " + std::to_string(tenants_.size()) +
                      " tenants: name one");
  }
  return tenant_for(caller, tenants_.front()->config.name);
}

RequestResult<void> Core::check_admin(const Caller& caller) const {
  if (caller.token != nullptr && !caller.token->admin) {
    return refuse(403, "forbidden", "token " + caller.token->id + " may not reload (no @admin)");
  }
  return {};
}

RequestResult<FindMissingOutcome> Core::find_missing(Tenant& tenant,
                                                     std::span<const Digest> digests) {
  // One snapshot for the whole batch: its filter, and its version for the
  // catalog lookups of the maybes and for the answer's version.
  const auto snapshot = tenant.publisher->current();
  if (snapshot == nullptr) {
    return refuse(
        503, "no_snapshot",
        "tenant " + tenant.config.name + " has no verified snapshot yet; retry after a reload", 5);
  }
  auto exists = std::make_unique<bool[]>(std::max<std::size_t>(digests.size(), 1));
  auto counts = tenant.service->exists_batch(digests, std::span<bool>(exists.get(), digests.size()),
                                             *snapshot);
  if (!counts) {
    logger_->log(LogLevel::kError, {{"event", "catalog_error"},
                                    {"tenant", tenant.config.name},
                                    {"error", counts.error().describe()}});
    return refuse(503, "catalog_unavailable",
                  "tenant " + tenant.config.name + ": the catalog could not answer; retry", 1);
  }
  FindMissingOutcome outcome;
  outcome.counts = *counts;
  outcome.catalog_version = snapshot->catalog_version();
  outcome.missing.reserve(digests.size() - counts->present);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    if (!exists[i]) outcome.missing.push_back(static_cast<std::uint32_t>(i));
  }
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

std::vector<TenantReload> Core::reload(std::string_view trigger) {
  std::vector<TenantReload> reports;
  for (const auto& tenant : tenants_) {
    TenantReload report;
    report.tenant = tenant->config.name;
    (void)reload_tenant(*tenant, trigger, report);
    reports.push_back(std::move(report));
  }
  return reports;
}

bool Core::ready() const {
  return std::all_of(tenants_.begin(), tenants_.end(),
                     [](const auto& tenant) { return tenant->publisher->current() != nullptr; });
}

nlohmann::ordered_json Core::readiness() const {
  nlohmann::ordered_json tenants = nlohmann::ordered_json::object();
  for (const auto& tenant : tenants_) {
    const auto snapshot = tenant->publisher->current();
    tenants[tenant->config.name] = {
        {"ready", snapshot != nullptr},
        {"catalog_version", snapshot ? nlohmann::ordered_json(snapshot->catalog_version())
                                     : nlohmann::ordered_json(nullptr)}};
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

std::string Core::prometheus() const {
  std::vector<std::string> order;
  std::map<std::string, Family> families;
  for (const auto& tenant : tenants_) {
    const auto snapshot = tenant->publisher->current();
    merge_exposition(service::to_prometheus(tenant->metrics.collect(snapshot.get())),
                     tenant->config.name, order, families);
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
  family("abf_serve_snapshot_ready", "gauge",
         "1 when the tenant serves a verified snapshot, else 0.");
  for (const auto& tenant : tenants_) {
    out += "abf_serve_snapshot_ready{tenant=\"" + label_value(tenant->config.name) + "\"} " +
           (tenant->publisher->current() ? "1" : "0") + "\n";
  }
  family("abf_serve_reloads_total", "counter",
         "Snapshot reloads (start, SIGHUP, POST /admin/reload) by result.");
  for (const auto& tenant : tenants_) {
    const std::string label = "tenant=\"" + label_value(tenant->config.name) + "\"";
    out += "abf_serve_reloads_total{" + label + ",result=\"ok\"} " +
           std::to_string(tenant->reloads_ok.load()) + "\n";
    out += "abf_serve_reloads_total{" + label + ",result=\"failed\"} " +
           std::to_string(tenant->reloads_failed.load()) + "\n";
  }
  const std::lock_guard lock(counts_mutex_);
  family("abf_serve_requests_total", "counter",
         "Requests answered, by front (http, grpc), tenant (\"\" when none was allowed) and "
         "HTTP status (gRPC: the HTTP status its code maps from).");
  for (const auto& [key, count] : requests_) {
    out += "abf_serve_requests_total{front=\"" + label_value(key.front) + "\",tenant=\"" +
           label_value(key.tenant) + "\",status=\"" + std::to_string(key.status) + "\"} " +
           std::to_string(count) + "\n";
  }
  family("abf_serve_digests_total", "counter", "Digests asked about in answered batches.");
  for (const auto& [tenant, counts] : digests_) {
    out += "abf_serve_digests_total{tenant=\"" + label_value(tenant) + "\"} " +
           std::to_string(counts.first) + "\n";
  }
  family("abf_serve_missing_digests_total", "counter", "Digests answered missing.");
  for (const auto& [tenant, counts] : digests_) {
    out += "abf_serve_missing_digests_total{tenant=\"" + label_value(tenant) + "\"} " +
           std::to_string(counts.second) + "\n";
  }
  return out;
}

}  // namespace abf::server
