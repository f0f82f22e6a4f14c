// The HTTP front's routes: each path's handler (request.hpp's parse_route
// names the route; a tenant endpoint is a parser, a TenantRequest, and one
// admission call), the access log line, and the JSON error answers of the
// requests cpp-httplib refuses itself. Internal.
#pragma once

#include <memory>

#include <httplib.h>

#include "server_core.hpp"

namespace abf::server {

class HttpRoutes {
 public:
  explicit HttpRoutes(Core& core);
  ~HttpRoutes();
  // Registers every route, the access log and the error answers on `server`.
  void install(httplib::Server& server);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace abf::server
