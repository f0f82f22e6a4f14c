// The engine table and the one function that chooses from it (engine.hpp),
// and the public face of both (abf/backend.hpp). The rows come from the
// engine folders (registered_engines, generated); no engine is named here.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "abf/backend.hpp"
#include "engine.hpp"

namespace abf {

namespace detail {

namespace {

// The registered rows by ascending rank, checked once: ranks unique, one
// fallback row. A violation is a mistake in an engine's row, found by the
// first use of the table in any test.
struct Table {
  std::vector<const Engine*> rows;
  const Engine* fallback = nullptr;
};

const Table& table() {
  static const Table sorted = [] {
    Table t;
    const auto registered = registered_engines();
    t.rows.assign(registered.begin(), registered.end());
    std::sort(t.rows.begin(), t.rows.end(),
              [](const Engine* a, const Engine* b) { return a->rank < b->rank; });
    for (std::size_t i = 0; i < t.rows.size(); ++i) {
      const Engine* row = t.rows[i];
      const bool duplicate = i > 0 && t.rows[i - 1]->rank == row->rank;
      const bool second_fallback = row->fallback && t.fallback != nullptr;
      if (duplicate || second_fallback) {
        std::fprintf(stderr, "abf: engine table: row '%.*s' repeats a %s\n",
                     static_cast<int>(row->name.size()), row->name.data(),
                     duplicate ? "rank" : "fallback");
        std::abort();
      }
      if (row->fallback) t.fallback = row;
    }
    if (t.fallback == nullptr) {
      std::fprintf(stderr, "abf: engine table: no row is the fallback\n");
      std::abort();
    }
    return t;
  }();
  return sorted;
}

std::string known_names() {
  std::string names = "auto";
  for (const Engine* engine : table().rows) {
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

std::span<const Engine* const> engine_table() noexcept { return table().rows; }

const Engine* find_engine(std::string_view name) noexcept {
  for (const Engine* engine : table().rows) {
    if (engine->name == name) return engine;
  }
  return nullptr;
}

const Engine& fallback_engine() noexcept { return *table().fallback; }

FingerprintFn fallback_fingerprint() noexcept {
  // The registered rows themselves (a constant array), not table(): no
  // allocation and nothing destroyed at exit, so ContentFingerprint::of
  // stays callable from anywhere it was before it had a vector kernel.
  for (const Engine* row : registered_engines()) {
    if (row->fallback) return row->fingerprint;
  }
  return nullptr;
}

Result<EngineChoice> choose_engine(Backend requested, const Workload& workload) {
  if (!requested.is_auto()) return choose_named(requested.name(), "");
  if (const char* forced = std::getenv("ABF_BACKEND"); forced != nullptr && *forced != '\0') {
    const std::string_view name(forced);
    if (name != "auto") return choose_named(name, "ABF_BACKEND=" + std::string(name) + ": ");
  }
  const auto& rows = table().rows;
  for (auto it = rows.rbegin(); it != rows.rend(); ++it) {
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

}  // namespace abf
