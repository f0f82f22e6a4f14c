// The HTTP front's body reader (http_body.hpp).
#include "http_body.hpp"

#include <algorithm>
#include <charconv>

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
    if (expected == 0) {
      t_body_read = true;
      return std::string();
    }
  } else if (lower_ascii(req.get_header_value("Transfer-Encoding")) != "chunked") {
    return refuse(400, "bad_request", "Transfer-Encoding: only chunked is accepted");
  }
  if (reader == nullptr) return refuse(400, "bad_request", "a body is not expected here");
  if (chunked && t_exchange.connection != nullptr) return read_chunked(config, *t_exchange.connection);
  if (t_exchange.connection != nullptr) {
    // Chunk framing costs bytes too: at most the body again, plus 64 KiB.
    t_exchange.connection->start_body(2 * limit + 65536);
  }
  std::string body;
  body.reserve(expected);
  bool over = false;
  const bool ok = (*reader)([&](const char* data, std::size_t size) {
    if (size > limit - body.size()) {
      over = true;
      return false;
    }
    // Grown by hand, never past the limit (std::string would double to 2x).
    if (body.size() + size > body.capacity()) {
      body.reserve(std::min(limit, std::max(2 * body.capacity(), body.size() + size)));
    }
    body.append(data, size);
    return true;
  });
  if (over || (t_exchange.connection != nullptr && t_exchange.connection->over_allowance())) {
    return too_large();
  }
  if (!ok) {
    if (t_exchange.connection != nullptr && t_exchange.connection->timed_out()) {
      return refuse(408, "request_timeout",
                    "the request was not complete within request_timeout_seconds (" +
                        std::to_string(config.request_timeout_seconds) + " s)");
    }
    return refuse(400, "incomplete_body", "the request body ended early or is malformed");
  }
  t_body_read = true;
  return body;
}

}  // namespace abf::server
