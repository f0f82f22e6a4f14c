// What both fronts of `abf serve` share: tenants, authentication, rate
// limits, the exact find-missing answer, metrics and the log. Internal.
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

namespace abf::server {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// One JSON object a line, each with "ts" (UTC, milliseconds) and "level".
class Logger {
 public:
  Logger(LogLevel level, std::function<void(std::string_view)> sink);
  bool enabled(LogLevel level) const noexcept { return level >= level_; }
  void log(LogLevel level, nlohmann::ordered_json fields) const;

 private:
  LogLevel level_;
  std::function<void(std::string_view)> sink_;
  mutable std::mutex mutex_;
};

// A tenant's exact store: its catalog, with the exact index (when one is
// configured) answering batch lookups in front of it. The index is replaced
// whole at a reload (set_index) while requests run: each batch takes the
// index that serves when it starts and keeps it to its end. Everything but
// the lookups is the catalog's, so the publisher (bound to this store)
// checks snapshots against the catalog exactly as without an index.
class TenantStore final : public service::ArtifactRepository {
 public:
  explicit TenantStore(service::SqliteCatalog& catalog, std::uint64_t head_cache_digests)
      : catalog_(catalog), head_cache_digests_(head_cache_digests) {}

  // Serves `index` from now on (it must have passed check_index_binding).
  void set_index(IndexSet index);
  // The index serving now; null without one.
  std::shared_ptr<const service::IndexedRepository> indexed() const;
  // Digests answered by every index this store has served (from the index
  // alone, or passed on to the catalog), since start. A batch in flight
  // on an index while a reload replaces it may go uncounted.
  service::IndexedLookupCounts lookups() const;

  Result<bool> exists_at_version(const Digest& digest, std::uint64_t catalog_version) override;
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t catalog_version,
                                 std::span<bool> exists) override;
  Result<std::uint64_t> latest_version() override { return catalog_.latest_version(); }
  // The catalog's, after checking the serving index against it whenever the
  // head's record changed: an index whose version now holds other digests
  // (the catalog's history rewritten, a backup restored) is kCatalogMismatch
  // until a reload; a head that moved otherwise than forward over an
  // unchanged history drops the index's held added digests.
  Result<service::HeadRecord> head_record() override;
  Result<service::CatalogContent> content_at_version(std::uint64_t catalog_version) override {
    return catalog_.content_at_version(catalog_version);
  }
  Result<service::VersionChanges> changes_between(std::uint64_t after,
                                                  std::uint64_t upto) override {
    return catalog_.changes_between(after, upto);
  }
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const service::DigestSink& sink,
                                     std::size_t chunk_size = 0) override {
    return catalog_.for_each_digest_added(after, upto, sink, chunk_size);
  }
  Result<std::vector<Digest>> sample_at_version(std::uint64_t catalog_version,
                                                std::size_t count) override {
    return catalog_.sample_at_version(catalog_version, count);
  }
  std::optional<service::CatalogBinding> catalog_binding() const override {
    return catalog_.catalog_binding();
  }

 private:
  std::shared_ptr<service::IndexedRepository> current() const;

  service::SqliteCatalog& catalog_;
  std::uint64_t head_cache_digests_;
  mutable std::mutex mutex_;  // guards indexed_ (the pointer, not what it points to) and retired_
  std::shared_ptr<service::IndexedRepository> indexed_;
  service::IndexedLookupCounts retired_;  // the replaced indexes' counts
  // The head record last seen with an index serving (under mutex_).
  std::optional<service::HeadRecord> seen_head_;
};

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

// The endpoints of the latency histogram (front and endpoint labels).
enum class Endpoint : std::size_t {
  kHttpFindMissing,
  kHttpBlob,
  kHttpMetrics,
  kHttpReadyz,
  kHttpHealthz,
  kHttpAdmin,
  kHttpOther,  // another path, or a request refused before routing
  kGrpcFindMissingBlobs,
  kCount,  // not an endpoint: how many there are (a new one goes above it)
};
inline constexpr std::size_t kEndpointCount = static_cast<std::size_t>(Endpoint::kCount);

// The histogram's labels of each endpoint, in the enum's order.
struct EndpointLabels {
  Endpoint endpoint;
  std::string_view front, name;
};
inline constexpr std::array<EndpointLabels, kEndpointCount> kEndpointLabels = {{
    {Endpoint::kHttpFindMissing, "http", "find-missing"},
    {Endpoint::kHttpBlob, "http", "blob"},
    {Endpoint::kHttpMetrics, "http", "metrics"},
    {Endpoint::kHttpReadyz, "http", "readyz"},
    {Endpoint::kHttpHealthz, "http", "healthz"},
    {Endpoint::kHttpAdmin, "http", "admin"},
    {Endpoint::kHttpOther, "http", "other"},
    {Endpoint::kGrpcFindMissingBlobs, "grpc", "FindMissingBlobs"},
}};
// An endpoint added without its labels (a missing entry is value-initialized:
// endpoint 0, no name) or out of order does not compile.
static_assert(
    [] {
      for (std::size_t e = 0; e < kEndpointCount; ++e) {
        if (kEndpointLabels[e].endpoint != static_cast<Endpoint>(e) ||
            kEndpointLabels[e].name.empty()) {
          return false;
        }
      }
      return true;
    }(),
    "kEndpointLabels: one entry per Endpoint, in the enum's order");

// One T per endpoint, indexed by Endpoint only (never by a plain number):
// its size comes from the enum, so every endpoint has its element.
template <typename T>
class PerEndpoint {
 public:
  T& operator[](Endpoint endpoint) noexcept { return items_[index(endpoint)]; }
  const T& operator[](Endpoint endpoint) const noexcept { return items_[index(endpoint)]; }

 private:
  static constexpr std::size_t index(Endpoint endpoint) noexcept {
    return static_cast<std::size_t>(endpoint);
  }
  std::array<T, kEndpointCount> items_{};
};

// Request latencies of one endpoint: Prometheus' cumulative buckets, kept
// per bucket (each observation bumps one) with relaxed atomics.
class LatencyHistogram {
 public:
  // Upper bounds in seconds. The lowest is 100 us, above what one catalog
  // lookup adds to a single-digest request (about 10 us here), so a bucket
  // never tells a filter answer.
  static constexpr std::array<double, 16> kBounds = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
                                                     0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
                                                     1,      2.5,     5,      10};
  struct Values {
    std::array<std::uint64_t, kBounds.size() + 1> buckets{};  // last: above every bound
    std::uint64_t sum_ns = 0;
  };
  void observe(std::chrono::nanoseconds elapsed) noexcept;
  Values values() const noexcept;

 private:
  std::array<std::atomic<std::uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<std::uint64_t> sum_ns_{0};
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

// A token bucket pair (requests, digests) per caller.
class RateLimiter {
 public:
  RateLimiter(const RateLimit& limit, std::size_t buckets);
  // Takes one request token; 429 with Retry-After when the bucket is empty.
  RequestResult<void> admit_request(std::size_t bucket);
  // Takes `digests` digest tokens (the bucket may go into debt by one
  // request); 429 when it is already in debt.
  RequestResult<void> admit_digests(std::size_t bucket, std::size_t digests);

 private:
  struct Bucket {
    std::mutex mutex;
    double requests = 0;
    double digests = 0;
    std::chrono::steady_clock::time_point last{};
    bool started = false;
  };
  void refill(Bucket& bucket, std::chrono::steady_clock::time_point now);
  RateLimit limit_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
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
