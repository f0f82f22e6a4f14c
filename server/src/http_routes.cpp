// The HTTP front's routes (http_routes.hpp). Adding an endpoint: a
// RouteKind and its path in parse_route (request.cpp), an Endpoint and its
// labels (metrics.hpp), then one case in handle_request and its handler
// here.
#include "http_routes.hpp"

#include <chrono>
#include <string>

#include "admission.hpp"
#include "http_body.hpp"
#include "http_connection.hpp"

namespace abf::server {

namespace {

// What the access log line of the request being answered on this thread
// says beyond method, path and status; reset after every line.
struct Access {
  bool set = false;   // the request reached a handler
  RequestNote note;   // what the admission pipeline learnt (admission.hpp)
  std::string route;  // the path with a blob digest replaced (digests are not logged)
  Clock::time_point start{};
  Endpoint endpoint = Endpoint::kHttpOther;  // the latency histogram's
  std::string request_id;  // X-Request-Id: the client's when sane, else made here
};
thread_local Access t_access;

std::string_view reason_code(int status) {
  switch (status) {
    case 400:
      return "bad_request";
    case 408:
      return "request_timeout";
    case 413:
      return "body_too_large";
    case 414:
      return "uri_too_long";
    case 416:
      return "range_not_satisfiable";
    case 431:
      return "headers_too_large";
    case 404:
      return "not_found";
    default:
      return status >= 500 ? "internal_error" : "bad_request";
  }
}

}  // namespace

struct HttpRoutes::Impl {
  Core& core;
  Admission admission{core};

  explicit Impl(Core& c) : core(c) {}

  void send_error(httplib::Response& res, const RequestError& error) {
    res.status = error.status;
    // RFC 6750 section 3: a 401 names the scheme it wants.
    if (error.status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"abf\"");
    if (error.retry_after_seconds > 0) {
      res.set_header("Retry-After", std::to_string(error.retry_after_seconds));
    }
    res.set_content(error_json(error), "application/json");
    t_access.note.error = error.code;
  }

  std::size_t header_bytes(const httplib::Request& req) {
    std::size_t total = 0;
    for (const auto& [name, value] : req.headers) total += name.size() + value.size() + 4;
    return total;
  }

  void handle(const httplib::Request& req, httplib::Response& res,
              const httplib::ContentReader* reader) {
    handle_request(req, res, reader);
    // A body left unread (a refusal before it, or one cut short) cannot be
    // skipped safely: the connection closes after this answer.
    if (has_body(req) && !t_body_read) close_after(res);
    t_body_read = false;
  }

  static bool has_body(const httplib::Request& req) {
    if (req.has_header("Transfer-Encoding")) return true;
    const std::string length = req.get_header_value("Content-Length");
    return !length.empty() && length != "0";
  }

  static void close_after(httplib::Response& res) {
    t_exchange.close = true;
    if (!res.has_header("Connection")) res.set_header("Connection", "close");
  }

  RequestResult<std::string> read_body(const httplib::Request& req,
                                       const httplib::ContentReader* reader) {
    return read_request_body(core.config(), req, reader);
  }

  void handle_request(const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader* reader) {
    t_access = Access{};
    t_access.set = true;
    t_access.start = Clock::now();
    t_access.request_id = request_id(req.get_header_value("X-Request-Id"));
    t_access.route = req.path;
    auto route = parse_route(req.method, req.path);
    if (route && route->kind == RouteKind::kBlob) {
      t_access.route = "/v1/" + route->tenant + "/blobs/{digest}";
    }
    if (header_bytes(req) > core.config().max_header_bytes) {
      return send_error(
          res, RequestError{431, "headers_too_large",
                            "request headers exceed " +
                                std::to_string(core.config().max_header_bytes) + " bytes"});
    }
    if (!route) return send_error(res, route.error());
    t_access.endpoint = endpoint_of(route->kind);
    if (t_exchange.probe_only) {
      // One answer on a connection past the per-client cap, then it closes
      // (converse ends it; no lingering unless a body is left unread).
      res.set_header("Connection", "close");
      if (route->kind != RouteKind::kHealthz && route->kind != RouteKind::kReadyz) {
        res.set_header("Retry-After", "1");
        return send_error(
            res, RequestError{503, "too_many_connections",
                              "this address has max_connections_per_client (" +
                                  std::to_string(t_exchange.per_client_cap) +
                                  ") open; beyond it only /healthz and /readyz are answered"});
      }
    }
    switch (route->kind) {
      case RouteKind::kHealthz:
        res.set_content("{\"status\":\"ok\"}\n", "application/json");
        return;
      case RouteKind::kReadyz:
        return readyz(req, res);
      case RouteKind::kMetrics: {
        auto who = caller(req);
        if (!who) return send_error(res, who.error());
        if (auto ok = core.check_operations(*who); !ok) return send_error(res, ok.error());
        res.set_content(core.prometheus(), "text/plain; version=0.0.4; charset=utf-8");
        return;
      }
      case RouteKind::kAdminReload:
        return admin_reload(req, res, reader);
      case RouteKind::kFindMissing:
        return find_missing(req, res, route->tenant, reader);
      case RouteKind::kBlob:
        return blob(req, res, route->tenant, route->blob);
    }
  }

  static Endpoint endpoint_of(RouteKind kind) {
    switch (kind) {
      case RouteKind::kFindMissing:
        return Endpoint::kHttpFindMissing;
      case RouteKind::kBlob:
        return Endpoint::kHttpBlob;
      case RouteKind::kMetrics:
        return Endpoint::kHttpMetrics;
      case RouteKind::kReadyz:
        return Endpoint::kHttpReadyz;
      case RouteKind::kHealthz:
        return Endpoint::kHttpHealthz;
      case RouteKind::kAdminReload:
        return Endpoint::kHttpAdmin;
    }
    return Endpoint::kHttpOther;
  }

  // 200 or 503 for everyone; the tenants' details only for a caller who may
  // read operations (any caller when there is no token file). A probe with
  // no token, or one that may not, is not refused: it gets the status.
  void readyz(const httplib::Request& req, httplib::Response& res) {
    const bool ready = core.ready();
    res.status = ready ? 200 : 503;
    nlohmann::ordered_json body = {{"ready", ready}};
    const auto who = caller(req);
    if (who && core.check_operations(*who)) body["tenants"] = core.readiness();
    res.set_content(body.dump() + "\n", "application/json");
  }

  RequestResult<Caller> caller(const httplib::Request& req) {
    return admission.authenticate(req.get_header_value("Authorization"), t_access.note);
  }

  void admin_reload(const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader* reader) {
    auto who = caller(req);
    if (!who) return send_error(res, who.error());
    if (auto ok = core.check_admin(*who); !ok) return send_error(res, ok.error());
    // The body, if any, is read and ignored: a reload re-reads the
    // configured snapshot paths.
    if (auto body = read_body(req, reader); !body) return send_error(res, body.error());
    const auto reports = core.reload("admin");
    nlohmann::ordered_json tenants = nlohmann::ordered_json::array();
    bool all_ok = true;
    for (const auto& report : reports) {
      all_ok = all_ok && report.ok;
      nlohmann::ordered_json item = {{"tenant", report.tenant},
                                     {"ok", report.ok},
                                     {"catalog_version", report.catalog_version}};
      if (!report.ok) item["error"] = report.error;
      tenants.push_back(std::move(item));
    }
    // 500 when any tenant's snapshot was refused (so `curl -f` and probes
    // see it), with every tenant's outcome; the old snapshot keeps serving.
    nlohmann::ordered_json body = {{"ok", all_ok}, {"tenants", tenants}};
    if (!all_ok) {
      res.status = 500;
      std::string reasons;
      for (const auto& report : reports) {
        if (report.ok) continue;
        reasons += (reasons.empty() ? "" : "; ") + report.tenant + ": " + report.error;
      }
      body["error"] = {{"code", "reload_failed"},
                       {"message", "reload refused (what was refused keeps serving its old "
                                   "version): " + reasons}};
      t_access.note.error = "reload_failed";
    }
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                    "application/json");
  }

  // POST /v1/<tenant>/find-missing's parser: the tenant from the path; the
  // digests from the body, in the encoding its Content-Type names (415
  // first), read only when the pipeline asks for them.
  class FindMissingRequest final : public TenantRequest {
   public:
    FindMissingRequest(Impl& impl, const httplib::Request& req, std::string_view tenant,
                       const httplib::ContentReader* reader)
        : impl_(impl), req_(req), tenant_(tenant), reader_(reader) {}
    RequestResult<std::string_view> tenant() override { return tenant_; }
    RequestResult<std::span<const Digest>> digests() override {
      auto encoding = parse_content_type(req_.get_header_value("Content-Type"));
      if (!encoding) return std::unexpected(encoding.error());
      encoding_ = *encoding;
      auto body = impl_.read_body(req_, reader_);
      if (!body) return std::unexpected(body.error());
      auto digests = parse_find_missing_body(encoding_, *body, impl_.core.config().max_digests);
      // The body is freed as this returns, before the answer is made.
      if (!digests) return std::unexpected(digests.error());
      digests_ = std::move(*digests);
      return digests_;
    }
    // The answer's body: the missing digests in the request's encoding.
    std::string encode(const FindMissingOutcome& outcome) const {
      return encode_missing(encoding_, digests_, outcome.missing, outcome.catalog_version);
    }
    BodyEncoding encoding() const noexcept { return encoding_; }

   private:
    Impl& impl_;
    const httplib::Request& req_;
    std::string_view tenant_;
    const httplib::ContentReader* reader_;
    BodyEncoding encoding_ = BodyEncoding::kBinary;
    std::vector<Digest> digests_;
  };

  void find_missing(const httplib::Request& req, httplib::Response& res,
                    std::string_view tenant_name, const httplib::ContentReader* reader) {
    FindMissingRequest request(*this, req, tenant_name, reader);
    auto outcome =
        admission.find_missing(req.get_header_value("Authorization"), request, t_access.note);
    if (!outcome) return send_error(res, outcome.error());
    res.set_header("X-Abf-Catalog-Version", std::to_string(outcome->catalog_version));
    res.set_header("X-Abf-Missing-Count", std::to_string(outcome->missing.size()));
    // Moved into place: set_content would copy the answer (2 MiB for a
    // 64 Ki-digest batch at 99% missing).
    res.body = request.encode(*outcome);
    res.set_header("Content-Type", std::string(content_type_of(request.encoding())));
  }

  // GET and HEAD /v1/<tenant>/blobs/<digest>'s parser: the tenant and the
  // one digest from the path.
  class BlobRequest final : public TenantRequest {
   public:
    BlobRequest(const Impl& impl, const httplib::Request& req, std::string_view tenant,
                std::string_view blob)
        : impl_(impl), req_(req), tenant_(tenant), blob_(blob) {}
    RequestResult<std::string_view> tenant() override { return tenant_; }
    RequestResult<std::span<const Digest>> digests() override {
      auto digest = parse_blob_digest(blob_);
      if (!digest) return std::unexpected(digest.error());
      digest_ = *digest;
      if (impl_.core.logger().enabled(LogLevel::kDebug)) t_access.route = req_.path;
      return std::span<const Digest>(&digest_, 1);
    }
    const Digest& digest() const noexcept { return digest_; }

   private:
    const Impl& impl_;
    const httplib::Request& req_;
    std::string_view tenant_, blob_;
    Digest digest_{};
  };

  void blob(const httplib::Request& req, httplib::Response& res, std::string_view tenant_name,
            std::string_view blob_text) {
    BlobRequest request(*this, req, tenant_name, blob_text);
    auto outcome =
        admission.find_missing(req.get_header_value("Authorization"), request, t_access.note);
    // Blob lines carry no answer_us (only find-missing's and gRPC's do).
    t_access.note.answer_us = -1;
    if (!outcome) return send_error(res, outcome.error());
    const bool missing = !outcome->missing.empty();
    res.status = missing ? 404 : 200;
    res.set_header("X-Abf-Catalog-Version", std::to_string(outcome->catalog_version));
    res.set_header("Docker-Content-Digest", "sha256:" + request.digest().hex());
    // A body only for GET; HEAD answers carry the headers alone.
    res.set_content(encode_blob_answer(request.digest(), !missing, outcome->catalog_version),
                    "application/json");
  }

  // The access log line, and the request counters, for every response,
  // those httplib makes itself (413, 400 for a bad request line) included.
  void log(const httplib::Request& req, const httplib::Response& res) {
    Access access = std::move(t_access);
    t_access = Access{};
    const auto elapsed = access.set ? Clock::now() - access.start : Clock::duration::zero();
    admission.finish(
        AccessLine{.front = "http",
                   .method = req.method,
                   .path = access.set ? std::string_view(access.route) : std::string_view("-"),
                   .remote = req.remote_addr,
                   .endpoint = access.set ? std::optional(access.endpoint) : std::nullopt,
                   .request_id = access.request_id},
        res.status, access.note, elapsed);
  }
};

HttpRoutes::HttpRoutes(Core& core) : impl_(std::make_unique<Impl>(core)) {}
HttpRoutes::~HttpRoutes() = default;

void HttpRoutes::install(httplib::Server& server) {
  Impl* impl = impl_.get();
  const auto handler = [impl](const httplib::Request& req, httplib::Response& res) {
    impl->handle(req, res, nullptr);
  };
  // Methods with a body get its reader: the handler checks everything else
  // first and reads no more than max_body_bytes.
  const auto with_body = [impl](const httplib::Request& req, httplib::Response& res,
                                const httplib::ContentReader& reader) {
    impl->handle(req, res, &reader);
  };
  server.Get(".*", handler);
  server.Post(".*", with_body);
  server.Put(".*", with_body);
  server.Patch(".*", with_body);
  server.Delete(".*", with_body);
  server.Options(".*", handler);
  server.set_logger(
      [impl](const httplib::Request& req, const httplib::Response& res) { impl->log(req, res); });
  // Responses httplib makes itself (413 past max_body_bytes, 400 for a
  // request it cannot parse, 414) get the same JSON error body as ours.
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([impl](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        // httplib answers 400 to headers it could not read; say why, when
        // it was the request's deadline or its header allowance.
        const Connection* connection = t_exchange.connection;
        if (res.status == 400 && connection != nullptr && connection->timed_out()) {
          res.status = 408;
        } else if (res.status == 400 && connection != nullptr && connection->over_allowance()) {
          res.status = 431;
        }
        const int status = res.status;
        std::string message = "HTTP " + std::to_string(status);
        if (status == 413) message = "request body exceeds the server's max_body_bytes";
        if (status == 408) {
          message = "the request was not complete within request_timeout_seconds (" +
                    std::to_string(impl->core.config().request_timeout_seconds) + " s)";
        }
        if (status == 431) {
          message = "request headers exceed " +
                    std::to_string(impl->core.config().max_header_bytes) + " bytes";
        }
        // 400 and 414 here are requests httplib could not parse: what
        // follows them is not read as a request either.
        if (status == 400 || status == 408 || status == 414 || status == 431) {
          res.set_header("Connection", "close");
          t_exchange.close = true;
        }
        res.set_content(error_json(RequestError{status, std::string(reason_code(status)), message}),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  // The connection headers say what this server does, not httplib's
  // defaults: httplib writes "Keep-Alive: timeout=5, max=5" (its own
  // loop's limits, which this front does not use: a connection stays open
  // for idle_timeout_seconds between requests, with no request count) even
  // beside "Connection: close", and "Accept-Ranges: bytes" on every HEAD,
  // though no range is served. A connection that stays open says
  // "Keep-Alive: timeout=<idle_timeout_seconds>"; one that closes says
  // "Connection: close" and nothing else about it.
  const unsigned idle_seconds = impl->core.config().idle_timeout_seconds;
  server.set_post_routing_handler([idle_seconds](const httplib::Request& req,
                                                 httplib::Response& res) {
    res.headers.erase("Keep-Alive");
    res.headers.erase("Accept-Ranges");
    // Every answer names its request, those httplib made itself too (the
    // access line, written after this, carries the same ID).
    if (t_access.request_id.empty()) {
      t_access.request_id = request_id(req.get_header_value("X-Request-Id"));
    }
    res.set_header("X-Request-Id", t_access.request_id);
    // httplib ends an HTTP/1.0 exchange unless it asked "Connection:
    // Keep-Alive" (its exact test), without saying so.
    const bool http10 = req.version == "HTTP/1.0";
    const bool http10_keep = http10 && req.get_header_value("Connection") == "Keep-Alive";
    if (http10 && !http10_keep && !res.has_header("Connection")) {
      res.set_header("Connection", "close");
    }
    if (res.get_header_value("Connection") == "close") return;
    if (http10_keep && !res.has_header("Connection")) res.set_header("Connection", "keep-alive");
    res.set_header("Keep-Alive", "timeout=" + std::to_string(idle_seconds));
  });
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content(error_json(RequestError{500, "internal_error", "internal error"}),
                        "application/json");
      });
}

}  // namespace abf::server
