// Files under stress: AtomicFile's durability, modes, links, devices,
// signals and a full disk, and input that is a FIFO, a directory, or a
// file that shrinks while it is read.
//
// Some of it can only be seen from inside the process, so this binary
// interposes a few libc calls (fsync, renameat, umask, pread, getrandom):
// the library, linked statically, calls these definitions, which record the
// call and pass it to the kernel unchanged unless a test asks otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace {

// What the interposed calls saw, and what they are told to do.
struct Hooks {
  std::mutex mutex;
  bool recording = false;
  std::vector<std::string> events;  // "fsync file", "fsync dir", "rename"
  std::atomic<int> umask_calls{0};
  // pread: at the first read at this offset (after passing over this many
  // more reads there), truncate the file to this size.
  std::atomic<long> truncate_at_offset{-1};
  std::atomic<long> truncate_to{0};
  std::atomic<int> truncate_skip{0};
  // getrandom: fill with this byte instead, this many more times.
  std::atomic<int> fixed_random_calls{0};
  std::atomic<int> fixed_random_byte{0};
};
Hooks hooks;

void record(const std::string& event) {
  std::lock_guard lock(hooks.mutex);
  if (hooks.recording) hooks.events.push_back(event);
}

}  // namespace

extern "C" int fsync(int fd) {
  struct stat info {};
  if (::fstat(fd, &info) == 0) record(S_ISDIR(info.st_mode) ? "fsync dir" : "fsync file");
  return static_cast<int>(::syscall(SYS_fsync, fd));
}

extern "C" int renameat(int old_dir, const char* old_name, int new_dir,
                        const char* new_name) noexcept {
  record("rename");
  return static_cast<int>(::syscall(SYS_renameat, old_dir, old_name, new_dir, new_name));
}

extern "C" mode_t umask(mode_t mask) noexcept {
  hooks.umask_calls.fetch_add(1);
  return static_cast<mode_t>(::syscall(SYS_umask, mask));
}

extern "C" ssize_t pread(int fd, void* buffer, size_t size, off_t offset) {
  if (offset == hooks.truncate_at_offset.load() && hooks.truncate_skip.fetch_sub(1) <= 0) {
    hooks.truncate_skip.store(0);
    hooks.truncate_at_offset.store(-1);
    // Another process would do this; the effect on this read is the same.
    // (The reader's descriptor is read-only: truncate through a new one.)
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const int writable = ::open(self.c_str(), O_WRONLY | O_CLOEXEC);
    if (writable < 0 || ::ftruncate(writable, hooks.truncate_to.load()) != 0) return -1;
    ::close(writable);
  }
  return ::syscall(SYS_pread64, fd, buffer, size, offset);
}

extern "C" ssize_t getrandom(void* buffer, size_t size, unsigned int flags) {
  if (hooks.fixed_random_calls.load() > 0) {
    hooks.fixed_random_calls.fetch_sub(1);
    std::memset(buffer, hooks.fixed_random_byte.load(), size);
    return static_cast<ssize_t>(size);
  }
  return ::syscall(SYS_getrandom, buffer, size, flags);
}

namespace abf {
namespace {

namespace fs = std::filesystem;

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

Result<void> write_atomically(const fs::path& path, const std::string& text,
                              const AtomicFileOptions& options = {}) {
  auto file = AtomicFile::create(path, options);
  if (!file) return std::unexpected(file.error());
  if (auto wrote = file->write(text); !wrote) return wrote;
  return file->commit();
}

// Every temporary file left in `dir` (AtomicFile names them .<name>.tmp.*).
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.find(".tmp.") != std::string::npos) found.push_back(name);
  }
  return found;
}

mode_t mode_of(const fs::path& path) {
  struct stat info {};
  EXPECT_EQ(::lstat(path.c_str(), &info), 0) << path;
  return info.st_mode;
}

// The umask, read without umask(2): the kernel reports it since Linux 4.7.
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.starts_with("Umask:"))
      return static_cast<mode_t>(std::stoul(line.substr(6), nullptr, 8));
  }
  ADD_FAILURE() << "no Umask: line in /proc/self/status";
  return 022;
}

class IoFiles : public ::testing::Test {
 protected:
  fs::path file(const std::string& name) const { return dir_ / name; }
  test::TempDir dir_{"abf-io-test"};
};

// ---------------------------------------------------------------- durability

TEST_F(IoFiles, CommitSyncsTheFileThenRenamesThenSyncsTheFolder) {
  {
    std::lock_guard lock(hooks.mutex);
    hooks.events.clear();
    hooks.recording = true;
  }
  const auto committed = write_atomically(file("out.txt"), "durable");
  {
    std::lock_guard lock(hooks.mutex);
    hooks.recording = false;
  }
  ASSERT_TRUE(committed.has_value()) << committed.error().describe();
  EXPECT_EQ(test::read_file(file("out.txt")), "durable");
  const std::vector<std::string> expected = {"fsync file", "rename", "fsync dir"};
  EXPECT_EQ(hooks.events, expected);
}

// ---------------------------------------------------------------- modes

TEST_F(IoFiles, ANewFileHasThePermissionsLessTheUmaskAndTheUmaskIsNeverTouched) {
  const mode_t saved = ::umask(027);
  hooks.umask_calls.store(0);
  EXPECT_EQ(current_umask(), 027u);
  ASSERT_TRUE(write_atomically(file("ordinary"), "x").has_value());
  ASSERT_TRUE(write_atomically(file("secret"), "x", {.permissions = 0600}).has_value());
  ASSERT_TRUE(write_atomically(file("wide"), "x", {.permissions = 0777}).has_value());
  // No umask(0)/umask(old) round trip: it would race every other thread.
  EXPECT_EQ(hooks.umask_calls.load(), 0);
  ::umask(saved);
  EXPECT_EQ(mode_of(file("ordinary")) & 07777, 0640u);
  EXPECT_EQ(mode_of(file("secret")) & 07777, 0600u);
  EXPECT_EQ(mode_of(file("wide")) & 07777, 0750u);
}

TEST_F(IoFiles, AReplacedFileKeepsItsMode) {
  auto filter = build_filter(test::random_digests(100, 1), {1000, 0.01});
  ASSERT_TRUE(filter.has_value());
  for (const mode_t mode : {0600u, 0640u, 0604u, 0755u}) {
    const fs::path path = file("kept.abf");
    ASSERT_TRUE(save_snapshot(*filter, path).has_value());
    ASSERT_EQ(::chmod(path.c_str(), mode), 0);
    ASSERT_TRUE(save_snapshot(*filter, path).has_value());
    EXPECT_EQ(mode_of(path) & 07777, mode) << std::oct << mode;
    fs::remove(path);
  }
}

// ---------------------------------------------------------------- links

TEST_F(IoFiles, ASymlinkIsFollowedAndItsTargetReplacedInItsOwnFolder) {
  fs::create_directories(file("real"));
  fs::create_directories(file("links"));
  write_text(file("real/target.txt"), "old");
  ASSERT_EQ(::chmod(file("real/target.txt").c_str(), 0600), 0);
  fs::create_symlink("../real/target.txt", file("links/relative"));
  fs::create_symlink(file("links/relative"), file("links/absolute-to-link"));

  ASSERT_TRUE(write_atomically(file("links/relative"), "new").has_value());
  EXPECT_TRUE(fs::is_symlink(file("links/relative")));
  EXPECT_EQ(test::read_file(file("real/target.txt")), "new");
  ASSERT_TRUE(write_atomically(file("links/absolute-to-link"), "newer").has_value());
  EXPECT_TRUE(fs::is_symlink(file("links/absolute-to-link")));
  EXPECT_TRUE(fs::is_symlink(file("links/relative")));
  EXPECT_EQ(test::read_file(file("real/target.txt")), "newer");
  EXPECT_EQ(mode_of(file("real/target.txt")) & 07777, 0600u);
  EXPECT_TRUE(temporaries(file("real")).empty());
  EXPECT_TRUE(temporaries(file("links")).empty());
}

TEST_F(IoFiles, ADanglingSymlinkCreatesItsTarget) {
  fs::create_symlink("made-by-write.txt", file("dangling"));
  ASSERT_TRUE(write_atomically(file("dangling"), "created").has_value());
  EXPECT_TRUE(fs::is_symlink(file("dangling")));
  EXPECT_EQ(test::read_file(file("made-by-write.txt")), "created");
}

TEST_F(IoFiles, ASymlinkLoopIsAnIoError) {
  fs::create_symlink("b", file("a"));
  fs::create_symlink("a", file("b"));
  const auto wrote = write_atomically(file("a"), "x");
  ASSERT_FALSE(wrote.has_value());
  EXPECT_EQ(wrote.error().code, ErrorCode::kIo);
  EXPECT_NE(wrote.error().message.find("symbolic links"), std::string::npos)
      << wrote.error().message;
  EXPECT_TRUE(temporaries(dir_.path()).empty());
}

TEST_F(IoFiles, TheTemporaryFileIsCreatedExclusively) {
  // With the random suffix forced, the first name is predictable: a link
  // planted there must neither be followed nor replaced.
  write_text(file("victim"), "untouched");
  fs::create_symlink("victim", file(".out.txt.tmp.AAAAAA"));
  hooks.fixed_random_byte.store(0);  // 'A' in the suffix alphabet
  hooks.fixed_random_calls.store(1);
  const auto wrote = write_atomically(file("out.txt"), "written");
  hooks.fixed_random_calls.store(0);
  ASSERT_TRUE(wrote.has_value()) << wrote.error().describe();
  EXPECT_EQ(test::read_file(file("out.txt")), "written");
  EXPECT_EQ(test::read_file(file("victim")), "untouched");
  EXPECT_TRUE(fs::is_symlink(file(".out.txt.tmp.AAAAAA")));
}

TEST_F(IoFiles, ADirectoryIsNotAnOutputFile) {
  fs::create_directories(file("folder"));
  const auto wrote = write_atomically(file("folder"), "x");
  ASSERT_FALSE(wrote.has_value());
  EXPECT_EQ(wrote.error().code, ErrorCode::kIo);
  EXPECT_TRUE(fs::is_directory(file("folder")));
}

// ---------------------------------------------------------------- devices

TEST_F(IoFiles, AFifoIsWrittenInPlace) {
  ASSERT_EQ(::mkfifo(file("pipe").c_str(), 0600), 0);
  // Renamed over, the FIFO would leave the reader waiting for a writer.
  ::alarm(30);
  std::string received;
  std::thread reader([&] { received = test::read_file(file("pipe")); });
  const auto wrote = write_atomically(file("pipe"), "through the fifo\n");
  reader.join();
  ASSERT_TRUE(wrote.has_value()) << wrote.error().describe();
  ::alarm(0);
  EXPECT_EQ(received, "through the fifo\n");
  EXPECT_TRUE(S_ISFIFO(mode_of(file("pipe"))));
  EXPECT_TRUE(temporaries(dir_.path()).empty());
}

// Device nodes of our own (the null and full devices, 1:3 and 1:7), so a
// regression replaces a copy in a temporary folder, never /dev/null itself:
// the code before this test, run as root against the real /dev/null,
// replaced the machine's /dev/null with a regular file.
TEST_F(IoFiles, DevicesAreWrittenInPlaceAndAFullOneIsAnIoError) {
  if (::geteuid() != 0) GTEST_SKIP() << "making device nodes (mknod) needs root";
  if (::mknod(file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0 ||
      ::mknod(file("full").c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0) {
    GTEST_SKIP() << "mknod is not allowed here: " << std::strerror(errno);
  }
  ASSERT_TRUE(write_atomically(file("null"), "discarded").has_value());
  EXPECT_TRUE(S_ISCHR(mode_of(file("null"))));

  const auto full = write_atomically(file("full"), "no room");
  ASSERT_FALSE(full.has_value());
  EXPECT_EQ(full.error().code, ErrorCode::kIo);
  EXPECT_NE(full.error().message.find(std::strerror(ENOSPC)), std::string::npos)
      << full.error().message;
  EXPECT_TRUE(S_ISCHR(mode_of(file("full"))));

  auto filter = build_filter(test::random_digests(10, 2), {100, 0.01});
  const auto saved = save_snapshot(*filter, file("full"));
  ASSERT_FALSE(saved.has_value());
  EXPECT_EQ(saved.error().code, ErrorCode::kIo);
  EXPECT_TRUE(S_ISCHR(mode_of(file("full"))));
  EXPECT_TRUE(temporaries(dir_.path()).empty());
}

// ---------------------------------------------------------------- signals

// A child writes an AtomicFile and waits; the signal must remove its
// temporary file and end it by that very signal.
void expect_signal_removes_temporary(const fs::path& dir, int signal_number) {
  SCOPED_TRACE(strsignal(signal_number));
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    // A named temporary (as on a filesystem without O_TMPFILE): the one a
    // signal can leave behind. Anonymous ones have no name to remove.
    ::setenv("ABF_NO_O_TMPFILE", "1", 1);
    remove_temporary_files_on_signal();
    auto file = AtomicFile::create(dir / "interrupted.txt");
    if (!file || !file->write("half") || ::write(ready[1], "r", 1) != 1) ::_exit(3);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  EXPECT_EQ(temporaries(dir).size(), 1u);
  ASSERT_EQ(::kill(child, signal_number), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), signal_number);
  EXPECT_TRUE(temporaries(dir).empty());
  EXPECT_FALSE(fs::exists(dir / "interrupted.txt"));
}

TEST_F(IoFiles, TermHupAndIntRemoveTemporaryFiles) {
  for (const int signal_number : {SIGTERM, SIGHUP, SIGINT}) {
    expect_signal_removes_temporary(dir_.path(), signal_number);
  }
}

// Where O_TMPFILE works (here: the test folder's filesystem), an output
// being written has no name at all, so even SIGKILL, which runs nothing,
// leaves nothing behind; and a committed one appears whole.
TEST_F(IoFiles, SigkillMidWriteLeavesNothingWithAnonymousTemporaries) {
  if (std::getenv("ABF_NO_O_TMPFILE") != nullptr) {
    GTEST_SKIP() << "this run (core_io_test_named_temporaries) covers named temporaries only";
  }
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    auto file = AtomicFile::create(dir_.path() / "killed.txt");
    if (!file || !file->write(std::string(1 << 20, 'x')) || ::write(ready[1], "r", 1) != 1) {
      ::_exit(3);
    }
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_TRUE(fs::is_empty(dir_.path())) << "the killed writer left a file";

  auto file = AtomicFile::create(dir_.path() / "whole.txt");
  ASSERT_TRUE(file.has_value()) << file.error().message;
  ASSERT_TRUE(file->write("whole"));
  EXPECT_TRUE(fs::is_empty(dir_.path())) << "an uncommitted file has a name";
  ASSERT_TRUE(file->commit());
  EXPECT_EQ(test::read_file(dir_.path() / "whole.txt"), "whole");
  EXPECT_TRUE(temporaries(dir_.path()).empty());
}

TEST_F(IoFiles, AnIgnoredSignalStaysIgnored) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    ::signal(SIGHUP, SIG_IGN);  // as under nohup
    remove_temporary_files_on_signal();
    ::raise(SIGHUP);
    if (::write(ready[1], "r", 1) != 1) ::_exit(3);
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte = 0;
  EXPECT_EQ(::read(ready[0], &byte, 1), 1);
  ::close(ready[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// ---------------------------------------------------------------- a full disk

// A 1 MiB tmpfs of this test's own; needs root (or CAP_SYS_ADMIN).
class FullDisk : public IoFiles {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root";
    fs::create_directories(file("small"));
    if (::mount("tmpfs", file("small").c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0) {
      GTEST_SKIP() << "mounting a tmpfs is not allowed here: " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(::umount2(file("small").c_str(), MNT_DETACH), 0) << std::strerror(errno);
    }
  }
  bool mounted_ = false;
};

TEST_F(FullDisk, SaveSnapshotFailsCleanlyAndLeavesTheOldFile) {
  const fs::path path = file("small/catalog.abf");
  auto old_filter = build_filter(test::random_digests(100, 3), {1000, 0.01});
  ASSERT_TRUE(save_snapshot(*old_filter, path).has_value());
  const std::string old_bytes = test::read_file(path);
  // About 1.2 MB of bits: more than the disk holds.
  auto big = build_filter(test::random_digests(1000, 4), {1'000'000, 0.01});
  ASSERT_TRUE(big.has_value());
  const auto saved = save_snapshot(*big, path);
  ASSERT_FALSE(saved.has_value());
  EXPECT_EQ(saved.error().code, ErrorCode::kIo);
  EXPECT_NE(saved.error().message.find(std::strerror(ENOSPC)), std::string::npos)
      << saved.error().message;
  EXPECT_NE(saved.error().message.find(path.string()), std::string::npos) << saved.error().message;
  EXPECT_EQ(test::read_file(path), old_bytes);
  EXPECT_TRUE(temporaries(file("small")).empty());
}

TEST_F(FullDisk, AtomicFileFailsCleanlyAndLeavesTheOldFile) {
  const fs::path path = file("small/answers.tsv");
  write_text(path, "old answers\n");
  for (const std::size_t piece : {std::size_t{100}, std::size_t{3} << 20}) {
    SCOPED_TRACE(piece);
    auto file = AtomicFile::create(path);
    ASSERT_TRUE(file.has_value());
    const std::string text(piece, 'x');
    Result<void> outcome;
    for (int i = 0; i < (2 << 20) / static_cast<int>(piece) + 1 && outcome; ++i) {
      outcome = file->write(text);
    }
    if (outcome) outcome = file->commit();
    ASSERT_FALSE(outcome.has_value());
    EXPECT_EQ(outcome.error().code, ErrorCode::kIo);
    EXPECT_NE(outcome.error().message.find(std::strerror(ENOSPC)), std::string::npos)
        << outcome.error().message;
  }
  EXPECT_EQ(test::read_file(path), "old answers\n");
  EXPECT_TRUE(temporaries(file("small")).empty());
}

// ---------------------------------------------------------------- odd input

TEST_F(IoFiles, DigestReaderStreamsAFifo) {
  ASSERT_EQ(::mkfifo(file("digests").c_str(), 0600), 0);
  const auto digests = test::random_digests(3000, 5);
  std::thread writer([&] {
    std::ofstream out(file("digests"));
    for (const auto& d : digests) out << "sha256:" << d.hex() << "\n";
  });
  auto reader = DigestReader::open(file("digests"), InputFormat::kHex);
  ASSERT_TRUE(reader.has_value());
  const auto all = reader->read_all();
  writer.join();
  ASSERT_TRUE(all.has_value()) << all.error().describe();
  EXPECT_EQ(*all, digests);
}

TEST_F(IoFiles, DigestReaderRefusesADirectory) {
  const auto reader = DigestReader::open(dir_.path(), InputFormat::kHex);
  ASSERT_FALSE(reader.has_value());
  EXPECT_EQ(reader.error().code, ErrorCode::kIo);
  EXPECT_NE(reader.error().message.find("directory"), std::string::npos) << reader.error().message;
}

TEST_F(IoFiles, DigestReaderRefusesAFileThatShrinksWhileRead) {
  // 3 MiB of lines: the reader holds 1 MiB, then the file is cut to 1.5 MiB.
  const auto digests = test::random_digests(48'000, 6);
  std::string text;
  for (const auto& d : digests) text += d.hex() + "\n";
  write_text(file("shrinking.txt"), text);
  auto reader = DigestReader::open(file("shrinking.txt"), InputFormat::kHex);
  ASSERT_TRUE(reader.has_value());
  std::vector<Digest> chunk(1000);
  ASSERT_EQ(reader->read(chunk).value(), 1000u);
  fs::resize_file(file("shrinking.txt"), 3 << 19);
  Result<std::size_t> got = chunk.size();
  while (got && *got > 0) got = reader->read(chunk);
  ASSERT_FALSE(got.has_value()) << "the cut file read as a complete, shorter input";
  EXPECT_EQ(got.error().code, ErrorCode::kIo);
  EXPECT_NE(got.error().message.find("shrank"), std::string::npos) << got.error().message;
}

TEST_F(IoFiles, BinaryDigestReaderRefusesAFileThatShrinksWhileRead) {
  // 3 MiB of records, cut to 1.5 MiB (a whole number of records, so only
  // the size it had when opened tells it was cut) after the first read.
  const auto digests = test::random_digests(98'304, 8);
  std::string bytes;
  for (const auto& d : digests) bytes.append(reinterpret_cast<const char*>(d.bytes.data()), 32);
  write_text(file("shrinking.bin"), bytes);
  auto reader = DigestReader::open(file("shrinking.bin"), InputFormat::kBinary);
  ASSERT_TRUE(reader.has_value());
  std::vector<Digest> chunk(1000);
  ASSERT_EQ(reader->read(chunk).value(), 1000u);
  fs::resize_file(file("shrinking.bin"), 3 << 19);
  Result<std::size_t> got = chunk.size();
  while (got && *got > 0) got = reader->read(chunk);
  ASSERT_FALSE(got.has_value()) << "the cut file read as a complete, shorter input";
  EXPECT_EQ(got.error().code, ErrorCode::kIo);
  EXPECT_NE(got.error().message.find("shrank"), std::string::npos) << got.error().message;
}

TEST_F(IoFiles, LoadFilterSetRefusesAManifestThatShrinksWhileRead) {
  auto set = build_filter_set(test::random_digests(100, 9), {1000, 0.01}, 2);
  ASSERT_TRUE(set.has_value()) << set.error().describe();
  const fs::path path = file("shrinking.abfs");
  ASSERT_TRUE(save_filter_set(*set, path).has_value());
  ASSERT_TRUE(load_filter_set(path).has_value());
  // Cut to 64 bytes as its whole is read: the third read at offset 0, after
  // the magic (which tells a manifest from a snapshot) and the header, whose
  // size the file then had.
  hooks.truncate_to.store(64);
  hooks.truncate_skip.store(2);
  hooks.truncate_at_offset.store(0);
  const auto loaded = load_filter_set(path);
  hooks.truncate_at_offset.store(-1);
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, ErrorCode::kSetManifestTruncated) << loaded.error().describe();
  EXPECT_NE(loaded.error().message.find("shrank"), std::string::npos) << loaded.error().message;
}

TEST_F(IoFiles, LoadSnapshotRefusesAFileThatShrinksWhileRead) {
  auto filter = build_filter(test::random_digests(100, 7), {1000, 0.01});
  const fs::path path = file("shrinking.abf");
  // Cut the file to 500 bytes just as its payload is read.
  const auto arm = [&] {
    EXPECT_TRUE(save_snapshot(*filter, path).has_value());
    hooks.truncate_to.store(500);
    hooks.truncate_at_offset.store(kSnapshotHeaderSize);
  };
  const auto expect_shrank = [](const Error& error) {
    EXPECT_EQ(error.code, ErrorCode::kSnapshotPayloadTruncated) << error.describe();
    EXPECT_NE(error.message.find("shrank"), std::string::npos) << error.message;
  };
  arm();
  const auto loaded = load_snapshot(path, LoadMode::kCopy);
  hooks.truncate_at_offset.store(-1);
  ASSERT_FALSE(loaded.has_value());
  expect_shrank(loaded.error());
  arm();
  const auto header = read_snapshot_header(path);
  hooks.truncate_at_offset.store(-1);
  ASSERT_FALSE(header.has_value());
  expect_shrank(header.error());
}

}  // namespace
}  // namespace abf
