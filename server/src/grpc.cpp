// The gRPC front of `abf serve` (grpc.hpp).
#include "grpc.hpp"

#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "abf/server/grpc_wire.hpp"
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

// FindMissingBlobs with the request and answer as bytes (grpc_wire.hpp
// says why), registered by hand as the generated Service does, with
// ByteBuffer for both messages: a synchronous method, as before. (The
// generated raw callback method spent more of the server's samples in
// thread switches under the same client: 13.8% against 9.7%, perf.)
class CasService final : public grpc::Service {
 public:
  explicit CasService(Core& core) : core_(core) {
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
    Answer answer;
    const auto result = answer_request(*context, *request, *response, answer);
    const int status = result ? 200 : result.error().status;
    const auto elapsed = Clock::now() - start;
    core_.observe_latency(Endpoint::kGrpcFindMissingBlobs, elapsed);
    core_.count_request("grpc", answer.tenant, status, answer.digests, answer.missing);
    if (core_.logger().enabled(LogLevel::kInfo)) {
      nlohmann::ordered_json line = {
          {"event", "request"},        {"front", "grpc"},           {"method", "FindMissingBlobs"},
          {"status", status},          {"tenant", answer.tenant},   {"caller", answer.caller},
          {"digests", answer.digests}, {"missing", answer.missing}, {"maybes", answer.maybes}};
      if (result) line["catalog_version"] = answer.catalog_version;
      if (!result) line["error"] = result.error().code;
      line["us"] = std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
      if (answer.answer_us >= 0) line["answer_us"] = answer.answer_us;
      line["remote"] = context->peer();
      core_.logger().log(LogLevel::kInfo, std::move(line));
    }
    if (!result) {
      const RequestError& error = result.error();
      if (error.retry_after_seconds > 0) {
        context->AddTrailingMetadata("retry-after", std::to_string(error.retry_after_seconds));
      }
      return grpc::Status(static_cast<grpc::StatusCode>(grpc_status_for(error.status)),
                          error.code + ": " + error.message);
    }
    return grpc::Status::OK;
  }

 private:
  struct Answer {
    std::string tenant, caller;
    std::uint64_t digests = 0, missing = 0, maybes = 0, catalog_version = 0;
    std::int64_t answer_us = -1;  // the exact answer alone: filter, then catalog
  };

  // The checks in HTTP's order (docs/serve.md): authentication, the tenant,
  // the request bucket, the digest function, the digest limit, the digests,
  // the digest bucket, the answer.
  RequestResult<void> answer_request(grpc::ServerContext& context,
                                     const grpc::ByteBuffer& request, grpc::ByteBuffer& response,
                                     Answer& answer) {
    auto caller = core_.authenticate(metadata(context, "authorization"));
    if (!caller) return std::unexpected(caller.error());
    answer.caller = std::string(caller->id());
    grpc::Slice bytes;
    if (!request.DumpToSingleSlice(&bytes).ok()) {
      return refuse(400, "invalid_request", "the request could not be read");
    }
    const std::span<const std::uint8_t> data(bytes.begin(), bytes.size());
    auto wire = parse_find_missing_blobs(data, core_.config().max_digests);
    if (!wire) return std::unexpected(wire.error());
    RequestResult<Tenant*> tenant = refuse(400, "invalid_tenant",
                                           "instance_name is not a tenant name (1 to 64 of "
                                           "A-Z a-z 0-9 . _ -)");
    if (wire->instance_name.empty()) {
      tenant = core_.default_tenant(*caller);
    } else if (valid_tenant_name(wire->instance_name)) {
      tenant = core_.tenant_for(*caller, wire->instance_name);
    }
    if (!tenant) return std::unexpected(tenant.error());
    answer.tenant = (*tenant)->config.name;
    if (auto ok = core_.limiter().admit_request(caller->bucket); !ok) return ok;
    const auto function = wire->digest_function;
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
    if (wire->count > core_.config().max_digests) {
      return refuse(413, "too_many_digests",
                    "request has " + std::to_string(wire->count) + " digests; the limit is " +
                        std::to_string(core_.config().max_digests) +
                        " per request: split the batch");
    }
    if (wire->digest_error) return std::unexpected(*wire->digest_error);
    const std::vector<Digest>& digests = wire->digests;
    answer.digests = digests.size();
    if (auto ok = core_.limiter().admit_digests(caller->bucket, digests.size()); !ok) return ok;
    const auto answer_start = Clock::now();
    auto outcome = core_.find_missing(**tenant, digests);
    answer.answer_us =
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - answer_start).count();
    if (!outcome) return std::unexpected(outcome.error());
    // Written in place into one slice of the answer's exact size.
    grpc::Slice out(find_missing_blobs_response_size(*wire, outcome->missing));
    encode_find_missing_blobs_response(
        data, *wire, outcome->missing,
        std::span<std::uint8_t>(const_cast<std::uint8_t*>(out.begin()), out.size()));
    response = grpc::ByteBuffer(&out, 1);
    answer.missing = outcome->missing.size();
    answer.maybes = outcome->counts.maybe;
    answer.catalog_version = outcome->catalog_version;
    context.AddTrailingMetadata("x-abf-catalog-version", std::to_string(outcome->catalog_version));
    return {};
  }

  Core& core_;
};

}  // namespace

struct GrpcFront::Impl {
  Core& core;
  CasService service;
  std::unique_ptr<grpc::Server> server;
  std::string host;
  int port = 0;
  explicit Impl(Core& c) : core(c), service(c) {}
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
  impl_->server = builder.BuildAndStart();
  if (impl_->server == nullptr || impl_->port == 0) {
    return fail(ErrorCode::kIo, "gRPC: cannot listen on " + where + ": " +
                                    bind_failure(address.host, address.port));
  }
  impl_->host = address.host;
  return {};
}

std::string GrpcFront::address() const {
  const std::string& host = impl_->host;
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
         std::to_string(impl_->port);
}

void GrpcFront::shutdown(unsigned grace_seconds) {
  if (impl_->server) {
    impl_->server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(grace_seconds));
  }
}

void GrpcFront::wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace abf::server
