// Small pieces the on-disk formats share (snapshot.cpp, filter_set_io.cpp,
// index.cpp, index_set.cpp): an owned file descriptor, an exact positioned
// read, and the hex spellings their messages and file names use.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>

#include "abf/error.hpp"

namespace abf::detail {

// Closes the descriptor it owns (a negative one is none).
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  Fd& operator=(Fd&&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Reads exactly `size` bytes at `offset`, retrying short reads and EINTR:
// kIo on a read error, `truncated` (the format's own code) when the file
// ends first, each naming `where`.
inline Result<void> read_exact(int fd, std::uint8_t* out, std::size_t size, std::uint64_t offset,
                               const std::string& where, ErrorCode truncated) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = ::pread(fd, out + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::kIo, where + ": read error: " + std::strerror(errno));
    }
    if (got == 0) return fail(truncated, where + ": file shrank while reading");
    done += static_cast<std::size_t>(got);
  }
  return {};
}

// "0x" and 16 lower-case hex digits (checksums in messages).
inline std::string hex64(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

// 16 lower-case hex digits, no prefix (build ids in shard file names).
inline std::string plain_hex16(std::uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace abf::detail
