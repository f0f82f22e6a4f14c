// The pieces of the server's Prometheus text (metrics.hpp).
#include "metrics.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

namespace abf::server {

// ---------------------------------------------------------------------------
// LatencyHistogram

void LatencyHistogram::observe(std::chrono::nanoseconds elapsed) noexcept {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  std::size_t bucket = 0;
  while (bucket < kBounds.size() && seconds > kBounds[bucket]) ++bucket;
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<std::uint64_t>(std::max<std::int64_t>(elapsed.count(), 0)),
                    std::memory_order_relaxed);
}

LatencyHistogram::Values LatencyHistogram::values() const noexcept {
  Values values;
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    values.buckets[b] = buckets_[b].load(std::memory_order_relaxed);
  }
  values.sum_ns = sum_ns_.load(std::memory_order_relaxed);
  return values;
}


// A label value in the exposition format: backslash, quote and newline
// escaped.
std::string label_value(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}


std::string format_bound(double value) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", value);
  for (int precision = 1; precision < 17; ++precision) {
    char shorter[32];
    std::snprintf(shorter, sizeof shorter, "%.*g", precision, value);
    if (std::strtod(shorter, nullptr) == value) return shorter;
  }
  return text;
}

std::string process_metrics() {
  std::string out;
  const auto sample = [&](std::string_view name, std::string_view type, std::string_view help,
                          double value) {
    out += "# HELP " + std::string(name) + " " + std::string(help) + "\n# TYPE " +
           std::string(name) + " " + std::string(type) + "\n" + std::string(name) + " " +
           format_bound(value) + "\n";
  };
  std::ifstream stat_file("/proc/self/stat");
  std::string stat((std::istreambuf_iterator<char>(stat_file)), std::istreambuf_iterator<char>());
  // Fields after the command's closing parenthesis (the command may hold
  // spaces): state is field 3, utime 14, stime 15, starttime 22, vsize 23,
  // rss 24 (proc(5)).
  std::vector<std::string> fields;
  if (const auto paren = stat.rfind(')'); paren != std::string::npos) {
    std::istringstream words(stat.substr(paren + 1));
    for (std::string word; words >> word;) fields.push_back(word);
  }
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  const auto field = [&](int number) { return std::strtod(fields[number - 3].c_str(), nullptr); };
  if (fields.size() >= 22 && ticks > 0) {
    sample("process_cpu_seconds_total", "counter",
           "Total user and system CPU time spent in seconds.", (field(14) + field(15)) / ticks);
    sample("process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
           field(24) * page);
    sample("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", field(23));
  }
  std::error_code error;
  std::size_t open = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", error), end; !error && it != end;
       it.increment(error)) {
    ++open;
  }
  if (!error) sample("process_open_fds", "gauge", "Number of open file descriptors.", open);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY) {
    sample("process_max_fds", "gauge", "Maximum number of open file descriptors.",
           static_cast<double>(limit.rlim_cur));
  }
  std::ifstream proc_stat("/proc/stat");
  for (std::string line; fields.size() >= 22 && ticks > 0 && std::getline(proc_stat, line);) {
    if (line.rfind("btime ", 0) == 0) {
      const double boot = std::strtod(line.c_str() + 6, nullptr);
      sample("process_start_time_seconds", "gauge",
             "Start time of the process since unix epoch in seconds.", boot + field(22) / ticks);
      break;
    }
  }
  return out;
}


}  // namespace abf::server
