#include "abf/digest.hpp"

#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace abf {

namespace {

// Two hex digits per byte value: one 16-bit copy per byte instead of two
// table lookups and shifts (query and dedup output is millions of lines).
constexpr std::array<std::array<char, 2>, 256> kHexPairs = [] {
  constexpr char digits[] = "0123456789abcdef";
  std::array<std::array<char, 2>, 256> table{};
  for (int b = 0; b < 256; ++b) table[b] = {digits[b >> 4], digits[b & 15]};
  return table;
}();

// Hex digit values, 0xff for anything else: one load per character instead
// of three range compares (hex parsing dominates `abf dedup` on text input).
constexpr std::array<std::uint8_t, 256> kHexValue = [] {
  std::array<std::uint8_t, 256> table{};
  table.fill(0xff);
  for (int c = 0; c < 10; ++c) table['0' + c] = static_cast<std::uint8_t>(c);
  for (int c = 0; c < 6; ++c) {
    table['a' + c] = static_cast<std::uint8_t>(10 + c);
    table['A' + c] = static_cast<std::uint8_t>(10 + c);
  }
  return table;
}();

bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view text) noexcept {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

// A NUL-terminated record's surroundings may also hold newlines (a record
// printed with a newline after it, or a final newline after the last NUL).
std::string_view trim_record(std::string_view text) noexcept {
  const auto blank = [](char c) { return is_space(c) || c == '\n'; };
  while (!text.empty() && blank(text.front())) text.remove_prefix(1);
  while (!text.empty() && blank(text.back())) text.remove_suffix(1);
  return text;
}

// A short, printable excerpt of bad input for an error message.
std::string excerpt(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 40)) {
    out += (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  if (text.size() > 40) out += "...";
  return out;
}

using DigestContext = std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)>;

DigestContext new_sha256() {
  DigestContext context(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  if (!context || EVP_DigestInit_ex(context.get(), EVP_sha256(), nullptr) != 1) {
    throw std::bad_alloc();  // only fails when OpenSSL cannot allocate
  }
  return context;
}

Digest finish_sha256(EVP_MD_CTX* context) {
  Digest digest;
  unsigned int length = 0;
  EVP_DigestFinal_ex(context, digest.bytes.data(), &length);
  return digest;
}

}  // namespace

void write_hex(const Digest& digest, char* out) noexcept {
  for (std::size_t i = 0; i < Digest::kSize; ++i) {
    std::memcpy(out + 2 * i, kHexPairs[digest.bytes[i]].data(), 2);
  }
}

std::string Digest::hex() const {
  std::string text(kSize * 2, '0');
  write_hex(*this, text.data());
  return text;
}

Result<Digest> parse_hex_digest(std::string_view hex) {
  if (hex.size() != Digest::kSize * 2) {
    return fail(ErrorCode::kInvalidDigest, "expected 64 hex digits, found " +
                                               std::to_string(hex.size()) + " characters ('" +
                                               excerpt(hex) + "')");
  }
  Digest digest;
  std::uint8_t invalid = 0;  // OR of every looked-up value: bit 7 set iff a non-hex character
  for (std::size_t i = 0; i < Digest::kSize; ++i) {
    const std::uint8_t high = kHexValue[static_cast<unsigned char>(hex[2 * i])];
    const std::uint8_t low = kHexValue[static_cast<unsigned char>(hex[2 * i + 1])];
    invalid |= high | low;
    digest.bytes[i] = static_cast<std::uint8_t>(high << 4 | (low & 15));
  }
  if (invalid & 0x80) {
    std::size_t column = 0;
    while (kHexValue[static_cast<unsigned char>(hex[column])] != 0xff) ++column;
    return fail(
        ErrorCode::kInvalidDigest,
        "non-hex character at column " + std::to_string(column + 1) + " ('" + excerpt(hex) + "')");
  }
  return digest;
}

bool is_blank_line(std::string_view line) noexcept { return trim(line).empty(); }

namespace {

// Where a record is, for error messages: "line 3: " or, for a NUL-terminated
// record, "record 3 (byte offset 210): ". Built only on error: text parsing
// is the hot path of `abf dedup`.
struct Where {
  bool record = false;
  std::uint64_t number = 0;
  std::uint64_t offset = 0;
};

std::string line_prefix(const Where& where) {
  if (!where.record) return "line " + std::to_string(where.number) + ": ";
  return "record " + std::to_string(where.number) + " (byte offset " +
         std::to_string(where.offset) + "): ";
}

// Whether `name`, as an escaped sha256sum line writes it, unescapes: GNU
// coreutils 9.1 (md5sum.c filename_unescape) allows only \\, \n and \r.
bool valid_escaped_name(std::string_view name) noexcept {
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] != '\\') continue;
    if (++i == name.size()) return false;  // a trailing lone backslash
    if (name[i] != '\\' && name[i] != 'n' && name[i] != 'r') return false;
  }
  return true;
}

// The hex of a sha256sum --tag line: `SHA256 (<name>) = <hex>` (also without
// the spaces), `text` starting after "SHA256". The name ends at the last ')',
// as GNU's bsd_split_3 has it, so it may hold ')' and " = " itself.
Result<std::string_view> tag_line_hex(std::string_view text, bool escaped, const Where& where) {
  if (text.starts_with(' ')) text.remove_prefix(1);
  const auto close = text.rfind(')');
  if (!text.starts_with('(') || close == std::string_view::npos) {
    return fail(ErrorCode::kInvalidDigest, line_prefix(where) +
                                               "expected a sha256sum --tag line, "
                                               "SHA256 (<name>) = <digest> ('" +
                                               excerpt(text) + "')");
  }
  if (escaped && !valid_escaped_name(text.substr(1, close - 1))) {
    return fail(ErrorCode::kInvalidDigest,
                line_prefix(where) +
                    "the escaped name of a sha256sum --tag line has a backslash not followed by "
                    "\\, n or r");
  }
  std::string_view rest = trim(text.substr(close + 1));
  if (!rest.starts_with('=')) {
    return fail(ErrorCode::kInvalidDigest, line_prefix(where) +
                                               "expected ' = <digest>' after the name of a "
                                               "sha256sum --tag line ('" +
                                               excerpt(rest) + "')");
  }
  return trim(rest.substr(1));
}

// parse_digest_line's work on a trimmed line or record.
Result<Digest> parse_digest_text(std::string_view text, const Where& where) {
  // GNU sha256sum starts a line with a backslash when it escaped the name
  // (one holding a backslash, a newline or a carriage return).
  const bool escaped = text.starts_with('\\');
  if (escaped) text.remove_prefix(1);
  if (text.starts_with("SHA256 (") || text.starts_with("SHA256(")) {
    auto hex = tag_line_hex(text.substr(6), escaped, where);
    if (!hex) return std::unexpected(hex.error());
    text = *hex;
  } else if (const auto space = text.find_first_of(" \t"); space != std::string_view::npos) {
    // A sha256sum line: the digest, a space, then ' ' (text mode) or '*'
    // (binary mode), then the name. The name may contain anything.
    const std::string_view rest = text.substr(space);
    // `abf query`'s own output, `<hex><TAB>absent|maybe`, reads back as its
    // digest: answers can be asked again (of another snapshot) as they are.
    if (space == Digest::kSize * 2 && !escaped && (rest == "\tabsent" || rest == "\tmaybe")) {
      text = text.substr(0, space);
      auto digest = parse_hex_digest(text);
      if (!digest) {
        return fail(ErrorCode::kInvalidDigest, line_prefix(where) + digest.error().message);
      }
      return digest;
    }
    const bool sha256sum_form = space == Digest::kSize * 2 && rest.size() >= 3 && rest[0] == ' ' &&
                                (rest[1] == ' ' || rest[1] == '*');
    if (!sha256sum_form) {
      return fail(ErrorCode::kInvalidDigest,
                  line_prefix(where) +
                      "expected a digest, sha256:<digest>, a sha256sum line or a sha256sum --tag "
                      "line ('" +
                      excerpt(text) + "')");
    }
    if (escaped && !valid_escaped_name(rest.substr(2))) {
      return fail(ErrorCode::kInvalidDigest,
                  line_prefix(where) +
                      "the escaped name of a sha256sum line has a backslash not followed by \\, "
                      "n or r");
    }
    text = text.substr(0, space);
  } else if (escaped) {
    return fail(ErrorCode::kInvalidDigest,
                line_prefix(where) +
                    "a line starting with '\\' is an escaped sha256sum line and needs a name ('\\" +
                    excerpt(text) + "')");
  } else if (const auto colon = text.find(':'); colon != std::string_view::npos) {
    const std::string_view algorithm = text.substr(0, colon);
    // The algorithm in either case, as the hex is: "SHA256:<hex>" is what
    // some registries and spreadsheets print.
    const auto lower = [](char c) {
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (!std::ranges::equal(algorithm, std::string_view("sha256"), {}, lower)) {
      return fail(ErrorCode::kInvalidDigest, line_prefix(where) + "unsupported digest algorithm '" +
                                                 excerpt(algorithm) + "' (only sha256)");
    }
    text.remove_prefix(colon + 1);
  }
  auto digest = parse_hex_digest(text);
  if (!digest) {
    return fail(ErrorCode::kInvalidDigest, line_prefix(where) + digest.error().message);
  }
  return digest;
}

}  // namespace

Result<Digest> parse_digest_line(std::string_view line, std::uint64_t line_number) {
  return parse_digest_text(trim(line), Where{.number = line_number});
}

Result<Digest> parse_digest_record(std::string_view record, std::uint64_t record_number,
                                   std::uint64_t byte_offset) {
  const Where where{.record = true, .number = record_number, .offset = byte_offset};
  const std::string_view text = trim_record(record);
  // A name may hold newlines (sha256sum -z leaves them as they are), but a
  // line of the record after its first that is a digest line of its own
  // means newline-terminated records run into this one (`cat sums-z.txt
  // sums.txt`, or a NUL in text of lines), whose digests would otherwise be
  // lost in the name.
  for (std::size_t at = text.find('\n'); at != std::string_view::npos;) {
    const std::size_t next = text.find('\n', at + 1);
    const std::string_view line =
        text.substr(at + 1, next == std::string_view::npos ? std::string_view::npos : next - at - 1);
    at = next;
    if (is_blank_line(line) || !parse_digest_text(trim(line), where)) continue;
    return fail(ErrorCode::kInvalidDigest,
                line_prefix(where) + "a line in it after the first is itself a digest line ('" +
                    excerpt(trim(line)) +
                    "'): a NUL-terminated record holds one digest (are NUL- and newline-"
                    "terminated records mixed?)");
  }
  return parse_digest_text(text, where);
}

bool is_blank_record(std::string_view record) noexcept { return trim_record(record).empty(); }

std::string sha256sum_line(const Digest& digest, std::string_view name) {
  // GNU coreutils 9.1 (md5sum.c print_filename): a name holding a
  // backslash, newline or carriage return is written with each of those as
  // \\, \n or \r, and the line starts with a backslash.
  const bool escape = name.find_first_of("\\\n\r") != std::string_view::npos;
  std::string line;
  line.reserve(Digest::kSize * 2 + name.size() + 4);
  if (escape) line += '\\';
  line.resize(line.size() + Digest::kSize * 2);
  write_hex(digest, line.data() + (escape ? 1 : 0));
  line += "  ";
  for (const char c : name) {
    if (!escape) {
      line += c;
    } else if (c == '\\') {
      line += "\\\\";
    } else if (c == '\n') {
      line += "\\n";
    } else if (c == '\r') {
      line += "\\r";
    } else {
      line += c;
    }
  }
  line += '\n';
  return line;
}

Digest sha256(std::span<const std::uint8_t> bytes) {
  auto context = new_sha256();
  EVP_DigestUpdate(context.get(), bytes.data(), bytes.size());
  return finish_sha256(context.get());
}

Digest sha256(std::string_view text) {
  return sha256(std::span(reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

Result<Digest> sha256_file(const std::filesystem::path& path) {
  std::unique_ptr<std::FILE, decltype(&std::fclose)> file(std::fopen(path.c_str(), "rb"),
                                                          &std::fclose);
  if (!file) {
    return fail(ErrorCode::kIo, path.string() + ": cannot open: " + std::strerror(errno));
  }
  auto context = new_sha256();
  std::vector<std::uint8_t> buffer(1 << 20);
  while (true) {
    const std::size_t got = std::fread(buffer.data(), 1, buffer.size(), file.get());
    if (got > 0) EVP_DigestUpdate(context.get(), buffer.data(), got);
    if (got < buffer.size()) {
      if (std::ferror(file.get())) {
        return fail(ErrorCode::kIo, path.string() + ": read error: " + std::strerror(errno));
      }
      break;
    }
  }
  return finish_sha256(context.get());
}

}  // namespace abf
