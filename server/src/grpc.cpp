// The gRPC front of `abf serve` (grpc.hpp).
#include "grpc.hpp"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <thread>

#include "abf/server/grpc_wire.hpp"
#include "admission.hpp"
#include "health.pb.h"
#include "remote_execution.grpc.pb.h"

namespace abf::server {

namespace rex = build::bazel::remote::execution::v2;

namespace {

using Clock = std::chrono::steady_clock;

Result<std::string> read_pem(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(ErrorCode::kIo, "TLS: cannot read " + path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Why gRPC could not listen on host:port, which it does not say: the errno
// of a plain bind(2) there, as the HTTP front reports it.
std::string bind_failure(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &found) != 0 || found == nullptr) {
    return "cannot resolve the host";
  }
  std::string reason = "unknown reason";
  const int fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  if (fd >= 0) {
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0) reason = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return reason;
}

std::string_view metadata(const grpc::ServerContextBase& context, std::string_view key) {
  const auto& headers = context.client_metadata();
  const auto found = headers.find(grpc::string_ref(key.data(), key.size()));
  if (found == headers.end()) return {};
  return {found->second.data(), found->second.size()};
}

// FindMissingBlobs' parser: the message read in place (grpc_wire.hpp says
// why) when the pipeline asks for the tenant, which it names; its digests
// checked when the pipeline asks for them.
class FindMissingBlobsRequest final : public TenantRequest {
 public:
  FindMissingBlobsRequest(const grpc::ByteBuffer& request, std::size_t max_digests)
      : request_(request), max_digests_(max_digests) {}

  RequestResult<std::string_view> tenant() override {
    if (!request_.DumpToSingleSlice(&bytes_).ok()) {
      return refuse(400, "invalid_request", "the request could not be read");
    }
    auto wire = parse_find_missing_blobs(data(), max_digests_);
    if (!wire) return std::unexpected(wire.error());
    wire_ = std::move(*wire);
    if (!wire_.instance_name.empty() && !valid_tenant_name(wire_.instance_name)) {
      return refuse(400, "invalid_tenant",
                    "instance_name is not a tenant name (1 to 64 of A-Z a-z 0-9 . _ -)");
    }
    return wire_.instance_name;
  }

  // The digest function, the digest limit, then the digests themselves.
  RequestResult<std::span<const Digest>> digests() override {
    const auto function = wire_.digest_function;
    if (function != rex::DigestFunction::UNKNOWN && function != rex::DigestFunction::SHA256) {
      // Named only when it is one of the enum's values: 2^63 is not
      // UNKNOWN (0), which its low 32 bits would be.
      const bool named = function <= static_cast<std::uint64_t>(std::numeric_limits<int>::max()) &&
                         rex::DigestFunction::Value_IsValid(static_cast<int>(function));
      const std::string name = named ? rex::DigestFunction::Value_Name(static_cast<int>(function))
                                     : std::to_string(function);
      return refuse(400, "unsupported_digest_function",
                    "digest_function " + name + ": this server answers for SHA256 only");
    }
    if (wire_.count > max_digests_) {
      return refuse(413, "too_many_digests",
                    "request has " + std::to_string(wire_.count) + " digests; the limit is " +
                        std::to_string(max_digests_) + " per request: split the batch");
    }
    if (wire_.digest_error) return std::unexpected(*wire_.digest_error);
    return wire_.digests;
  }

  // The answer: the missing entries exactly as they were sent, written in
  // place into one slice of the answer's exact size.
  grpc::ByteBuffer encode(const FindMissingOutcome& outcome) const {
    grpc::Slice out(find_missing_blobs_response_size(wire_, outcome.missing));
    encode_find_missing_blobs_response(
        data(), wire_, outcome.missing,
        std::span<std::uint8_t>(const_cast<std::uint8_t*>(out.begin()), out.size()));
    return grpc::ByteBuffer(&out, 1);
  }

 private:
  std::span<const std::uint8_t> data() const { return {bytes_.begin(), bytes_.size()}; }

  const grpc::ByteBuffer& request_;
  std::size_t max_digests_;
  grpc::Slice bytes_;
  FindMissingBlobsWire wire_;
};

// FindMissingBlobs with the request and answer as bytes, registered by hand
// as the generated Service does, with ByteBuffer for both messages: a
// synchronous method, as before. (The generated raw callback method spent
// more of the server's samples in thread switches under the same client:
// 13.8% against 9.7%, perf.)
class CasService final : public grpc::Service {
 public:
  explicit CasService(Core& core) : core_(core), admission_(core) {
    AddMethod(new grpc::internal::RpcServiceMethod(
        "/build.bazel.remote.execution.v2.ContentAddressableStorage/FindMissingBlobs",
        grpc::internal::RpcMethod::NORMAL_RPC,
        new grpc::internal::RpcMethodHandler<CasService, grpc::ByteBuffer, grpc::ByteBuffer>(
            [](CasService* service, grpc::ServerContext* context, const grpc::ByteBuffer* request,
               grpc::ByteBuffer* response) {
              return service->FindMissingBlobs(context, request, response);
            },
            this)));
  }

  grpc::Status FindMissingBlobs(grpc::ServerContext* context, const grpc::ByteBuffer* request,
                                grpc::ByteBuffer* response) {
    const auto start = Clock::now();
    // The caller's x-request-id when sane, else a new one: in the answer's
    // initial metadata and the access line.
    const std::string id = request_id(metadata(*context, "x-request-id"));
    context->AddInitialMetadata("x-request-id", id);
    RequestNote note;
    FindMissingBlobsRequest parsed(*request, core_.config().max_digests);
    auto outcome = admission_.find_missing(metadata(*context, "authorization"), parsed, note);
    grpc::Status status = grpc::Status::OK;
    if (outcome) {
      *response = parsed.encode(*outcome);
      context->AddTrailingMetadata("x-abf-catalog-version",
                                   std::to_string(outcome->catalog_version));
    } else {
      const RequestError& error = outcome.error();
      note.error = error.code;
      if (error.retry_after_seconds > 0) {
        context->AddTrailingMetadata("retry-after", std::to_string(error.retry_after_seconds));
      }
      status = grpc::Status(static_cast<grpc::StatusCode>(grpc_status_for(error.status)),
                            error.code + ": " + error.message);
    }
    const std::string remote =
        core_.logger().enabled(LogLevel::kInfo) ? context->peer() : std::string();
    admission_.finish(AccessLine{.front = "grpc",
                                 .method = "FindMissingBlobs",
                                 .path = std::nullopt,
                                 .remote = remote,
                                 .endpoint = Endpoint::kGrpcFindMissingBlobs,
                                 .request_id = id},
                      outcome ? 200 : outcome.error().status, note, Clock::now() - start);
    return status;
  }

 private:
  Core& core_;
  Admission admission_;
};

// GetCapabilities' parser: the tenant from instance_name; no digests.
class CapabilitiesRequest final : public TenantRequest {
 public:
  explicit CapabilitiesRequest(const std::string& instance) : instance_(instance) {}
  RequestResult<std::string_view> tenant() override {
    if (!instance_.empty() && !valid_tenant_name(instance_)) {
      return refuse(400, "invalid_tenant",
                    "instance_name is not a tenant name (1 to 64 of A-Z a-z 0-9 . _ -)");
    }
    return std::string_view(instance_);
  }
  RequestResult<std::span<const Digest>> digests() override { return std::span<const Digest>(); }

 private:
  const std::string& instance_;
};

// REAPI's Capabilities.GetCapabilities: clients (Bazel first) ask it before
// anything else. The answer says what this server is: a CAS that answers
// FindMissingBlobs for SHA-256 digests (the only digest function it
// accepts), with no action cache updates and no remote execution. The
// caller and tenant are checked as for FindMissingBlobs (the same tokens,
// 403 for another tenant, the same default tenant for an empty name) and
// the call takes a token of the caller's request bucket.
class CapabilitiesService final : public rex::Capabilities::Service {
 public:
  explicit CapabilitiesService(Core& core) : core_(core), admission_(core) {}

  grpc::Status GetCapabilities(grpc::ServerContext* context,
                               const rex::GetCapabilitiesRequest* request,
                               rex::ServerCapabilities* response) override {
    const auto start = Clock::now();
    const std::string id = request_id(metadata(*context, "x-request-id"));
    context->AddInitialMetadata("x-request-id", id);
    RequestNote note;
    CapabilitiesRequest parsed(request->instance_name());
    auto admitted = admission_.admit(metadata(*context, "authorization"), parsed, note);
    grpc::Status status = grpc::Status::OK;
    if (admitted) {
      auto* cache = response->mutable_cache_capabilities();
      cache->add_digest_functions(rex::DigestFunction::SHA256);
      cache->mutable_action_cache_update_capabilities()->set_update_enabled(false);
      // No batch methods are served; this is the largest request message
      // the server reads (max_body_bytes), which bounds FindMissingBlobs.
      cache->set_max_batch_total_size_bytes(
          static_cast<std::int64_t>(std::min<std::size_t>(core_.config().max_body_bytes,
                                                          std::numeric_limits<int>::max())));
      cache->set_symlink_absolute_path_strategy(rex::SymlinkAbsolutePathStrategy::DISALLOWED);
      auto* execution = response->mutable_execution_capabilities();
      execution->set_digest_function(rex::DigestFunction::SHA256);
      execution->add_digest_functions(rex::DigestFunction::SHA256);
      execution->set_exec_enabled(false);
      // FindMissingBlobs as of API 2.0, with 2.3's digest_function field.
      response->mutable_low_api_version()->set_major(2);
      response->mutable_high_api_version()->set_major(2);
      response->mutable_high_api_version()->set_minor(3);
    } else {
      const RequestError& error = admitted.error();
      note.error = error.code;
      if (error.retry_after_seconds > 0) {
        context->AddTrailingMetadata("retry-after", std::to_string(error.retry_after_seconds));
      }
      status = grpc::Status(static_cast<grpc::StatusCode>(grpc_status_for(error.status)),
                            error.code + ": " + error.message);
    }
    const std::string remote =
        core_.logger().enabled(LogLevel::kInfo) ? context->peer() : std::string();
    admission_.finish(AccessLine{.front = "grpc",
                                 .method = "GetCapabilities",
                                 .path = std::nullopt,
                                 .remote = remote,
                                 .endpoint = Endpoint::kGrpcGetCapabilities,
                                 .request_id = id},
                      admitted ? 200 : admitted.error().status, note, Clock::now() - start);
    return status;
  }

 private:
  Core& core_;
  Admission admission_;
};

}  // namespace

struct GrpcFront::Impl {
  Core& core;
  CasService service;
  CapabilitiesService capabilities;
  std::unique_ptr<grpc::Server> server;
  std::string host;
  int port = 0;
  // The health service's statuses follow the server's readiness (/readyz),
  // looked at every second on a thread of its own.
  std::mutex health_mutex;
  std::condition_variable_any health_wake;
  std::jthread health_thread;
  explicit Impl(Core& c) : core(c), service(c), capabilities(c) {}

  // Sets the statuses of the server as a whole ("") and of each service it
  // answers to `ready`.
  void show_readiness(bool ready) {
    for (const char* name : {"", "build.bazel.remote.execution.v2.ContentAddressableStorage",
                             "build.bazel.remote.execution.v2.Capabilities"}) {
      server->GetHealthCheckService()->SetServingStatus(name, ready);
    }
  }
  // From the first status, set before the server is announced, on.
  void follow_readiness(std::stop_token stop, bool shown) {
    std::unique_lock lock(health_mutex);
    while (!stop.stop_requested()) {
      health_wake.wait_for(lock, stop, std::chrono::seconds(1), [] { return false; });
      if (stop.stop_requested()) break;
      const bool ready = core.ready();
      if (shown != ready) {
        show_readiness(ready);
        shown = ready;
      }
    }
  }
};

GrpcFront::GrpcFront(Core& core) : impl_(std::make_unique<Impl>(core)) {}
GrpcFront::~GrpcFront() = default;

Result<void> GrpcFront::start(const ListenAddress& address) {
  const ServerConfig& config = impl_->core.config();
  std::shared_ptr<grpc::ServerCredentials> credentials;
  if (config.tls_cert) {
    auto cert = read_pem(*config.tls_cert);
    if (!cert) return std::unexpected(cert.error());
    auto key = read_pem(*config.tls_key);
    if (!key) return std::unexpected(key.error());
    grpc::SslServerCredentialsOptions options;
    options.pem_key_cert_pairs.push_back({*key, *cert});
    credentials = grpc::SslServerCredentials(options);
  } else {
    credentials = grpc::InsecureServerCredentials();
  }
  const std::string where =
      (address.host.find(':') != std::string::npos ? "[" + address.host + "]" : address.host) +
      ":" + std::to_string(address.port);
  // The standard services operators' tools expect: grpc.health.v1.Health
  // (gRPC's default service; its statuses follow /readyz, below) and server
  // reflection (grpc.reflection.v1alpha), so grpcurl and grpc_health_probe
  // work without the .proto files. Both are process-wide settings, read by
  // the builder.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  // Referenced so that the linker keeps health.proto's descriptor, which
  // reflection serves for the health service.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(where, credentials, &impl_->port);
  // One owner per port: gRPC sets SO_REUSEPORT by default, so a second
  // server on the same port would start and take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // A 64 Ki-digest request is about 6 MB of protobuf; the body limit applies.
  builder.SetMaxReceiveMessageSize(static_cast<int>(
      std::min<std::size_t>(config.max_body_bytes, std::numeric_limits<int>::max())));
  builder.SetMaxSendMessageSize(std::numeric_limits<int>::max());
  builder.RegisterService(&impl_->service);
  builder.RegisterService(&impl_->capabilities);
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->port == 0) {
    return fail(ErrorCode::kIo, "gRPC: cannot listen on " + where + ": " +
                                    bind_failure(address.host, address.port));
  }
  impl_->host = address.host;
  if (impl_->server->GetHealthCheckService() != nullptr) {
    Impl* impl = impl_.get();
    const bool ready = impl->core.ready();
    impl->show_readiness(ready);
    impl_->health_thread = std::jthread(
        [impl, ready](std::stop_token stop) { impl->follow_readiness(stop, ready); });
  }
  return {};
}

std::string GrpcFront::address() const {
  const std::string& host = impl_->host;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(impl_->port);
}

void GrpcFront::shutdown(unsigned grace_seconds) {
  // The readiness thread stops first: statuses are not changed while the
  // server shuts down (Shutdown makes every service NOT_SERVING).
  if (impl_->health_thread.joinable()) {
    impl_->health_thread.request_stop();
    impl_->health_thread.join();
  }
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(grace_seconds));
  }
}

void GrpcFront::wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace abf::server
