// Request parsing for `abf serve` (request.hpp): routes, headers, error
// bodies and gRPC digests, pure functions of bytes. Bodies and answers are
// in request_body.cpp, the request head and chunked framing in
// request_head.cpp.
#include "abf/server/request.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

#include "request_text.hpp"

namespace abf::server {

using detail::describe_digest_text;
using detail::lower;
using detail::parse_prefixed_or_bare;
using detail::trim;

std::string error_json(const RequestError& error) {
  const nlohmann::json json = {{"error", {{"code", error.code}, {"message", error.message}}}};
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

int grpc_status_for(int http_status) noexcept {
  switch (http_status) {
    case 400:
    case 415:
      return 3;  // INVALID_ARGUMENT
    case 401:
      return 16;  // UNAUTHENTICATED
    case 403:
      return 7;  // PERMISSION_DENIED
    case 404:
      return 5;  // NOT_FOUND
    case 413:
    case 429:
      return 8;  // RESOURCE_EXHAUSTED
    case 503:
      return 14;  // UNAVAILABLE
    default:
      return 13;  // INTERNAL
  }
}

bool valid_tenant_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 64 || name.front() == '.') return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

RequestResult<Route> parse_route(std::string_view method, std::string_view path) {
  const bool get = method == "GET" || method == "HEAD";
  const bool post = method == "POST";
  const auto not_allowed = [&](std::string_view allowed) {
    return refuse(405, "method_not_allowed",
                  std::string(method) + " " + std::string(path) + ": use " + std::string(allowed));
  };
  if (path == "/metrics" || path == "/healthz" || path == "/readyz") {
    if (!get) return not_allowed("GET");
    Route route;
    route.kind = path == "/metrics"   ? RouteKind::kMetrics
                 : path == "/healthz" ? RouteKind::kHealthz
                                      : RouteKind::kReadyz;
    return route;
  }
  if (path == "/admin/reload") {
    if (!post) return not_allowed("POST");
    return Route{RouteKind::kAdminReload, {}, {}};
  }
  constexpr std::string_view kV1 = "/v1/";
  if (path.substr(0, kV1.size()) == kV1) {
    std::string_view rest = path.substr(kV1.size());
    const auto slash = rest.find('/');
    if (slash != std::string_view::npos) {
      const std::string_view tenant = rest.substr(0, slash);
      const std::string_view tail = rest.substr(slash + 1);
      constexpr std::string_view kBlobs = "blobs/";
      const bool find_missing = tail == "find-missing";
      const bool blob = tail.substr(0, kBlobs.size()) == kBlobs && tail.size() > kBlobs.size() &&
                        tail.substr(kBlobs.size()).find('/') == std::string_view::npos;
      if (find_missing || blob) {
        if (!valid_tenant_name(tenant)) {
          return refuse(400, "invalid_tenant",
                        "tenant name of " + std::to_string(tenant.size()) +
                            " bytes: expected 1 to 64 of A-Z a-z 0-9 . _ - (not starting with .)");
        }
        if (find_missing) {
          if (!post) return not_allowed("POST");
          return Route{RouteKind::kFindMissing, std::string(tenant), {}};
        }
        if (!get) return not_allowed("GET or HEAD");
        return Route{RouteKind::kBlob, std::string(tenant),
                     std::string(tail.substr(kBlobs.size()))};
      }
    }
  }
  return refuse(404, "not_found",
                "no such path; the API is POST /v1/<tenant>/find-missing, GET or HEAD "
                "/v1/<tenant>/blobs/sha256:<hex>, GET /metrics, /healthz, /readyz, "
                "POST /admin/reload");
}

RequestResult<Digest> parse_blob_digest(std::string_view text) {
  return parse_prefixed_or_bare(text, /*require_prefix=*/true, "blob path");
}

RequestResult<std::optional<std::string>> parse_bearer(std::string_view value) {
  value = trim(value);
  if (value.empty()) return std::optional<std::string>{};
  constexpr std::string_view kScheme = "bearer";
  if (value.size() <= kScheme.size() || lower(value.substr(0, kScheme.size())) != kScheme ||
      (value[kScheme.size()] != ' ' && value[kScheme.size()] != '\t')) {
    return refuse(401, "invalid_authorization",
                  "Authorization header: expected \"Bearer <token>\"");
  }
  const std::string_view token = trim(value.substr(kScheme.size()));
  if (token.empty() || token.find_first_of(" \t") != std::string_view::npos) {
    return refuse(401, "invalid_authorization",
                  "Authorization header: expected one token after \"Bearer\"");
  }
  return std::optional<std::string>(std::string(token));
}

RequestResult<BodyEncoding> parse_content_type(std::string_view content_type) {
  std::string_view type = content_type.substr(0, content_type.find(';'));
  const std::string name = lower(trim(type));
  if (name == "application/octet-stream") return BodyEncoding::kBinary;
  if (name == "text/plain") return BodyEncoding::kText;
  if (name == "application/json") return BodyEncoding::kJson;
  return refuse(
      415, "unsupported_media_type",
      (name.empty() ? std::string("no Content-Type") : "Content-Type " + std::string(trim(type))) +
          ": send application/octet-stream (32-byte records), text/plain (one digest "
          "per line) or application/json ({\"digests\": [\"sha256:<hex>\", ...]})");
}

bool sane_request_id(std::string_view id) noexcept {
  if (id.empty() || id.size() > 128) return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == ':' || c == '+' || c == '/' || c == '=' ||
           c == '@';
  });
}

std::string request_id(std::string_view client_id) {
  if (sane_request_id(client_id)) return std::string(client_id);
  // Per thread, seeded once from the OS: IDs only need to be unique, not
  // secret (128 bits of a 64-bit generator's two outputs).
  thread_local std::mt19937_64 generator{[] {
    std::random_device device;
    return (static_cast<std::uint64_t>(device()) << 32) ^ device();
  }()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    std::uint64_t bits = generator();
    for (int i = 0; i < 16; ++i, bits >>= 4) id[static_cast<std::size_t>(half * 16 + i)] = kHex[bits & 15];
  }
  return id;
}

RequestResult<ContentCoding> parse_content_encoding(std::string_view value) {
  const std::string name = lower(trim(value));
  if (name.empty() || name == "identity") return ContentCoding::kIdentity;
  if (name == "gzip" || name == "x-gzip") return ContentCoding::kGzip;
  if (name == "deflate") return ContentCoding::kDeflate;
  return refuse(415, "unsupported_content_encoding",
                "Content-Encoding " + std::string(trim(value)) +
                    ": this server inflates gzip and deflate request bodies only (or none, "
                    "identity); send the body uncompressed or gzip-compressed");
}

std::string_view content_type_of(BodyEncoding encoding) noexcept {
  switch (encoding) {
    case BodyEncoding::kBinary:
      return "application/octet-stream";
    case BodyEncoding::kText:
      return "text/plain";
    case BodyEncoding::kJson:
      return "application/json";
  }
  return "application/octet-stream";
}

RequestResult<Digest> parse_grpc_digest(std::string_view hash, std::int64_t size_bytes,
                                        std::size_t index) {
  const std::string where = "blob_digests[" + std::to_string(index) + "]";
  if (size_bytes < 0) {
    return refuse(400, "invalid_digest", where + ": size_bytes is negative");
  }
  auto digest = parse_hex_digest(hash);
  if (!digest) {
    return refuse(
        400, "invalid_digest",
        where + ": hash must be 64 hex digits (SHA-256), got " + describe_digest_text(hash));
  }
  return *digest;
}

}  // namespace abf::server
