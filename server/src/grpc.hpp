// The gRPC front of `abf serve`: the Remote Execution API's
// ContentAddressableStorage.FindMissingBlobs (proto/remote_execution.proto).
// Internal.
#pragma once

#include <memory>
#include <string>

#include "abf/error.hpp"
#include "abf/server/config.hpp"
#include "server_core.hpp"

namespace abf::server {

class GrpcFront {
 public:
  explicit GrpcFront(Core& core);
  ~GrpcFront();

  // Binds and starts serving on gRPC's own threads; kIo when it cannot.
  Result<void> start(const ListenAddress& address);
  std::string address() const;
  // Stops accepting calls; calls in flight finish (until `grace_seconds`,
  // then they are cancelled).
  void shutdown(unsigned grace_seconds);
  void wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace abf::server
