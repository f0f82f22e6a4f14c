// Progress lines on a terminal (common.hpp): Progress and Activity.
#include "common.hpp"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

namespace abf::cli {

Progress::Progress(std::string label, std::uint64_t total, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

Progress::~Progress() {
  if (enabled_) std::fprintf(stderr, "\r\033[K");
}

void Progress::update(std::uint64_t done) {
  if (!enabled_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  if (total_ > 0) {
    std::fprintf(stderr, "\r\033[K%s: %5.1f%% (%s / %s %s, %.1fs)", label_.c_str(),
                 100.0 * static_cast<double>(done) / static_cast<double>(total_),
                 with_commas(done).c_str(), with_commas(total_).c_str(), unit_.c_str(), seconds);
  } else {
    std::fprintf(stderr, "\r\033[K%s: %s %s (%.1fs)", label_.c_str(), with_commas(done).c_str(),
                 unit_.c_str(), seconds);
  }
  std::fflush(stderr);
}

// -------------------------------------------------------------------- Activity

struct Activity::State {
  std::mutex mutex;
  std::condition_variable wake;
  bool done = false;
};

Activity::Activity(std::string label) {
  if (::isatty(STDERR_FILENO) != 1) return;
  state_ = std::make_shared<State>();
  thread_ = std::thread([state = state_, label = std::move(label)] {
    const auto start = std::chrono::steady_clock::now();
    std::unique_lock lock(state->mutex);
    // The first line after a second: work that ends sooner shows nothing.
    auto next = start + std::chrono::seconds(1);
    while (!state->wake.wait_until(lock, next, [&] { return state->done; })) {
      std::fprintf(stderr, "\r\033[K%s (%.1fs)", label.c_str(), seconds_since(start));
      std::fflush(stderr);
      next = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    }
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
  });
}

Activity::~Activity() {
  if (!state_) return;
  {
    const std::lock_guard lock(state_->mutex);
    state_->done = true;
  }
  state_->wake.notify_one();
  thread_.join();
}

}  // namespace abf::cli
