// What both fronts of `abf serve` share (server_core.hpp).
#include "server_core.hpp"

#include <algorithm>
#include <string>

#include "abf/filter_set.hpp"
#include "abf/snapshot.hpp"

namespace abf::server {

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
  auto logger = std::make_unique<Logger>(parse_log_level(config.log_level), options.log_sink);
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
  // One rule for every file a tenant serves from (issue 37): a snapshot or
  // filter set that does not load, verify or bind to its catalog stops the
  // server here, before it listens, as an index does above. Serving the
  // tenant unready instead (503 no_snapshot) hid the mistake from a
  // supervisor that restarts on failure.
  for (const auto& tenant : core->tenants_) {
    TenantReload report;
    report.tenant = tenant->config.name;
    if (auto loaded = core->reload_tenant(*tenant, "start", report); !loaded) {
      const std::string path = tenant->config.snapshot.string();
      const std::string& message = loaded.error().message;
      return fail(loaded.error().code,
                  "tenant " + tenant->config.name + ": " +
                      (message.find(path) == std::string::npos ? "snapshot " + path + ": " : "") +
                      message);
    }
  }
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
  // The engine's verdicts arrive as the missing indices the answer is
  // written from: one form from the filter to the response.
  FindMissingOutcome outcome;
  auto counts = head ? tenant.service->find_missing(digests, *snapshot, *head, outcome.missing)
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
  outcome.counts = *counts;
  outcome.catalog_version = head->catalog_version;
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
  tenant.last_reload_ok_ms.store(std::chrono::duration_cast<std::chrono::milliseconds>(
                                     std::chrono::system_clock::now().time_since_epoch())
                                     .count(),
                                 std::memory_order_relaxed);
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
  // The same index again (a reload that re-read an unchanged file): the
  // serving one stays, and nothing is announced. Its fingerprint was just
  // checked against its digests, so equal fingerprints mean equal contents.
  if (const auto serving = tenant.store->indexed(); serving != nullptr) {
    const IndexSet& old = serving->index();
    if (old.catalog_id() == index->catalog_id() && old.catalog_version() == version &&
        old.size() == count && old.shard_count() == index->shard_count() &&
        old.content_fingerprint() == index->content_fingerprint()) {
      tenant.index_reloads_ok.fetch_add(1, std::memory_order_relaxed);
      logger_->log(LogLevel::kDebug, {{"event", "index_unchanged"},
                                      {"trigger", trigger},
                                      {"tenant", tenant.config.name},
                                      {"index", path},
                                      {"catalog_version", version},
                                      {"digests", count}});
      return {};
    }
  }
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


}  // namespace abf::server
