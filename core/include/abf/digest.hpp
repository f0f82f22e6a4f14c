// SHA-256 artifact digests and their text and binary encodings
// (docs/protocol.md section 2).
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "abf/error.hpp"

namespace abf {

// A SHA-256 digest: exactly 32 bytes. Trivially copyable, so an array of
// digests is one contiguous block of 32-byte records that the SIMD and CUDA
// engines read directly.
struct Digest {
  static constexpr std::size_t kSize = 32;
  std::array<std::uint8_t, kSize> bytes{};

  // 64 lowercase hex digits.
  std::string hex() const;

  friend constexpr auto operator<=>(const Digest&, const Digest&) = default;
};
static_assert(sizeof(Digest) == Digest::kSize);
static_assert(std::is_trivially_copyable_v<Digest>);

// Writes the 64 lowercase hex digits of `digest` to out[0..64) (no
// terminator). The fast path for output of millions of digests.
void write_hex(const Digest& digest, char* out) noexcept;

// Parses exactly 64 hex digits (either case), nothing else.
Result<Digest> parse_hex_digest(std::string_view hex);

// Parses one line of text input. Accepted forms, surrounding spaces, tabs and
// a trailing '\r' ignored:
//   <64 hex>                   a bare digest
//   sha256:<64 hex>            the OCI digest form (SHA256: or any case too)
//   <64 hex>\t<absent|maybe>   a line of `abf query`'s output
//   <64 hex>  <name>           a sha256sum line (also "<64 hex> *<name>")
//   \<64 hex>  <name>          a sha256sum line whose name is escaped (GNU
//                              coreutils writes a name holding a backslash,
//                              newline or carriage return as \\, \n, \r and
//                              starts the line with a backslash); any other
//                              backslash sequence in the name is refused
//   SHA256 (<name>) = <64 hex> a `sha256sum --tag` line (the spaces around
//                              "(" and "=" optional, as GNU reads it; the name
//                              ends at the last ')'), escaped with a leading
//                              backslash the same way
// The name is not kept. `line_number` (1-based) goes into the error message.
// Blank lines are the caller's business: see `is_blank_line`.
Result<Digest> parse_digest_line(std::string_view line, std::uint64_t line_number);

// Parses one NUL-terminated record, as `sha256sum -z` writes them
// (`<hex>  <name>` with the name never escaped, so it may hold newlines;
// also `sha256sum -z --tag` records): every form parse_digest_line takes,
// surrounding spaces, tabs, '\r' and newlines ignored. A line of the record
// after its first that is itself a digest line (newline-terminated records
// run into a NUL-terminated one) is refused: its digest would be lost in the
// name.
// Errors start "record <record_number> (byte offset <byte_offset>): ".
Result<Digest> parse_digest_record(std::string_view record, std::uint64_t record_number,
                                   std::uint64_t byte_offset);

// The line `sha256sum` (GNU coreutils 9.1) prints for a file `name` with
// this digest, newline included: `<hex>  <name>`; when the name holds a
// backslash, newline or carriage return, those are written as the two
// characters \\, \n and \r and the line starts with a backslash. `sha256sum -c`
// reads it back, and so does parse_digest_line.
std::string sha256sum_line(const Digest& digest, std::string_view name);

// True for an empty line or one of spaces, tabs and '\r' only.
bool is_blank_line(std::string_view line) noexcept;
// True for an empty record or one of spaces, tabs, '\r' and newlines only.
bool is_blank_record(std::string_view record) noexcept;

// SHA-256 of bytes in memory (OpenSSL libcrypto).
Digest sha256(std::span<const std::uint8_t> bytes);
Digest sha256(std::string_view text);

// SHA-256 of a file's contents, streamed.
Result<Digest> sha256_file(const std::filesystem::path& path);

}  // namespace abf
