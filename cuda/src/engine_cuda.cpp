// The CUDA engine's row of the engine table (core/engine/engine.hpp), on top
// of DeviceFilter: queries from host memory through a device copy attached
// to the filter, builds into a device bitset lane folded into the builder's
// bits once. Registered by cuda/CMakeLists.txt. And the engine's public face
// in abf/cuda/controls.hpp (cuda_compiled, cuda_device_description,
// cuda_copy_bandwidth).
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "abf/backend.hpp"
#include "abf/cuda/controls.hpp"
#include "abf/cuda/device_filter.hpp"
#include "cuda_engine.hpp"
#include "cuda_error.hpp"
#include "engine.hpp"

namespace abf {

namespace {

// The device probe runs once per process: a missing driver or device does
// not appear later, and cudaGetDeviceCount is not free.
const Result<cuda::DeviceInfo>& device_probe() {
  static const Result<cuda::DeviceInfo> probe = cuda::current_device();
  return probe;
}

Result<void> require_device() {
  if (const auto& probe = device_probe(); !probe) return std::unexpected(probe.error());
  return {};
}

}  // namespace

namespace detail {

namespace {

// --- Queries -------------------------------------------------------------------

// A filter's device copy is attached to the filter (FilterAccess), made by
// its first CUDA query and freed with its last copy: a stream of batches
// against one filter uploads it once, and filters queried from different
// threads each use their own copy (and every call its own staging), so they
// run on the GPU at once. The copy can never outlive or mistake its
// filter's bits.
Result<void> query(const Filter& filter, std::span<const Digest> digests,
                   std::span<Answer> answers) {
  if (auto r = require_device(); !r) return r;
  if (digests.empty()) return {};
  auto device = FilterAccess::attachment<cuda::DeviceFilter>(
      filter, kCudaEngine, [&]() -> Result<std::shared_ptr<cuda::DeviceFilter>> {
        auto uploaded = cuda::DeviceFilter::upload(filter);
        if (!uploaded) return std::unexpected(uploaded.error());
        return std::make_shared<cuda::DeviceFilter>(std::move(*uploaded));
      });
  if (!device) return std::unexpected(device.error());
  return (*device)->query_host(digests, answers);
}

// --- Builds --------------------------------------------------------------------

// The device bitset of the last CUDA build that ended, kept for the next
// build of the same scheme: a service rebuilding its filter, or a benchmark,
// pays the allocation once. Leaked on purpose: destroying device memory from
// a static destructor races the CUDA runtime's own teardown.
struct LaneCache {
  std::mutex mutex;
  std::optional<cuda::DeviceFilter> spare;
};

LaneCache& lane_cache() {
  static auto* cache = new LaneCache;
  return *cache;
}

// A bitset on the device that a FilterBuilder building with CUDA inserts
// into: opened at its first CUDA chunk, ORed into the builder's own words
// once, in finish(). A streamed build so moves the filter across the bus
// once, not once per chunk.
class CudaLane final : public BuildLane {
 public:
  CudaLane(cuda::DeviceFilter device, std::uint64_t* words)
      : device_(std::move(device)), words_(words) {}
  CudaLane(const CudaLane&) = delete;
  CudaLane& operator=(const CudaLane&) = delete;

  ~CudaLane() override {
    LaneCache& cache = lane_cache();
    std::lock_guard lock(cache.mutex);
    cache.spare = std::move(device_);
  }

  Result<void> insert(std::span<const Digest> digests) override {
    return device_->insert_host(digests);
  }

  Result<void> finish() override {
    return device_->or_into({words_, device_->scheme().bit_count() / 64});
  }

 private:
  std::optional<cuda::DeviceFilter> device_;
  std::uint64_t* words_;  // the builder's bitset
};

Result<std::unique_ptr<BuildLane>> open_lane(const Scheme& scheme, std::uint64_t* words) {
  if (auto r = require_device(); !r) return std::unexpected(r.error());
  std::optional<cuda::DeviceFilter> reused;
  {
    LaneCache& cache = lane_cache();
    std::lock_guard lock(cache.mutex);
    // The same scheme, not only the same size: the kernels take the
    // protocol and key from the device filter.
    if (cache.spare && cache.spare->scheme() == scheme &&
        cache.spare->device() == device_probe()->ordinal) {
      reused = std::move(cache.spare);
    }
    cache.spare.reset();
  }
  if (reused && reused->clear()) return std::make_unique<CudaLane>(std::move(*reused), words);
  reused.reset();
  auto device = cuda::DeviceFilter::create(scheme);
  if (!device) return std::unexpected(device.error());
  return std::make_unique<CudaLane>(std::move(*device), words);
}

void release_caches() noexcept {
  {
    LaneCache& cache = lane_cache();
    const std::lock_guard lock(cache.mutex);
    cache.spare.reset();
  }
  cuda::release_idle_staging();
}

}  // namespace

extern const Engine kCudaEngine{
    .name = "cuda",
    .summary = "NVIDIA GPU: queries through the filter's device copy, builds into a device bitset",
    .kind = EngineKind::kDevice,
    .rank = 2,
    .fallback = false,
    .available = []() noexcept { return device_probe().has_value(); },
    .detail =
        [] {
          const auto& probe = device_probe();
          return probe ? probe->describe() : probe.error().message;
        },
    .auto_prefers =
        [](const Workload& workload) noexcept {
          return auto_prefers_cuda(workload.batch, workload.query_filter_bytes);
        },
    .query = query,
    .open_lane = open_lane,
    .release_caches = release_caches,
};

}  // namespace detail

bool cuda_compiled() { return true; }

std::string cuda_device_description() { return detail::kCudaEngine.detail(); }

Result<double> cuda_copy_bandwidth() {
  if (auto r = require_device(); !r) return std::unexpected(r.error());
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  void* host = nullptr;
  void* device = nullptr;
  cudaEvent_t begin = nullptr;
  cudaEvent_t end = nullptr;
  Result<void> r = cuda::detail::check(cudaHostAlloc(&host, kBytes, cudaHostAllocDefault),
                                       "cudaHostAlloc (64 MiB for the copy ceiling)");
  if (r) r = cuda::detail::check(cudaMalloc(&device, kBytes), "cudaMalloc (64 MiB)");
  if (r) r = cuda::detail::check(cudaEventCreate(&begin), "cudaEventCreate");
  if (r) r = cuda::detail::check(cudaEventCreate(&end), "cudaEventCreate");
  if (r) std::memset(host, 0x5a, kBytes);
  std::vector<float> runs;
  for (int run = 0; r && run < 6; ++run) {
    r = cuda::detail::check(cudaEventRecord(begin), "cudaEventRecord");
    if (r) {
      r = cuda::detail::check(cudaMemcpyAsync(device, host, kBytes, cudaMemcpyHostToDevice),
                              "copying 64 MiB to the device");
    }
    if (r) r = cuda::detail::check(cudaEventRecord(end), "cudaEventRecord");
    if (r) r = cuda::detail::check(cudaEventSynchronize(end), "waiting for the copy");
    float ms = 0;
    if (r) r = cuda::detail::check(cudaEventElapsedTime(&ms, begin, end), "timing the copy");
    if (r && run > 0) runs.push_back(ms);  // the first run warms up
  }
  if (end != nullptr) (void)cudaEventDestroy(end);
  if (begin != nullptr) (void)cudaEventDestroy(begin);
  if (device != nullptr) (void)cudaFree(device);
  if (host != nullptr) (void)cudaFreeHost(host);
  if (!r) return std::unexpected(r.error());
  std::sort(runs.begin(), runs.end());
  return static_cast<double>(kBytes) / (static_cast<double>(runs[runs.size() / 2]) / 1e3);
}

}  // namespace abf
