// The host API of the CUDA backend: a filter uploaded once to device memory
// (owned by a RAII DeviceFilter), queried or built from device-resident
// digests (`*_async(stream)` and synchronous forms) or from host memory
// through a pipelined path (pinned staging buffers, chunks on several streams
// overlapping copy-in, kernel and copy-out).
//
// Only in a build with the CUDA backend (ABF_CUDA=ON, or AUTO with nvcc
// found); `abf::cuda_compiled()` (abf/cuda/controls.hpp) says whether this one
// has it. Include this header from host C++23 code. It uses std::expected,
// which nvcc 13 (C++20 at most) can only parse when the host compiler runs
// in C++23: the abf target passes `-Xcompiler=-std=c++23` to the .cu files
// of targets linking it. A kernel that only needs the view includes
// abf/cuda/view.hpp, which works in any dialect.
//
// Every CUDA call is checked. Failures come back as abf::Error:
//   kBackendUnavailable  no device, a driver older than the runtime, a device
//                        older than sm_80 (the build has sm_80 and sm_90 code
//                        plus sm_90 PTX)
//   kCuda                any other CUDA failure (out of device memory, a
//                        failed copy or launch), naming the call and sizes
//   kInvalidArgument     a bad layout or an empty scheme, spans of different
//                        lengths, device memory where host memory was
//                        expected
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "abf/cuda/view.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "abf/scheme.hpp"

namespace abf::cuda {

// The device the backend would use: the calling thread's current device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;  // "NVIDIA H200"
  int major = 0;     // compute capability, e.g. 9.0
  int minor = 0;
  int sm_count = 0;              // multiprocessors
  std::size_t total_memory = 0;  // bytes
  int driver_version = 0;        // cudaDriverGetVersion, e.g. 13000
  int runtime_version = 0;       // cudaRuntimeGetVersion of the runtime linked in

  // "NVIDIA H200 (device 0, sm_90, 132 SMs, 139.8 GiB, driver 13.0, runtime 13.0)".
  std::string describe() const;
};

// The current device, checked usable: a driver and a device are present and
// the device runs sm_80 code or newer. kBackendUnavailable says why not.
Result<DeviceInfo> current_device();

// Launches the query kernel over device memory: device_answers[i] for
// device_digests[i] (kMaybe / kDefinitelyNot), under the view's protocol.
// Asynchronous in `stream`; the view's bitset must stay unchanged until the
// kernel has run. Any alignment works; 16-byte aligned digests are read with
// 128-bit loads (one for protocol 1, which reads bytes 0..16; two for
// protocol 2, which hashes all 32).
Result<void> query_async(const DeviceFilterView& view, const Digest* device_digests,
                         std::size_t count, Answer* device_answers, cudaStream_t stream);

// Launches the build kernel: atomic ORs of the digests' bits into the view's
// bitset. The bits are the same as the scalar build's, in any order.
Result<void> insert_async(const DeviceBuildView& view, const Digest* device_digests,
                          std::size_t count, cudaStream_t stream);

// A filter's bitset in device memory, on the device current when it was
// made, and the scheme its bits are placed by (layout, protocol, key).
// Move-only; frees its device memory when destroyed. Methods may be called
// from any thread, at once: each host-memory call borrows its own staging
// (below) for its length.
class DeviceFilter {
 public:
  // Uploads a filter's bits (m / 8 bytes) once; the copy keeps the filter's
  // scheme, so it answers as the filter does under either protocol.
  static Result<DeviceFilter> upload(const Filter& filter);
  // An empty (all zero) bitset of this scheme, to build into. An empty
  // (default-constructed) scheme is kInvalidArgument.
  static Result<DeviceFilter> create(const Scheme& scheme);
  // Uploads a bitset of this scheme; `words` must hold bit_count / 64 words.
  static Result<DeviceFilter> from_words(std::span<const std::uint64_t> words,
                                         const Scheme& scheme);
  // Protocol 1 (unkeyed) conveniences: Scheme::unkeyed(layout), whose
  // layout errors (kInvalidArgument) they return.
  static Result<DeviceFilter> create(const Layout& layout);
  static Result<DeviceFilter> from_words(std::span<const std::uint64_t> words,
                                         const Layout& layout);

  DeviceFilter(DeviceFilter&&) noexcept;
  DeviceFilter& operator=(DeviceFilter&&) noexcept;
  DeviceFilter(const DeviceFilter&) = delete;
  DeviceFilter& operator=(const DeviceFilter&) = delete;
  ~DeviceFilter();

  // What a kernel needs, by value: valid while this object lives.
  DeviceFilterView view() const noexcept;
  DeviceBuildView build_view() noexcept;
  const Scheme& scheme() const noexcept;
  Layout layout() const noexcept;  // scheme().layout()
  int device() const noexcept;     // the CUDA ordinal the bitset lives on
  const std::uint64_t* device_words() const noexcept;

  // --- Digests and answers in device memory ---------------------------------
  // Asynchronous in `stream` (errors of the launch itself are returned; a
  // fault while the kernel runs shows at the next synchronization).
  Result<void> query_device_async(const Digest* device_digests, std::size_t count,
                                  Answer* device_answers, cudaStream_t stream) const;
  // The same, then waits for it.
  Result<void> query_device(const Digest* device_digests, std::size_t count,
                            Answer* device_answers) const;
  Result<void> insert_device_async(const Digest* device_digests, std::size_t count,
                                   cudaStream_t stream);
  Result<void> insert_device(const Digest* device_digests, std::size_t count);

  // --- Digests and answers in host memory -----------------------------------
  // Pipelined: chunks of up to 2^19 digests (16 MiB) go round four streams, so
  // the copy-in of one chunk, the kernel of another and the copy-out of a
  // third overlap. The streams and their buffers are a staging set borrowed
  // from a process-wide pool for the call and returned after it (see
  // release_idle_staging). Pageable memory is staged through pinned buffers;
  // memory already pinned (cudaHostAlloc, cudaHostRegister) is copied
  // directly, which is the fastest path. `answers` must be as long as `digests`.
  // Returns when every answer is written.
  Result<void> query_host(std::span<const Digest> digests, std::span<Answer> answers) const;
  // One copy-in, kernel and copy-out in `stream`, device scratch from the
  // stream-ordered allocator. Both spans should be pinned host memory (with
  // pageable memory the copies block) and must stay alive until the stream
  // has finished.
  Result<void> query_host_async(std::span<const Digest> digests, std::span<Answer> answers,
                                cudaStream_t stream) const;
  // Inserts host digests (the build kernel), pipelined like query_host.
  Result<void> insert_host(std::span<const Digest> digests);

  // Sets every bit to zero, to build anew in the same memory.
  Result<void> clear();

  // --- Back to the host -----------------------------------------------------
  // Copies the bitset into `words` (bit_count / 64 words).
  Result<void> download(std::span<std::uint64_t> words) const;
  Result<std::vector<std::uint64_t>> download() const;
  // words[i] |= the bitset's word i (bit_count / 64 words): joins a build on
  // the GPU with bits set elsewhere. Pipelined through the pinned staging
  // buffers, so it runs at the copy's speed and needs no bitset-sized
  // buffer on the host.
  Result<void> or_into(std::span<std::uint64_t> words) const;

 private:
  struct Impl;
  explicit DeviceFilter(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

// The host-memory paths (query_host, insert_host, or_into) borrow a staging
// set (four streams, each with pinned and device buffers for one chunk: up to
// 66 MiB pinned and 66 MiB of device memory) from a process-wide pool and
// give it back when they return, so the pool holds as many sets as such calls
// ever ran at once, whatever the number of filters. This frees the sets no
// call is using now; abf::release_cached_buffers() calls it. Thread-safe.
void release_idle_staging() noexcept;

}  // namespace abf::cuda
