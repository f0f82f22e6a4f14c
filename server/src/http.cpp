// The HTTP/1.1 front of `abf serve`. This file owns the sockets: the
// listener (no SO_REUSEPORT), the accept loop with the connection caps, a
// thread per open connection, TLS (OpenSSL), and a deadline for each whole
// request that a trickle of bytes does not move. cpp-httplib parses each
// request and writes each response (Server::process_request on a Stream of
// ours). Routing, headers and bodies go through request.hpp's pure
// functions; tokens, tenants, limits and the exact answer through the
// admission pipeline (admission.hpp): a tenant endpoint is a parser (a
// TenantRequest) and one call.
#include "http.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <httplib.h>

#include "admission.hpp"

namespace abf::server {

namespace {

using Clock = std::chrono::steady_clock;

// The listen(2) backlog: a burst of 256 connects is not dropped into SYN
// retries.
constexpr int kListenBacklog = 1024;
// Bytes of request line and headers beyond max_header_bytes that a request
// may send before its handler runs (the request line is up to 8 KiB, and the
// read buffer may hold the start of the body).
constexpr std::size_t kHeaderSlack = 8192 + 16384;

// httplib's Server with its request parser opened to our connections.
class Engine final : public httplib::Server {
 public:
  bool serve(httplib::Stream& stream, bool close_connection, bool& connection_closed) {
    return process_request(stream, close_connection, connection_closed, [](httplib::Request&) {});
  }
};

// One accepted connection, plain or TLS, as httplib reads and writes it.
// Reads are buffered (httplib reads request lines a byte at a time) and
// stop at the request's deadline and at its byte allowance; writes stop at
// the response's deadline. Sockets are non-blocking; every wait is a
// poll(2) bounded by a deadline, which shutdown(2) from another thread ends.
class Connection final : public httplib::Stream {
 public:
  Connection(int fd, SSL* ssl, std::string ip, int port)
      : fd_(fd), ssl_(ssl), ip_(std::move(ip)), port_(port) {}
  ~Connection() override {
    if (ssl_ != nullptr) SSL_free(ssl_);
    ::close(fd_);
  }

  // A new request: it must be read by `deadline`, and may send
  // `allowance` bytes before its body is reached.
  void start_request(Clock::time_point deadline, std::size_t allowance) {
    // A buffer grown for a long head goes back to its usual size.
    if (begin_ == end_ && buffer_.size() > kBufferBytes) {
      std::vector<char>(kBufferBytes).swap(buffer_);
      begin_ = end_ = 0;
    }
    read_deadline_ = deadline;
    allowance_ = allowance;
    writing_ = false;
    timed_out_ = false;
    over_allowance_ = false;
  }
  // Reads the request's head (up to its empty line) into the buffer, by the
  // request's deadline and within its allowance, and checks it
  // (RequestHeadCheck) before httplib parses it; empty lines before it are
  // dropped. True: the head is buffered. False: the client closed, or
  // timed_out() or over_allowance(). An error: the head is malformed.
  RequestResult<bool> read_head() {
    RequestHeadCheck check;
    for (;;) {
      auto done = check.scan(std::string_view(buffer_.data() + begin_, end_ - begin_));
      if (!done) return std::unexpected(done.error());
      if (*done) {
        begin_ += check.skipped();
        return true;
      }
      if (end_ - begin_ >= allowance_) {
        over_allowance_ = true;
        return false;
      }
      if (end_ == buffer_.size()) {
        // The check's offsets are from begin_: moving the bytes keeps them.
        if (begin_ > 0) {
          std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
          end_ -= begin_;
          begin_ = 0;
        } else {
          buffer_.resize(2 * buffer_.size());
        }
      }
      const ssize_t got = receive(buffer_.data() + end_, buffer_.size() - end_);
      if (got <= 0) return false;
      end_ += static_cast<std::size_t>(got);
    }
  }

  // The buffered bytes of the request (reading more by its deadline when
  // none are), within its allowance; empty when the client closed, the
  // deadline passed or the allowance is spent. consume() takes them.
  std::string_view peek() {
    if (allowance_ == 0) {
      over_allowance_ = true;
      return {};
    }
    if (begin_ == end_) {
      const ssize_t got = receive(buffer_.data(), buffer_.size());
      if (got <= 0) return {};
      begin_ = 0;
      end_ = static_cast<std::size_t>(got);
    }
    return {buffer_.data() + begin_, std::min(end_ - begin_, allowance_)};
  }
  void consume(std::size_t n) {
    begin_ += n;
    allowance_ -= n;
  }

  // The request's body is about to be read: `allowance` more bytes.
  void start_body(std::size_t allowance) { allowance_ = allowance; }
  bool timed_out() const noexcept { return timed_out_; }
  bool over_allowance() const noexcept { return over_allowance_; }
  bool wrote() const noexcept { return writing_; }
  int fd() const noexcept { return fd_; }

  // Waits up to `timeout` for the next request's first byte; false when
  // the client closed, the time passed or the socket was shut down.
  bool wait_for_request(std::chrono::milliseconds timeout) {
    if (begin_ < end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0)) return true;
    const auto deadline = Clock::now() + timeout;
    pollfd p{fd_, POLLIN, 0};
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) return false;
      const int ready = ::poll(&p, 1, static_cast<int>(left.count()));
      if (ready > 0) return (p.revents & POLLIN) != 0;
      if (ready < 0 && errno != EINTR) return false;
    }
  }

  // The TLS handshake, by `deadline`.
  bool handshake(Clock::time_point deadline) {
    for (;;) {
      const int done = SSL_accept(ssl_);
      if (done == 1) return true;
      const int error = SSL_get_error(ssl_, done);
      if (error == SSL_ERROR_WANT_READ) {
        if (!wait(POLLIN, deadline)) return false;
      } else if (error == SSL_ERROR_WANT_WRITE) {
        if (!wait(POLLOUT, deadline)) return false;
      } else {
        ERR_clear_error();
        return false;
      }
    }
  }

  bool is_readable() const override {
    return begin_ < end_ || (ssl_ != nullptr && SSL_pending(ssl_) > 0) ||
           const_cast<Connection*>(this)->wait(POLLIN, read_deadline_);
  }
  bool is_writable() const override {
    return const_cast<Connection*>(this)->wait(POLLOUT, Clock::now() + std::chrono::seconds(1));
  }

  ssize_t read(char* out, std::size_t size) override {
    if (size == 0) return 0;
    if (allowance_ == 0) {
      over_allowance_ = true;
      return -1;
    }
    size = std::min(size, allowance_);
    if (begin_ == end_) {
      if (size >= buffer_.size()) {
        const ssize_t got = receive(out, size);
        if (got > 0) allowance_ -= static_cast<std::size_t>(got);
        return got;
      }
      const ssize_t got = receive(buffer_.data(), buffer_.size());
      if (got <= 0) return got;
      begin_ = 0;
      end_ = static_cast<std::size_t>(got);
    }
    const std::size_t n = std::min(size, end_ - begin_);
    std::memcpy(out, buffer_.data() + begin_, n);
    begin_ += n;
    allowance_ -= n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* data, std::size_t size) override {
    if (!writing_) {
      writing_ = true;
      write_deadline_ = Clock::now() + write_timeout;
    }
    for (;;) {
      if (ssl_ != nullptr) {
        const int wrote =
            SSL_write(ssl_, data, static_cast<int>(std::min<std::size_t>(size, 1 << 30)));
        if (wrote > 0) return wrote;
        const int error = SSL_get_error(ssl_, wrote);
        if (error == SSL_ERROR_WANT_WRITE) {
          if (!wait(POLLOUT, write_deadline_)) return -1;
        } else if (error == SSL_ERROR_WANT_READ) {
          if (!wait(POLLIN, write_deadline_)) return -1;
        } else {
          ERR_clear_error();
          return -1;
        }
        continue;
      }
      const ssize_t wrote = ::send(fd_, data, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (wrote >= 0) return wrote;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!wait(POLLOUT, write_deadline_)) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = ip_;
    port = port_;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    ip.clear();
    port = 0;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      describe(address, ip, port);
    }
  }
  socket_t socket() const override { return fd_; }

  // Writes `text` (a whole response made here) if it can be, by `deadline`.
  void write_all(std::string_view text) {
    while (!text.empty()) {
      const ssize_t wrote = write(text.data(), text.size());
      if (wrote <= 0) return;
      text.remove_prefix(static_cast<std::size_t>(wrote));
    }
  }

  // Before closing a connection whose request was not read to its end: no
  // more writing, and what the client still sends is read and dropped for a
  // moment (1 s, 1 MiB at most), so the answer reaches it before the
  // close's reset would discard it (nginx's lingering close).
  void linger() {
    if (ssl_ == nullptr) ::shutdown(fd_, SHUT_WR);
    read_deadline_ = Clock::now() + std::chrono::seconds(1);
    allowance_ = std::size_t{1} << 20;
    begin_ = end_ = 0;
    while (allowance_ > 0) {
      const ssize_t got = receive(buffer_.data(), std::min(buffer_.size(), allowance_));
      if (got <= 0) break;
      allowance_ -= static_cast<std::size_t>(got);
    }
  }

  static void describe(const sockaddr_storage& address, std::string& ip, int& port) {
    char text[INET6_ADDRSTRLEN] = {};
    if (address.ss_family == AF_INET) {
      const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
      ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
      port = ntohs(v4.sin_port);
    } else if (address.ss_family == AF_INET6) {
      const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
      ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
      port = ntohs(v6.sin6_port);
    }
    ip = text;
  }

  std::chrono::seconds write_timeout{10};

 private:
  // One read from the socket (TLS or not) by the request's deadline.
  ssize_t receive(char* out, std::size_t size) {
    for (;;) {
      if (ssl_ != nullptr) {
        const int got = SSL_read(ssl_, out, static_cast<int>(std::min<std::size_t>(size, 1 << 30)));
        if (got > 0) return got;
        const int error = SSL_get_error(ssl_, got);
        if (error == SSL_ERROR_WANT_READ) {
          if (!wait(POLLIN, read_deadline_)) return -1;
        } else if (error == SSL_ERROR_WANT_WRITE) {
          if (!wait(POLLOUT, read_deadline_)) return -1;
        } else {
          ERR_clear_error();
          return error == SSL_ERROR_ZERO_RETURN ? 0 : -1;
        }
        continue;
      }
      const ssize_t got = ::recv(fd_, out, size, MSG_DONTWAIT);
      if (got >= 0) return got;
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
      if (!wait(POLLIN, read_deadline_)) return -1;
    }
  }

  // Waits for `events` until `deadline`; false (and timed_out) past it.
  bool wait(short events, Clock::time_point deadline) {
    pollfd p{fd_, events, 0};
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) {
        timed_out_ = true;
        return false;
      }
      const int ready = ::poll(&p, 1, static_cast<int>(std::min<long long>(left + 1, 1 << 30)));
      if (ready > 0) return true;  // readable, writable, or closed: the call says which
      if (ready < 0 && errno != EINTR) return false;
    }
  }

  int fd_;
  SSL* ssl_;
  std::string ip_;
  int port_;
  static constexpr std::size_t kBufferBytes = 16384;
  std::vector<char> buffer_ = std::vector<char>(kBufferBytes);
  std::size_t begin_ = 0, end_ = 0;
  std::size_t allowance_ = 0;
  Clock::time_point read_deadline_{}, write_deadline_{};
  bool writing_ = false, timed_out_ = false, over_allowance_ = false;
};

// The connection whose request this thread is answering, for the handler:
// it marks how much body may be read, and whether the connection must close
// after the answer (a body left unread cannot be skipped safely).
struct Exchange {
  Connection* connection = nullptr;
  bool close = false;
  // A connection its address's max_connections_per_client would have
  // refused, let in for one health probe (Impl::run): /healthz and /readyz
  // are answered on it, anything else 503 too_many_connections; it closes
  // after that one answer.
  bool probe_only = false;
  std::size_t per_client_cap = 0;
};
thread_local Exchange t_exchange;

// What the access log line of the request being answered on this thread
// says beyond method, path and status; reset after every line.
struct Access {
  bool set = false;   // the request reached a handler
  RequestNote note;   // what the admission pipeline learnt (admission.hpp)
  std::string route;  // the path with a blob digest replaced (digests are not logged)
  Clock::time_point start{};
  Endpoint endpoint = Endpoint::kHttpOther;  // the latency histogram's
};
thread_local Access t_access;
// Whether the handler read the request's body to its end.
thread_local bool t_body_read = false;

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
  Admission admission{core};
  Engine engine;
  SSL_CTX* tls = nullptr;
  int listener = -1;
  int wake[2] = {-1, -1};  // stop() writes here to end the accept loop's poll
  std::string host;
  int port = 0;
  std::atomic<bool> running{false};
  std::atomic<bool> stopping{false};

  // Open connections: every one has a thread. `idle` ones wait for their
  // next request and are closed at once on stop; busy ones get
  // shutdown_grace_seconds.
  struct Open {
    int fd;
    bool idle;
  };
  std::mutex mutex;
  std::condition_variable changed;
  std::uint64_t next_id = 0;
  std::unordered_map<std::uint64_t, Open> open;
  std::unordered_map<std::string, unsigned> per_client;
  // Probe-only connections open per address (beyond its per-client cap):
  // at most kProbeSlotsPerClient, so 300 idle connections from one address
  // do not make its health probes fail, and the bound on what one address
  // holds is still max_connections_per_client + kProbeSlotsPerClient.
  static constexpr unsigned kProbeSlotsPerClient = 2;
  std::unordered_map<std::string, unsigned> probes_per_client;
  // Threads kept for the next connection (up to http_threads) and the
  // accepted connections waiting for one.
  struct Accepted {
    int fd;
    std::string ip;
    int port;
    std::uint64_t id;
    bool probe_only = false;
  };
  std::deque<Accepted> queue;
  std::size_t threads = 0, idle_threads = 0;
  bool exiting = false;  // run() is done with connections: threads end
  std::condition_variable work;

  explicit Impl(Core& c) : core(c) {}
  ~Impl() {
    if (listener >= 0) ::close(listener);
    for (int fd : wake) {
      if (fd >= 0) ::close(fd);
    }
    if (tls != nullptr) SSL_CTX_free(tls);
  }

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

  // The request's body, read only when every check before it passed and
  // only up to max_body_bytes, chunked or not: 413 past it (at once for a
  // Content-Length over it), 408 past the request's deadline, 400 for a
  // body cut short. A request with neither Content-Length nor chunked
  // encoding has no body (RFC 9112 section 6.3).
  RequestResult<std::string> read_body(const httplib::Request& req,
                                       const httplib::ContentReader* reader) {
    const std::size_t limit = core.config().max_body_bytes;
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
    if (chunked && t_exchange.connection != nullptr) return read_chunked(*t_exchange.connection);
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
                          std::to_string(core.config().request_timeout_seconds) + " s)");
      }
      return refuse(400, "incomplete_body", "the request body ended early or is malformed");
    }
    t_body_read = true;
    return body;
  }

  // A chunked body, decoded here (ChunkedDecoder: strict chunk sizes,
  // trailer fields read and ignored) from the connection's bytes, never
  // past the body's last CRLF: a pipelined request after it stays
  // buffered for the next exchange.
  RequestResult<std::string> read_chunked(Connection& connection) {
    const ServerConfig& config = core.config();
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

  static std::string lower_ascii(std::string text) {
    for (char& c : text) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
    return text;
  }

  void handle_request(const httplib::Request& req, httplib::Response& res,
                      const httplib::ContentReader* reader) {
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
                   .endpoint = access.set ? std::optional(access.endpoint) : std::nullopt},
        res.status, access.note, elapsed);
  }

  // A connection the caps refuse: a 503 if it is plain HTTP (best effort,
  // never waiting), then closed.
  void refuse_connection(int fd, std::string_view why) {
    if (tls == nullptr) {
      const std::string body =
          error_json(RequestError{503, "too_many_connections", std::string(why)});
      const std::string text =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
          std::to_string(body.size()) + "\r\n\r\n" + body;
      [[maybe_unused]] const ssize_t sent =
          ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ::close(fd);
    core.count_request("http", "", 503, 0, 0);
  }

  // An answer made here, for a request httplib could not read (past its
  // deadline, or its headers past their allowance): counted and logged
  // like the others, and the connection closes.
  void answer_unread(Connection& connection, int status, std::string code, std::string message) {
    const std::string body = error_json(RequestError{status, code, std::move(message)});
    const std::string text = "HTTP/1.1 " + std::to_string(status) +
                             (status == 400   ? " Bad Request"
                              : status == 408 ? " Request Timeout"
                                              : " Request Header Fields Too Large") +
                             "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             "Content-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body;
    connection.write_all(text);
    core.count_request("http", "", status, 0, 0);
    if (!core.logger().enabled(LogLevel::kInfo)) return;
    std::string ip;
    int port = 0;
    connection.get_remote_ip_and_port(ip, port);
    core.logger().log(LogLevel::kInfo, {{"event", "request"},
                                        {"front", "http"},
                                        {"status", status},
                                        {"error", code},
                                        {"remote", ip}});
  }

  // Serves one connection until it closes, idles out, breaks a limit or
  // the server stops.
  void serve(const Accepted& accepted, std::uint64_t id) {
    const ServerConfig& config = core.config();
    const std::chrono::seconds request_timeout(config.request_timeout_seconds);
    SSL* ssl = nullptr;
    if (tls != nullptr) {
      ssl = SSL_new(tls);
      if (ssl != nullptr) SSL_set_fd(ssl, accepted.fd);
    }
    Connection connection(accepted.fd, ssl, accepted.ip, accepted.port);
    connection.write_timeout = request_timeout;
    if (tls == nullptr ||
        (ssl != nullptr && connection.handshake(Clock::now() + request_timeout))) {
      converse(connection, id, accepted.probe_only);
    }
    // Forgotten before the socket closes (when `connection` goes): a
    // shutdown(2) from run() must never reach a descriptor number that was
    // closed and given to another file.
    const std::lock_guard lock(mutex);
    open.erase(id);
    auto& counts = accepted.probe_only ? probes_per_client : per_client;
    if (auto found = counts.find(accepted.ip); found != counts.end() && --found->second == 0) {
      counts.erase(found);
    }
    changed.notify_all();
  }

  void converse(Connection& connection, std::uint64_t id, bool probe_only) {
    const ServerConfig& config = core.config();
    const std::chrono::seconds request_timeout(config.request_timeout_seconds);
    // A probe-only connection gets no idle time: its one request within
    // the request deadline, or it closes.
    const std::chrono::milliseconds idle_timeout(
        1000ull * (probe_only ? std::min<std::uint64_t>(config.idle_timeout_seconds,
                                                        config.request_timeout_seconds)
                              : config.idle_timeout_seconds));
    t_exchange = Exchange{&connection, false, probe_only, config.max_connections_per_client};
    for (;;) {
      if (!connection.wait_for_request(idle_timeout)) break;
      {
        const std::lock_guard lock(mutex);
        if (stopping) break;
        open[id].idle = false;
      }
      // The whole request, headers and body, by one deadline that no
      // trickle of bytes moves.
      connection.start_request(Clock::now() + request_timeout,
                               config.max_header_bytes + kHeaderSlack);
      t_exchange.close = false;
      t_body_read = false;
      // The head is read and checked here first: a malformed one is
      // answered 400 and the connection closes (what follows it cannot be
      // trusted to be a request), as do one past the deadline (408) or the
      // allowance (431).
      if (auto head = connection.read_head(); !head || !*head) {
        if (!head) {
          answer_unread(connection, 400, head.error().code, head.error().message);
          connection.linger();
        } else if (connection.timed_out()) {
          answer_unread(connection, 408, "request_timeout",
                        "the request was not complete within request_timeout_seconds (" +
                            std::to_string(config.request_timeout_seconds) + " s)");
        } else if (connection.over_allowance()) {
          answer_unread(connection, 431, "headers_too_large",
                        "request line and headers exceed " +
                            std::to_string(config.max_header_bytes) + " bytes");
        }
        break;
      }
      bool closed = false;
      const bool ok = engine.serve(connection, stopping.load(), closed);
      if (!ok && !connection.wrote()) {
        if (connection.timed_out()) {
          answer_unread(connection, 408, "request_timeout",
                        "the request was not complete within request_timeout_seconds (" +
                            std::to_string(config.request_timeout_seconds) + " s)");
        } else if (connection.over_allowance()) {
          answer_unread(connection, 431, "headers_too_large",
                        "request line and headers exceed " +
                            std::to_string(config.max_header_bytes) + " bytes");
        }
      }
      {
        const std::lock_guard lock(mutex);
        open[id].idle = true;
      }
      if (!ok || closed || t_exchange.close || connection.timed_out() || stopping || probe_only) {
        if (t_exchange.close) connection.linger();
        break;
      }
    }
    t_exchange = Exchange{};
  }

  // A thread: serves connections from the queue; beyond http_threads, an
  // idle one ends after 30 s.
  void worker() {
    std::unique_lock lock(mutex);
    for (;;) {
      if (queue.empty()) {
        if (exiting) break;
        ++idle_threads;
        const bool woke = work.wait_for(lock, std::chrono::seconds(30),
                                        [&] { return !queue.empty() || exiting; });
        --idle_threads;
        if (!woke && threads > core.config().http_threads) break;
        continue;
      }
      const Accepted accepted = queue.front();
      queue.pop_front();
      lock.unlock();
      serve(accepted, accepted.id);
      lock.lock();
    }
    --threads;
    changed.notify_all();
  }

  // The accept loop, then the shutdown: the listener closes (new
  // connections are refused), idle connections close at once, requests in
  // flight get shutdown_grace_seconds, then their sockets are shut down.
  void run() {
    const ServerConfig& config = core.config();
    running = true;
    pollfd fds[2] = {{listener, POLLIN, 0}, {wake[0], POLLIN, 0}};
    while (!stopping) {
      const int ready = ::poll(fds, 2, -1);
      if (ready < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (fds[1].revents != 0) break;
      if ((fds[0].revents & POLLIN) == 0) continue;
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      const int fd = ::accept4(listener, reinterpret_cast<sockaddr*>(&address), &length,
                               SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        // Out of descriptors or memory: let connections finish, then retry.
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        continue;
      }
      const int yes = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
      Accepted accepted{fd, {}, 0, 0};
      Connection::describe(address, accepted.ip, accepted.port);
      std::unique_lock lock(mutex);
      if (open.size() >= config.max_connections) {
        lock.unlock();
        refuse_connection(fd, "the server has max_connections (" +
                                  std::to_string(config.max_connections) + ") open");
        continue;
      }
      const auto client = per_client.find(accepted.ip);
      if (client != per_client.end() && client->second >= config.max_connections_per_client) {
        // Past the cap: a few more from this address, each for one health
        // probe only (Exchange::probe_only), so a flood of idle connections
        // does not fail the address's /readyz and /healthz.
        auto& probes = probes_per_client[accepted.ip];
        if (probes >= kProbeSlotsPerClient) {
          lock.unlock();
          refuse_connection(fd, "this address has max_connections_per_client (" +
                                    std::to_string(config.max_connections_per_client) +
                                    ") open");
          continue;
        }
        ++probes;
        accepted.probe_only = true;
      } else {
        ++per_client[accepted.ip];
      }
      accepted.id = next_id++;
      open[accepted.id] = Open{fd, true};
      queue.push_back(std::move(accepted));
      if (queue.size() > idle_threads) {
        ++threads;
        std::thread([this] { worker(); }).detach();
      } else {
        work.notify_one();
      }
    }
    ::close(listener);
    listener = -1;
    std::unique_lock lock(mutex);
    for (const auto& [id, connection] : open) {
      if (connection.idle) ::shutdown(connection.fd, SHUT_RDWR);
    }
    const auto grace = Clock::now() + std::chrono::seconds(config.shutdown_grace_seconds);
    if (!changed.wait_until(lock, grace, [&] { return open.empty(); })) {
      core.logger().log(LogLevel::kWarn, {{"event", "shutdown_grace_expired"},
                                          {"front", "http"},
                                          {"connections_closed", open.size()}});
      for (const auto& [id, connection] : open) ::shutdown(connection.fd, SHUT_RDWR);
      changed.wait(lock, [&] { return open.empty(); });
    }
    exiting = true;
    work.notify_all();
    changed.wait(lock, [&] { return threads == 0; });
    running = false;
  }
};

HttpFront::HttpFront(Core& core) : impl_(std::make_unique<Impl>(core)) {}
HttpFront::~HttpFront() = default;

Result<void> HttpFront::bind(const ListenAddress& address) {
  const ServerConfig& config = impl_->core.config();
  const std::string where =
      (address.host.find(':') != std::string::npos ? "[" + address.host + "]" : address.host) +
      ":" + std::to_string(address.port);
  if (config.tls_cert) {
    SSL_CTX* tls = SSL_CTX_new(TLS_server_method());
    impl_->tls = tls;
    if (tls == nullptr || SSL_CTX_set_min_proto_version(tls, TLS1_2_VERSION) != 1 ||
        SSL_CTX_use_certificate_chain_file(tls, config.tls_cert->c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(tls, config.tls_key->c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(tls) != 1) {
      char reason[256] = "unknown error";
      if (const unsigned long code = ERR_get_error(); code != 0) {
        ERR_error_string_n(code, reason, sizeof reason);
      }
      ERR_clear_error();
      return fail(ErrorCode::kIo, "TLS: cannot load the certificate " + config.tls_cert->string() +
                                      " or its key " + config.tls_key->string() + ": " + reason);
    }
    SSL_CTX_set_mode(tls, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_options(tls, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
  }
  httplib::Server& server = impl_->engine;
  server.set_payload_max_length(config.max_body_bytes);
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
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.status = 500;
        res.set_content(error_json(RequestError{500, "internal_error", "internal error"}),
                        "application/json");
      });

  // The listener: SO_REUSEADDR (a restart may bind while old connections
  // are in TIME_WAIT) but never SO_REUSEPORT, which would let a second
  // server bind the same port and take half the connections.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(address.port);
  if (const int error = ::getaddrinfo(address.host.empty() ? nullptr : address.host.c_str(),
                                      service.c_str(), &hints, &found);
      error != 0 || found == nullptr) {
    return fail(ErrorCode::kIo, "HTTP: cannot listen on " + where + ": " + ::gai_strerror(error));
  }
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      error = errno;
      ::close(fd);
    }
  }
  ::freeaddrinfo(found);
  if (error != 0) {
    return fail(ErrorCode::kIo, "HTTP: cannot listen on " + where + ": " + std::strerror(error));
  }
  impl_->listener = fd;
  // A descriptor per connection: the soft limit (1024 under systemd by
  // default) is raised to the hard one, so the cap, not EMFILE, is what a
  // flood meets. A limit still below max_connections + 256 (the listeners,
  // snapshots, the catalog, gRPC) is warned about: past it, new
  // connections wait in the listen queue unanswered.
  if (rlimit files{}; ::getrlimit(RLIMIT_NOFILE, &files) == 0) {
    const rlim_t wanted = static_cast<rlim_t>(config.max_connections) + 256;
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < files.rlim_max) {
      rlimit raised = files;
      raised.rlim_cur = files.rlim_max;
      // An infinite hard limit is more than the kernel's nr_open allows.
      if (::setrlimit(RLIMIT_NOFILE, &raised) != 0 && wanted > files.rlim_cur) {
        raised.rlim_cur = wanted;
        ::setrlimit(RLIMIT_NOFILE, &raised);
      }
      ::getrlimit(RLIMIT_NOFILE, &files);
    }
    if (files.rlim_cur != RLIM_INFINITY && files.rlim_cur < wanted) {
      impl_->core.logger().log(
          LogLevel::kWarn,
          {{"event", "file_limit"},
           {"limit", static_cast<std::uint64_t>(files.rlim_cur)},
           {"max_connections", config.max_connections},
           {"message", "WARNING: RLIMIT_NOFILE is " + std::to_string(files.rlim_cur) +
                           " (the hard limit), below max_connections (" +
                           std::to_string(config.max_connections) +
                           ") + 256: connections past the limit wait unanswered; raise it "
                           "(ulimit -Hn, systemd LimitNOFILE=) or lower max_connections"}});
    }
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  std::string ip;
  Connection::describe(bound, ip, impl_->port);
  impl_->host = address.host;
  if (::pipe2(impl_->wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    return fail(ErrorCode::kIo, std::string("HTTP: pipe: ") + std::strerror(errno));
  }
  return {};
}

std::string HttpFront::address() const {
  const std::string& host = impl_->host;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(impl_->port);
}

void HttpFront::run() { impl_->run(); }

bool HttpFront::running() const { return impl_->running; }

void HttpFront::stop() {
  impl_->stopping = true;
  if (impl_->wake[1] >= 0) {
    [[maybe_unused]] const ssize_t wrote = ::write(impl_->wake[1], "x", 1);
  }
}

}  // namespace abf::server
