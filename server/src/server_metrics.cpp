// The server's /metrics text and the counts behind it (server_core.hpp):
// every tenant's service families with its tenant label (service::to_prometheus
// of them all), the server's own, the latency histograms as of their last
// release, the process' metrics.
#include <algorithm>
#include <string>
#include <vector>

#include "abf/backend.hpp"
#include "abf/cuda/controls.hpp"
#include "abf/simd/target.hpp"
#include "abf/version.hpp"
#include "server_core.hpp"

namespace abf::server {

namespace {

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

}  // namespace

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
  // Every tenant's service metrics, each sample with its tenant's label.
  std::vector<service::MetricsSnapshot> snapshots(tenants_.size());
  std::vector<std::string> labels(tenants_.size());
  std::vector<service::LabelledMetrics> sources(tenants_.size());
  for (std::size_t t = 0; t < tenants_.size(); ++t) {
    const Tenant& tenant = *tenants_[t];
    const auto snapshot = tenant.publisher->current();
    snapshots[t] = tenant.metrics.collect(snapshot.get());
    for (std::size_t i = 0; i < service::kCounterCount; ++i) {
      if (follows_answers(static_cast<service::Counter>(i))) {
        snapshots[t].counters[i] = released[t].counters[i];
      }
    }
    labels[t] = "tenant=\"" + label_value(tenant.config.name) + "\"";
    sources[t] = service::LabelledMetrics{labels[t], &snapshots[t]};
  }
  std::string out = service::to_prometheus(sources);
  const auto family = [&](std::string_view name, std::string_view type, std::string_view help) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " +
           std::string(name) + " " + std::string(type) + "\n";
  };
  // Which build serves (Prometheus' *_build_info convention: always 1, the
  // facts in its labels), under the one prefix of every series here.
  family("artifact_bloom_build_info", "gauge",
         "Always 1: the abf version serving, the SIMD target its engine runs on here and "
         "whether the CUDA backend was compiled in.");
  out += "artifact_bloom_build_info{version=\"" + label_value(kVersion) + "\",simd_target=\"" +
         label_value(simd_target_name()) + "\",cuda=\"" + (cuda_compiled() ? "true" : "false") +
         "\"} 1\n";
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
  family("artifact_bloom_serve_last_reload_success_timestamp_seconds", "gauge",
         "Unix time of the tenant's last snapshot load that was verified and published (start, "
         "SIGHUP, POST /admin/reload, --follow).");
  for (const auto& tenant : tenants_) {
    const std::int64_t ms = tenant->last_reload_ok_ms.load(std::memory_order_relaxed);
    if (ms == 0) continue;
    out += "artifact_bloom_serve_last_reload_success_timestamp_seconds{tenant=\"" +
           label_value(tenant->config.name) + "\"} " + std::to_string(ms / 1000) + "." +
           std::string(ms % 1000 < 100 ? (ms % 1000 < 10 ? "00" : "0") : "") +
           std::to_string(ms % 1000) + "\n";
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
