// The HTTP/1.1 front of `abf serve`. This file owns the sockets: the
// listener (no SO_REUSEPORT), the accept loop with the connection caps, a
// thread per open connection, the TLS context, and a deadline for each whole
// request that a trickle of bytes does not move. cpp-httplib parses each
// request and writes each response (Server::process_request on a
// Connection, http_connection.hpp); the routes and their handlers are
// http_routes.cpp's, the body reader http_body.cpp's.
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

#include "http_connection.hpp"
#include "http_routes.hpp"

namespace abf::server {

namespace {

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
    // Ranges are not served (no answer is a byte range of a resource):
    // a Range header is ignored, as RFC 9110 14.2 allows, so httplib never
    // cuts an answer into a 206.
    return process_request(stream, close_connection, connection_closed,
                           [](httplib::Request& req) { req.ranges.clear(); });
  }
};

}  // namespace

struct HttpFront::Impl {
  Core& core;
  HttpRoutes routes{core};
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


  // A connection the caps refuse: a 503 if it is plain HTTP (best effort,
  // never waiting), then closed.
  void refuse_connection(int fd, std::string_view why) {
    if (tls == nullptr) {
      const std::string body =
          error_json(RequestError{503, "too_many_connections", std::string(why)});
      const std::string text =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
          "Retry-After: 1\r\nConnection: close\r\nX-Request-Id: " + request_id("") +
          "\r\nContent-Length: " +
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
    // A head that was not read gives no client ID to echo: a new one.
    const std::string id = request_id("");
    const std::string text = "HTTP/1.1 " + std::to_string(status) +
                             (status == 400   ? " Bad Request"
                              : status == 408 ? " Request Timeout"
                                              : " Request Header Fields Too Large") +
                             "\r\nContent-Type: application/json\r\nConnection: close\r\n"
                             "X-Request-Id: " + id + "\r\nContent-Length: " +
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
                                        {"remote", ip},
                                        {"request_id", id}});
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
  impl_->routes.install(server);

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
