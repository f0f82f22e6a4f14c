// The server's log: one JSON object a line. Internal.
#pragma once

#include <functional>
#include <mutex>
#include <string_view>

#include <nlohmann/json.hpp>

namespace abf::server {

enum class LogLevel { kDebug, kInfo, kWarn, kError };

// One JSON object a line, each with "ts" (UTC, milliseconds) and "level".
class Logger {
 public:
  Logger(LogLevel level, std::function<void(std::string_view)> sink);
  bool enabled(LogLevel level) const noexcept { return level >= level_; }
  void log(LogLevel level, nlohmann::ordered_json fields) const;

 private:
  LogLevel level_;
  std::function<void(std::string_view)> sink_;
  mutable std::mutex mutex_;
};

// The level a config's log_level names ("info" for any other word).
LogLevel parse_log_level(std::string_view name);

}  // namespace abf::server
