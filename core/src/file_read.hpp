// Small pieces the on-disk formats share (snapshot.cpp, filter_set_io.cpp,
// index.cpp, index_set.cpp, manifest_io.cpp): an owned file descriptor, the
// one opener of their files, an exact positioned read, and the hex
// spellings their messages and file names use.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
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

// What a path names that is not a regular file, for messages ("a FIFO").
inline std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// A file opened for reading, and what fstat said of it.
struct OpenedForReading {
  Fd fd;
  struct stat info {};
  std::uint64_t size() const noexcept { return static_cast<std::uint64_t>(info.st_size); }
};

// The formats' one opener: read-only, O_NONBLOCK (opening a FIFO for
// reading would otherwise wait for a writer, forever), then fstat, so what
// the path names is known before anything is read. kIo "<where>: cannot
// open: ..." or "cannot stat: ...".
inline Result<OpenedForReading> open_for_reading(const std::filesystem::path& path,
                                                 const std::string& where) {
  OpenedForReading file{Fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)), {}};
  if (file.fd.get() < 0) {
    return fail(ErrorCode::kIo, where + ": cannot open: " + std::strerror(errno));
  }
  if (::fstat(file.fd.get(), &file.info) != 0) {
    return fail(ErrorCode::kIo, where + ": cannot stat: " + std::strerror(errno));
  }
  return file;
}

// The same, for a regular file only: kIo "<where>: is <file_kind>, not
// <what>" for anything else (`what`: "a regular snapshot file").
inline Result<OpenedForReading> open_regular_file(const std::filesystem::path& path,
                                                  const std::string& where, std::string_view what) {
  auto file = open_for_reading(path, where);
  if (!file) return file;
  if (!S_ISREG(file->info.st_mode)) {
    return fail(ErrorCode::kIo,
                where + ": is " + file_kind(file->info.st_mode) + ", not " + std::string(what));
  }
  return file;
}

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
