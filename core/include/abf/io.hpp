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
  kHex,     // one digest per line, see parse_digest_line; blank lines skipped
};

// "bin" / "hex"; kInvalidArgument otherwise.
Result<InputFormat> parse_input_format(std::string_view name);

// Reads digests from a file or standard input in bounded chunks. Errors name
// the source and the line (hex) or byte offset (binary).
class DigestReader {
 public:
  // `path` "-" reads standard input.
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
  // Mode bits of the new file, less the umask (0666: an ordinary file;
  // 0600 for secrets, which the umask cannot widen).
  unsigned permissions = 0666;
  // false: commit fails with kIo if `path` exists by then, and never
  // replaces it (renameat2 RENAME_NOREPLACE).
  bool replace = true;
};

// An output file that appears at `path` only when commit() succeeds. Writes go
// to a temporary file beside it; destroying an uncommitted AtomicFile removes
// the temporary, so a failed command leaves any earlier file untouched.
// `path` "-" writes straight to standard output instead.
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
  // Flushes, fsyncs and renames into place.
  Result<void> commit();

 private:
  struct State;
  explicit AtomicFile(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace abf
