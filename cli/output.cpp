// Standard output and data outputs (common.hpp): unbuffered writes, reports,
// DataOutput's file or staged standard output.
#include "common.hpp"

#include <sys/sendfile.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <span>
#include <string>
#include <utility>

namespace abf::cli {

namespace {

constexpr std::size_t kStageMemory = std::size_t{1} << 20;

std::string errno_text() { return std::strerror(errno); }

// Writes all of `text` to `fd`; errno is kept for the caller on failure.
bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t wrote = ::write(fd, text.data(), text.size());
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(wrote));
  }
  return true;
}

}  // namespace

Result<void> write_stdout(std::string_view text) {
  if (!write_all(STDOUT_FILENO, text)) {
    return fail(ErrorCode::kIo, "<stdout>: write error: " + errno_text());
  }
  return {};
}

Result<void> flush_stdout() {
  std::cout.flush();
  errno = 0;
  const bool flushed = std::fflush(stdout) == 0;
  if (!flushed || std::ferror(stdout) || !std::cout) {
    return fail(ErrorCode::kIo,
                "<stdout>: write error: " +
                    (errno != 0 ? errno_text() : std::string("an earlier write failed")));
  }
  return {};
}

std::optional<std::string> binary_to_terminal(std::string_view output) {
  if (output != "-" || ::isatty(STDOUT_FILENO) != 1) return std::nullopt;
  return "refusing to write binary to a terminal (--output - is a snapshot); redirect or use "
         "-o FILE";
}

Result<void> write_report(std::string_view text, bool stdout_carries_data) {
  if (!stdout_carries_data) return write_stdout(text);
  std::cerr << text;
  std::cerr.flush();
  return {};
}

Error summary_error(std::string_view output, Error error) {
  const std::string name = output == "-" ? "<stdout>" : std::string(output);
  error.message = name + " was written, but printing the summary failed: " + error.message;
  return error;
}

// ------------------------------------------------------------------ DataOutput

DataOutput::DataOutput(DataOutput&& other) noexcept = default;
DataOutput& DataOutput::operator=(DataOutput&& other) noexcept = default;
DataOutput::~DataOutput() = default;

Result<DataOutput> DataOutput::create(const std::string& path) {
  DataOutput output;
  if (path != "-") {
    auto file = AtomicFile::create(path);
    if (!file) return std::unexpected(file.error());
    output.file_.emplace(std::move(*file));
    return output;
  }
  const char* tmpdir = std::getenv("TMPDIR");
  output.stage_.emplace(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp", "abf-stdout");
  output.buffer_.reserve(kStageMemory);
  return output;
}

Result<void> DataOutput::stage(std::string_view text) {
  auto staged = stage_->append(text);
  if (staged) return {};
  return fail(ErrorCode::kIo,
              "<stdout>: cannot stage the output in '" + stage_->dir() + "' (TMPDIR): " +
                  (staged.error().step == SpillError::Step::kWrite ? "write error: " : "") +
                  staged.error().reason());
}

Result<void> DataOutput::write(std::string_view text) {
  if (file_) return file_->write(text);
  if (buffer_.size() + text.size() <= kStageMemory) {
    buffer_.append(text);
    return {};
  }
  if (!buffer_.empty()) {
    if (auto staged = stage(buffer_); !staged) return staged;
    buffer_.clear();
  }
  // A large piece goes to the file as it is, never through the buffer.
  if (text.size() >= kStageMemory) return stage(text);
  buffer_.append(text);
  return {};
}

Result<void> DataOutput::commit() {
  if (file_) return file_->commit();
  if (!stage_->created()) return write_stdout(buffer_);  // it all fit in memory
  if (!buffer_.empty()) {
    if (auto staged = stage(buffer_); !staged) return staged;
    buffer_.clear();
  }
  // The kernel copies the staged file to stdout (sendfile), never through
  // this process; where it refuses stdout (EINVAL: an O_APPEND file, some
  // devices) before copying anything, read and write do it.
  const std::uint64_t staged_bytes = stage_->size();
  off_t offset = 0;
  while (static_cast<std::uint64_t>(offset) < staged_bytes) {
    const std::uint64_t left = staged_bytes - static_cast<std::uint64_t>(offset);
    const ssize_t sent =
        ::sendfile(STDOUT_FILENO, stage_->fd(), &offset,
                   static_cast<std::size_t>(std::min<std::uint64_t>(left, 1u << 30)));
    if (sent > 0) continue;
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EINVAL || errno == ENOSYS) && offset == 0) break;
    return fail(ErrorCode::kIo,
                "<stdout>: write error: " +
                    (sent < 0 ? errno_text() : std::string("staged output shrank")));
  }
  if (static_cast<std::uint64_t>(offset) == staged_bytes) return {};
  std::string chunk(kStageMemory, '\0');
  while (static_cast<std::uint64_t>(offset) < staged_bytes) {
    const auto count = static_cast<std::size_t>(
        std::min<std::uint64_t>(chunk.size(), staged_bytes - static_cast<std::uint64_t>(offset)));
    if (auto got = stage_->read(static_cast<std::uint64_t>(offset), std::span(chunk.data(), count));
        !got) {
      return fail(ErrorCode::kIo,
                  "<stdout>: cannot reread the staged output: " +
                      (got.error().code != 0 ? got.error().reason() : std::string("it shrank")));
    }
    if (auto wrote = write_stdout(std::string_view(chunk.data(), count)); !wrote) return wrote;
    offset += static_cast<off_t>(count);
  }
  return {};
}

}  // namespace abf::cli
