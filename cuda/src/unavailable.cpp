// The CUDA engine's entry points for a build without CUDA: the API stays the
// same, every call says the backend is not compiled in.
#include "engines.hpp"

namespace abf::cuda_engine {

namespace {
Error not_compiled() {
  return Error{ErrorCode::kBackendUnavailable,
               "the CUDA backend is not compiled into this build (configure with -DABF_CUDA=ON "
               "on a machine with nvcc)"};
}
}  // namespace

bool compiled() noexcept { return false; }
bool device_present() noexcept { return false; }
std::string device_description() { return "CUDA backend not compiled in"; }

Result<void> query_batch(const Filter&, const Digest*, std::size_t, Answer*) {
  return std::unexpected(not_compiled());
}

Result<std::unique_ptr<DeviceLane>> open_lane(std::uint64_t, std::uint32_t) {
  return std::unexpected(not_compiled());
}

Result<double> copy_bandwidth() { return std::unexpected(not_compiled()); }

void release_caches() noexcept {}

}  // namespace abf::cuda_engine
