// A spill file: an unlinked temporary file the commands put what does not fit
// in memory into, and read back. DataOutput (common.hpp) stages standard
// output in one; DistinctDigests (distinct.hpp) its sorted runs.
//
// Header-only: tests and benchmarks compile distinct.cpp in whole
// (tests/cli_distinct_test.cc, bench/dedup_set_bench.cc), and this comes
// with it.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <expected>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace abf::cli {

// Which step of a spill failed, and why; the caller words the message.
struct SpillError {
  enum class Step : std::uint8_t { kCreate, kWrite, kRead };
  Step step = Step::kCreate;
  // errno; 0 for a read that met the end of the file first (it shrank).
  int code = 0;

  // strerror(code), or "" when code is 0.
  std::string reason() const { return code != 0 ? std::strerror(code) : std::string(); }
};

// An unlinked temporary file in `dir`, created by the first append: with
// O_TMPFILE it never has a name, so nothing is left behind even after
// SIGKILL; where the filesystem refuses O_TMPFILE, a mkstemp name
// "<dir>/<prefix>.XXXXXX", unlinked at once. Closing frees its space.
class SpillFile {
 public:
  SpillFile(std::string dir, std::string prefix)
      : dir_(std::move(dir)), prefix_(std::move(prefix)) {}
  SpillFile(SpillFile&& other) noexcept
      : dir_(std::move(other.dir_)),
        prefix_(std::move(other.prefix_)),
        fd_(std::exchange(other.fd_, -1)),
        size_(std::exchange(other.size_, 0)) {}
  SpillFile& operator=(SpillFile&& other) noexcept {
    if (this != &other) {
      if (fd_ >= 0) ::close(fd_);
      dir_ = std::move(other.dir_);
      prefix_ = std::move(other.prefix_);
      fd_ = std::exchange(other.fd_, -1);
      size_ = std::exchange(other.size_, 0);
    }
    return *this;
  }
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;
  ~SpillFile() {
    if (fd_ >= 0) ::close(fd_);  // unlinked: closing removes it
  }

  // The folder it is (or will be) in.
  const std::string& dir() const noexcept { return dir_; }
  // Whether the file exists yet (an append happened).
  bool created() const noexcept { return fd_ >= 0; }
  // The descriptor (-1 before the first append), for a caller that has the
  // kernel copy the file (sendfile).
  int fd() const noexcept { return fd_; }
  // Bytes appended so far.
  std::uint64_t size() const noexcept { return size_; }

  // Appends `bytes` at the end, creating the file first if need be.
  std::expected<void, SpillError> append(std::string_view bytes) {
    if (fd_ < 0) {
      fd_ = ::open(dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
      if (fd_ < 0) {
        std::string name = dir_ + "/" + prefix_ + ".XXXXXX";
        fd_ = ::mkstemp(name.data());
        if (fd_ < 0) return std::unexpected(SpillError{SpillError::Step::kCreate, errno});
        ::unlink(name.c_str());
      }
    }
    auto offset = static_cast<off_t>(size_);
    while (!bytes.empty()) {
      const ssize_t wrote = ::pwrite(fd_, bytes.data(), bytes.size(), offset);
      if (wrote < 0) {
        if (errno == EINTR) continue;
        return std::unexpected(SpillError{SpillError::Step::kWrite, errno});
      }
      bytes.remove_prefix(static_cast<std::size_t>(wrote));
      offset += wrote;
      size_ += static_cast<std::uint64_t>(wrote);
    }
    return {};
  }

  // Reads exactly out.size() bytes from `offset`.
  std::expected<void, SpillError> read(std::uint64_t offset, std::span<char> out) const {
    auto at = static_cast<off_t>(offset);
    while (!out.empty()) {
      const ssize_t got = ::pread(fd_, out.data(), out.size(), at);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return std::unexpected(SpillError{SpillError::Step::kRead, got < 0 ? errno : 0});
      }
      out = out.subspan(static_cast<std::size_t>(got));
      at += got;
    }
    return {};
  }

 private:
  std::string dir_;
  std::string prefix_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

}  // namespace abf::cli
