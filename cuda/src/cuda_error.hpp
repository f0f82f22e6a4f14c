// Internal: CUDA runtime errors as abf::Error, and a scoped device switch.
#pragma once

#include <string_view>

#include <cuda_runtime_api.h>

#include "abf/error.hpp"

namespace abf::cuda::detail {

// "CUDA backend: <what>: <description> (<cudaErrorName>)". The code is
// kBackendUnavailable where the status means the backend cannot run here at
// all (no device or driver, a driver older than the runtime, no code for the
// device), kCuda otherwise (out of memory, a failed copy or launch).
Error cuda_error(cudaError_t status, std::string_view what);

// Success, or cuda_error(status, what).
Result<void> check(cudaError_t status, std::string_view what);

// Makes `device` current for a scope and restores the previous one after.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

  // Whether switching worked.
  Result<void> check() const { return detail::check(status_, "cudaSetDevice"); }

 private:
  int previous_ = -1;
  cudaError_t status_ = cudaSuccess;
};

}  // namespace abf::cuda::detail
