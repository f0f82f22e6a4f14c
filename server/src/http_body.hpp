// The HTTP front's body reader: a request's body by its Content-Length or
// chunked (ChunkedDecoder), within max_body_bytes and the request's
// deadline. Internal.
#pragma once

#include <string>

#include <httplib.h>

#include "abf/server/config.hpp"
#include "abf/server/request.hpp"

namespace abf::server {

// The request's body, read only when every check before it passed and
// only up to max_body_bytes, chunked or not: 413 past it (at once for a
// Content-Length over it), 408 past the request's deadline, 400 for a
// body cut short. A request with neither Content-Length nor chunked
// encoding has no body (RFC 9112 section 6.3).
// Reads through the connection this thread answers (t_exchange), and sets
// t_body_read once the body was read to its end.
RequestResult<std::string> read_request_body(const ServerConfig& config,
                                             const httplib::Request& req,
                                             const httplib::ContentReader* reader);

}  // namespace abf::server
