// What both fronts of `abf serve` share: the tenants, authentication, the
// exact find-missing answer, reloads, readiness and the counts /metrics
// shows (its text: server_metrics.cpp). The log (log.hpp), the Prometheus
// pieces (metrics.hpp), the rate limiter (rate_limiter.hpp) and a tenant's
// store (tenant_store.hpp) have files of their own. Internal.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/index.hpp"
#include "abf/scheme.hpp"
#include "abf/server/config.hpp"
#include "abf/server/request.hpp"
#include "abf/server/server.hpp"
#include "abf/service/exact_index.hpp"
#include "abf/service/metrics.hpp"
#include "abf/service/service.hpp"
#include "abf/service/snapshot_publisher.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "log.hpp"
#include "metrics.hpp"
#include "rate_limiter.hpp"
#include "tenant_store.hpp"

namespace abf::server {

struct Tenant {
  TenantConfig config;
  std::optional<Key> key;
  service::Metrics metrics;
  std::unique_ptr<service::SqliteCatalog> catalog;
  std::unique_ptr<TenantStore> store;  // the catalog, with the index in front when configured
  std::unique_ptr<service::SnapshotPublisher> publisher;
  std::unique_ptr<service::ArtifactExistenceService> service;
  std::mutex reload_mutex;  // one reload of this tenant at a time
  std::atomic<std::uint64_t> reloads_ok{0};
  std::atomic<std::uint64_t> reloads_failed{0};
  std::atomic<std::uint64_t> index_reloads_ok{0};
  std::atomic<std::uint64_t> index_reloads_failed{0};
  // Unix time in ms of the last snapshot published (0: none yet).
  std::atomic<std::int64_t> last_reload_ok_ms{0};
  // Digests answered missing (exactly), counted after `metrics` counted
  // their filter answers: what the metrics release waits for.
  std::atomic<std::uint64_t> missing_answered{0};
  // --follow (ServerConfig::head.follow): the follower's own read-only
  // connection (a rebuild's long read never holds up the answers' one), its
  // rebuilds by result, and when the last one failed (retried after a pause).
  std::unique_ptr<service::SqliteCatalog> follow_catalog;
  std::atomic<std::uint64_t> follow_ok{0};
  std::atomic<std::uint64_t> follow_failed{0};
  std::chrono::steady_clock::time_point follow_failed_at{};
};

// Who is asking: a token's entry (null without authentication) and the rate
// bucket it draws from.
struct Caller {
  const TokenEntry* token = nullptr;
  std::size_t bucket = 0;
  // Both arms are string_views: `cond ? token->id : "anonymous"` would be a
  // temporary std::string, and the view would dangle (ASan:
  // stack-use-after-scope).
  std::string_view id() const noexcept {
    return token != nullptr ? std::string_view(token->id) : std::string_view("anonymous");
  }
};

// The exact answer of one batch.
struct FindMissingOutcome {
  std::vector<std::uint32_t> missing;  // indices into the request, ascending
  service::BatchCounts counts;
  std::uint64_t catalog_version = 0;
};

class Core {
 public:
  static Result<std::unique_ptr<Core>> create(const ServerConfig& config,
                                              const ServerOptions& options);

  const ServerConfig& config() const noexcept { return config_; }
  const Logger& logger() const noexcept { return *logger_; }
  bool auth_enabled() const noexcept { return config_.token_file.has_value(); }

  // 403 unless `caller` may reload (an @admin token, or no authentication).
  RequestResult<void> check_admin(const Caller& caller) const;
  // 403 unless `caller` may read /metrics and /readyz's details (@metrics
  // or @admin, or no authentication).
  RequestResult<void> check_operations(const Caller& caller) const;

  // Re-reads every tenant's index (when `indexes`; a configured one) and
  // snapshot; a tenant's report is ok when both were.
  std::vector<TenantReload> reload(std::string_view trigger, bool indexes = true);
  bool ready() const;
  // Every tenant: {"name": {"ready": bool, "catalog_version": N, "lag":
  // {"head_version": H, "versions": N, "digests_added": N} or null}} ("lag"
  // only with a snapshot; null when the catalog cannot answer).
  nlohmann::ordered_json readiness() const;

  // Prometheus text: every tenant's service metrics with a tenant label
  // (the counters that follow filter answers as of their last release),
  // then the server's own (snapshot ready, reloads, requests by front,
  // tenant and status, digests asked and missing, the latency histograms
  // as of the last release), then the process' (process_*).
  std::string prometheus() const;

  // Counts one request's latency, from its handler's start to its answer.
  void observe_latency(Endpoint endpoint, std::chrono::nanoseconds elapsed) noexcept;

  // Counts one answered request. `tenant` is "" when the request named no
  // tenant it was allowed to see (so unknown names add no label values).
  void count_request(std::string_view front, std::string_view tenant, int status,
                     std::uint64_t digests, std::uint64_t missing);

 private:
  // The steps of the admission pipeline (admission.hpp), which alone
  // takes them: a front reaches a tenant only through it.
  friend class Admission;
  // The caller of a request with this Authorization value ("" for none):
  // anonymous when authentication is off; 401 "unauthenticated" without a
  // token, "invalid_token" for one that is not in the file.
  RequestResult<Caller> authenticate(std::string_view authorization) const;
  // The tenant `name` if `caller` may ask it: 403 "forbidden" when the
  // token does not name it (whether or not it exists, so a token learns
  // nothing about other tenants), 404 "unknown_tenant" otherwise.
  RequestResult<Tenant*> tenant_for(const Caller& caller, std::string_view name);
  // The tenant of a request that names none (gRPC's empty instance_name), decided from
  // what the caller may see only, so the answer never depends on how many
  // tenants the server has beyond them: a token that names exactly one
  // tenant gets that one (as if it had named it); a token of "*", or no
  // authentication, gets the only tenant when the server has one; anything
  // else is 400 "invalid_request" (name one), with no count in the message.
  RequestResult<Tenant*> default_tenant(const Caller& caller);
  // The exact answer for `digests` at the serving snapshot's version: 503
  // "no_snapshot" before a snapshot is served, 503 "catalog_unavailable"
  // when the catalog fails.
  RequestResult<FindMissingOutcome> find_missing(Tenant& tenant, std::span<const Digest> digests);

  Core(const ServerConfig& config, std::unique_ptr<Logger> logger, std::vector<TokenEntry> tokens);
  Result<void> reload_tenant(Tenant& tenant, std::string_view trigger, TenantReload& report);
  // Loads the tenant's configured index, checks it against the catalog
  // (check_index_binding) and serves it; on error the old one (or none)
  // keeps serving.
  Result<void> reload_index(Tenant& tenant, std::string_view trigger);
  // Takes the due releases (ServerConfig::metrics_release_*); under release_mutex_.
  void release_metrics() const;
  // --follow (follow.cpp): every head.follow_poll_ms, each tenant whose
  // snapshot lags past the bounds is rebuilt, saved and published, one
  // tenant at a time, on this one thread.
  void follow_loop(std::stop_token stop);
  // Rebuilds `tenant`'s snapshot when its lag is past the bounds; false
  // when nothing was due.
  Result<bool> follow_tenant(Tenant& tenant);

  ServerConfig config_;
  std::unique_ptr<Logger> logger_;
  std::vector<TokenEntry> tokens_;
  std::vector<std::unique_ptr<Tenant>> tenants_;
  std::map<std::string, Tenant*, std::less<>> by_name_;
  RateLimiter limiter_;
  Backend backend_ = Backend::kAuto;

  struct RequestKey {
    std::string front, tenant;
    int status;
    friend auto operator<=>(const RequestKey&, const RequestKey&) = default;
  };
  mutable std::mutex counts_mutex_;
  std::map<RequestKey, std::uint64_t> requests_;
  std::map<std::string, std::pair<std::uint64_t, std::uint64_t>> digests_;  // asked, missing

  PerEndpoint<LatencyHistogram> latency_;
  // What /metrics shows of the counters that follow filter answers: their
  // values at each tenant's last release, and the histograms' at the last
  // release of all (docs/serve.md, "Private operations").
  struct Release {
    std::array<std::uint64_t, service::kCounterCount> counters{};
    std::uint64_t missing_mark = 0;      // Tenant::missing_answered at the release
    service::IndexedLookupCounts index;  // TenantStore::lookups(): they follow filter answers too
  };
  mutable std::mutex release_mutex_;
  mutable std::vector<Release> released_;  // one per tenant, in tenants_' order
  mutable PerEndpoint<LatencyHistogram::Values> released_latency_{};
  mutable std::chrono::steady_clock::time_point last_release_{};
  // Last: stopped and joined first when the Core goes.
  std::mutex follow_mutex_;
  std::condition_variable_any follow_wake_;
  std::jthread follower_;
};

}  // namespace abf::server
