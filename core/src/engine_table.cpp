// The engine table and the one function that chooses from it (engine.hpp),
// and the public face of both (abf/backend.hpp).
#include <cstdlib>
#include <iterator>
#include <string>

#include "abf/backend.hpp"
#include "abf/version.hpp"
#include "engine.hpp"
#include "kernels.hpp"

namespace abf {

namespace detail {

namespace {

// The registration list: every engine, the reference first. --help lists
// them in this order; an automatic choice asks them from the last (the most
// specialized) to the first.
constexpr const Engine* kEngines[] = {&kScalarEngine, &kSimdEngine, &kCudaEngine};

std::string known_names() {
  std::string names = "auto";
  for (const Engine* engine : kEngines) {
    names += ", ";
    names += engine->name;
  }
  return names;
}

Result<EngineChoice> choose_named(std::string_view name, std::string_view origin) {
  const Engine* engine = find_engine(name);
  if (engine == nullptr) {
    return fail(ErrorCode::kInvalidArgument, std::string(origin) + "unknown backend '" +
                                                 std::string(name) + "' (expected " +
                                                 known_names() + ")");
  }
  if (!engine->available()) {
    return fail(ErrorCode::kBackendUnavailable, std::string(origin) + "backend " +
                                                    std::string(engine->name) +
                                                    " cannot run here: " + engine->detail());
  }
  return EngineChoice{engine, false};
}

}  // namespace

std::span<const Engine* const> engine_table() noexcept { return kEngines; }

const Engine* find_engine(std::string_view name) noexcept {
  for (const Engine* engine : kEngines) {
    if (engine->name == name) return engine;
  }
  return nullptr;
}

const Engine& fallback_engine() noexcept { return kSimdEngine; }

Result<EngineChoice> choose_engine(Backend requested, const Workload& workload) {
  if (!requested.is_auto()) return choose_named(requested.name(), "");
  if (const char* forced = std::getenv("ABF_BACKEND"); forced != nullptr && *forced != '\0') {
    const std::string_view name(forced);
    if (name != "auto") return choose_named(name, "ABF_BACKEND=" + std::string(name) + ": ");
  }
  for (auto it = std::rbegin(kEngines); it != std::rend(kEngines); ++it) {
    const Engine* engine = *it;
    if (engine->auto_prefers != nullptr && engine->auto_prefers(workload) && engine->available()) {
      return EngineChoice{engine, true};
    }
  }
  return EngineChoice{&fallback_engine(), true};
}

}  // namespace detail

std::string_view to_string(Backend backend) noexcept { return backend.name(); }

Result<Backend> Backend::parse(std::string_view name) {
  if (name == "auto") return Backend::kAuto;
  const detail::Engine* engine = detail::find_engine(name);
  if (engine == nullptr) {
    return fail(ErrorCode::kInvalidArgument, "unknown backend '" + std::string(name) +
                                                 "' (expected " + detail::known_names() + ")");
  }
  return Backend(engine->name);
}

Result<Backend> parse_backend(std::string_view name) { return Backend::parse(name); }

std::vector<BackendInfo> list_backends() {
  std::vector<BackendInfo> backends;
  for (const detail::Engine* engine : detail::engine_table()) {
    backends.push_back(BackendInfo{*Backend::parse(engine->name), std::string(engine->summary),
                                   engine->available(), engine->detail()});
  }
  return backends;
}

std::vector<std::string> backend_names() {
  std::vector<std::string> names{"auto"};
  for (const detail::Engine* engine : detail::engine_table()) names.emplace_back(engine->name);
  return names;
}

Result<Backend> resolve_backend(Backend requested, std::size_t batch_size,
                                std::uint64_t query_filter_bytes) {
  auto choice = detail::choose_engine(requested, {batch_size, query_filter_bytes});
  if (!choice) return std::unexpected(choice.error());
  return *Backend::parse(choice->engine->name);
}

bool backend_available(Backend backend) {
  if (backend.is_auto()) return true;
  const detail::Engine* engine = detail::find_engine(backend.name());
  return engine != nullptr && engine->available();
}

std::string simd_target_name() { return simd::target_name(); }
std::vector<std::string> simd_compiled_targets() { return simd::compiled_targets(); }
bool cuda_compiled() { return kCudaCompiled; }
std::string cuda_device_description() { return detail::kCudaEngine.detail(); }

}  // namespace abf
