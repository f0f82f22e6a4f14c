// `abf serve`'s process-level object (server.hpp): the core and both fronts.
#include "abf/server/server.hpp"

#include <chrono>
#include <mutex>
#include <thread>

#include "server_core.hpp"
#include "grpc.hpp"
#include "http.hpp"

namespace abf::server {

struct Server::State {
  std::unique_ptr<Core> core;
  std::unique_ptr<HttpFront> http;
  std::unique_ptr<GrpcFront> grpc;
  std::thread http_thread;
  std::once_flag shutdown_once;
  std::mutex wait_mutex;
  bool waited = false;
};

Server::Server(std::unique_ptr<State> state) : state_(std::move(state)) {}

Server::~Server() {
  shutdown();
  wait();
}

namespace {

// Whether `host` only reaches this machine (127.0.0.0/8, ::1, localhost).
bool loopback_host(std::string_view host) {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

}  // namespace

Result<std::unique_ptr<Server>> Server::start(const ServerConfig& config, ServerOptions options) {
  if (config.tls_key) {
    if (auto ok = check_private_file(*config.tls_key, "TLS private key"); !ok) {
      return std::unexpected(ok.error());
    }
  }
  auto core = Core::create(config, options);
  if (!core) return std::unexpected(core.error());
  auto state = std::make_unique<State>();
  state->core = std::move(*core);
  auto http_address = parse_listen_address(config.http_listen);
  if (!http_address) return std::unexpected(http_address.error());
  state->http = std::make_unique<HttpFront>(*state->core);
  if (auto bound = state->http->bind(*http_address); !bound) {
    return std::unexpected(bound.error());
  }
  if (!config.grpc_listen.empty()) {
    auto grpc_address = parse_listen_address(config.grpc_listen);
    if (!grpc_address) return std::unexpected(grpc_address.error());
    state->grpc = std::make_unique<GrpcFront>(*state->core);
    if (auto started = state->grpc->start(*grpc_address); !started) {
      return std::unexpected(started.error());
    }
  }
  HttpFront* http = state->http.get();
  state->http_thread = std::thread([http] { http->run(); });
  // stop() reaches only a server that is listening: wait for it (bounded).
  for (int i = 0; i < 5000 && !http->running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  nlohmann::ordered_json line = {{"event", "listening"},
                                 {"http", state->http->address()},
                                 {"tls", config.tls_cert.has_value()},
                                 {"auth", config.token_file.has_value()},
                                 {"tenants", config.tenants.size()},
                                 {"ready", state->core->ready()}};
  if (state->grpc) line["grpc"] = state->grpc->address();
  state->core->logger().log(LogLevel::kInfo, std::move(line));
  // Without tokens anyone who can reach the port may read every tenant and
  // POST /admin/reload: fine on loopback, loud anywhere else.
  if (!config.token_file) {
    std::vector<std::string> open;
    if (!loopback_host(http_address->host)) open.push_back(state->http->address());
    if (state->grpc && !loopback_host(parse_listen_address(config.grpc_listen)->host)) {
      open.push_back(state->grpc->address());
    }
    if (!open.empty()) {
      nlohmann::ordered_json warning = {
          {"event", "insecure_listen"},
          {"addresses", open},
          {"message",
           "WARNING: serving on a non-loopback address without a token file: anyone who can "
           "reach it may ask every tenant and POST /admin/reload; give --token-file"}};
      state->core->logger().log(LogLevel::kWarn, std::move(warning));
    }
  }
  return std::unique_ptr<Server>(new Server(std::move(state)));
}

std::string Server::http_address() const { return state_->http->address(); }

std::string Server::grpc_address() const {
  return state_->grpc ? state_->grpc->address() : std::string();
}

std::vector<TenantReload> Server::reload(std::string_view trigger) {
  return state_->core->reload(trigger);
}

bool Server::ready() const { return state_->core->ready(); }

void Server::shutdown() {
  std::call_once(state_->shutdown_once, [this] {
    state_->core->logger().log(LogLevel::kInfo, {{"event", "shutting_down"}});
    state_->http->stop();
    if (state_->grpc) state_->grpc->shutdown(state_->core->config().shutdown_grace_seconds);
  });
}

void Server::wait() {
  const std::lock_guard lock(state_->wait_mutex);
  if (state_->waited) return;
  if (state_->http_thread.joinable()) state_->http_thread.join();
  if (state_->grpc) state_->grpc->wait();
  state_->waited = true;
  state_->core->logger().log(LogLevel::kInfo, {{"event", "stopped"}});
}

}  // namespace abf::server
