// The HTTP/1.1 front of `abf serve`: its own listener, connection caps and
// request deadlines, cpp-httplib's request parser, TLS (OpenSSL) when the
// config has a certificate. Internal.
#pragma once

#include <memory>
#include <string>

#include "abf/error.hpp"
#include "abf/server/config.hpp"
#include "server_core.hpp"

namespace abf::server {

class HttpFront {
 public:
  explicit HttpFront(Core& core);
  ~HttpFront();

  // Binds the listener (port 0: the OS picks); kIo when it cannot.
  Result<void> bind(const ListenAddress& address);
  // "HOST:PORT" as bound.
  std::string address() const;
  // Serves until stop(); call on a thread of its own.
  void run();
  // Whether run() is serving (so that stop() will reach it).
  bool running() const;
  // Closes the listener; idle connections close, busy ones finish the
  // request they are on within shutdown_grace_seconds (then their sockets
  // are shut down). run() returns once every connection is done.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace abf::server
