#include "abf/backend.hpp"

#include <cstdlib>
#include <string>

#include "engines.hpp"

namespace abf {

std::string_view to_string(Backend backend) noexcept {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kScalar:
      return "scalar";
    case Backend::kSimd:
      return "simd";
    case Backend::kCuda:
      return "cuda";
  }
  return "unknown";
}

Result<Backend> parse_backend(std::string_view name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "scalar") return Backend::kScalar;
  if (name == "simd") return Backend::kSimd;
  if (name == "cuda") return Backend::kCuda;
  return fail(ErrorCode::kInvalidArgument,
              "unknown backend '" + std::string(name) + "' (expected auto, scalar, simd or cuda)");
}

Result<Backend> resolve_backend(Backend requested, std::size_t batch_size,
                                std::uint64_t query_filter_bytes) {
  if (requested != Backend::kAuto) return requested;
  if (const char* forced = std::getenv("ABF_BACKEND"); forced != nullptr && *forced != '\0') {
    auto parsed = parse_backend(forced);
    if (!parsed) {
      return fail(ErrorCode::kInvalidArgument,
                  "ABF_BACKEND=" + std::string(forced) + ": " + parsed.error().message);
    }
    if (*parsed != Backend::kAuto) return *parsed;
  }
  if (auto_prefers_cuda(batch_size, query_filter_bytes) && cuda_engine::device_present()) {
    return Backend::kCuda;
  }
  return Backend::kSimd;
}

bool backend_available(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
    case Backend::kScalar:
    case Backend::kSimd:
      return true;
    case Backend::kCuda:
      return cuda_engine::device_present();
  }
  return false;
}

std::string simd_target_name() { return simd::target_name(); }
std::vector<std::string> simd_compiled_targets() { return simd::compiled_targets(); }
bool cuda_compiled() { return cuda_engine::compiled(); }
std::string cuda_device_description() { return cuda_engine::device_description(); }

}  // namespace abf
