#include "abf/io.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace abf {

namespace {

constexpr std::size_t kReadBuffer = DigestReader::kMaxRecordBytes;

std::string errno_text() { return std::strerror(errno); }

std::string nul_in_line_message(const std::string& source, std::uint64_t line,
                                std::uint64_t offset) {
  return source + ": line " + std::to_string(line) + ": a NUL byte at byte offset " +
         std::to_string(offset) +
         ": NUL ends records only in input whose first MiB holds one (as sha256sum -z writes "
         "it), and this input's first MiB has none";
}

}  // namespace

Result<InputFormat> parse_input_format(std::string_view name) {
  if (name == "bin" || name == "binary") return InputFormat::kBinary;
  if (name == "hex" || name == "text") return InputFormat::kHex;
  return fail(ErrorCode::kInvalidArgument,
              "unknown input format '" + std::string(name) + "' (expected bin or hex)");
}

// ---------------------------------------------------------------- DigestReader

struct DigestReader::State {
  // Text records end with a newline, or with a NUL throughout where the
  // first MiB of the input (the longest record) holds a NUL: a
  // NUL-terminated input (sha256sum -z) has one there, at the end of its
  // first record, even when that record's name holds newlines. Undecided
  // until that much is read (or the input ends).
  enum class Terminator { kUndecided, kNewline, kNul };

  InputFormat format = InputFormat::kHex;
  std::string name;
  int fd = -1;
  bool owns_fd = false;
  bool eof = false;
  bool regular_file = false;  // then size_hint is the size it had when opened
  std::vector<char> buffer;
  std::size_t begin = 0;  // unread bytes are buffer[begin, end)
  std::size_t end = 0;
  std::uint64_t consumed = 0;  // bytes before buffer[begin]
  std::uint64_t line = 0;      // lines (or NUL-terminated records) consumed (hex)
  Terminator terminator = Terminator::kUndecided;
  std::uint64_t size_hint = 0;
  std::uint64_t received = 0;  // bytes read from fd so far

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
        // A file cut short while we read it would otherwise pass for a
        // complete, shorter input.
        if (regular_file && received < size_hint) {
          return fail(ErrorCode::kIo, name + ": the file shrank while being read (it ended at " +
                                          std::to_string(received) + " of the " +
                                          std::to_string(size_hint) + " bytes it had when opened)");
        }
        eof = true;
        break;
      }
      end += static_cast<std::size_t>(got);
      received += static_cast<std::uint64_t>(got);
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

  // Decides the terminator from the input's first MiB, all in the buffer
  // (nothing is consumed before it is decided).
  void decide_terminator() {
    const std::size_t window = std::min(end - begin, DigestReader::kMaxRecordBytes);
    terminator = window != 0 && std::memchr(buffer.data() + begin, '\0', window) != nullptr
                     ? Terminator::kNul
                     : Terminator::kNewline;
  }

  Result<std::size_t> read_text(std::span<Digest> out) {
    std::size_t produced = 0;
    while (produced < out.size()) {
      if (terminator == Terminator::kUndecided) {
        if (!eof && end - begin < DigestReader::kMaxRecordBytes) {
          if (auto filled = fill(); !filled) return std::unexpected(filled.error());
          continue;
        }
        decide_terminator();
      }
      const char* start = buffer.data() + begin;
      const char end_of_record = terminator == Terminator::kNul ? '\0' : '\n';
      // memchr needs a valid pointer even for 0 bytes, and an empty buffer
      // has none.
      const auto* found =
          begin == end ? nullptr
                       : static_cast<const char*>(std::memchr(start, end_of_record, end - begin));
      std::size_t length = 0;
      std::size_t advance = 0;
      if (found != nullptr) {
        length = static_cast<std::size_t>(found - start);
        advance = length + 1;
      } else if (eof) {
        if (begin == end) break;
        length = advance = end - begin;  // last record without its terminator
      } else {
        if (begin == 0 && end == buffer.size()) {
          return fail(ErrorCode::kInvalidDigest,
                      name + ": " + (terminator == Terminator::kNul ? "record " : "line ") +
                          std::to_string(line + 1) + " is longer than " +
                          std::to_string(buffer.size()) + " bytes");
        }
        if (auto filled = fill(); !filled) return std::unexpected(filled.error());
        continue;
      }
      const std::string_view text(start, length);
      const std::uint64_t offset = consumed;
      consume(advance);
      ++line;
      if (terminator == Terminator::kNul) {
        if (is_blank_record(text)) continue;
        auto digest = parse_digest_record(text, line, offset);
        if (!digest) return fail(ErrorCode::kInvalidDigest, name + ": " + digest.error().message);
        out[produced++] = *digest;
        continue;
      }
      // A NUL in a line would hide what follows it in the line's name.
      if (const auto* nul = static_cast<const char*>(std::memchr(text.data(), '\0', length));
          nul != nullptr) {
        return fail(ErrorCode::kInvalidDigest,
                    nul_in_line_message(name, line,
                                        offset + static_cast<std::uint64_t>(nul - text.data())));
      }
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
    state->fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (state->fd < 0) {
      return fail(ErrorCode::kIo, state->name + ": cannot open: " + errno_text());
    }
    state->owns_fd = true;
  }
  struct stat info {};
  if (::fstat(state->fd, &info) != 0) {
    return fail(ErrorCode::kIo, state->name + ": cannot stat: " + errno_text());
  }
  if (S_ISDIR(info.st_mode)) {
    return fail(ErrorCode::kIo, state->name + ": is a directory, not a file of digests");
  }
  if (S_ISREG(info.st_mode)) {
    state->regular_file = true;
    state->size_hint = static_cast<std::uint64_t>(info.st_size);
    // Standard input redirected from a file may start part way in.
    if (const off_t at = ::lseek(state->fd, 0, SEEK_CUR); at > 0) {
      state->size_hint -= std::min(state->size_hint, static_cast<std::uint64_t>(at));
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
  return state_->format == InputFormat::kBinary ? state_->read_binary(out) : state_->read_text(out);
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

// ------------------------------------------------- temporary files and signals

namespace {

// The live temporary files, for the signal handler. A fixed table of plain
// slots, because a handler may not allocate or take locks: a slot is claimed
// (0 -> 1), filled, then published (1 -> 2), and freed (-> 0) before its
// folder's descriptor is closed.
constexpr int kTempSlots = 64;
struct TempSlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 live
  int dir_fd = -1;
  char name[NAME_MAX + 1] = {};
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler reads these");
TempSlot g_temp_slots[kTempSlots];

int register_temp(int dir_fd, const std::string& name) {
  if (name.size() > NAME_MAX) return -1;
  for (int i = 0; i < kTempSlots; ++i) {
    int expected = 0;
    if (g_temp_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      g_temp_slots[i].dir_fd = dir_fd;
      std::memcpy(g_temp_slots[i].name, name.c_str(), name.size() + 1);
      g_temp_slots[i].state.store(2, std::memory_order_release);
      return i;
    }
  }
  return -1;  // full: this file is still removed on every path but a signal
}

void unregister_temp(int slot) {
  if (slot >= 0) g_temp_slots[slot].state.store(0, std::memory_order_release);
}

extern "C" void remove_temporaries_and_reraise(int signal_number) {
  for (auto& slot : g_temp_slots) {
    if (slot.state.load(std::memory_order_acquire) == 2) ::unlinkat(slot.dir_fd, slot.name, 0);
  }
  // Die of the same signal: it is blocked while this handler runs, so the
  // raise takes effect, with the default action, as the handler returns.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  ::sigaction(signal_number, &default_action, nullptr);
  ::raise(signal_number);
}

// Six characters for a temporary name. O_EXCL makes a guessed name harmless
// (creation fails and we try another), so they need only be unlikely to
// collide, not secret.
std::string random_suffix() {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  std::uint8_t bytes[6];
  if (::getrandom(bytes, sizeof bytes, GRND_NONBLOCK) != static_cast<ssize_t>(sizeof bytes)) {
    static std::atomic<std::uint64_t> counter{0};
    std::uint64_t x =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
        (static_cast<std::uint64_t>(::getpid()) << 32) ^
        (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull);
    for (auto& b : bytes) {
      x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ull;
      b = static_cast<std::uint8_t>(x >> 56);
    }
  }
  std::string suffix;
  for (const auto b : bytes) suffix += kAlphabet[b % (sizeof kAlphabet - 1)];
  return suffix;
}

// Where an output path leads: symbolic links followed to the file (or the
// missing name) they end at.
struct OutputTarget {
  std::filesystem::path path;
  bool exists = false;
  struct stat info {};
};

Result<OutputTarget> resolve_output(const std::filesystem::path& path) {
  OutputTarget target{path};
  for (int links = 0;; ++links) {
    if (::lstat(target.path.c_str(), &target.info) != 0) {
      if (errno == ENOENT) return target;  // a new file (the folder is checked later)
      return fail(ErrorCode::kIo,
                  path.string() + ": cannot stat '" + target.path.string() + "': " + errno_text());
    }
    if (!S_ISLNK(target.info.st_mode)) {
      target.exists = true;
      return target;
    }
    if (links == 40) {
      return fail(ErrorCode::kIo, path.string() + ": more than 40 symbolic links to follow");
    }
    std::string link(PATH_MAX, '\0');
    const ssize_t length = ::readlink(target.path.c_str(), link.data(), link.size());
    if (length < 0) {
      return fail(ErrorCode::kIo, path.string() + ": cannot read the symbolic link '" +
                                      target.path.string() + "': " + errno_text());
    }
    link.resize(static_cast<std::size_t>(length));
    const std::filesystem::path next(link);
    target.path = next.is_absolute() ? next : target.path.parent_path() / next;
  }
}

// ".<stem>.tmp.XXXXXX", a name for a temporary file beside the output.
std::string temporary_name(const std::string& stem) {
  std::string name = ".";  // appended piecewise: GCC 12 -Wrestrict misfires on "." + str
  name += stem;
  name += ".tmp.";
  name += random_suffix();
  return name;
}

// Whether an O_TMPFILE file can be given a name by commit(): linkat(2) of
// its /proc/self/fd entry (AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH).
// Without /proc, or with ABF_NO_O_TMPFILE set (tests use it to exercise
// the named temporaries of filesystems without O_TMPFILE), no.
bool can_link_anonymous() {
  if (const char* off = std::getenv("ABF_NO_O_TMPFILE"); off != nullptr && *off != '\0') {
    return false;
  }
  static const bool proc = ::access("/proc/self/fd", X_OK) == 0;
  return proc;
}

// Gives the anonymous file `fd` the name `name` in `dir_fd` (fails with
// EEXIST if the name is taken: a planted name is never followed).
int link_anonymous(int fd, int dir_fd, const char* name) {
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  return ::linkat(AT_FDCWD, self.c_str(), dir_fd, name, AT_SYMLINK_FOLLOW);
}

}  // namespace

void remove_temporary_files_on_signal() noexcept {
  for (const int signal_number : {SIGTERM, SIGHUP, SIGINT}) {
    struct sigaction current {};
    if (::sigaction(signal_number, nullptr, &current) != 0) continue;
    // Ignored (nohup) or someone else's: theirs to keep.
    if ((current.sa_flags & SA_SIGINFO) != 0 || current.sa_handler != SIG_DFL) continue;
    struct sigaction action {};
    action.sa_handler = remove_temporaries_and_reraise;
    sigemptyset(&action.sa_mask);
    // The other two wait while one handler runs, so the table is walked once.
    sigaddset(&action.sa_mask, SIGTERM);
    sigaddset(&action.sa_mask, SIGHUP);
    sigaddset(&action.sa_mask, SIGINT);
    ::sigaction(signal_number, &action, nullptr);
  }
}

// ------------------------------------------------------------------ AtomicFile

struct AtomicFile::State {
  enum class Kind { kStdout, kDirect, kReplace };
  Kind kind = Kind::kReplace;
  std::filesystem::path final_path;  // as the caller named it, for messages
  int fd = -1;
  // kReplace: the folder the file goes into, and the names in it.
  int dir_fd = -1;
  std::string final_name;
  std::string temp_name;   // empty while the file is anonymous (O_TMPFILE)
  bool anonymous = false;  // made with O_TMPFILE: no name until commit()
  int slot = -1;           // in the signal handler's table
  std::string stem;        // of the temporary names: the final name, cut to fit
  bool committed = false;
  bool replace = true;
  std::vector<std::uint8_t> pending;

  ~State() {
    if (kind == Kind::kStdout) return;
    if (fd >= 0) ::close(fd);
    if (!committed && !temp_name.empty()) ::unlinkat(dir_fd, temp_name.c_str(), 0);
    unregister_temp(slot);
    if (dir_fd >= 0) ::close(dir_fd);
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

  std::string display() const { return kind == Kind::kStdout ? "<stdout>" : final_path.string(); }

  // The rename (or link) is durable only once the folder is: without this
  // a crash can bring back the old file, or neither.
  Result<void> sync_folder() {
    if (::fsync(dir_fd) != 0 && errno != EINVAL) {
      return fail(ErrorCode::kIo, display() +
                                      ": the new file is in place, but syncing its folder failed "
                                      "(it may not survive a crash): " +
                                      errno_text());
    }
    return {};
  }

  // After the file took its final name directly (linked, not renamed).
  Result<void> close_and_sync_folder() {
    const int file_fd = fd;
    fd = -1;
    if (::close(file_fd) != 0) {
      return fail(ErrorCode::kIo, display() + ": close failed: " + errno_text());
    }
    return sync_folder();
  }

  // Creates the temporary file in the target's folder, O_EXCL: never an
  // existing name, never through a link planted there.
  Result<void> create_temporary(const OutputTarget& target, unsigned permissions) {
    const auto directory =
        target.path.has_parent_path() ? target.path.parent_path() : std::filesystem::path(".");
    dir_fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd < 0) {
      return fail(ErrorCode::kIo, final_path.string() + ": cannot open the folder '" +
                                      directory.string() + "': " + errno_text());
    }
    final_name = target.path.filename().string();
    // The name's room: NAME_MAX less ".", ".tmp." and six characters.
    stem = final_name.substr(0, NAME_MAX - 12);
    // A file that replaces another takes its mode, so it starts private and
    // is widened (never narrowed from wider) below.
    const mode_t create_mode = target.exists ? 0600 : static_cast<mode_t>(permissions & 0777);
    // The kernel applies the umask to create_mode, exactly as for any new
    // file: no umask(2) round trip, which would race other threads.
    // First choice: a file with no name at all (O_TMPFILE), which a SIGKILL
    // or a power cut cannot leave behind; commit() links it in. Where the
    // filesystem or kernel lacks it (or the link cannot be made, see
    // can_link_anonymous), a named temporary made with O_EXCL.
    if (can_link_anonymous()) {
      fd = ::openat(dir_fd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, create_mode);
      anonymous = fd >= 0;
    }
    for (int attempt = 0; fd < 0 && attempt < 100; ++attempt) {
      std::string name = temporary_name(stem);
      fd = ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    create_mode);
      if (fd >= 0) {
        temp_name = std::move(name);
        slot = register_temp(dir_fd, temp_name);
        break;
      }
      if (errno != EEXIST) break;
    }
    if (fd < 0) {
      return fail(ErrorCode::kIo, final_path.string() + ": cannot create a temporary file in '" +
                                      directory.string() + "': " + errno_text());
    }
    if (target.exists) {
      // Best effort: only root may give a file away, and the mode (below)
      // matters more.
      if (target.info.st_uid != ::geteuid() || target.info.st_gid != ::getegid()) {
        [[maybe_unused]] const int ignored = ::fchown(fd, target.info.st_uid, target.info.st_gid);
      }
      if (::fchmod(fd, target.info.st_mode & 0777) != 0) {
        return fail(
            ErrorCode::kIo,
            final_path.string() + ": cannot give the new file the old one's mode: " + errno_text());
      }
    }
    return {};
  }
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
    state->kind = State::Kind::kStdout;
    state->fd = STDOUT_FILENO;
    return AtomicFile(std::move(state));
  }
  state->final_path = path;
  state->replace = options.replace;
  auto target = resolve_output(path);
  if (!target) return std::unexpected(target.error());
  if (target->exists) {
    if (S_ISDIR(target->info.st_mode))
      return fail(ErrorCode::kIo, path.string() + ": is a directory");
    if (!options.replace) {
      return fail(ErrorCode::kIo, path.string() + ": exists, and is never replaced");
    }
    if (!S_ISREG(target->info.st_mode)) {
      // A device or FIFO is written in place: renaming a regular file over
      // /dev/null would replace the device itself.
      const int fd = ::open(target->path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
      if (fd < 0) return fail(ErrorCode::kIo, path.string() + ": cannot open: " + errno_text());
      struct stat info {};
      if (::fstat(fd, &info) == 0 && !S_ISREG(info.st_mode)) {
        state->kind = State::Kind::kDirect;
        state->fd = fd;
        return AtomicFile(std::move(state));
      }
      // A regular file took its place since the lstat: replace it, as any.
      ::close(fd);
      target->info = info;
    }
  }
  if (auto created = state->create_temporary(*target, options.permissions); !created) {
    return std::unexpected(created.error());
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
  if (s.kind == State::Kind::kStdout) {
    s.committed = true;
    return {};
  }
  if (s.kind == State::Kind::kDirect) {
    // A device or FIFO has nothing to sync (fsync is EINVAL there); close
    // reports what a write could not.
    const int fd = s.fd;
    s.fd = -1;
    if (::close(fd) != 0) {
      return fail(ErrorCode::kIo, s.display() + ": close failed: " + errno_text());
    }
    s.committed = true;
    return {};
  }
  if (::fsync(s.fd) != 0) {
    return fail(ErrorCode::kIo, s.display() + ": fsync failed: " + errno_text());
  }
  if (s.anonymous) {
    // The finished file gets a name only now. Not to be replaced: its final
    // name at once (EEXIST if taken; link never replaces). To replace: a
    // temporary name first, renamed over the old file below. Only a process
    // killed between these two calls leaves that name behind.
    if (!s.replace) {
      if (link_anonymous(s.fd, s.dir_fd, s.final_name.c_str()) != 0) {
        return fail(
            ErrorCode::kIo,
            s.display() + (errno == EEXIST
                               ? ": exists, and is never replaced"
                               : ": cannot link the finished file into place: " + errno_text()));
      }
      s.committed = true;
      return s.close_and_sync_folder();
    }
    for (int attempt = 0; s.temp_name.empty() && attempt < 100; ++attempt) {
      std::string name = temporary_name(s.stem);
      s.slot = register_temp(s.dir_fd, name);
      if (link_anonymous(s.fd, s.dir_fd, name.c_str()) == 0) {
        s.temp_name = std::move(name);
        break;
      }
      const int link_errno = errno;
      unregister_temp(s.slot);
      s.slot = -1;
      if (link_errno != EEXIST) {
        errno = link_errno;
        return fail(ErrorCode::kIo,
                    s.display() + ": cannot link the finished file into place: " + errno_text());
      }
    }
    if (s.temp_name.empty()) {
      return fail(ErrorCode::kIo, s.display() + ": cannot name the finished file: 100 names taken");
    }
  }
  const int fd = s.fd;
  s.fd = -1;
  if (::close(fd) != 0) {
    return fail(ErrorCode::kIo, s.display() + ": close failed: " + errno_text());
  }
  if (!s.replace) {
    if (::renameat2(s.dir_fd, s.temp_name.c_str(), s.dir_fd, s.final_name.c_str(),
                    RENAME_NOREPLACE) != 0) {
      return fail(ErrorCode::kIo,
                  s.display() + ": cannot move the finished file into place: " + errno_text());
    }
  } else if (::renameat(s.dir_fd, s.temp_name.c_str(), s.dir_fd, s.final_name.c_str()) != 0) {
    return fail(ErrorCode::kIo,
                s.display() + ": cannot rename the finished file into place: " + errno_text());
  }
  s.committed = true;
  unregister_temp(s.slot);
  s.slot = -1;
  return s.sync_folder();
}

}  // namespace abf
