// The CUDA engine's row for a build without CUDA: the table keeps the name,
// and every use says the backend is not compiled in. Registered by
// cuda/CMakeLists.txt, as engine_cuda.cpp's row is in a CUDA build.
#include "abf/backend.hpp"
#include "abf/cuda/controls.hpp"
#include "cuda_engine.hpp"
#include "engine.hpp"

namespace abf {

namespace {
Error not_compiled() {
  return Error{ErrorCode::kBackendUnavailable,
               "the CUDA backend is not compiled into this build (configure with -DABF_CUDA=ON "
               "on a machine with nvcc)"};
}
}  // namespace

namespace detail {

extern const Engine kCudaEngine{
    .name = "cuda",
    .summary = "NVIDIA GPU (not compiled into this build)",
    .kind = EngineKind::kDevice,
    .rank = 2,
    .fallback = false,
    .available = []() noexcept { return false; },
    .detail = [] { return std::string("CUDA backend not compiled in"); },
    .auto_prefers = nullptr,
    .query = [](const Filter&, std::span<const Digest>, std::span<Answer>) -> Result<void> {
      return std::unexpected(not_compiled());
    },
    .open_lane = [](const Scheme&, std::uint64_t*) -> Result<std::unique_ptr<BuildLane>> {
      return std::unexpected(not_compiled());
    },
    .release_caches = []() noexcept {},
};

}  // namespace detail

bool cuda_compiled() { return false; }
std::string cuda_device_description() { return detail::kCudaEngine.detail(); }
Result<double> cuda_copy_bandwidth() { return std::unexpected(not_compiled()); }

}  // namespace abf
