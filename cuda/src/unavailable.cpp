// The CUDA engine's row for a build without CUDA: the table keeps the name,
// and every use says the backend is not compiled in.
#include "engine.hpp"
#include "kernels.hpp"

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
    .available = []() noexcept { return false; },
    .detail = [] { return std::string("CUDA backend not compiled in"); },
    .auto_prefers = nullptr,
    .query = [](const Filter&, std::span<const Digest>, std::span<Answer>) -> Result<void> {
      return std::unexpected(not_compiled());
    },
    .insert = nullptr,
    .open_lane = [](const Scheme&, std::uint64_t*) -> Result<std::unique_ptr<BuildLane>> {
      return std::unexpected(not_compiled());
    },
    .release_caches = []() noexcept {},
};

}  // namespace detail

namespace cuda_engine {
Result<double> copy_bandwidth() { return std::unexpected(not_compiled()); }
}  // namespace cuda_engine

}  // namespace abf
