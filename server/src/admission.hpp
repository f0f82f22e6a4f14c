// The one pipeline a tenant request goes through, whichever front it came
// in on (docs/serve.md, "The order of checks"). Internal.
//
// A front only translates: it reads where its request keeps the token, the
// tenant and the digests (an endpoint's TenantRequest, its parser), makes
// one call, Admission::find_missing, encodes the answer or maps the refusal
// to its own status, and ends with Admission::finish. The call runs, in
// this order, stopping at the first refusal:
//   1. the caller: the Authorization value's token (401);
//   2. the tenant the request names, or the caller's default one when it
//      names none (TenantRequest::tenant first: its own 400s; then 403
//      whether or not the tenant exists, 404, 400 for no default);
//   3. one token from the caller's request bucket (429);
//   4. the digests (TenantRequest::digests: its own 400, 408, 413, 415),
//      read only now, so no byte of a body is read before 1-3 pass;
//   5. a token per digest from the caller's digest bucket (429);
//   6. the exact answer at the tenant's serving version (503).
// Steps 1-5 make an Admitted request (admit), step 6 answers one (answer);
// each step notes what it learnt in the request's RequestNote, which the
// access line and the request counters read.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "abf/digest.hpp"
#include "abf/server/request.hpp"
#include "server_core.hpp"

namespace abf::server {

// What one request's access line and counters say of it beyond its front's
// own fields (method, path, remote). The pipeline fills it in as its steps
// pass; the front adds `error` when it answers a refusal.
struct RequestNote {
  std::string caller;  // the caller's id, once authenticated ("anonymous" without tokens)
  // The tenant, once the caller may ask it; "" otherwise, so names the
  // caller may not see add no label values to /metrics.
  std::string tenant;
  std::string error;          // the refusal's code; "" when answered
  std::uint64_t digests = 0;  // once read (step 4)
  std::uint64_t missing = 0;  // once answered
  std::uint64_t maybes = 0;   // the filter's maybes, once answered
  std::uint64_t catalog_version = 0;
  bool has_version = false;     // answered: catalog_version is the answer's
  std::int64_t answer_us = -1;  // step 6 alone (filter, then catalog); -1: not reached
};

// What an endpoint reads from its request, asked by the pipeline in its
// order and only once the steps before passed. What either returns must
// stay valid until the request is answered.
class TenantRequest {
 public:
  // The tenant the request names, "" for none (then the caller's default
  // tenant: Core::default_tenant). Asked after authentication; a name
  // that is not valid_tenant_name must be refused here.
  virtual RequestResult<std::string_view> tenant() = 0;
  // The digests asked, in request order, repeats kept; at most
  // max_digests. Asked once the caller, the tenant and the request token
  // passed.
  virtual RequestResult<std::span<const Digest>> digests() = 0;

 protected:
  ~TenantRequest() = default;
};

// A request that passed steps 1-5, both of its caller's tokens taken. Only
// Admission makes one, and only an Admitted request is answered.
class Admitted {
 public:
  const Caller& caller() const noexcept { return caller_; }
  Tenant& tenant() const noexcept { return *tenant_; }
  // The TenantRequest's digests.
  std::span<const Digest> digests() const noexcept { return digests_; }

 private:
  friend class Admission;
  Admitted(const Caller& caller, Tenant& tenant, std::span<const Digest> digests)
      : caller_(caller), tenant_(&tenant), digests_(digests) {}
  Caller caller_;
  Tenant* tenant_;
  std::span<const Digest> digests_;
};

// How a front names a request in its access line.
struct AccessLine {
  std::string_view front;  // "http", "grpc": also the counters' front label
  std::string_view method;
  std::optional<std::string_view> path;  // HTTP's; none for gRPC
  std::string_view remote;
  // The latency histogram's; none for a request that reached no handler.
  std::optional<Endpoint> endpoint;
  // The request's ID (request.hpp's request_id), echoed in its answer.
  std::string_view request_id;
};

class Admission {
 public:
  explicit Admission(Core& core) noexcept : core_(core) {}

  // Steps 1-6: what a tenant endpoint calls. The answer's `missing` are
  // indices into the request's digests.
  RequestResult<FindMissingOutcome> find_missing(std::string_view authorization,
                                                 TenantRequest& request, RequestNote& note);

  // Steps 1-5.
  RequestResult<Admitted> admit(std::string_view authorization, TenantRequest& request,
                                RequestNote& note);
  // Step 6, timed (note.answer_us).
  RequestResult<FindMissingOutcome> answer(const Admitted& admitted, RequestNote& note);

  // Step 1 alone, for the endpoints that name no tenant (/metrics, /readyz,
  // /admin/reload), which then check what the caller may do
  // (Core::check_operations, Core::check_admin).
  RequestResult<Caller> authenticate(std::string_view authorization, RequestNote& note) const;

  // The end of every request, answered or refused: its latency (with an
  // endpoint), its count by front, tenant and status, and at info its
  // access line: event, front, method, path (HTTP), status, tenant, caller,
  // digests, missing, maybes, catalog_version (answered), error (refused),
  // us, answer_us (step 6 reached), remote.
  void finish(const AccessLine& line, int status, const RequestNote& note,
              std::chrono::nanoseconds elapsed);

 private:
  Core& core_;
};

}  // namespace abf::server
