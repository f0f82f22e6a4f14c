// The CUDA backend's host side: device checks, DeviceFilter (device memory,
// staging buffers, streams) and the pipelined host-memory paths. Plain C++23
// against the CUDA runtime API; the kernels are in kernels.cu.
#include "abf/cuda/device_filter.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "cuda_error.hpp"
#include "launch.hpp"

namespace abf::cuda {

namespace detail {

namespace {

std::string version_text(int version) {
  // CUDA encodes 13.0 as 13000.
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

std::string mib(std::size_t bytes) {
  const std::size_t tenths = bytes * 10 / (std::size_t{1} << 20);
  return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " MiB";
}

bool means_unavailable(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorDevicesUnavailable:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorInitializationError:
      return true;
    default:
      return false;
  }
}

}  // namespace

Error cuda_error(cudaError_t status, std::string_view what) {
  std::string message = "CUDA backend: ";
  message += what;
  message += ": ";
  if (status == cudaErrorMemoryAllocation) {
    message += "out of device memory";
  } else if (status == cudaErrorInsufficientDriver) {
    int driver = 0;
    int runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    message += driver == 0 ? std::string("no NVIDIA driver is loaded")
                           : "the NVIDIA driver supports CUDA " + version_text(driver) +
                                 ", older than the CUDA runtime " + version_text(runtime) +
                                 " this build uses; update the driver";
  } else if (status == cudaErrorNoKernelImageForDevice) {
    message += "no code for this device in the build (it has sm_80 and sm_90 code, sm_90 PTX)";
  } else {
    message += cudaGetErrorString(status);
  }
  message += " (";
  message += cudaGetErrorName(status);
  message += ")";
  return Error{means_unavailable(status) ? ErrorCode::kBackendUnavailable : ErrorCode::kCuda,
               std::move(message)};
}

Result<void> check(cudaError_t status, std::string_view what) {
  if (status == cudaSuccess) return {};
  return std::unexpected(cuda_error(status, what));
}

DeviceGuard::DeviceGuard(int device) {
  if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
  if (previous_ == device) {
    previous_ = -1;
    return;
  }
  status_ = cudaSetDevice(device);
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) (void)cudaSetDevice(previous_);
}

}  // namespace detail

using detail::check;

// --- Devices ---------------------------------------------------------------

std::string DeviceInfo::describe() const {
  const std::size_t tenths_gib = total_memory * 10 / (std::size_t{1} << 30);
  return name + " (device " + std::to_string(ordinal) + ", sm_" + std::to_string(major) +
         std::to_string(minor) + ", " + std::to_string(sm_count) + " SMs, " +
         std::to_string(tenths_gib / 10) + "." + std::to_string(tenths_gib % 10) + " GiB, driver " +
         detail::version_text(driver_version) + ", runtime " +
         detail::version_text(runtime_version) + ")";
}

Result<DeviceInfo> current_device() {
  DeviceInfo info;
  (void)cudaDriverGetVersion(&info.driver_version);
  (void)cudaRuntimeGetVersion(&info.runtime_version);
  int count = 0;
  if (const cudaError_t status = cudaGetDeviceCount(&count); status != cudaSuccess) {
    Error error = detail::cuda_error(status, "looking for a CUDA device (cudaGetDeviceCount)");
    error.code = ErrorCode::kBackendUnavailable;
    return std::unexpected(std::move(error));
  }
  if (count == 0) {
    return fail(ErrorCode::kBackendUnavailable,
                "CUDA backend: no CUDA device found (cudaGetDeviceCount returned 0)");
  }
  if (auto r = check(cudaGetDevice(&info.ordinal), "cudaGetDevice"); !r) {
    return std::unexpected(r.error());
  }
  const std::string where = " of device " + std::to_string(info.ordinal);
  auto attribute = [&](cudaDeviceAttr which, int& value, const char* name) {
    return check(cudaDeviceGetAttribute(&value, which, info.ordinal),
                 std::string("cudaDeviceGetAttribute(") + name + ")" + where);
  };
  if (auto r = attribute(cudaDevAttrComputeCapabilityMajor, info.major, "major"); !r) {
    return std::unexpected(r.error());
  }
  if (auto r = attribute(cudaDevAttrComputeCapabilityMinor, info.minor, "minor"); !r) {
    return std::unexpected(r.error());
  }
  if (auto r = attribute(cudaDevAttrMultiProcessorCount, info.sm_count, "sm count"); !r) {
    return std::unexpected(r.error());
  }
  cudaDeviceProp props{};
  if (auto r =
          check(cudaGetDeviceProperties(&props, info.ordinal), "cudaGetDeviceProperties" + where);
      !r) {
    return std::unexpected(r.error());
  }
  info.name = props.name;
  info.total_memory = props.totalGlobalMem;
  if (info.major < 8) {
    return fail(ErrorCode::kBackendUnavailable,
                "CUDA backend: " + info.describe() +
                    " is older than sm_80; this build has sm_80 and sm_90 code and sm_90 PTX");
  }
  return info;
}

// --- Raw-view launches -------------------------------------------------------

namespace {

const std::uint8_t* bytes_of(const Digest* digests) {
  return reinterpret_cast<const std::uint8_t*>(digests);
}
std::uint8_t* bytes_of(Answer* answers) { return reinterpret_cast<std::uint8_t*>(answers); }

Result<int> sm_count_of_current() {
  int device = 0;
  if (auto r = check(cudaGetDevice(&device), "cudaGetDevice"); !r)
    return std::unexpected(r.error());
  int sm_count = 0;
  if (auto r = check(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device),
                     "cudaDeviceGetAttribute(sm count)");
      !r) {
    return std::unexpected(r.error());
  }
  return sm_count;
}

std::string launch_what(const char* kernel, std::size_t count) {
  return std::string("launching the ") + kernel + " kernel for " + std::to_string(count) +
         " digests";
}

}  // namespace

Result<void> query_async(const DeviceFilterView& view, const Digest* device_digests,
                         std::size_t count, Answer* device_answers, cudaStream_t stream) {
  if (count == 0) return {};
  auto sm_count = sm_count_of_current();
  if (!sm_count) return std::unexpected(sm_count.error());
  return check(detail::launch_query(view, bytes_of(device_digests), count, bytes_of(device_answers),
                                    *sm_count, stream),
               launch_what("query", count));
}

Result<void> insert_async(const DeviceBuildView& view, const Digest* device_digests,
                          std::size_t count, cudaStream_t stream) {
  if (count == 0) return {};
  auto sm_count = sm_count_of_current();
  if (!sm_count) return std::unexpected(sm_count.error());
  return check(detail::launch_insert(view, bytes_of(device_digests), count, *sm_count, stream),
               launch_what("insert", count));
}

// --- DeviceFilter ------------------------------------------------------------

namespace {

// Digests per pipeline chunk: 16 MiB of digests. At ~50 GB/s a chunk's
// copy takes ~0.3 ms, far above the ~10 us of a launch and a stream sync.
constexpr std::size_t kChunkDigests = std::size_t{1} << 19;
constexpr std::size_t kStreams = 4;

// One stream of the pipeline and the buffers it owns.
struct Slot {
  cudaStream_t stream = nullptr;
  Digest* pinned_in = nullptr;
  Answer* pinned_out = nullptr;
  Digest* device_in = nullptr;
  Answer* device_out = nullptr;
  // The chunk in flight, if any.
  bool busy = false;
  std::size_t offset = 0;
  std::size_t count = 0;
  bool staged_out = false;  // answers land in pinned_out, to copy to the caller
};

// Runs body(begin, end) over [0, bytes) in 1 MiB pieces on the cores of the
// current TBB arena (on this thread alone below 2 MiB).
template <class Body>
void over_pieces(std::size_t bytes, const Body& body) {
  constexpr std::size_t kPiece = std::size_t{1} << 20;
  if (bytes < 2 * kPiece) {
    body(std::size_t{0}, bytes);
    return;
  }
  // Isolated: a thread waiting in this loop must not pick up an outer task
  // (another pipeline, say) and leave this one's streams idle behind it.
  tbb::this_task_arena::isolate([&] {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(0, (bytes + kPiece - 1) / kPiece),
                      [&](const tbb::blocked_range<std::size_t>& pieces) {
                        body(pieces.begin() * kPiece, std::min(bytes, pieces.end() * kPiece));
                      });
  });
}

// Copies pageable memory into a pinned staging buffer. One core copies about
// 6-15 GB/s, well under a PCIe 5 x16 link's ~55 GB/s (measured on an H200
// machine), so large chunks are split over the cores of the current arena.
void stage(void* to, const void* from, std::size_t bytes) {
  over_pieces(bytes, [&](std::size_t begin, std::size_t end) {
    std::memcpy(static_cast<std::uint8_t*>(to) + begin,
                static_cast<const std::uint8_t*>(from) + begin, end - begin);
  });
}

// to[i] |= from[i] for `count` words, over the cores likewise.
void or_words(std::uint64_t* to, const std::uint64_t* from, std::size_t count) {
  over_pieces(count * sizeof(std::uint64_t), [&](std::size_t begin, std::size_t end) {
    for (std::size_t w = begin / sizeof(std::uint64_t); w < end / sizeof(std::uint64_t); ++w) {
      to[w] |= from[w];
    }
  });
}

enum class HostMemory { kPageable, kPinned, kDevice };

HostMemory kind_of(const void* pointer) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    (void)cudaGetLastError();  // older runtimes flag unregistered memory
    return HostMemory::kPageable;
  }
  switch (attributes.type) {
    case cudaMemoryTypeHost:
      return HostMemory::kPinned;
    case cudaMemoryTypeDevice:
      return HostMemory::kDevice;
    default:  // unregistered; managed memory is staged like pageable
      return HostMemory::kPageable;
  }
}

// One pipeline's streams and buffers: kStreams slots, each with pinned and
// device buffers for one chunk, on one device.
struct Staging {
  int device = 0;
  std::size_t chunk_capacity = 0;
  std::array<Slot, kStreams> slots{};

  explicit Staging(int on_device) : device(on_device) {}
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;

  ~Staging() {
    detail::DeviceGuard guard(device);
    release();
  }

  void release() {
    for (Slot& slot : slots) {
      if (slot.stream != nullptr) (void)cudaStreamSynchronize(slot.stream);
      if (slot.pinned_in != nullptr) (void)cudaFreeHost(slot.pinned_in);
      if (slot.pinned_out != nullptr) (void)cudaFreeHost(slot.pinned_out);
      if (slot.device_in != nullptr) (void)cudaFree(slot.device_in);
      if (slot.device_out != nullptr) (void)cudaFree(slot.device_out);
      if (slot.stream != nullptr) (void)cudaStreamDestroy(slot.stream);
      slot = Slot{};
    }
    chunk_capacity = 0;
  }

  // Buffers for chunks of min(count, kChunkDigests) digests (rounded up to
  // 4096, so a run of small batches does not reallocate every time).
  Result<void> ensure(std::size_t count) {
    const std::size_t wanted =
        std::min(kChunkDigests, (std::max<std::size_t>(count, 1) + 4095) / 4096 * 4096);
    if (chunk_capacity >= wanted) return {};
    release();
    const std::size_t in_bytes = wanted * sizeof(Digest);
    const std::size_t out_bytes = wanted * sizeof(Answer);
    for (std::size_t s = 0; s < kStreams; ++s) {
      Slot& slot = slots[s];
      const std::string which = " for pipeline stream " + std::to_string(s);
      Result<void> r = check(cudaStreamCreateWithFlags(&slot.stream, cudaStreamNonBlocking),
                             "cudaStreamCreate" + which);
      if (r)
        r = check(cudaHostAlloc(reinterpret_cast<void**>(&slot.pinned_in), in_bytes,
                                cudaHostAllocDefault),
                  "cudaHostAlloc (" + detail::mib(in_bytes) + " of pinned digests" + which + ")");
      if (r)
        r = check(cudaHostAlloc(reinterpret_cast<void**>(&slot.pinned_out), out_bytes,
                                cudaHostAllocDefault),
                  "cudaHostAlloc (" + detail::mib(out_bytes) + " of pinned answers" + which + ")");
      if (r)
        r = check(cudaMalloc(reinterpret_cast<void**>(&slot.device_in), in_bytes),
                  "cudaMalloc (" + detail::mib(in_bytes) + " of device digests" + which + ")");
      if (r)
        r = check(cudaMalloc(reinterpret_cast<void**>(&slot.device_out), out_bytes),
                  "cudaMalloc (" + detail::mib(out_bytes) + " of device answers" + which + ")");
      if (!r) {
        release();
        return r;
      }
    }
    chunk_capacity = wanted;
    return {};
  }

  // Waits for a slot's chunk; copies its staged answers to the caller.
  Result<void> drain(Slot& slot, Answer* answers) {
    if (!slot.busy) return {};
    slot.busy = false;
    if (auto r = check(cudaStreamSynchronize(slot.stream),
                       "waiting for the chunk of " + std::to_string(slot.count) + " digests at " +
                           std::to_string(slot.offset));
        !r) {
      return r;
    }
    if (slot.staged_out) {
      std::memcpy(answers + slot.offset, slot.pinned_out, slot.count * sizeof(Answer));
    }
    return {};
  }

  // After a failure: let every copy into the caller's memory finish before
  // returning, so nothing writes to it afterwards.
  void abandon() {
    for (Slot& slot : slots) {
      if (slot.busy) (void)cudaStreamSynchronize(slot.stream);
      slot.busy = false;
    }
  }
};

// The staging sets no call is using, kept for the next host-memory call on
// their device. A call borrows one for its length (BorrowedStaging), so
// calls running at once, on one filter or on several, each have their own,
// and the pool holds as many sets as calls ever ran at once, not one per
// filter: a process querying many filters on the GPU, each with its own
// device copy, pins no more host memory for it. Leaked on purpose, like the
// engine's caches: freeing CUDA memory from a static destructor races the
// runtime's own teardown.
struct StagingPool {
  std::mutex mutex;
  std::vector<std::unique_ptr<Staging>> idle;
};

StagingPool& staging_pool() {
  static auto* pool = new StagingPool;
  return *pool;
}

class BorrowedStaging {
 public:
  // The set of `device` returned last (its buffers are the likeliest to be
  // large enough already), or a new, empty one.
  explicit BorrowedStaging(int device) {
    StagingPool& pool = staging_pool();
    {
      std::lock_guard lock(pool.mutex);
      for (std::size_t i = pool.idle.size(); i-- > 0;) {
        if (pool.idle[i]->device == device) {
          staging_ = std::move(pool.idle[i]);
          pool.idle.erase(pool.idle.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      }
    }
    if (!staging_) staging_ = std::make_unique<Staging>(device);
  }
  ~BorrowedStaging() {
    StagingPool& pool = staging_pool();
    std::lock_guard lock(pool.mutex);
    pool.idle.push_back(std::move(staging_));
  }
  BorrowedStaging(const BorrowedStaging&) = delete;
  BorrowedStaging& operator=(const BorrowedStaging&) = delete;

  Staging& operator*() const noexcept { return *staging_; }
  Staging* operator->() const noexcept { return staging_.get(); }

 private:
  std::unique_ptr<Staging> staging_;
};

}  // namespace

void release_idle_staging() noexcept {
  std::vector<std::unique_ptr<Staging>> idle;
  {
    StagingPool& pool = staging_pool();
    std::lock_guard lock(pool.mutex);
    idle.swap(pool.idle);
  }
  // Freed outside the lock: each waits for its streams.
}

struct DeviceFilter::Impl {
  int device = 0;
  int sm_count = 0;
  Scheme scheme;
  std::uint64_t* words = nullptr;  // device memory, bit_count / 8 bytes

  Impl() = default;
  Impl(const Impl&) = delete;
  Impl& operator=(const Impl&) = delete;

  ~Impl() {
    detail::DeviceGuard guard(device);
    if (words != nullptr) (void)cudaFree(words);
  }

  std::size_t bytes() const { return scheme.bit_count() / 8; }
  std::size_t word_count() const { return scheme.bit_count() / 64; }

  // host_words |= the device bitset, a staging buffer's worth per chunk:
  // the copy of one chunk overlaps the OR of the one before.
  Result<void> or_into_host(std::uint64_t* host_words) const {
    BorrowedStaging staging(device);
    if (auto r = staging->ensure(kChunkDigests); !r) return r;
    auto& slots = staging->slots;
    const std::size_t chunk_words =
        staging->chunk_capacity * sizeof(Digest) / sizeof(std::uint64_t);
    const std::size_t total = word_count();
    auto finish = [&](Slot& slot) -> Result<void> {
      if (!slot.busy) return {};
      slot.busy = false;
      if (auto r = check(cudaStreamSynchronize(slot.stream),
                         "downloading bitset words " + std::to_string(slot.offset) + ".." +
                             std::to_string(slot.offset + slot.count));
          !r) {
        return r;
      }
      or_words(host_words + slot.offset, reinterpret_cast<const std::uint64_t*>(slot.pinned_in),
               slot.count);
      return {};
    };
    std::size_t next = 0;
    Result<void> r;
    for (std::size_t offset = 0; r && offset < total; offset += chunk_words) {
      Slot& slot = slots[next++ % kStreams];
      r = finish(slot);
      const std::size_t n = std::min(chunk_words, total - offset);
      if (r) {
        r = check(cudaMemcpyAsync(slot.pinned_in, words + offset, n * sizeof(std::uint64_t),
                                  cudaMemcpyDeviceToHost, slot.stream),
                  "downloading bitset words " + std::to_string(offset) + ".." +
                      std::to_string(offset + n));
      }
      if (r) {
        slot.busy = true;
        slot.offset = offset;
        slot.count = n;
      }
    }
    for (std::size_t s = 0; r && s < kStreams; ++s) r = finish(slots[(next + s) % kStreams]);
    if (!r) staging->abandon();
    return r;
  }

  // The pipeline: query (answers != nullptr) or insert (answers == nullptr).
  Result<void> run_host(const Digest* digests, std::size_t count, Answer* answers) const {
    if (count == 0) return {};
    const HostMemory in_kind = kind_of(digests);
    const HostMemory out_kind = answers != nullptr ? kind_of(answers) : HostMemory::kPinned;
    if (in_kind == HostMemory::kDevice || out_kind == HostMemory::kDevice) {
      return fail(ErrorCode::kInvalidArgument,
                  "CUDA backend: the host-memory query got a device pointer; use "
                  "query_device / insert_device for device-resident digests");
    }
    BorrowedStaging staging(device);
    if (auto r = staging->ensure(count); !r) return r;
    auto& slots = staging->slots;
    const std::size_t chunk_capacity = staging->chunk_capacity;
    const DeviceFilterView query_view = cuda::make_view(words, scheme.probe());
    const DeviceBuildView build_view = cuda::make_build_view(words, scheme.probe());
    std::size_t next = 0;
    for (std::size_t offset = 0; offset < count; offset += chunk_capacity) {
      Slot& slot = slots[next++ % kStreams];
      const std::size_t n = std::min(chunk_capacity, count - offset);
      const std::string where =
          " (chunk of " + std::to_string(n) + " digests at " + std::to_string(offset) + ")";
      Result<void> r = staging->drain(slot, answers);
      const Digest* source = digests + offset;
      if (r && in_kind == HostMemory::kPageable) {
        stage(slot.pinned_in, source, n * sizeof(Digest));
        source = slot.pinned_in;
      }
      if (r)
        r = check(cudaMemcpyAsync(slot.device_in, source, n * sizeof(Digest),
                                  cudaMemcpyHostToDevice, slot.stream),
                  "copying digests to the device" + where);
      if (r) {
        r = check(answers != nullptr
                      ? detail::launch_query(query_view, bytes_of(slot.device_in), n,
                                             bytes_of(slot.device_out), sm_count, slot.stream)
                      : detail::launch_insert(build_view, bytes_of(slot.device_in), n, sm_count,
                                              slot.stream),
                  std::string("launching the ") + (answers != nullptr ? "query" : "insert") +
                      " kernel" + where);
      }
      if (r && answers != nullptr) {
        Answer* target = out_kind == HostMemory::kPinned ? answers + offset : slot.pinned_out;
        r = check(cudaMemcpyAsync(target, slot.device_out, n * sizeof(Answer),
                                  cudaMemcpyDeviceToHost, slot.stream),
                  "copying answers to the host" + where);
      }
      if (!r) {
        staging->abandon();
        return r;
      }
      slot.busy = true;
      slot.offset = offset;
      slot.count = n;
      slot.staged_out = answers != nullptr && out_kind == HostMemory::kPageable;
    }
    Result<void> result;
    for (Slot& slot : slots) {
      if (auto r = staging->drain(slot, answers); !r && result) result = r;
    }
    if (!result) staging->abandon();
    return result;
  }
};

DeviceFilter::DeviceFilter(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
DeviceFilter::DeviceFilter(DeviceFilter&&) noexcept = default;
DeviceFilter& DeviceFilter::operator=(DeviceFilter&&) noexcept = default;
DeviceFilter::~DeviceFilter() = default;

namespace {

// A scheme made by Scheme's factories has a valid layout; this catches the
// empty, default-constructed one (m = 0).
Result<void> check_scheme(const Scheme& scheme) {
  if (auto fault = describe_layout_fault(scheme.layout(), scheme.protocol()); !fault.empty()) {
    return fail(ErrorCode::kInvalidArgument, "CUDA backend: " + fault);
  }
  return {};
}

Result<Scheme> unkeyed_scheme(const Layout& layout) {
  auto scheme = Scheme::unkeyed(layout);
  if (!scheme) {
    return fail(ErrorCode::kInvalidArgument, "CUDA backend: " + scheme.error().message);
  }
  return scheme;
}

}  // namespace

Result<DeviceFilter> DeviceFilter::create(const Scheme& scheme) {
  if (auto r = check_scheme(scheme); !r) return std::unexpected(r.error());
  auto info = current_device();
  if (!info) return std::unexpected(info.error());
  auto impl = std::make_unique<Impl>();
  impl->device = info->ordinal;
  impl->sm_count = info->sm_count;
  impl->scheme = scheme;
  const std::size_t bytes = impl->bytes();
  if (auto r = check(
          cudaMalloc(reinterpret_cast<void**>(&impl->words), bytes),
          "cudaMalloc (" + detail::mib(bytes) + " filter bitset on " + info->describe() + ")");
      !r) {
    return std::unexpected(r.error());
  }
  if (auto r = check(cudaMemset(impl->words, 0, bytes), "clearing the device bitset"); !r) {
    return std::unexpected(r.error());
  }
  return DeviceFilter(std::move(impl));
}

Result<DeviceFilter> DeviceFilter::create(const Layout& layout) {
  auto scheme = unkeyed_scheme(layout);
  if (!scheme) return std::unexpected(scheme.error());
  return create(*scheme);
}

Result<DeviceFilter> DeviceFilter::from_words(std::span<const std::uint64_t> words,
                                              const Scheme& scheme) {
  if (auto r = check_scheme(scheme); !r) return std::unexpected(r.error());
  if (words.size() != scheme.bit_count() / 64) {
    return fail(ErrorCode::kInvalidArgument,
                "CUDA backend: bitset of " + std::to_string(words.size()) +
                    " words for m = " + std::to_string(scheme.bit_count()) + " (needs m / 64)");
  }
  auto filter = create(scheme);
  if (!filter) return filter;
  if (auto r = check(cudaMemcpy(filter->impl_->words, words.data(), filter->impl_->bytes(),
                                cudaMemcpyHostToDevice),
                     "uploading the bitset (" + detail::mib(filter->impl_->bytes()) + ")");
      !r) {
    return std::unexpected(r.error());
  }
  return filter;
}

Result<DeviceFilter> DeviceFilter::from_words(std::span<const std::uint64_t> words,
                                              const Layout& layout) {
  auto scheme = unkeyed_scheme(layout);
  if (!scheme) return std::unexpected(scheme.error());
  return from_words(words, *scheme);
}

Result<DeviceFilter> DeviceFilter::upload(const Filter& filter) {
  return from_words(filter.words(), filter.scheme());
}

DeviceFilterView DeviceFilter::view() const noexcept {
  return cuda::make_view(impl_->words, impl_->scheme.probe());
}
DeviceBuildView DeviceFilter::build_view() noexcept {
  return cuda::make_build_view(impl_->words, impl_->scheme.probe());
}
const Scheme& DeviceFilter::scheme() const noexcept { return impl_->scheme; }
Layout DeviceFilter::layout() const noexcept { return impl_->scheme.layout(); }
int DeviceFilter::device() const noexcept { return impl_->device; }
const std::uint64_t* DeviceFilter::device_words() const noexcept { return impl_->words; }

Result<void> DeviceFilter::query_device_async(const Digest* device_digests, std::size_t count,
                                              Answer* device_answers, cudaStream_t stream) const {
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return check(detail::launch_query(view(), bytes_of(device_digests), count,
                                    bytes_of(device_answers), impl_->sm_count, stream),
               launch_what("query", count));
}

Result<void> DeviceFilter::query_device(const Digest* device_digests, std::size_t count,
                                        Answer* device_answers) const {
  if (auto r = query_device_async(device_digests, count, device_answers, nullptr); !r) return r;
  detail::DeviceGuard guard(impl_->device);
  return check(cudaStreamSynchronize(nullptr), "waiting for the query kernel");
}

Result<void> DeviceFilter::insert_device_async(const Digest* device_digests, std::size_t count,
                                               cudaStream_t stream) {
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return check(
      detail::launch_insert(build_view(), bytes_of(device_digests), count, impl_->sm_count, stream),
      launch_what("insert", count));
}

Result<void> DeviceFilter::insert_device(const Digest* device_digests, std::size_t count) {
  if (auto r = insert_device_async(device_digests, count, nullptr); !r) return r;
  detail::DeviceGuard guard(impl_->device);
  return check(cudaStreamSynchronize(nullptr), "waiting for the insert kernel");
}

Result<void> DeviceFilter::query_host(std::span<const Digest> digests,
                                      std::span<Answer> answers) const {
  if (answers.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "CUDA backend: " + std::to_string(answers.size()) +
                                                 " answer slots for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return impl_->run_host(digests.data(), digests.size(), answers.data());
}

Result<void> DeviceFilter::query_host_async(std::span<const Digest> digests,
                                            std::span<Answer> answers, cudaStream_t stream) const {
  if (answers.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "CUDA backend: " + std::to_string(answers.size()) +
                                                 " answer slots for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  const std::size_t count = digests.size();
  if (count == 0) return {};
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  // One scratch block: digests, then answers.
  const std::size_t in_bytes = count * sizeof(Digest);
  const std::size_t bytes = in_bytes + count * sizeof(Answer);
  void* scratch = nullptr;
  if (auto r = check(cudaMallocAsync(&scratch, bytes, stream),
                     "cudaMallocAsync (" + detail::mib(bytes) + " of query scratch)");
      !r) {
    return r;
  }
  auto* device_in = static_cast<Digest*>(scratch);
  auto* device_out = reinterpret_cast<Answer*>(static_cast<std::uint8_t*>(scratch) + in_bytes);
  Result<void> r =
      check(cudaMemcpyAsync(device_in, digests.data(), in_bytes, cudaMemcpyHostToDevice, stream),
            "copying " + std::to_string(count) + " digests to the device");
  if (r) {
    r = check(detail::launch_query(view(), bytes_of(device_in), count, bytes_of(device_out),
                                   impl_->sm_count, stream),
              launch_what("query", count));
  }
  if (r) {
    r = check(cudaMemcpyAsync(answers.data(), device_out, count * sizeof(Answer),
                              cudaMemcpyDeviceToHost, stream),
              "copying " + std::to_string(count) + " answers to the host");
  }
  // Freed in stream order, after whatever was enqueued above.
  const Result<void> freed = check(cudaFreeAsync(scratch, stream), "cudaFreeAsync (query scratch)");
  if (!r) return r;
  return freed;
}

Result<void> DeviceFilter::insert_host(std::span<const Digest> digests) {
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return impl_->run_host(digests.data(), digests.size(), nullptr);
}

Result<void> DeviceFilter::download(std::span<std::uint64_t> words) const {
  if (words.size() != impl_->word_count()) {
    return fail(ErrorCode::kInvalidArgument,
                "CUDA backend: download into " + std::to_string(words.size()) +
                    " words, the bitset has " + std::to_string(impl_->word_count()));
  }
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return check(cudaMemcpy(words.data(), impl_->words, impl_->bytes(), cudaMemcpyDeviceToHost),
               "downloading the bitset (" + detail::mib(impl_->bytes()) + ")");
}

Result<void> DeviceFilter::clear() {
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return check(cudaMemset(impl_->words, 0, impl_->bytes()), "clearing the device bitset");
}

Result<void> DeviceFilter::or_into(std::span<std::uint64_t> words) const {
  if (words.size() != impl_->word_count()) {
    return fail(ErrorCode::kInvalidArgument,
                "CUDA backend: OR into " + std::to_string(words.size()) +
                    " words, the bitset has " + std::to_string(impl_->word_count()));
  }
  detail::DeviceGuard guard(impl_->device);
  if (auto r = guard.check(); !r) return r;
  return impl_->or_into_host(words.data());
}

Result<std::vector<std::uint64_t>> DeviceFilter::download() const {
  std::vector<std::uint64_t> words(impl_->word_count());
  if (auto r = download(words); !r) return std::unexpected(r.error());
  return words;
}

}  // namespace abf::cuda
