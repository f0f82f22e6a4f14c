// The HTTP front's body reader (http_body.hpp).
#include "http_body.hpp"

#include <algorithm>
#include <charconv>

#include <zlib.h>

#include "http_connection.hpp"

namespace abf::server {

namespace {

std::string lower_ascii(std::string text) {
  for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return text;
}

// A chunked body, decoded here (ChunkedDecoder: strict chunk sizes,
// trailer fields read and ignored) from the connection's bytes, never
// past the body's last CRLF: a pipelined request after it stays
// buffered for the next exchange.
RequestResult<std::string> read_chunked(const ServerConfig& config, Connection& connection) {
  // Chunk framing costs bytes too: at most the body again, plus 64 KiB
  // and the trailer section.
  connection.start_body(2 * config.max_body_bytes + 65536 + config.max_header_bytes);
  ChunkedDecoder decoder(config.max_body_bytes, config.max_header_bytes);
  std::string body;
  while (!decoder.done()) {
    const std::string_view bytes = connection.peek();
    if (bytes.empty()) {
      if (connection.over_allowance()) {
        return refuse(413, "body_too_large",
                      "request body exceeds the server's max_body_bytes (" +
                          std::to_string(config.max_body_bytes) + ")");
      }
      if (connection.timed_out()) {
        return refuse(408, "request_timeout",
                      "the request was not complete within request_timeout_seconds (" +
                          std::to_string(config.request_timeout_seconds) + " s)");
      }
      return refuse(400, "incomplete_body", "the connection closed inside the chunked body");
    }
    auto used = decoder.feed(bytes, body);
    if (!used) return std::unexpected(used.error());
    connection.consume(*used);
  }
  t_body_read = true;
  return body;
}

// A body of `expected` bytes (its Content-Length), read from the
// connection's buffer and socket, never past its last byte: a pipelined
// request after it stays buffered for the next exchange.
RequestResult<std::string> read_length(const ServerConfig& config, Connection& connection,
                                       std::size_t expected) {
  connection.start_body(expected);
  std::string body(expected, '\0');
  std::size_t got = 0;
  while (got < expected) {
    const ssize_t n = connection.read(body.data() + got, expected - got);
    if (n <= 0) {
      if (connection.timed_out()) {
        return refuse(408, "request_timeout",
                      "the request was not complete within request_timeout_seconds (" +
                          std::to_string(config.request_timeout_seconds) + " s)");
      }
      return refuse(400, "incomplete_body",
                    "the connection closed after " + std::to_string(got) + " of the " +
                        std::to_string(expected) + " body bytes its Content-Length announced");
    }
    got += static_cast<std::size_t>(n);
  }
  t_body_read = true;
  return body;
}

// A gzip or deflate (zlib) body inflated, to at most `limit` bytes: 413
// past it (so a small body that inflates to gigabytes costs at most the
// limit), 400 "invalid_content_encoding" for data that is not what its
// Content-Encoding says, cut short, or followed by more bytes.
RequestResult<std::string> inflate_body(ContentCoding coding, std::string_view in,
                                        std::size_t limit) {
  const std::string name = coding == ContentCoding::kGzip ? "gzip" : "deflate";
  z_stream stream{};
  // 16 + MAX_WBITS reads a gzip member, MAX_WBITS a zlib stream (RFC 9110
  // 8.4.1.2: "deflate" is the zlib format).
  if (inflateInit2(&stream, coding == ContentCoding::kGzip ? 16 + MAX_WBITS : MAX_WBITS) != Z_OK) {
    return refuse(500, "internal_error", "zlib: inflateInit2 failed");
  }
  std::string out(std::min<std::size_t>(limit, std::max<std::size_t>(4 * in.size(), 4096)), '\0');
  unsigned char probe = 0;  // the byte past a full limit, which only says "more"
  int status = Z_OK;
  for (;;) {
    if (stream.avail_in == 0) {
      const std::size_t at = stream.total_in;
      stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data() + at));
      stream.avail_in = static_cast<uInt>(std::min<std::size_t>(in.size() - at, 1u << 30));
    }
    const std::size_t produced = stream.total_out;
    if (produced == out.size() && out.size() < limit) out.resize(std::min(limit, 2 * out.size()));
    const bool at_limit = produced == out.size();
    stream.next_out = at_limit ? &probe : reinterpret_cast<Bytef*>(out.data() + produced);
    stream.avail_out =
        at_limit ? 1u : static_cast<uInt>(std::min<std::size_t>(out.size() - produced, 1u << 30));
    status = inflate(&stream, Z_NO_FLUSH);
    if (at_limit && stream.total_out > produced) {
      inflateEnd(&stream);
      return refuse(413, "body_too_large",
                    "the " + name + " request body inflates past the server's max_body_bytes (" +
                        std::to_string(limit) + ")");
    }
    // Z_BUF_ERROR: no progress, so every input byte was used (output room
    // is always given): the stream was cut short.
    if (status != Z_OK) break;
  }
  const std::size_t used = stream.total_in, produced = stream.total_out;
  const std::string why = stream.msg != nullptr ? std::string(" (") + stream.msg + ")" : "";
  inflateEnd(&stream);
  if (status == Z_BUF_ERROR) {
    return refuse(400, "invalid_content_encoding",
                  "the request body ends inside its " + name + " data (" + std::to_string(used) +
                      " bytes)");
  }
  if (status != Z_STREAM_END) {
    return refuse(400, "invalid_content_encoding",
                  "the request body is not valid " + name + " data at byte " +
                      std::to_string(used) + why);
  }
  if (used != in.size()) {
    return refuse(400, "invalid_content_encoding",
                  "the request body has " + std::to_string(in.size() - used) +
                      " bytes after the end of its " + name + " data (at byte " +
                      std::to_string(used) + ")");
  }
  out.resize(produced);
  return out;
}

}  // namespace

RequestResult<std::string> read_request_body(const ServerConfig& config,
                                             const httplib::Request& req,
                                             const httplib::ContentReader* reader) {
  const std::size_t limit = config.max_body_bytes;
  const auto too_large = [&] {
    return refuse(
        413, "body_too_large",
        "request body exceeds the server's max_body_bytes (" + std::to_string(limit) + ")");
  };
  const bool chunked = req.has_header("Transfer-Encoding");
  std::size_t expected = 0;
  if (!chunked) {
    if (!req.has_header("Content-Length")) {
      t_body_read = true;
      return std::string();
    }
    const std::string text = req.get_header_value("Content-Length");
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), expected);
    if (error != std::errc{} || end != text.data() + text.size()) {
      if (error == std::errc::result_out_of_range) return too_large();
      return refuse(400, "bad_request", "Content-Length is not a number");
    }
    if (expected > limit) return too_large();
  } else if (lower_ascii(req.get_header_value("Transfer-Encoding")) != "chunked") {
    return refuse(400, "bad_request", "Transfer-Encoding: only chunked is accepted");
  }
  // The coding is checked before a byte of the body is read: 415 for one
  // this server cannot inflate (httplib's own reader would have answered
  // br with a 400, and passed an unknown coding on as if it were none).
  auto coding = parse_content_encoding(req.get_header_value("Content-Encoding"));
  if (!coding) return std::unexpected(coding.error());
  if (!chunked && expected == 0) {
    t_body_read = true;
    return std::string();
  }
  if (reader == nullptr) return refuse(400, "bad_request", "a body is not expected here");
  Connection* connection = t_exchange.connection;
  if (connection == nullptr) return refuse(500, "internal_error", "no connection to read from");
  auto body = chunked ? read_chunked(config, *connection) : read_length(config, *connection, expected);
  if (!body || *coding == ContentCoding::kIdentity) return body;
  return inflate_body(*coding, *body, limit);
}

}  // namespace abf::server
