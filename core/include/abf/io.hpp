// Streaming digest input and all-or-nothing file output.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"

namespace abf {

enum class InputFormat {
  kBinary,  // consecutive 32-byte records; size must be a multiple of 32
  kHex,     // text: one digest a line (parse_digest_line), or, where the
            // input's first MiB holds a NUL, one digest a NUL-terminated
            // record (parse_digest_record, as sha256sum -z writes them);
            // blank lines and records skipped
};

// "bin" / "hex"; kInvalidArgument otherwise.
Result<InputFormat> parse_input_format(std::string_view name);

// Reads digests from a file or standard input in bounded chunks. Errors name
// the source and the line (hex), the record and its byte offset
// (NUL-terminated hex) or the byte offset (binary). In text read as lines,
// a NUL byte (past the first MiB) is an error naming its line and byte
// offset: never part of a name that would hide the digest after it.
class DigestReader {
 public:
  // The longest text line or record, and the read buffer's size. Text
  // whose first kMaxRecordBytes hold a NUL byte is NUL-terminated records:
  // every such input has one there, at the end of its first record.
  static constexpr std::size_t kMaxRecordBytes = std::size_t{1} << 20;

  // `path` "-" reads standard input. Pipes and FIFOs stream like files (a
  // FIFO's open waits for its writer, as with any reader); a directory is
  // kIo. A regular file that ends before the size it had when opened (it
  // was truncated while being read) is kIo, never a silently short input.
  static Result<DigestReader> open(const std::filesystem::path& path, InputFormat format);
  // Reads from bytes in memory (tests, embedding).
  static DigestReader from_memory(std::string_view bytes, InputFormat format,
                                  std::string source_name = "<memory>");

  DigestReader(DigestReader&&) noexcept;
  DigestReader& operator=(DigestReader&&) noexcept;
  ~DigestReader();

  // Fills the front of `out`; returns how many digests were read, 0 at the
  // end of the input. kInvalidDigest on the first malformed record.
  Result<std::size_t> read(std::span<Digest> out);

  // Reads everything (for inputs known to be small).
  Result<std::vector<Digest>> read_all();

  // Bytes consumed so far (for progress reports).
  std::uint64_t bytes_read() const noexcept;
  // Total size when known (a regular file), else 0.
  std::uint64_t size_hint() const noexcept;
  const std::string& source_name() const noexcept;

 private:
  struct State;
  explicit DigestReader(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// How an AtomicFile comes into place.
struct AtomicFileOptions {
  // Mode bits of a new file, less the umask, which the kernel applies as
  // for open(2) (0666: an ordinary file; 0600 for secrets, which the umask
  // cannot widen). A file that replaces an existing one takes that file's
  // mode bits (and, where permitted, its owner) instead: a 0600 snapshot
  // stays 0600 when rebuilt.
  unsigned permissions = 0666;
  // false: fails with kIo "exists" if `path` exists (at create, or by commit),
  // and never replaces it (renameat2 RENAME_NOREPLACE).
  bool replace = true;
};

// An output file that appears at `path` only when commit() succeeds. Writes go
// to a temporary file in the same folder: where the filesystem supports it an
// anonymous one (O_TMPFILE), which has no name until commit() and so is never
// left behind, even by SIGKILL or a power cut; elsewhere (or with the
// environment variable ABF_NO_O_TMPFILE set, which tests use) one named
// `.<name>.tmp.XXXXXX`. Every temporary name is created with O_EXCL (linked,
// for an anonymous file), so nothing planted at it is followed or
// overwritten. Destroying an uncommitted AtomicFile removes the temporary, so
// a failed command leaves any earlier file untouched. commit() fsyncs the
// file, gives it a temporary name (anonymous files), renames it over `path`
// and fsyncs the folder, so once it returns the new file survives a crash or
// power loss (docs/reliability.md). Only a process killed between those two
// calls leaves an anonymous file's temporary name behind.
//
// What `path` names decides how it is written:
//   "-"                    straight to standard output;
//   a symbolic link        followed (up to 40 links; a dangling link creates
//                          its target): the target is replaced atomically,
//                          the temporary file made in the target's folder,
//                          and the link stays;
//   a device, FIFO, ...    any existing file that is not a regular file or a
//                          directory (/dev/null, /dev/full, a FIFO: opening
//                          one waits for its reader) is written directly,
//                          never replaced by a regular file; such output is
//                          not atomic, and a failed write (ENOSPC on
//                          /dev/full) is kIo from write() or commit();
//   a directory            kIo.
class AtomicFile {
 public:
  using Options = AtomicFileOptions;
  static Result<AtomicFile> create(const std::filesystem::path& path,
                                   const AtomicFileOptions& options = {});

  AtomicFile(AtomicFile&&) noexcept;
  AtomicFile& operator=(AtomicFile&&) noexcept;
  ~AtomicFile();

  Result<void> write(std::span<const std::uint8_t> bytes);
  Result<void> write(std::string_view text);
  // Flushes, fsyncs and renames into place, then fsyncs the folder. kIo if
  // any step fails; `path` is then left as it was, except when only the
  // folder's fsync failed (the new file is in place but not yet durable:
  // the message says so).
  Result<void> commit();

 private:
  struct State;
  explicit AtomicFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// Installs handlers for SIGTERM, SIGHUP and SIGINT that remove the temporary
// file of every AtomicFile not yet committed or destroyed, then end the
// process by the same signal (its default action, so a parent sees how it
// ended). A signal that is ignored stays ignored, and a handler installed
// before is left in place. Call it once, early in main(); without it such a
// signal leaves the named temporaries (`.<name>.tmp.XXXXXX`) behind. The handler is
// async-signal-safe: it only reads a fixed table of live temporary files
// (64 at once; more still work, but are not removed on a signal) and calls
// unlinkat(2).
void remove_temporary_files_on_signal() noexcept;

}  // namespace abf
