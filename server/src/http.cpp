// The HTTP/1.1 front of `abf serve` (cpp-httplib). Routing, headers and
// bodies go through request.hpp's pure functions; tenants, tokens, limits
// and the exact answer through Core.
#include "http.hpp"

#include <sys/socket.h>

#include <chrono>
#include <cstring>

#include <httplib.h>

namespace abf::server {

namespace {

using Clock = std::chrono::steady_clock;

// httplib's listen backlog is a compile-time 5 in the Debian library;
// listen(2) again on the bound socket raises it (Linux updates the backlog
// of a listening socket), so a burst of 256 connects is not dropped into
// SYN retries.
constexpr int kListenBacklog = 1024;

template <class Base>
class Listener final : public Base {
 public:
  using Base::Base;
  void raise_backlog() {
    const auto sock = this->svr_sock_.load();
    if (sock != INVALID_SOCKET) ::listen(sock, kListenBacklog);
  }
};

// What the access log line of the request being answered on this thread
// says beyond method, path and status; reset after every line.
struct Access {
  bool set = false;
  std::string tenant;
  std::string route;  // the path with a blob digest replaced (digests are not logged)
  std::string caller;
  std::string error;
  std::uint64_t digests = 0, missing = 0, maybes = 0, catalog_version = 0;
  bool has_version = false;
  std::int64_t answer_us = -1;  // the exact answer alone: filter, then catalog
  Clock::time_point start{};
  Endpoint endpoint = Endpoint::kHttpOther;  // the latency histogram's
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

struct HttpFront::Impl {
  Core& core;
  std::unique_ptr<httplib::Server> server;
  std::function<void()> raise_backlog;
  std::string host;
  int port = 0;

  explicit Impl(Core& c) : core(c) {}

  void send_error(httplib::Response& res, const RequestError& error) {
    res.status = error.status;
    if (error.retry_after_seconds > 0) {
      res.set_header("Retry-After", std::to_string(error.retry_after_seconds));
    }
    res.set_content(error_json(error), "application/json");
    t_access.error = error.code;
  }

  std::size_t header_bytes(const httplib::Request& req) {
    std::size_t total = 0;
    for (const auto& [name, value] : req.headers) total += name.size() + value.size() + 4;
    return total;
  }

  void handle(const httplib::Request& req, httplib::Response& res) {
    t_access = Access{};
    t_access.set = true;
    t_access.start = Clock::now();
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
        return admin_reload(req, res);
      case RouteKind::kFindMissing:
        return find_missing(req, res, route->tenant);
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
    auto caller = core.authenticate(req.get_header_value("Authorization"));
    if (caller) t_access.caller = std::string(caller->id());
    return caller;
  }

  void admin_reload(const httplib::Request& req, httplib::Response& res) {
    auto who = caller(req);
    if (!who) return send_error(res, who.error());
    if (auto ok = core.check_admin(*who); !ok) return send_error(res, ok.error());
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
    // 200 either way: the reload ran; a refused snapshot is reported, and
    // the old one keeps serving.
    const nlohmann::ordered_json body = {{"ok", all_ok}, {"tenants", tenants}};
    res.set_content(body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n",
                    "application/json");
  }

  // Authentication, the tenant, the request bucket: what every tenant
  // request checks first, in this order (so a token for tenant A learns
  // nothing about tenant B: 403 whether B exists or not).
  RequestResult<std::pair<Caller, Tenant*>> admit(const httplib::Request& req,
                                                  std::string_view tenant_name) {
    auto who = caller(req);
    if (!who) return std::unexpected(who.error());
    auto tenant = core.tenant_for(*who, tenant_name);
    if (!tenant) return std::unexpected(tenant.error());
    t_access.tenant = std::string(tenant_name);
    if (auto ok = core.limiter().admit_request(who->bucket); !ok) {
      return std::unexpected(ok.error());
    }
    return std::pair{*who, *tenant};
  }

  void find_missing(const httplib::Request& req, httplib::Response& res,
                    std::string_view tenant_name) {
    auto admitted = admit(req, tenant_name);
    if (!admitted) return send_error(res, admitted.error());
    auto [who, tenant] = *admitted;
    auto encoding = parse_content_type(req.get_header_value("Content-Type"));
    if (!encoding) return send_error(res, encoding.error());
    auto digests = parse_find_missing_body(*encoding, req.body, core.config().max_digests);
    if (!digests) return send_error(res, digests.error());
    t_access.digests = digests->size();
    if (auto ok = core.limiter().admit_digests(who.bucket, digests->size()); !ok) {
      return send_error(res, ok.error());
    }
    const auto answer_start = Clock::now();
    auto outcome = core.find_missing(*tenant, *digests);
    t_access.answer_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - answer_start).count();
    if (!outcome) return send_error(res, outcome.error());
    std::vector<Digest> missing;
    missing.reserve(outcome->missing.size());
    for (std::uint32_t i : outcome->missing) missing.push_back((*digests)[i]);
    t_access.missing = missing.size();
    t_access.maybes = outcome->counts.maybe;
    t_access.catalog_version = outcome->catalog_version;
    t_access.has_version = true;
    res.set_header("X-Abf-Catalog-Version", std::to_string(outcome->catalog_version));
    res.set_header("X-Abf-Missing-Count", std::to_string(missing.size()));
    // Moved into place: set_content would copy the answer (2 MiB for a
    // 64 Ki-digest batch at 99% missing).
    res.body = encode_missing(*encoding, missing, outcome->catalog_version);
    res.set_header("Content-Type", std::string(content_type_of(*encoding)));
  }

  void blob(const httplib::Request& req, httplib::Response& res, std::string_view tenant_name,
            std::string_view blob_text) {
    auto admitted = admit(req, tenant_name);
    if (!admitted) return send_error(res, admitted.error());
    auto [who, tenant] = *admitted;
    auto digest = parse_blob_digest(blob_text);
    if (!digest) return send_error(res, digest.error());
    if (core.logger().enabled(LogLevel::kDebug)) t_access.route = req.path;
    t_access.digests = 1;
    if (auto ok = core.limiter().admit_digests(who.bucket, 1); !ok) {
      return send_error(res, ok.error());
    }
    auto outcome = core.find_missing(*tenant, std::span<const Digest>(&*digest, 1));
    if (!outcome) return send_error(res, outcome.error());
    const bool missing = !outcome->missing.empty();
    t_access.missing = missing ? 1 : 0;
    t_access.maybes = outcome->counts.maybe;
    t_access.catalog_version = outcome->catalog_version;
    t_access.has_version = true;
    res.status = missing ? 404 : 200;
    res.set_header("X-Abf-Catalog-Version", std::to_string(outcome->catalog_version));
    res.set_header("Docker-Content-Digest", "sha256:" + digest->hex());
    // A body only for GET; HEAD answers carry the headers alone.
    const nlohmann::ordered_json body = {{"digest", "sha256:" + digest->hex()},
                                         {"present", !missing},
                                         {"catalog_version", outcome->catalog_version}};
    res.set_content(body.dump() + "\n", "application/json");
  }

  // The access log line, and the request counters, for every response,
  // those httplib makes itself (413, 400 for a bad request line) included.
  void log(const httplib::Request& req, const httplib::Response& res) {
    Access access = std::move(t_access);
    t_access = Access{};
    const auto elapsed = access.set ? Clock::now() - access.start : Clock::duration::zero();
    if (access.set) core.observe_latency(access.endpoint, elapsed);
    core.count_request("http", access.tenant, res.status, access.digests, access.missing);
    if (!core.logger().enabled(LogLevel::kInfo)) return;
    nlohmann::ordered_json line = {
        {"event", "request"},        {"front", "http"},
        {"method", req.method},      {"path", access.set ? access.route : std::string("-")},
        {"status", res.status},      {"tenant", access.tenant},
        {"caller", access.caller},   {"digests", access.digests},
        {"missing", access.missing}, {"maybes", access.maybes}};
    if (access.has_version) line["catalog_version"] = access.catalog_version;
    if (!access.error.empty()) line["error"] = access.error;
    line["us"] = std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
    if (access.answer_us >= 0) line["answer_us"] = access.answer_us;
    line["remote"] = req.remote_addr;
    core.logger().log(LogLevel::kInfo, std::move(line));
  }
};

HttpFront::HttpFront(Core& core) : impl_(std::make_unique<Impl>(core)) {}
HttpFront::~HttpFront() = default;

Result<void> HttpFront::bind(const ListenAddress& address) {
  const ServerConfig& config = impl_->core.config();
  if (config.tls_cert) {
    auto server = std::make_unique<Listener<httplib::SSLServer>>(config.tls_cert->c_str(),
                                                                 config.tls_key->c_str());
    if (!server->is_valid()) {
      return fail(ErrorCode::kIo, "TLS: cannot load the certificate " + config.tls_cert->string() +
                                      " or its key " + config.tls_key->string());
    }
    impl_->raise_backlog = [s = server.get()] { s->raise_backlog(); };
    impl_->server = std::move(server);
  } else {
    auto server = std::make_unique<Listener<httplib::Server>>();
    impl_->raise_backlog = [s = server.get()] { s->raise_backlog(); };
    impl_->server = std::move(server);
  }
  httplib::Server& server = *impl_->server;
  const unsigned threads = config.http_threads;
  // Each connection holds a worker while it is open (keep-alive), so the
  // pool is as large as the connections served at once.
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_keep_alive_max_count(1'000'000);
  server.set_keep_alive_timeout(config.idle_timeout_seconds);
  server.set_read_timeout(config.request_timeout_seconds, 0);
  server.set_write_timeout(config.request_timeout_seconds, 0);
  server.set_payload_max_length(config.max_body_bytes);
  server.set_tcp_nodelay(true);
  Impl* impl = impl_.get();
  const auto handler = [impl](const httplib::Request& req, httplib::Response& res) {
    impl->handle(req, res);
  };
  server.Get(".*", handler);
  server.Post(".*", handler);
  server.Put(".*", handler);
  server.Patch(".*", handler);
  server.Delete(".*", handler);
  server.Options(".*", handler);
  server.set_logger(
      [impl](const httplib::Request& req, const httplib::Response& res) { impl->log(req, res); });
  // Responses httplib makes itself (413 past max_body_bytes, 400 for a
  // request it cannot parse, 414) get the same JSON error body as ours.
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const int status = res.status;
        std::string message = "HTTP " + std::to_string(status);
        if (status == 413) message = "request body exceeds the server's max_body_bytes";
        res.set_content(error_json(RequestError{status, std::string(reason_code(status)), message}),
                        "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content(error_json(RequestError{500, "internal_error", "internal error"}),
                        "application/json");
      });
  impl_->host = address.host;
  if (address.port == 0) {
    impl_->port = server.bind_to_any_port(address.host);
    if (impl_->port < 0) impl_->port = 0;
  } else {
    impl_->port = server.bind_to_port(address.host, address.port) ? address.port : 0;
  }
  if (impl_->port <= 0) {
    return fail(ErrorCode::kIo, "HTTP: cannot listen on " + address.host + ":" +
                                    std::to_string(address.port) + ": " + std::strerror(errno));
  }
  impl_->raise_backlog();
  return {};
}

std::string HttpFront::address() const {
  const std::string& host = impl_->host;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(impl_->port);
}

void HttpFront::run() { impl_->server->listen_after_bind(); }

bool HttpFront::running() const { return impl_->server->is_running(); }

void HttpFront::stop() {
  if (impl_->server) impl_->server->stop();
}

}  // namespace abf::server
