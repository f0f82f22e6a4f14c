// `abf serve --follow` (server_core.hpp): keeps each tenant's snapshot near its
// catalog's head. Answers are exact at the head whatever the lag (docs/protocol.md
// section 8); a rebuild only makes them cheaper again (fewer head lookups).
//
// One thread, one rebuild at a time: when a tenant's snapshot lags by
// head.follow_lag_versions versions or head.follow_lag_digests added digests,
// the snapshot of the head is made
//   - incrementally (advance_filter: the serving filter's bits plus the
//     digests added since, bit-identical to a fresh build) when nothing was
//     removed since and the capacity holds them, else
//   - by a full build from the catalog (with twice the head's digests as
//     expected item count when the old capacity is too small),
// saved over the tenant's snapshot file (save_snapshot: a temporary file
// renamed into place) and published through the tenant's publisher by the
// ordinary reload, which verifies the file it reads. The serving snapshot
// answers throughout; a failure is counted, logged, and retried after a
// pause, and the old snapshot keeps serving.
#include <chrono>
#include <string>

#include "abf/filter_set.hpp"
#include "abf/service/catalog_build.hpp"
#include "abf/snapshot.hpp"
#include "server_core.hpp"

namespace abf::server {

namespace {

// After a failed rebuild a tenant is retried no sooner than this (a failing
// disk is not hammered every poll).
constexpr std::chrono::seconds kRetryPause{30};

// A spec for the head: the snapshot's, or, when the head holds more digests
// than it was designed for, twice the head's count (room to grow).
BloomSpec spec_for(std::uint64_t expected, double fpp, std::uint64_t count) {
  return BloomSpec{.expected_item_count = count > expected ? 2 * count : expected,
                   .target_fpp = fpp};
}

}  // namespace

void Core::follow_loop(std::stop_token stop) {
  const auto poll = std::chrono::milliseconds(config_.head.follow_poll_ms);
  while (!stop.stop_requested()) {
    {
      std::unique_lock lock(follow_mutex_);
      follow_wake_.wait_for(lock, stop, poll, [] { return false; });
    }
    if (stop.stop_requested()) break;
    for (const auto& tenant : tenants_) {
      if (stop.stop_requested()) break;
      if (tenant->follow_failed_at != std::chrono::steady_clock::time_point{} &&
          std::chrono::steady_clock::now() - tenant->follow_failed_at < kRetryPause) {
        continue;
      }
      auto rebuilt = follow_tenant(*tenant);
      if (rebuilt) {
        tenant->follow_failed_at = {};
        continue;
      }
      tenant->follow_failed.fetch_add(1, std::memory_order_relaxed);
      tenant->follow_failed_at = std::chrono::steady_clock::now();
      logger_->log(LogLevel::kWarn, {{"event", "follow_failed"},
                                     {"tenant", tenant->config.name},
                                     {"snapshot", tenant->config.snapshot.string()},
                                     {"error", rebuilt.error().describe()}});
    }
  }
}

Result<bool> Core::follow_tenant(Tenant& tenant) {
  const auto snapshot = tenant.publisher->current();
  if (snapshot == nullptr) return false;  // nothing to follow from; reloads bring one
  service::SqliteCatalog& catalog = *tenant.follow_catalog;
  const auto start = std::chrono::steady_clock::now();
  auto lag = tenant.service->lag();
  // The snapshot's own version now holds other digests (the catalog's
  // history rewritten: a backup restored and advanced): the tenant answers
  // nothing until a snapshot of the new history is published, and none can
  // be advanced from this one, so the head is built in full.
  const bool rewritten = !lag && lag.error().code == ErrorCode::kCatalogMismatch;
  if (!lag && !rewritten) return std::unexpected(lag.error());
  if (!rewritten &&
      (lag->versions_behind == 0 || (lag->versions_behind < config_.head.follow_lag_versions &&
                                     lag->digests_added < config_.head.follow_lag_digests))) {
    return false;
  }
  std::uint64_t head = 0;
  if (rewritten) {
    auto latest = catalog.latest_version();
    if (!latest) return std::unexpected(latest.error());
    head = *latest;
  } else {
    head = lag->head_version;
  }
  const FilterSet& serving = snapshot->filter;
  std::string kind;
  if (serving.shard_count() == 1) {
    const Filter& base = serving.shard(0);
    Result<Filter> filter = std::unexpected(Error{ErrorCode::kInvalidArgument, ""});
    // Both paths keep base's protocol (advance_filter builds the added
    // digests in it; the full build is asked for it).
    if (!rewritten && lag->digests_removed == 0) {
      filter = service::advance_filter(base, catalog, head, tenant.key, backend_);
      kind = "incremental";
      // A removal or a full capacity needs the full build below; anything
      // else (the catalog failing) is this rebuild's error.
      if (!filter && filter.error().code != ErrorCode::kCapacityExceeded &&
          filter.error().code != ErrorCode::kInvalidArgument) {
        return std::unexpected(filter.error());
      }
    }
    if (!filter) {
      auto count = catalog.count_at_version(head);
      if (!count) return std::unexpected(count.error());
      filter = service::build_filter_from_catalog(
          catalog, head, spec_for(base.expected_item_count(), base.target_fpp(), *count),
          tenant.key, base.hash_protocol_version(), backend_);
      kind = "full";
      if (!filter) return std::unexpected(filter.error());
    }
    if (auto saved = save_snapshot(*filter, tenant.config.snapshot); !saved) {
      return std::unexpected(saved.error());
    }
  } else {
    // A filter set: rebuilt whole, with its shard count.
    auto count = catalog.count_at_version(head);
    if (!count) return std::unexpected(count.error());
    auto set = service::build_filter_set_from_catalog(
        catalog, head, spec_for(serving.expected_item_count(), serving.target_fpp(), *count),
        serving.shard_count(), tenant.key, serving.hash_protocol_version(), backend_);
    if (!set) return std::unexpected(set.error());
    kind = "full";
    if (auto saved = save_filter_set(*set, tenant.config.snapshot); !saved) {
      return std::unexpected(saved.error());
    }
  }
  TenantReload report;
  report.tenant = tenant.config.name;
  if (auto published = reload_tenant(tenant, "follow", report); !published) {
    return std::unexpected(published.error());
  }
  tenant.follow_ok.fetch_add(1, std::memory_order_relaxed);
  logger_->log(
      LogLevel::kInfo,
      {{"event", "snapshot_rebuilt"},
       {"tenant", tenant.config.name},
       {"kind", kind},
       {"from_version", snapshot->filter.catalog_version()},
       {"catalog_version", report.catalog_version},
       {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}});
  return true;
}

}  // namespace abf::server
