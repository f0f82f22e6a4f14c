// The CUDA engine behind Backend::kCuda (and kAuto for large batches when a
// device is present): the abf::cuda_engine functions of core/src/engines.hpp,
// on top of DeviceFilter.
#include <mutex>
#include <optional>
#include <utility>

#include "abf/cuda/device_filter.hpp"
#include "engines.hpp"

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

Result<void> insert_batch(std::uint64_t* words, std::uint64_t bit_count, std::uint32_t hash_count,
                          const Digest* digests, std::size_t count) {
  if (auto r = require_device(); !r) return r;
  if (count == 0) return {};
  const Layout layout{bit_count, hash_count};
  // Upload the bits so far, OR the new digests in on the device, bring the
  // bits back: the same words as scalar::insert_batch on the same input.
  auto device = cuda::DeviceFilter::from_words({words, bit_count / 64}, layout);
  if (!device) return std::unexpected(device.error());
  if (auto r = device->insert_host({digests, count}); !r) return r;
  return device->download({words, bit_count / 64});
}

}  // namespace abf::cuda_engine
