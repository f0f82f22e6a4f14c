// The pieces of the server's Prometheus text (/metrics): the endpoints
// and their latency histograms, label escaping, number formatting, and the
// process metrics read from /proc. Internal.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace abf::server {

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
  kGrpcGetCapabilities,
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
    {Endpoint::kGrpcGetCapabilities, "grpc", "GetCapabilities"},
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

// A label value in the exposition format: backslash, quote and newline
// escaped.
std::string label_value(std::string_view text);

// A sample value or bucket bound: the shortest form that reads back the same.
std::string format_bound(double value);

// The standard process metrics of Prometheus' client libraries, from
// /proc/self (Linux): CPU seconds, resident and virtual memory, open and
// maximum file descriptors, start time. A value that cannot be read is
// left out.
std::string process_metrics();

}  // namespace abf::server
