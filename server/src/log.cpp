// The server's log (log.hpp).
#include "log.hpp"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <string>

namespace abf::server {

namespace {

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&seconds, &tm);
  char text[64];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return text;
}

std::string_view level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace

LogLevel parse_log_level(std::string_view name) {
  if (name == "debug") return LogLevel::kDebug;
  if (name == "warn") return LogLevel::kWarn;
  if (name == "error") return LogLevel::kError;
  return LogLevel::kInfo;
}

Logger::Logger(LogLevel level, std::function<void(std::string_view)> sink)
    : level_(level), sink_(std::move(sink)) {}

void Logger::log(LogLevel level, nlohmann::ordered_json fields) const {
  if (!enabled(level)) return;
  nlohmann::ordered_json line = {{"ts", utc_now()}, {"level", level_name(level)}};
  for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const std::lock_guard lock(mutex_);
  if (sink_) {
    sink_(text);
    return;
  }
  std::string out = text + "\n";
  const char* p = out.data();
  std::size_t left = out.size();
  while (left > 0) {
    const ssize_t wrote = ::write(STDERR_FILENO, p, left);
    if (wrote <= 0) break;  // a log that cannot be written must not stop the server
    p += wrote;
    left -= static_cast<std::size_t>(wrote);
  }
}

}  // namespace abf::server
