// One accepted connection of the HTTP front, plain or TLS, as cpp-httplib
// reads and writes it (a Stream of ours), and the exchange that its thread
// is answering. Internal.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <httplib.h>

#include "abf/server/request.hpp"

namespace abf::server {

using Clock = std::chrono::steady_clock;


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
inline thread_local Exchange t_exchange;
// Whether the handler read the request's body to its end.
inline thread_local bool t_body_read = false;

}  // namespace abf::server
