// The CUDA engine behind Backend::kCuda (and kAuto for large batches when a
// device is present): the abf::cuda_engine functions of core/src/engines.hpp,
// on top of DeviceFilter.
#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "abf/cuda/device_filter.hpp"
#include "cuda_error.hpp"
#include "kernels.hpp"

namespace abf::cuda_engine {

namespace {

// The device probe runs once per process: a missing driver or device does
// not appear later, and cudaGetDeviceCount is not free.
const Result<cuda::DeviceInfo>& device_probe() {
  static const Result<cuda::DeviceInfo> probe = cuda::current_device();
  return probe;
}

// The last filter queried, kept on the device so a stream of batches against
// one filter uploads it once. The cache holds a copy of the Filter (which
// shares its bits), so the words it was keyed on cannot be freed and reused
// for another filter while it lives. Leaked on purpose: destroying device
// memory from a static destructor races the CUDA runtime's own teardown.
struct UploadCache {
  std::mutex mutex;
  std::optional<Filter> filter;
  std::optional<cuda::DeviceFilter> device;
};

UploadCache& upload_cache() {
  static auto* cache = new UploadCache;
  return *cache;
}

bool same_filter(const Filter& a, const Filter& b) {
  return a.words().data() == b.words().data() && a.bit_count() == b.bit_count() &&
         a.hash_count() == b.hash_count();
}

Result<void> require_device() {
  if (const auto& probe = device_probe(); !probe) return std::unexpected(probe.error());
  return {};
}

}  // namespace

bool compiled() noexcept { return true; }

bool device_present() noexcept { return device_probe().has_value(); }

std::string device_description() {
  const auto& probe = device_probe();
  return probe ? probe->describe() : probe.error().message;
}

Result<void> query_batch(const Filter& filter, const Digest* digests, std::size_t count,
                         Answer* answers) {
  if (auto r = require_device(); !r) return r;
  UploadCache& cache = upload_cache();
  // One host pipeline at a time: the lock also keeps the cached DeviceFilter
  // alive while it is used.
  std::lock_guard lock(cache.mutex);
  if (!cache.filter || !same_filter(*cache.filter, filter)) {
    cache.device.reset();
    cache.filter.reset();
    auto uploaded = cuda::DeviceFilter::upload(filter);
    if (!uploaded) return std::unexpected(uploaded.error());
    cache.device.emplace(std::move(*uploaded));
    cache.filter.emplace(filter);
  }
  return cache.device->query_host({digests, count}, {answers, count});
}

namespace {

// The device bitset (with its pinned staging) of the last CUDA build that
// ended, kept for the next build of the same layout: a service rebuilding
// its filter, or a benchmark, pays the allocations once. Leaked on purpose,
// like the upload cache.
struct LaneCache {
  std::mutex mutex;
  std::optional<cuda::DeviceFilter> spare;
};

LaneCache& lane_cache() {
  static auto* cache = new LaneCache;
  return *cache;
}

class CudaLane final : public DeviceLane {
 public:
  explicit CudaLane(cuda::DeviceFilter device) : device_(std::move(device)) {}
  CudaLane(const CudaLane&) = delete;
  CudaLane& operator=(const CudaLane&) = delete;

  ~CudaLane() override {
    LaneCache& cache = lane_cache();
    std::lock_guard lock(cache.mutex);
    cache.spare = std::move(device_);
  }

  Result<void> insert(const Digest* digests, std::size_t count) override {
    return device_->insert_host({digests, count});
  }

  Result<void> fold_into(std::uint64_t* words) override {
    return device_->or_into({words, device_->layout().bit_count / 64});
  }

 private:
  std::optional<cuda::DeviceFilter> device_;
};

}  // namespace

Result<double> copy_bandwidth() {
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

Result<std::unique_ptr<DeviceLane>> open_lane(std::uint64_t bit_count, std::uint32_t hash_count) {
  if (auto r = require_device(); !r) return std::unexpected(r.error());
  const Layout layout{bit_count, hash_count};
  std::optional<cuda::DeviceFilter> reused;
  {
    LaneCache& cache = lane_cache();
    std::lock_guard lock(cache.mutex);
    if (cache.spare && cache.spare->layout() == layout &&
        cache.spare->device() == device_probe()->ordinal) {
      reused = std::move(cache.spare);
    }
    cache.spare.reset();
  }
  if (reused && reused->clear()) return std::make_unique<CudaLane>(std::move(*reused));
  reused.reset();
  auto device = cuda::DeviceFilter::create(layout);
  if (!device) return std::unexpected(device.error());
  return std::make_unique<CudaLane>(std::move(*device));
}

void release_caches() noexcept {
  {
    UploadCache& cache = upload_cache();
    const std::lock_guard lock(cache.mutex);  // after a query in flight
    cache.device.reset();
    cache.filter.reset();
  }
  LaneCache& cache = lane_cache();
  const std::lock_guard lock(cache.mutex);
  cache.spare.reset();
}

}  // namespace abf::cuda_engine
