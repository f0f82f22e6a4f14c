// The request head check and the chunked decoder of `abf serve`
// (request.hpp, RFC 9112): pure functions of the bytes a connection
// receives.
#include <algorithm>
#include <cctype>
#include <cstring>

#include "abf/server/request.hpp"

namespace abf::server {

// ---------------------------------------------------------------------------
// The request head and chunked framing.

namespace {

bool is_tchar(unsigned char c) noexcept {
  return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool is_token(std::string_view text) noexcept {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return c != '\0' && is_tchar(static_cast<unsigned char>(c));
  });
}

// A control character other than HTAB (DEL included).
bool is_ctl(unsigned char c) noexcept { return (c < 0x20 && c != '\t') || c == 0x7f; }

std::string byte_name(unsigned char c) {
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string("0x") + kHex[c >> 4] + kHex[c & 15];
}

bool equals_ignoring_case(std::string_view a, std::string_view b) noexcept {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim_ows(std::string_view text) noexcept {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::unexpected<RequestError> bad_head(std::uint64_t line, std::string what) {
  return refuse(400, "bad_request", "request head line " + std::to_string(line) + ": " + what);
}

}  // namespace

RequestResult<bool> RequestHeadCheck::scan(std::string_view bytes) {
  for (;;) {
    const std::size_t from = std::max(next_, searched_);
    const std::size_t lf = from < bytes.size() ? bytes.find('\n', from) : std::string_view::npos;
    if (lf == std::string_view::npos) {
      searched_ = bytes.size();
      return false;
    }
    ++line_;
    std::string_view line = bytes.substr(next_, lf - next_);
    next_ = searched_ = lf + 1;
    if (line.empty() || line.back() != '\r') {
      return bad_head(line_, "a line ends in a bare LF (lines end in CRLF)");
    }
    line.remove_suffix(1);
    if (const auto cr = line.find('\r'); cr != std::string_view::npos) {
      return bad_head(line_, "a CR not followed by LF");
    }
    if (!request_line_) {
      if (line.empty()) {
        if (++empty_lines_ > kMaxLeadingEmptyLines) {
          return bad_head(line_, "more than " + std::to_string(kMaxLeadingEmptyLines) +
                                     " empty lines before the request line");
        }
        skipped_ = next_;
        continue;
      }
      // method SP request-target SP HTTP-version
      const auto first = line.find(' ');
      const auto second = first == std::string_view::npos ? first : line.find(' ', first + 1);
      const bool shaped =
          second != std::string_view::npos && line.find(' ', second + 1) == std::string_view::npos;
      if (!shaped) {
        return bad_head(line_, "the request line is not `method SP target SP version`");
      }
      const std::string_view method = line.substr(0, first);
      const std::string_view target = line.substr(first + 1, second - first - 1);
      const std::string_view version = line.substr(second + 1);
      if (!is_token(method)) return bad_head(line_, "the method is not a token");
      // The methods the HTTP parser knows: another would be refused after
      // its request line alone, leaving its header lines unread.
      static constexpr std::string_view kMethods[] = {
          "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"};
      if (std::find(std::begin(kMethods), std::end(kMethods), method) == std::end(kMethods)) {
        return bad_head(line_,
                        "the method is not one of GET, HEAD, POST, PUT, DELETE, CONNECT, "
                        "OPTIONS, TRACE, PATCH (case matters)");
      }
      if (target.empty() || !std::all_of(target.begin(), target.end(), [](char c) {
            return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
          })) {
        return bad_head(line_, "the request target is empty or not visible ASCII");
      }
      if (version != "HTTP/1.1" && version != "HTTP/1.0") {
        return bad_head(line_, "the HTTP version is not HTTP/1.1 or HTTP/1.0");
      }
      request_line_ = true;
      continue;
    }
    if (line.empty()) {
      end_ = next_;
      return true;
    }
    if (line.front() == ' ' || line.front() == '\t') {
      return bad_head(line_, "a field line folded onto the previous one (obs-fold)");
    }
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) return bad_head(line_, "a field line without ':'");
    const std::string_view name = line.substr(0, colon);
    if (!is_token(name)) {
      return bad_head(line_, "the field name is not a token (no whitespace before ':')");
    }
    const std::string_view raw = line.substr(colon + 1);
    for (const char c : raw) {
      if (is_ctl(static_cast<unsigned char>(c))) {
        return bad_head(line_, "control character " + byte_name(static_cast<unsigned char>(c)) +
                                   " in the value of " + std::string(name));
      }
    }
    const std::string_view value = trim_ows(raw);
    if (equals_ignoring_case(name, "Content-Length")) {
      if (content_length_) return bad_head(line_, "Content-Length appears more than once");
      if (value.empty() ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return bad_head(line_, "Content-Length is not a decimal number (1*DIGIT)");
      }
      content_length_ = true;
    } else if (equals_ignoring_case(name, "Transfer-Encoding")) {
      if (transfer_encoding_) return bad_head(line_, "Transfer-Encoding appears more than once");
      transfer_encoding_ = true;
    }
    if (content_length_ && transfer_encoding_) {
      return bad_head(line_, "Content-Length together with Transfer-Encoding");
    }
  }
}

RequestResult<void> ChunkedDecoder::size_line(std::string_view line) {
  std::size_t digits = 0;
  std::uint64_t size = 0;
  while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) {
    if ((size >> 60) != 0) {
      return refuse(
          413, "body_too_large",
          "a chunk size exceeds the server's max_body_bytes (" + std::to_string(max_body_) + ")");
    }
    const char c = line[digits];
    size = size * 16 + static_cast<std::uint64_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    ++digits;
  }
  std::string_view rest = line.substr(digits);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  if (digits == 0 || (!rest.empty() && rest.front() != ';')) {
    return refuse(400, "invalid_chunked_body",
                  "chunk size line at byte " + std::to_string(offset_) +
                      " is not hexadecimal digits (1*HEXDIG, no sign or 0x), optionally "
                      "followed by ';' extensions");
  }
  if (size > max_body_) {
    return refuse(
        413, "body_too_large",
        "a chunk size exceeds the server's max_body_bytes (" + std::to_string(max_body_) + ")");
  }
  remaining_ = size;
  state_ = size == 0 ? State::kTrailer : State::kData;
  return {};
}

RequestResult<std::size_t> ChunkedDecoder::feed(std::string_view bytes, std::string& body) {
  // A size line is short: its digits and extensions fit in 4 KiB.
  constexpr std::size_t kMaxSizeLine = 4096;
  std::size_t used = 0;
  const auto framing = [&](std::string what) {
    return refuse(400, "invalid_chunked_body",
                  what + " at byte " + std::to_string(offset_ + used) + " of the chunked body");
  };
  while (used < bytes.size() && state_ != State::kDone) {
    const char c = bytes[used];
    switch (state_) {
      case State::kSize:
      case State::kTrailer: {
        ++used;
        if (state_ == State::kTrailer && ++trailer_bytes_ > max_trailer_) {
          return refuse(431, "headers_too_large",
                        "the chunked body's trailer fields exceed " + std::to_string(max_trailer_) +
                            " bytes");
        }
        if (c != '\n') {
          if (state_ == State::kSize && line_.size() >= kMaxSizeLine) {
            return framing("a chunk size line longer than 4096 bytes");
          }
          line_ += c;
          continue;
        }
        if (line_.empty() || line_.back() != '\r') return framing("a bare LF (lines end in CRLF)");
        line_.pop_back();
        for (const char d : line_) {
          if (is_ctl(static_cast<unsigned char>(d))) {
            return framing("control character " + byte_name(static_cast<unsigned char>(d)));
          }
        }
        if (state_ == State::kSize) {
          if (auto ok = size_line(line_); !ok) {
            if (ok.error().code == "invalid_chunked_body") {
              return framing(
                  "a chunk size that is not hexadecimal digits (1*HEXDIG, no sign or "
                  "0x), optionally followed by ';' extensions,");
            }
            return std::unexpected(ok.error());
          }
        } else if (line_.empty()) {
          state_ = State::kDone;
        } else if (const auto colon = line_.find(':');
                   colon == std::string::npos ||
                   !is_token(std::string_view(line_).substr(0, colon))) {
          return framing("a trailer line that is not `name: value`");
        }
        line_.clear();
        continue;
      }
      case State::kData: {
        const std::size_t n =
            static_cast<std::size_t>(std::min<std::uint64_t>(remaining_, bytes.size() - used));
        if (n > max_body_ - body.size()) {
          return refuse(413, "body_too_large",
                        "request body exceeds the server's max_body_bytes (" +
                            std::to_string(max_body_) + ")");
        }
        // Reserved once at the limit: pages are only touched as bytes
        // arrive, and no reallocation ever holds two copies (doubling
        // would, up to 1.5x the limit at once).
        if (body.size() + n > body.capacity()) body.reserve(max_body_);
        body.append(bytes.data() + used, n);
        used += n;
        remaining_ -= n;
        if (remaining_ == 0) state_ = State::kDataEnd;
        continue;
      }
      case State::kDataEnd:
        if (c != (data_end_ == 0 ? '\r' : '\n')) return framing("chunk data not followed by CRLF");
        ++used;
        if (++data_end_ == 2) {
          data_end_ = 0;
          state_ = State::kSize;
        }
        continue;
      case State::kDone:
        break;
    }
  }
  offset_ += used;
  return used;
}

}  // namespace abf::server
