// Request parsing for `abf serve`: paths, bodies, headers and JSON, as pure
// functions of their bytes, with no network library in sight, so that the
// HTTP and gRPC fronts share them and a libFuzzer target can call them
// (fuzz/serve_request_fuzz.cc). Each function either returns its value or a
// RequestError carrying the HTTP status and a stable code the server sends
// back as JSON: {"error": {"code": "...", "message": "..."}}.
#pragma once

#include <cstddef>
#include <cstdint>
#include <expected>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "abf/digest.hpp"

namespace abf::server {

// Why a request is refused: the HTTP status (gRPC maps it, grpc_status_for),
// a stable snake_case code for programs ("invalid_digest") and a message for
// people that says what and where ("line 3: ...").
struct RequestError {
  int status = 400;
  std::string code;
  std::string message;
  // For 429 and 503: the Retry-After seconds to send (0: none).
  int retry_after_seconds = 0;
};

template <class T>
using RequestResult = std::expected<T, RequestError>;

inline std::unexpected<RequestError> refuse(int status, std::string code, std::string message,
                                            int retry_after_seconds = 0) {
  return std::unexpected<RequestError>(
      RequestError{status, std::move(code), std::move(message), retry_after_seconds});
}

// The JSON body of an error: {"error":{"code":"...","message":"..."}} and a
// newline. Bytes of the message that are not UTF-8 are replaced (U+FFFD).
std::string error_json(const RequestError& error);

// The gRPC status code (grpc::StatusCode's numbering) for an HTTP status:
// 400 INVALID_ARGUMENT (3), 401 UNAUTHENTICATED (16), 403
// PERMISSION_DENIED (7), 404 NOT_FOUND (5), 413 and 429 RESOURCE_EXHAUSTED
// (8), 503 UNAVAILABLE (14), others INTERNAL (13).
int grpc_status_for(int http_status) noexcept;

// ---------------------------------------------------------------------------
// Routes.

enum class RouteKind {
  kFindMissing,  // POST /v1/<tenant>/find-missing
  kBlob,         // GET or HEAD /v1/<tenant>/blobs/<digest>
  kMetrics,      // GET /metrics
  kHealthz,      // GET /healthz
  kReadyz,       // GET /readyz
  kAdminReload,  // POST /admin/reload
};

struct Route {
  RouteKind kind = RouteKind::kHealthz;
  std::string tenant;  // kFindMissing and kBlob
  std::string blob;    // kBlob: the digest text as given (parse_blob_digest)
};

// The route of `method` and `path` (the path as decoded, without the query
// string). 404 "not_found" for a path the server does not serve, 405
// "method_not_allowed" for a known path asked with another method (GET and
// HEAD are one), 400 "invalid_tenant" for a tenant name that is not
// valid_tenant_name.
RequestResult<Route> parse_route(std::string_view method, std::string_view path);

// A tenant name: 1 to 64 of [A-Za-z0-9._-], not starting with '.'.
bool valid_tenant_name(std::string_view name) noexcept;

// The digest of a blob path: "sha256:" and 64 hex digits, either case (the
// OCI form; the algorithm prefix is required, as in an OCI registry's
// paths). 400 "invalid_digest" otherwise, never a 404.
RequestResult<Digest> parse_blob_digest(std::string_view text);

// ---------------------------------------------------------------------------
// Headers.

// The bearer token of an Authorization header value ("Bearer <token>", the
// scheme in any case, one or more spaces). None when `value` is empty (no
// header). 401 "invalid_authorization" for another scheme or an empty
// token.
RequestResult<std::optional<std::string>> parse_bearer(std::string_view value);

// The ID of one request (the X-Request-Id header, gRPC's x-request-id
// metadata): the client's own when it is sane, 1 to 128 characters of
// A-Z a-z 0-9 and - _ . : + / = @ (a UUID, a hex or base64 token, a
// proxy's "host:counter"), else a new one, 32 random hex digits. It is
// echoed in the answer and written in the access line, so nothing that
// could break a log line or a header is ever taken from the client.
bool sane_request_id(std::string_view id) noexcept;
std::string request_id(std::string_view client_id);

// The body encodings of find-missing, chosen by Content-Type.
enum class BodyEncoding {
  kBinary,  // application/octet-stream: consecutive 32-byte records
  kText,    // text/plain: one digest per line, <hex> or sha256:<hex>
  kJson,    // application/json: {"digests": ["sha256:<hex>", ...]}
};

// The encoding a Content-Type names (parameters such as "; charset=utf-8"
// ignored, case-insensitive). 415 "unsupported_media_type" for anything
// else, a missing header included.
RequestResult<BodyEncoding> parse_content_type(std::string_view content_type);

// The Content-Type to answer with, e.g. "application/octet-stream".
std::string_view content_type_of(BodyEncoding encoding) noexcept;

// A request body's Content-Encoding (RFC 9110 8.4): none (absent or
// "identity"), or gzip ("gzip", "x-gzip") and deflate (zlib format), which
// the server inflates. Case-insensitive, spaces around it ignored. 415
// "unsupported_content_encoding" for any other coding (br, zstd, compress)
// and for more than one ("gzip, gzip"), naming it and the ones accepted.
enum class ContentCoding { kIdentity, kGzip, kDeflate };
RequestResult<ContentCoding> parse_content_encoding(std::string_view value);

// ---------------------------------------------------------------------------
// Bodies.

// The digests of a find-missing body, in order, repeats kept. At most
// `max_digests` of them: 413 "too_many_digests" beyond. Malformed input is
// 400 with where it is:
//   binary  "truncated_record": the size is not a multiple of 32 (the byte
//           offset of the cut record is named)
//   text    "invalid_digest": a line that is not one digest, <64 hex> or
//           sha256:<64 hex> (its line number); a second word on a line
//           (a sha256sum name, another digest) is refused, not dropped;
//           blank lines are skipped
//   json    "invalid_json" (not JSON: the byte offset; or a number out of
//           a double's range, such as 1e400), "invalid_request"
//           (not an object with a "digests" array of strings), or
//           "invalid_digest" (an entry that is not "sha256:<64 hex>" or
//           bare hex: its index)
RequestResult<std::vector<Digest>> parse_find_missing_body(BodyEncoding encoding,
                                                           std::string_view body,
                                                           std::size_t max_digests);

// The answer body for the missing digests in `encoding`: 32-byte records;
// lowercase hex lines; or {"missing":["sha256:<hex>",...],
// "catalog_version":N} and a newline.
std::string encode_missing(BodyEncoding encoding, std::span<const Digest> missing,
                           std::uint64_t catalog_version);
// The same body for the request's `digests` at `missing` (indices into
// `digests`, in order), written straight from the request's digests.
std::string encode_missing(BodyEncoding encoding, std::span<const Digest> digests,
                           std::span<const std::uint32_t> missing, std::uint64_t catalog_version);

// The body of a blob answer (GET /v1/<tenant>/blobs/<digest>):
// {"digest":"sha256:<hex>","present":true|false,"catalog_version":N} and a
// newline.
std::string encode_blob_answer(const Digest& digest, bool present, std::uint64_t catalog_version);

// The digest of a gRPC Digest.hash: 64 hex digits, lowercase as the Remote
// Execution API writes them (upper case accepted too). 400
// "invalid_digest" naming `index`, the digest's position in the request;
// also for a negative size_bytes.
RequestResult<Digest> parse_grpc_digest(std::string_view hash, std::int64_t size_bytes,
                                        std::size_t index);

// ---------------------------------------------------------------------------
// The request head and chunked framing (RFC 9112), checked by the server
// itself before and instead of the HTTP library's parser, so that no two
// readers of one connection can disagree on where a request ends.

// Checks a request head as its bytes arrive. `bytes` is everything received
// from the request's first byte on: the same prefix at every call, longer.
// Lines end in CRLF (a bare LF is refused: RFC 9112 section 2.2 allows
// either). Up to kMaxLeadingEmptyLines empty lines before the request line
// are skipped. 400 "bad_request", naming the line, for: a request line that
// is not `method SP target SP version` (GET, HEAD, POST, PUT, DELETE,
// CONNECT, OPTIONS, TRACE or PATCH; visible ASCII; HTTP/1.1 or HTTP/1.0);
// a field name that is not a token or is followed by whitespace;
// a line folded onto the previous one; a control character other than HTAB
// in a field value; a CR not before LF; a Content-Length that is not
// 1*DIGIT, or appears twice (even with the same value); Transfer-Encoding
// twice, or with Content-Length. The server answers such a request and
// closes the connection.
class RequestHeadCheck {
 public:
  static constexpr unsigned kMaxLeadingEmptyLines = 4;

  // True once the head is complete (its empty line seen): skipped() and
  // end() say where it lies. False: more bytes are needed.
  RequestResult<bool> scan(std::string_view bytes);
  // Bytes of empty lines before the request line.
  std::size_t skipped() const noexcept { return skipped_; }
  // The offset just past the head's final CRLF.
  std::size_t end() const noexcept { return end_; }

 private:
  std::size_t next_ = 0;      // the start of the first line not checked
  std::size_t searched_ = 0;  // no LF in [next_, searched_)
  std::size_t skipped_ = 0, end_ = 0;
  std::uint64_t line_ = 0;  // lines checked, the empty ones before included
  unsigned empty_lines_ = 0;
  bool request_line_ = false, content_length_ = false, transfer_encoding_ = false;
};

// Decodes a chunked body (RFC 9112 section 7.1) as its bytes arrive.
// chunk-size is 1*HEXDIG (no sign, no "0x"); chunk extensions after ';' and
// trailer fields after the last chunk are read and ignored, the trailer
// section up to `max_trailer_bytes`. Errors: 400 "invalid_chunked_body"
// for malformed framing (with what and the byte offset), 413
// "body_too_large" past `max_body_bytes` of data.
class ChunkedDecoder {
 public:
  ChunkedDecoder(std::size_t max_body_bytes, std::size_t max_trailer_bytes)
      : max_body_(max_body_bytes), max_trailer_(max_trailer_bytes) {}

  // Consumes a prefix of `bytes` (all of it unless the body ends inside),
  // appending chunk data to `body`; returns the bytes consumed.
  RequestResult<std::size_t> feed(std::string_view bytes, std::string& body);
  // Whether the last chunk and the trailer section have been read.
  bool done() const noexcept { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataEnd, kTrailer, kDone };
  RequestResult<void> size_line(std::string_view line);
  std::size_t max_body_, max_trailer_;
  State state_ = State::kSize;
  std::string line_;             // the line being read (size or trailer)
  std::uint64_t remaining_ = 0;  // data bytes left in this chunk
  std::uint64_t offset_ = 0;     // bytes consumed so far
  std::size_t trailer_bytes_ = 0;
  std::size_t data_end_ = 0;  // bytes of the CRLF after a chunk's data seen
};

}  // namespace abf::server
