#include "abf/io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace abf {

namespace {

constexpr std::size_t kReadBuffer = std::size_t{1} << 20;  // also the longest accepted hex line

std::string errno_text() { return std::strerror(errno); }

}  // namespace

Result<InputFormat> parse_input_format(std::string_view name) {
  if (name == "bin" || name == "binary") return InputFormat::kBinary;
  if (name == "hex" || name == "text") return InputFormat::kHex;
  return fail(ErrorCode::kInvalidArgument,
              "unknown input format '" + std::string(name) + "' (expected bin or hex)");
}

// ---------------------------------------------------------------- DigestReader

struct DigestReader::State {
  InputFormat format = InputFormat::kHex;
  std::string name;
  int fd = -1;
  bool owns_fd = false;
  bool eof = false;
  std::vector<char> buffer;
  std::size_t begin = 0;  // unread bytes are buffer[begin, end)
  std::size_t end = 0;
  std::uint64_t consumed = 0;  // bytes before buffer[begin]
  std::uint64_t line = 0;      // lines consumed (hex)
  std::uint64_t size_hint = 0;

  ~State() {
    if (owns_fd && fd >= 0) ::close(fd);
  }

  // Moves the unread bytes to the front and reads more after them.
  Result<void> fill() {
    if (begin > 0) {
      std::memmove(buffer.data(), buffer.data() + begin, end - begin);
      end -= begin;
      begin = 0;
    }
    while (end < buffer.size()) {
      const ssize_t got = ::read(fd, buffer.data() + end, buffer.size() - end);
      if (got < 0) {
        if (errno == EINTR) continue;
        return fail(ErrorCode::kIo, name + ": read error: " + errno_text());
      }
      if (got == 0) {
        eof = true;
        break;
      }
      end += static_cast<std::size_t>(got);
    }
    return {};
  }

  void consume(std::size_t bytes) {
    begin += bytes;
    consumed += bytes;
  }

  Result<std::size_t> read_binary(std::span<Digest> out) {
    std::size_t produced = 0;
    while (produced < out.size()) {
      const std::size_t available = (end - begin) / Digest::kSize;
      if (available > 0) {
        const std::size_t take = std::min(available, out.size() - produced);
        std::memcpy(out.data() + produced, buffer.data() + begin, take * Digest::kSize);
        consume(take * Digest::kSize);
        produced += take;
        continue;
      }
      if (eof) {
        if (end != begin) {
          return fail(ErrorCode::kInvalidDigest,
                      name + ": byte offset " + std::to_string(consumed) +
                          ": the input ends with " + std::to_string(end - begin) +
                          " stray bytes; binary input is 32-byte records (size " +
                          std::to_string(consumed + (end - begin)) + " is not a multiple of 32)");
        }
        break;
      }
      if (auto filled = fill(); !filled) return std::unexpected(filled.error());
    }
    return produced;
  }

  Result<std::size_t> read_hex(std::span<Digest> out) {
    std::size_t produced = 0;
    while (produced < out.size()) {
      const char* start = buffer.data() + begin;
      // memchr needs a valid pointer even for 0 bytes, and an empty buffer
      // has none.
      const auto* newline =
          begin == end ? nullptr : static_cast<const char*>(std::memchr(start, '\n', end - begin));
      std::size_t length = 0;
      std::size_t advance = 0;
      if (newline != nullptr) {
        length = static_cast<std::size_t>(newline - start);
        advance = length + 1;
      } else if (eof) {
        if (begin == end) break;
        length = advance = end - begin;  // last line without a newline
      } else {
        if (begin == 0 && end == buffer.size()) {
          return fail(ErrorCode::kInvalidDigest, name + ": line " + std::to_string(line + 1) +
                                                     " is longer than " +
                                                     std::to_string(buffer.size()) + " bytes");
        }
        if (auto filled = fill(); !filled) return std::unexpected(filled.error());
        continue;
      }
      const std::string_view text(start, length);
      consume(advance);
      ++line;
      if (is_blank_line(text)) continue;
      auto digest = parse_digest_line(text, line);
      if (!digest) {
        return fail(ErrorCode::kInvalidDigest, name + ": " + digest.error().message);
      }
      out[produced++] = *digest;
    }
    return produced;
  }
};

DigestReader::DigestReader(std::unique_ptr<State> state) : state_(std::move(state)) {}
DigestReader::DigestReader(DigestReader&&) noexcept = default;
DigestReader& DigestReader::operator=(DigestReader&&) noexcept = default;
DigestReader::~DigestReader() = default;

Result<DigestReader> DigestReader::open(const std::filesystem::path& path, InputFormat format) {
  auto state = std::make_unique<State>();
  state->format = format;
  if (path == "-") {
    state->name = "<stdin>";
    state->fd = STDIN_FILENO;
  } else {
    state->name = path.string();
    state->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (state->fd < 0) {
      return fail(ErrorCode::kIo, state->name + ": cannot open: " + errno_text());
    }
    state->owns_fd = true;
    struct stat info {};
    if (::fstat(state->fd, &info) == 0) {
      if (S_ISDIR(info.st_mode)) {
        return fail(ErrorCode::kIo, state->name + ": is a directory");
      }
      if (S_ISREG(info.st_mode)) state->size_hint = static_cast<std::uint64_t>(info.st_size);
    }
  }
  state->buffer.resize(kReadBuffer);
  return DigestReader(std::move(state));
}

DigestReader DigestReader::from_memory(std::string_view bytes, InputFormat format,
                                       std::string source_name) {
  auto state = std::make_unique<State>();
  state->format = format;
  state->name = std::move(source_name);
  state->buffer.assign(bytes.begin(), bytes.end());
  state->end = bytes.size();
  state->eof = true;
  state->size_hint = bytes.size();
  return DigestReader(std::move(state));
}

Result<std::size_t> DigestReader::read(std::span<Digest> out) {
  return state_->format == InputFormat::kBinary ? state_->read_binary(out) : state_->read_hex(out);
}

Result<std::vector<Digest>> DigestReader::read_all() {
  std::vector<Digest> all;
  std::vector<Digest> chunk(4096);
  while (true) {
    auto got = read(chunk);
    if (!got) return std::unexpected(got.error());
    if (*got == 0) break;
    all.insert(all.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(*got));
  }
  return all;
}

std::uint64_t DigestReader::bytes_read() const noexcept { return state_->consumed; }
std::uint64_t DigestReader::size_hint() const noexcept { return state_->size_hint; }
const std::string& DigestReader::source_name() const noexcept { return state_->name; }

// ------------------------------------------------------------------ AtomicFile

struct AtomicFile::State {
  std::filesystem::path final_path;
  std::string temp_path;
  int fd = -1;
  bool to_stdout = false;
  bool committed = false;
  bool replace = true;
  std::vector<std::uint8_t> pending;

  ~State() {
    if (to_stdout) return;
    if (fd >= 0) ::close(fd);
    if (!committed && !temp_path.empty()) ::unlink(temp_path.c_str());
  }

  Result<void> write_through(std::span<const std::uint8_t> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (wrote < 0) {
        if (errno == EINTR) continue;
        return fail(ErrorCode::kIo, display() + ": write error: " + errno_text());
      }
      done += static_cast<std::size_t>(wrote);
    }
    return {};
  }

  Result<void> flush() {
    auto wrote = write_through(pending);
    pending.clear();
    return wrote;
  }

  std::string display() const { return to_stdout ? "<stdout>" : final_path.string(); }
};

AtomicFile::AtomicFile(std::unique_ptr<State> state) : state_(std::move(state)) {}
AtomicFile::AtomicFile(AtomicFile&&) noexcept = default;
AtomicFile& AtomicFile::operator=(AtomicFile&&) noexcept = default;
AtomicFile::~AtomicFile() = default;

Result<AtomicFile> AtomicFile::create(const std::filesystem::path& path,
                                      const AtomicFileOptions& options) {
  auto state = std::make_unique<State>();
  state->pending.reserve(kReadBuffer);
  if (path == "-") {
    state->to_stdout = true;
    state->fd = STDOUT_FILENO;
    return AtomicFile(std::move(state));
  }
  state->final_path = path;
  if (std::error_code ec; std::filesystem::is_directory(path, ec)) {
    return fail(ErrorCode::kIo, path.string() + ": is a directory");
  }
  const auto directory = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string temp_name = ".";  // appended piecewise: GCC 12 -Wrestrict misfires on "." + str
  temp_name += path.filename().string();
  temp_name += ".tmp.XXXXXX";
  std::string temp = (directory / temp_name).string();
  const int fd = ::mkstemp(temp.data());
  if (fd < 0) {
    return fail(ErrorCode::kIo, path.string() + ": cannot create a temporary file in '" +
                                    directory.string() + "': " + errno_text());
  }
  state->fd = fd;
  state->temp_path = temp;
  state->replace = options.replace;
  // mkstemp made it 0600; widen it to what was asked, less the umask.
  if ((options.permissions & 0777) != 0600) {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    ::fchmod(fd, static_cast<mode_t>(options.permissions & 0777) & ~mask);
  }
  return AtomicFile(std::move(state));
}

Result<void> AtomicFile::write(std::span<const std::uint8_t> bytes) {
  auto& s = *state_;
  if (s.pending.size() + bytes.size() > kReadBuffer) {
    if (auto flushed = s.flush(); !flushed) return flushed;
  }
  if (bytes.size() >= kReadBuffer) return s.write_through(bytes);  // no copy of large writes
  s.pending.insert(s.pending.end(), bytes.begin(), bytes.end());
  return {};
}

Result<void> AtomicFile::write(std::string_view text) {
  return write(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

Result<void> AtomicFile::commit() {
  auto& s = *state_;
  if (auto flushed = s.flush(); !flushed) return flushed;
  if (s.to_stdout) {
    s.committed = true;
    return {};
  }
  if (::fsync(s.fd) != 0) {
    return fail(ErrorCode::kIo, s.display() + ": fsync failed: " + errno_text());
  }
  if (::close(s.fd) != 0) {
    s.fd = -1;
    return fail(ErrorCode::kIo, s.display() + ": close failed: " + errno_text());
  }
  s.fd = -1;
  if (!s.replace) {
    if (::renameat2(AT_FDCWD, s.temp_path.c_str(), AT_FDCWD, s.final_path.c_str(),
                    RENAME_NOREPLACE) != 0) {
      return fail(ErrorCode::kIo,
                  s.display() + ": cannot move the finished file into place: " + errno_text());
    }
  } else if (::rename(s.temp_path.c_str(), s.final_path.c_str()) != 0) {
    return fail(ErrorCode::kIo,
                s.display() + ": cannot rename the finished file into place: " + errno_text());
  }
  s.committed = true;
  return {};
}

}  // namespace abf
