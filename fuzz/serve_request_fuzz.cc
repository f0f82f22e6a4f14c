// libFuzzer target for `abf serve`'s request parsing (server/include/abf/
// server/request.hpp and config.hpp): the pure functions every HTTP and gRPC
// request goes through before anything else runs. Follows fuzz/fuzzer.cc: a
// broken property aborts, which libFuzzer reports as a crash and saves.
//
// Input: one control byte, then the bytes the chosen function parses:
//   control % 8 == 0  route: "<method> <path>"
//                  1  find-missing body, binary   (control / 8 % 4 + 1 is max digests, x 64)
//                  2  find-missing body, text
//                  3  find-missing body, JSON
//                  4  headers: Content-Type, then Authorization
//                  5  blob digest path segment, a gRPC hash, and the same
//                     bytes as a FindMissingBlobsRequest (grpc_wire.hpp)
//                  6  config file (JSON)
//                  7  token file
// Properties: no crash, hang or leak; every refusal has a status of 4xx or
// 5xx, a code and a message, and its JSON form is JSON; an accepted body
// never holds more than the limit, its binary form is the body itself, and
// its answer in every encoding parses back to the same digests; a route's
// tenant is a valid tenant name; an accepted blob digest reads back from its
// canonical form; a parsed FindMissingBlobsRequest holds at most the limit,
// its records lie inside it, and the answer naming every entry reads back to
// the same digests; a parsed config validates; every parsed token has a
// scope.
//
// check_serve_request is declared in fuzz/checks.hpp, so the corpus replay
// test (tests/fuzz_replay_test.cc) runs it too, compiling this file with
// ABF_SERVE_FUZZ_NO_MAIN. Built as fuzz_serve_request with the other fuzz
// targets (ABF_FUZZ=ON, clang; scripts/fuzz serve_request SECONDS).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/server/config.hpp"
#include "abf/server/grpc_wire.hpp"
#include "abf/server/request.hpp"
#include "checks.hpp"

namespace abf::fuzz {

namespace {

using server::BodyEncoding;
using server::RequestError;

std::string check_error(const RequestError& error) {
  if (error.status < 400 || error.status > 599)
    return "error status " + std::to_string(error.status);
  if (error.code.empty() || error.message.empty()) return "error without code or message";
  const auto json = nlohmann::json::parse(server::error_json(error), nullptr, false);
  if (json.is_discarded() || json["error"]["code"] != error.code) return "error_json is not JSON";
  return "";
}

template <class T>
std::string check_result(const server::RequestResult<T>& result) {
  return result ? std::string() : check_error(result.error());
}

std::string check_body(BodyEncoding encoding, std::string_view body, std::size_t max) {
  const auto digests = server::parse_find_missing_body(encoding, body, max);
  if (!digests) return check_error(digests.error());
  if (digests->size() > max) return "more digests than the limit";
  if (encoding == BodyEncoding::kBinary &&
      (body.size() != digests->size() * 32 ||
       (body.size() != 0 && std::memcmp(body.data(), digests->data(), body.size()) != 0))) {
    return "binary digests are not the body's records";
  }
  for (BodyEncoding answer : {BodyEncoding::kBinary, BodyEncoding::kText, BodyEncoding::kJson}) {
    const std::string encoded = server::encode_missing(answer, *digests, 7);
    if (answer == BodyEncoding::kJson) {
      // The answer's JSON names the digests under "missing": rename to read it back.
      const auto json = nlohmann::json::parse(encoded, nullptr, false);
      if (json.is_discarded()) return "JSON answer is not JSON";
      const nlohmann::json request = {{"digests", json["missing"]}};
      const auto back = server::parse_find_missing_body(answer, request.dump(), max);
      if (!back || *back != *digests) return "JSON answer does not read back";
      continue;
    }
    const auto back = server::parse_find_missing_body(answer, encoded, max);
    if (!back || *back != *digests) return "answer does not read back";
  }
  return "";
}

// A FindMissingBlobsRequest's bytes: refused with a proper error, or read
// within its limit, and its answer naming every entry (field 2 in both
// messages) reads back to the same entries.
std::string check_grpc_wire(std::span<const std::uint8_t> bytes, std::size_t max) {
  const auto wire = server::parse_find_missing_blobs(bytes, max);
  if (!wire) return check_result(wire);
  if (wire->digest_error) return check_error(*wire->digest_error);
  if (wire->count > max) return wire->digests.empty() ? "" : "digests decoded past the limit";
  if (wire->digests.size() != wire->count || wire->records.size() != wire->count) {
    return "entries and digests disagree";
  }
  for (const auto& record : wire->records) {
    if (std::size_t{record.offset} + record.size > bytes.size()) return "a record outside";
  }
  std::vector<std::uint32_t> all(wire->count);
  for (std::uint32_t i = 0; i < all.size(); ++i) all[i] = i;
  std::vector<std::uint8_t> answer(server::find_missing_blobs_response_size(*wire, all));
  server::encode_find_missing_blobs_response(bytes, *wire, all, answer);
  const auto back = server::parse_find_missing_blobs(answer, max);
  if (!back || back->digest_error || back->digests != wire->digests) {
    return "the answer does not read back";
  }
  return "";
}

}  // namespace

std::string check_serve_request(std::span<const std::uint8_t> data) {
  if (data.empty()) return "";
  const std::uint8_t control = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data.data() + 1), data.size() - 1);
  switch (control % 8) {
    case 0: {
      const auto space = text.find(' ');
      const auto route = server::parse_route(text.substr(0, space), space == std::string_view::npos
                                                                        ? std::string_view()
                                                                        : text.substr(space + 1));
      if (route &&
          (route->kind == server::RouteKind::kFindMissing ||
           route->kind == server::RouteKind::kBlob) &&
          !server::valid_tenant_name(route->tenant)) {
        return "route with an invalid tenant name";
      }
      return check_result(route);
    }
    case 1:
    case 2:
    case 3: {
      const BodyEncoding encoding = control % 8 == 1   ? BodyEncoding::kBinary
                                    : control % 8 == 2 ? BodyEncoding::kText
                                                       : BodyEncoding::kJson;
      return check_body(encoding, text, (control / 8 % 4 + 1) * 64);
    }
    case 4: {
      const auto newline = text.find('\n');
      if (auto problem = check_result(server::parse_content_type(text.substr(0, newline)));
          !problem.empty()) {
        return problem;
      }
      if (newline == std::string_view::npos) return "";
      return check_result(server::parse_bearer(text.substr(newline + 1)));
    }
    case 5: {
      const auto blob = server::parse_blob_digest(text);
      if (blob) {
        const auto again = server::parse_blob_digest("sha256:" + blob->hex());
        if (!again || *again != *blob) return "a blob digest does not read back";
      }
      if (auto problem = check_result(blob); !problem.empty()) return problem;
      if (auto problem = check_result(
              server::parse_grpc_digest(text, static_cast<std::int64_t>(control) - 128, 0));
          !problem.empty()) {
        return problem;
      }
      return check_grpc_wire(data.subspan(1), (control / 8 % 4 + 1) * 64);
    }
    case 6: {
      const auto config = server::parse_server_config(text, "fuzz.json", "/base");
      if (config && !server::validate(*config)) return "a parsed config does not validate";
      return "";
    }
    default: {
      const auto tokens = server::parse_token_file(text, "tokens");
      if (tokens) {
        (void)server::find_token(*tokens, text);
        for (const auto& entry : *tokens) {
          if (entry.tenants.empty() && !entry.admin && !entry.metrics) {
            return "token with no scope";
          }
        }
      }
      return "";
    }
  }
}

}  // namespace abf::fuzz

#ifndef ABF_SERVE_FUZZ_NO_MAIN
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string problem = abf::fuzz::check_serve_request({data, size});
  if (!problem.empty()) {
    std::fprintf(stderr, "property broken: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
#endif
