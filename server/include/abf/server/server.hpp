// `abf serve`: the existence service on the network (docs/serve.md). One
// process answers for several tenants, each with its own catalog, snapshot
// and optional key, over HTTP/1.1 (cpp-httplib) and gRPC (the Remote
// Execution API's ContentAddressableStorage.FindMissingBlobs).
//
// Every answer is exact: a digest is missing iff it is not in the tenant's
// catalog at the serving snapshot's catalogVersion. The filter decides
// `absent` alone; every `maybe` goes to the catalog, in one batch per
// request (ArtifactExistenceService::exists_batch). No raw filter answer
// reaches a client.
//
//   auto config = abf::server::parse_server_config(text, "serve.json", ".");
//   auto server = abf::server::Server::start(*config, {});
//   // ... (*server)->http_address() ...
//   (*server)->shutdown();   // in-flight requests finish
//   (*server)->wait();
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "abf/error.hpp"
#include "abf/server/config.hpp"

namespace abf::server {

// What one reload did, per tenant.
struct TenantReload {
  std::string tenant;
  bool ok = false;
  std::uint64_t catalog_version = 0;  // serving after the reload
  std::string error;                  // why the new snapshot was refused
};

struct ServerOptions {
  // Where log lines go (one JSON object a line, no newline); default: stderr.
  std::function<void(std::string_view line)> log_sink;
};

class Server {
 public:
  // Opens every tenant's catalog (read-only) and key, loads its snapshot
  // through a SnapshotPublisher bound to the catalog, reads the token file,
  // binds both listeners and starts serving on threads of its own. Errors
  // (nothing listens then): the config (validate), a catalog, key or token
  // file that cannot be opened, a snapshot, filter set, index or index set
  // that does not load, verify or bind to its catalog (the loader's code,
  // naming the tenant and the file), TLS files that do not load, an address
  // that cannot be bound (kIo naming it).
  static Result<std::unique_ptr<Server>> start(const ServerConfig& config,
                                               ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The bound addresses, "HOST:PORT" with the port the OS chose for 0;
  // grpc_address() is empty without gRPC.
  std::string http_address() const;
  std::string grpc_address() const;

  // Re-reads every tenant's snapshot path through its publisher (SIGHUP and
  // POST /admin/reload). A snapshot that fails to load or verify, is of
  // another catalog, is older than the serving one, or is newer than the
  // catalog reaches, is refused and counted; the old one keeps serving.
  // `trigger` goes into the log ("sighup", "admin").
  std::vector<TenantReload> reload(std::string_view trigger);

  // Whether every tenant has a verified snapshot (GET /readyz).
  bool ready() const;

  // Graceful stop: the listeners close (new connections are refused),
  // requests in flight finish and are answered, then the fronts stop.
  // Returns at once; wait() blocks until done. Safe to call more than once.
  void shutdown();
  void wait();

 private:
  struct State;
  explicit Server(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace abf::server
