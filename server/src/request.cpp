// Request parsing for `abf serve` (request.hpp): pure functions of bytes.
#include "abf/server/request.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <optional>
#include <random>

#include <nlohmann/json.hpp>

namespace abf::server {

namespace {

constexpr std::string_view kShaPrefix = "sha256:";

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) {
    return static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  });
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

// A digest text for messages: never the digest itself (digests are not
// logged, and error messages are logged), only its length and shape.
std::string describe_digest_text(std::string_view text) {
  return std::to_string(text.size()) + " bytes";
}

RequestResult<Digest> parse_prefixed_or_bare(std::string_view text, bool require_prefix,
                                             const std::string& where) {
  std::string_view hex = text;
  if (hex.size() >= kShaPrefix.size() && lower(hex.substr(0, kShaPrefix.size())) == kShaPrefix) {
    hex.remove_prefix(kShaPrefix.size());
  } else if (require_prefix) {
    const auto colon = text.find(':');
    if (colon != std::string_view::npos && colon < 16) {
      return refuse(400, "invalid_digest",
                    where + ": digest algorithm '" + std::string(text.substr(0, colon)) +
                        "' is not supported: only sha256:<64 hex digits>");
    }
    return refuse(400, "invalid_digest",
                  where + ": expected sha256:<64 hex digits>, got " + describe_digest_text(text));
  }
  auto digest = parse_hex_digest(hex);
  if (!digest) {
    return refuse(400, "invalid_digest",
                  where + ": expected 64 hex digits after sha256:, got " +
                      describe_digest_text(hex) +
                      (hex.size() == 64 ? " with a non-hex digit" : ""));
  }
  return *digest;
}

// JSON bodies, read with nlohmann-json's SAX interface: no DOM is built
// (a DOM of a 32 MiB body of small numbers took 610 MB, and of nested
// arrays 890 MB), digests are kept as they come, and reading stops at the
// first mistake, at max_digests + 1 digests and at kMaxJsonDepth levels.
// What a body costs is its digests (32 bytes each, fewer than its bytes)
// and one string at a time.
constexpr std::size_t kMaxJsonDepth = 32;

class DigestListSax {
 public:
  using json = nlohmann::json;
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  explicit DigestListSax(std::size_t max_digests) : max_digests_(max_digests) {}

  std::vector<Digest> digests;
  std::optional<RequestError> error;

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_integer(number_integer_t) { return scalar(); }
  bool number_unsigned(number_unsigned_t) { return scalar(); }
  bool number_float(number_float_t, const string_t&) { return scalar(); }
  bool binary(binary_t&) { return scalar(); }
  bool string(string_t& text) {
    if (!in_list()) return scalar();
    const std::size_t index = digests.size();
    if (index == max_digests_) {
      return stop(413, "too_many_digests",
                  "request has more than " + std::to_string(max_digests_) +
                      " digests; the limit is " + std::to_string(max_digests_) +
                      " per request: split the batch");
    }
    auto digest = parse_prefixed_or_bare(text, /*require_prefix=*/false,
                                         "JSON body: digests[" + std::to_string(index) + "]");
    if (!digest) {
      error = digest.error();
      return false;
    }
    digests.push_back(*digest);
    return true;
  }
  bool start_object(std::size_t) {
    if (in_list()) return not_a_string();
    if (depth_ == 1 && key_is_digests_) return not_a_list();
    return enter();
  }
  bool key(string_t& name) {
    key_is_digests_ = depth_ == 1 && name == "digests";
    if (key_is_digests_ && seen_digests_) {
      return stop(400, "invalid_request", "JSON body: \"digests\" is given twice");
    }
    return true;
  }
  bool end_object() {
    --depth_;
    if (depth_ == 0 && !seen_digests_) return not_a_list();
    return true;
  }
  bool start_array(std::size_t) {
    if (in_list()) return not_a_string();
    if (depth_ == 0) return not_a_list();
    if (depth_ == 1 && key_is_digests_) {
      seen_digests_ = true;
      list_depth_ = depth_ + 1;
    }
    return enter();
  }
  bool end_array() {
    if (depth_ == list_depth_) list_depth_ = 0;
    --depth_;
    return true;
  }
  bool parse_error(std::size_t position, const std::string&,
                   const nlohmann::detail::exception& ex) {
    // nlohmann-json reports a number past a double's range (1e400) as
    // out_of_range 406 through this call too.
    if (ex.id == 406) {
      error = RequestError{400, "invalid_json",
                           "JSON body: a number is out of range"
                           " (expected {\"digests\": [\"sha256:<hex>\", ...]})"};
    } else {
      error = RequestError{400, "invalid_json",
                           "JSON body: not JSON at byte " + std::to_string(position) +
                               " (expected {\"digests\": [\"sha256:<hex>\", ...]})"};
    }
    return false;
  }

 private:
  bool in_list() const noexcept { return list_depth_ != 0 && depth_ == list_depth_; }
  bool scalar() {
    if (in_list()) return not_a_string();
    if (depth_ == 0 || (depth_ == 1 && key_is_digests_)) return not_a_list();
    return true;
  }
  bool enter() {
    if (++depth_ > kMaxJsonDepth) {
      return stop(400, "invalid_json",
                  "JSON body: nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    return true;
  }
  bool not_a_string() {
    return stop(400, "invalid_digest",
                "JSON body: digests[" + std::to_string(digests.size()) +
                    "]: expected a string \"sha256:<hex>\"");
  }
  bool not_a_list() {
    return stop(400, "invalid_request",
                "JSON body: expected an object with a \"digests\" array of strings");
  }
  bool stop(int status, std::string code, std::string message) {
    error = RequestError{status, std::move(code), std::move(message)};
    return false;
  }

  std::size_t max_digests_;
  std::size_t depth_ = 0;        // objects and arrays open
  std::size_t list_depth_ = 0;   // depth_ inside the "digests" array; 0 outside it
  bool key_is_digests_ = false;  // the value being read is the top object's "digests"
  bool seen_digests_ = false;
};

RequestResult<std::vector<Digest>> parse_json_body(std::string_view body, std::size_t max_digests) {
  DigestListSax sax(max_digests);
  const bool ok = nlohmann::json::sax_parse(body, &sax, nlohmann::json::input_format_t::json,
                                            /*strict=*/true);
  if (sax.error) return std::unexpected(std::move(*sax.error));
  if (!ok) {
    return refuse(400, "invalid_json",
                  "JSON body: not JSON (expected {\"digests\": [\"sha256:<hex>\", ...]})");
  }
  return std::move(sax.digests);
}

// One line of a text/plain body: one digest, bare hex or sha256:<hex>
// (either case; surrounding spaces, tabs and '\r' ignored). A second word is
// refused, never read as a sha256sum name: `<hex>  <hex>` would lose its
// second digest, and a NUL-separated `sha256sum -z` body all but its first.
RequestResult<Digest> parse_text_line(std::string_view line, std::uint64_t line_number) {
  const auto blank = [](char c) { return c == ' ' || c == '\t' || c == '\r'; };
  while (!line.empty() && blank(line.front())) line.remove_prefix(1);
  while (!line.empty() && blank(line.back())) line.remove_suffix(1);
  const auto where = [&] { return "text body: line " + std::to_string(line_number); };
  if (const auto space = line.find_first_of(" \t"); space != std::string_view::npos) {
    return refuse(400, "invalid_digest",
                  where() + ": more than one word (" + describe_digest_text(line.substr(0, space)) +
                      ", then " + describe_digest_text(line.substr(space)) +
                      "): send one digest a line, <64 hex digits> or sha256:<64 hex digits>");
  }
  const bool prefixed =
      line.size() >= kShaPrefix.size() && lower(line.substr(0, kShaPrefix.size())) == kShaPrefix;
  const std::string_view hex = prefixed ? line.substr(kShaPrefix.size()) : line;
  auto digest = parse_hex_digest(hex);
  if (!digest) {
    return refuse(400, "invalid_digest",
                  where() + ": expected " +
                      (prefixed ? "64 hex digits after sha256:"
                                : "<64 hex digits> or sha256:<64 hex digits>") +
                      ", got " + describe_digest_text(hex) +
                      (hex.size() == 64 ? " with a non-hex digit" : ""));
  }
  return *digest;
}

}  // namespace

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

RequestResult<std::vector<Digest>> parse_find_missing_body(BodyEncoding encoding,
                                                           std::string_view body,
                                                           std::size_t max_digests) {
  const auto too_many = [&](std::size_t count) {
    return refuse(413, "too_many_digests",
                  "request has " +
                      (count == 0 ? std::string("more than ") + std::to_string(max_digests)
                                  : std::to_string(count)) +
                      " digests; the limit is " + std::to_string(max_digests) +
                      " per request: split the batch");
  };
  std::vector<Digest> digests;
  switch (encoding) {
    case BodyEncoding::kBinary: {
      if (body.size() % Digest::kSize != 0) {
        const std::size_t cut = body.size() / Digest::kSize * Digest::kSize;
        return refuse(400, "truncated_record",
                      "binary body of " + std::to_string(body.size()) +
                          " bytes is not whole 32-byte records: the record at byte offset " +
                          std::to_string(cut) + " has " + std::to_string(body.size() - cut) +
                          " bytes");
      }
      const std::size_t count = body.size() / Digest::kSize;
      if (count > max_digests) return too_many(count);
      digests.resize(count);
      if (count != 0) std::memcpy(digests.data(), body.data(), body.size());
      return digests;
    }
    case BodyEncoding::kText: {
      std::uint64_t line_number = 0;
      std::size_t start = 0;
      while (start < body.size()) {
        std::size_t end = body.find('\n', start);
        if (end == std::string_view::npos) end = body.size();
        const std::string_view line = body.substr(start, end - start);
        start = end + 1;
        ++line_number;
        if (is_blank_line(line)) continue;
        auto digest = parse_text_line(line, line_number);
        if (!digest) return std::unexpected(digest.error());
        if (digests.size() == max_digests) return too_many(0);
        digests.push_back(*digest);
      }
      return digests;
    }
    case BodyEncoding::kJson:
      return parse_json_body(body, max_digests);
  }
  return digests;
}

namespace {

// The find-missing answer body of `count` digests, the i-th `at(i)`.
template <class At>
std::string encode_missing_with(BodyEncoding encoding, std::size_t count, At at,
                                std::uint64_t catalog_version) {
  std::string out;
  switch (encoding) {
    case BodyEncoding::kBinary:
      out.resize(count * Digest::kSize);
      for (std::size_t i = 0; i < count; ++i) {
        std::memcpy(out.data() + i * Digest::kSize, &at(i), Digest::kSize);
      }
      return out;
    case BodyEncoding::kText:
      out.resize(count * 65);
      for (std::size_t i = 0; i < count; ++i) {
        write_hex(at(i), out.data() + i * 65);
        out[i * 65 + 64] = '\n';
      }
      return out;
    case BodyEncoding::kJson: {
      // Written by hand: 75 bytes a digest, no allocation per entry.
      out.reserve(count * 75 + 64);
      out += "{\"missing\":[";
      char hex[64];
      for (std::size_t i = 0; i < count; ++i) {
        if (i != 0) out += ',';
        write_hex(at(i), hex);
        out += "\"sha256:";
        out.append(hex, sizeof hex);
        out += '"';
      }
      out += "],\"catalog_version\":" + std::to_string(catalog_version) + "}\n";
      return out;
    }
  }
  return out;
}

}  // namespace

std::string encode_missing(BodyEncoding encoding, std::span<const Digest> missing,
                           std::uint64_t catalog_version) {
  if (encoding == BodyEncoding::kBinary) {
    // The records are the digests' own bytes: one copy.
    std::string out(missing.size() * Digest::kSize, '\0');
    if (!missing.empty()) std::memcpy(out.data(), missing.data(), out.size());
    return out;
  }
  return encode_missing_with(
      encoding, missing.size(), [&](std::size_t i) -> const Digest& { return missing[i]; },
      catalog_version);
}

std::string encode_missing(BodyEncoding encoding, std::span<const Digest> digests,
                           std::span<const std::uint32_t> missing, std::uint64_t catalog_version) {
  return encode_missing_with(
      encoding, missing.size(), [&](std::size_t i) -> const Digest& { return digests[missing[i]]; },
      catalog_version);
}

std::string encode_blob_answer(const Digest& digest, bool present, std::uint64_t catalog_version) {
  // Written by hand, as nlohmann's dump() writes it: no character of it
  // needs escaping.
  std::string out = "{\"digest\":\"sha256:";
  char hex[64];
  write_hex(digest, hex);
  out.append(hex, sizeof hex);
  out += present ? "\",\"present\":true" : "\",\"present\":false";
  out += ",\"catalog_version\":" + std::to_string(catalog_version) + "}\n";
  return out;
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
