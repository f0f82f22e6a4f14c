// The admission pipeline of both fronts (admission.hpp).
#include "admission.hpp"

#include <utility>

namespace abf::server {

using Clock = std::chrono::steady_clock;

RequestResult<FindMissingOutcome> Admission::find_missing(std::string_view authorization,
                                                          TenantRequest& request,
                                                          RequestNote& note) {
  auto admitted = admit(authorization, request, note);
  if (!admitted) return std::unexpected(std::move(admitted.error()));
  return answer(*admitted, note);
}

RequestResult<Admitted> Admission::admit(std::string_view authorization, TenantRequest& request,
                                         RequestNote& note) {
  auto caller = authenticate(authorization, note);
  if (!caller) return std::unexpected(std::move(caller.error()));
  auto name = request.tenant();
  if (!name) return std::unexpected(std::move(name.error()));
  auto tenant = name->empty() ? core_.default_tenant(*caller) : core_.tenant_for(*caller, *name);
  if (!tenant) return std::unexpected(std::move(tenant.error()));
  note.tenant = (*tenant)->config.name;
  if (auto ok = core_.limiter_.admit_request(caller->bucket); !ok) {
    return std::unexpected(std::move(ok.error()));
  }
  auto digests = request.digests();
  if (!digests) return std::unexpected(std::move(digests.error()));
  note.digests = digests->size();
  if (auto ok = core_.limiter_.admit_digests(caller->bucket, digests->size()); !ok) {
    return std::unexpected(std::move(ok.error()));
  }
  return Admitted(*caller, **tenant, *digests);
}

RequestResult<FindMissingOutcome> Admission::answer(const Admitted& admitted, RequestNote& note) {
  const auto start = Clock::now();
  auto outcome = core_.find_missing(admitted.tenant(), admitted.digests());
  note.answer_us =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count();
  if (!outcome) return outcome;
  note.missing = outcome->missing.size();
  note.maybes = outcome->counts.maybe;
  note.catalog_version = outcome->catalog_version;
  note.has_version = true;
  return outcome;
}

RequestResult<Caller> Admission::authenticate(std::string_view authorization,
                                              RequestNote& note) const {
  auto caller = core_.authenticate(authorization);
  if (caller) note.caller = std::string(caller->id());
  return caller;
}

void Admission::finish(const AccessLine& line, int status, const RequestNote& note,
                       std::chrono::nanoseconds elapsed) {
  if (line.endpoint) core_.observe_latency(*line.endpoint, elapsed);
  core_.count_request(line.front, note.tenant, status, note.digests, note.missing);
  const Logger& logger = core_.logger();
  if (!logger.enabled(LogLevel::kInfo)) return;
  // Keys in this order (an ordered_json keeps the order they were set in).
  nlohmann::ordered_json fields = {{"event", "request"}, {"front", line.front}};
  fields["method"] = line.method;
  if (line.path) fields["path"] = *line.path;
  fields["status"] = status;
  fields["tenant"] = note.tenant;
  fields["caller"] = note.caller;
  fields["digests"] = note.digests;
  fields["missing"] = note.missing;
  fields["maybes"] = note.maybes;
  if (note.has_version) fields["catalog_version"] = note.catalog_version;
  if (!note.error.empty()) fields["error"] = note.error;
  fields["us"] = std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
  if (note.answer_us >= 0) fields["answer_us"] = note.answer_us;
  fields["remote"] = line.remote;
  if (!line.request_id.empty()) fields["request_id"] = line.request_id;
  logger.log(LogLevel::kInfo, std::move(fields));
}

}  // namespace abf::server
