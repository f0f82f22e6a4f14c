// `abf serve`'s pure request functions (server/include/abf/server/request.hpp,
// config.hpp, grpc_wire.hpp): routes, bodies in each encoding, bearer
// tokens, the config file and token files, FindMissingBlobs' bytes. The servers themselves are tested from Python
// (tests/serve/).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/server/config.hpp"
#include "abf/server/grpc_wire.hpp"
#include "abf/server/request.hpp"
#include "test_support.hpp"

namespace abf::server {
namespace {

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

std::string binary_of(const std::vector<Digest>& digests) {
  std::string out(digests.size() * 32, '\0');
  if (!digests.empty()) std::memcpy(out.data(), digests.data(), out.size());
  return out;
}

TEST(ServeRoute, ParsesEveryPath) {
  auto route = parse_route("POST", "/v1/acme/find-missing");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->kind, RouteKind::kFindMissing);
  EXPECT_EQ(route->tenant, "acme");
  route = parse_route("HEAD", "/v1/acme.prod_1/blobs/sha256:00");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->kind, RouteKind::kBlob);
  EXPECT_EQ(route->tenant, "acme.prod_1");
  EXPECT_EQ(route->blob, "sha256:00");
  EXPECT_EQ(parse_route("GET", "/metrics")->kind, RouteKind::kMetrics);
  EXPECT_EQ(parse_route("GET", "/healthz")->kind, RouteKind::kHealthz);
  EXPECT_EQ(parse_route("HEAD", "/readyz")->kind, RouteKind::kReadyz);
  EXPECT_EQ(parse_route("POST", "/admin/reload")->kind, RouteKind::kAdminReload);
}

TEST(ServeRoute, RefusesWithTheRightStatus) {
  EXPECT_EQ(parse_route("GET", "/v1/acme/find-missing").error().status, 405);
  EXPECT_EQ(parse_route("POST", "/v1/acme/blobs/sha256:00").error().status, 405);
  EXPECT_EQ(parse_route("GET", "/admin/reload").error().status, 405);
  EXPECT_EQ(parse_route("GET", "/").error().status, 404);
  EXPECT_EQ(parse_route("GET", "/v1/acme/blobs/").error().status, 404);
  EXPECT_EQ(parse_route("GET", "/v1/acme/blobs/a/b").error().status, 404);
  EXPECT_EQ(parse_route("GET", "/v1/acme").error().status, 404);
  const auto bad = parse_route("POST", "/v1/.x/find-missing");
  EXPECT_EQ(bad.error().status, 400);
  EXPECT_EQ(bad.error().code, "invalid_tenant");
  EXPECT_EQ(parse_route("POST", "/v1/" + std::string(65, 'a') + "/find-missing").error().code,
            "invalid_tenant");
}

TEST(ServeRoute, TenantNames) {
  EXPECT_TRUE(valid_tenant_name("default"));
  EXPECT_TRUE(valid_tenant_name(std::string(64, 'z')));
  EXPECT_FALSE(valid_tenant_name(""));
  EXPECT_FALSE(valid_tenant_name(std::string(65, 'z')));
  EXPECT_FALSE(valid_tenant_name(".hidden"));
  EXPECT_FALSE(valid_tenant_name("a/b"));
  EXPECT_FALSE(valid_tenant_name("a b"));
  EXPECT_FALSE(valid_tenant_name("@admin"));
}

TEST(ServeBlob, NeedsTheSha256Prefix) {
  const Digest d = test::member_digest(1);
  EXPECT_EQ(*parse_blob_digest("sha256:" + d.hex()), d);
  EXPECT_EQ(*parse_blob_digest(upper("SHA256:" + d.hex())), d);
  for (const std::string& bad :
       {d.hex(), "sha256:" + d.hex().substr(1), "md5:" + d.hex(), "sha256:" + d.hex() + "0",
        std::string("sha256:") + "g" + d.hex().substr(1)}) {
    const auto parsed = parse_blob_digest(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().status, 400);
    EXPECT_EQ(parsed.error().code, "invalid_digest");
    // Messages are logged: they never carry the digest.
    EXPECT_EQ(parsed.error().message.find(d.hex().substr(8, 40)), std::string::npos);
  }
}

TEST(ServeHeaders, Bearer) {
  EXPECT_FALSE(parse_bearer("")->has_value());
  EXPECT_EQ(**parse_bearer("Bearer abc"), "abc");
  EXPECT_EQ(**parse_bearer("bearer   abc  "), "abc");
  EXPECT_EQ(parse_bearer("Basic YTpi").error().status, 401);
  EXPECT_EQ(parse_bearer("Bearer").error().code, "invalid_authorization");
  EXPECT_EQ(parse_bearer("Bearer a b").error().code, "invalid_authorization");
  EXPECT_EQ(parse_bearer("Bearerabc").error().code, "invalid_authorization");
}

TEST(ServeHeaders, ContentTypes) {
  EXPECT_EQ(*parse_content_type("application/octet-stream"), BodyEncoding::kBinary);
  EXPECT_EQ(*parse_content_type("Text/Plain; charset=utf-8"), BodyEncoding::kText);
  EXPECT_EQ(*parse_content_type(" application/json "), BodyEncoding::kJson);
  EXPECT_EQ(parse_content_type("").error().status, 415);
  EXPECT_EQ(parse_content_type("application/xml").error().code, "unsupported_media_type");
}

TEST(ServeHeaders, ContentEncodings) {
  EXPECT_EQ(*parse_content_encoding(""), ContentCoding::kIdentity);
  EXPECT_EQ(*parse_content_encoding(" Identity "), ContentCoding::kIdentity);
  EXPECT_EQ(*parse_content_encoding("gzip"), ContentCoding::kGzip);
  EXPECT_EQ(*parse_content_encoding("X-GZIP"), ContentCoding::kGzip);
  EXPECT_EQ(*parse_content_encoding("deflate"), ContentCoding::kDeflate);
  for (const char* refused : {"br", "zstd", "compress", "gzip, br", "gzip,gzip", "gzip;q=1"}) {
    const auto coding = parse_content_encoding(refused);
    ASSERT_FALSE(coding) << refused;
    EXPECT_EQ(coding.error().status, 415) << refused;
    EXPECT_EQ(coding.error().code, "unsupported_content_encoding") << refused;
    EXPECT_NE(coding.error().message.find(refused), std::string::npos) << coding.error().message;
  }
}

TEST(ServeHeaders, RequestIds) {
  const std::string uuid = "3f2b8c1e-9d4a-4e7b-8a6c-1f0e2d3c4b5a";
  EXPECT_EQ(request_id(uuid), uuid);
  EXPECT_EQ(request_id("proxy-1:42/abc+def=@x_y.z"), "proxy-1:42/abc+def=@x_y.z");
  EXPECT_EQ(request_id(std::string(128, 'a')), std::string(128, 'a'));
  // Anything else gets a new one: 32 lowercase hex digits, different each time.
  for (const std::string refused : {std::string(), std::string(129, 'a'), std::string("a b"),
                                    std::string("a\"b"), std::string("a\r\nSet-Cookie: x"),
                                    std::string("caf\xc3\xa9"), std::string("a,b"), std::string("{}")}) {
    EXPECT_FALSE(sane_request_id(refused)) << refused;
    const std::string made = request_id(refused);
    EXPECT_EQ(made.size(), 32u) << refused;
    EXPECT_EQ(made.find_first_not_of("0123456789abcdef"), std::string::npos) << made;
  }
  EXPECT_NE(request_id(""), request_id(""));
}

TEST(ServeBody, BinaryRecords) {
  const auto digests = test::member_digests(5);
  EXPECT_EQ(*parse_find_missing_body(BodyEncoding::kBinary, binary_of(digests), 5), digests);
  EXPECT_TRUE(parse_find_missing_body(BodyEncoding::kBinary, "", 5)->empty());
  const auto cut = parse_find_missing_body(BodyEncoding::kBinary, binary_of(digests) + "xyz", 9);
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().code, "truncated_record");
  EXPECT_NE(cut.error().message.find("offset 160"), std::string::npos) << cut.error().message;
  const auto many = parse_find_missing_body(BodyEncoding::kBinary, binary_of(digests), 4);
  EXPECT_EQ(many.error().status, 413);
  EXPECT_EQ(many.error().code, "too_many_digests");
}

TEST(ServeBody, TextLinesHoldOneDigestBareOrPrefixed) {
  const auto d = test::member_digests(4);
  const std::string text = d[0].hex() + "\r\n\n  \nsha256:" + d[1].hex() + "\n\t" + d[2].hex() +
                           " \r\nSHA256:" + upper(d[3].hex());
  EXPECT_EQ(*parse_find_missing_body(BodyEncoding::kText, text, 4), d);
  const auto bad = parse_find_missing_body(BodyEncoding::kText, d[0].hex() + "\n\nnope\n", 10);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, "invalid_digest");
  EXPECT_NE(bad.error().message.find("line 3"), std::string::npos) << bad.error().message;
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kText, text, 3).error().status, 413);
}

// Every line is one digest: a second word is refused with its line, never
// dropped as a sha256sum name (`<hex>  <hex>` lost its second digest), and
// a sha256sum -z body, NUL-separated, is refused rather than read as its
// first record (issue 22: a 2-digest body reported 1 missing).
TEST(ServeBody, TextLinesWithASecondWordOrANulAreRefused) {
  const auto d = test::member_digests(3);
  const std::string z = std::string(1, '\0');
  for (const auto& [body, line] : std::initializer_list<std::pair<std::string, std::string>>{
           {d[0].hex() + "\n" + d[1].hex() + "  " + d[2].hex() + "\n", "line 2"},
           {d[0].hex() + "\t" + d[1].hex(), "line 1"},
           {d[0].hex() + "  a.tar\n", "line 1"},
           {"SHA256 (a.tar) = " + d[0].hex(), "line 1"},
           {"\n\n" + d[0].hex() + "  a" + z + d[1].hex() + "  b" + z, "line 3"},
           {d[0].hex() + z + d[1].hex() + z, "line 1"},
           {d[0].hex() + z, "line 1"}}) {
    SCOPED_TRACE(body);
    const auto parsed = parse_find_missing_body(BodyEncoding::kText, body, 10);
    ASSERT_FALSE(parsed);
    EXPECT_EQ(parsed.error().status, 400);
    EXPECT_EQ(parsed.error().code, "invalid_digest");
    EXPECT_TRUE(parsed.error().message.starts_with("text body: " + line + ": "))
        << parsed.error().message;
    // Error messages are logged; digests are not.
    for (const Digest& digest : d) {
      EXPECT_EQ(parsed.error().message.find(digest.hex()), std::string::npos);
    }
  }
}

TEST(ServeBody, Json) {
  const auto d = test::member_digests(3);
  const nlohmann::json body = {
      {"digests", {"sha256:" + d[0].hex(), d[1].hex(), "SHA256:" + d[2].hex()}}};
  EXPECT_EQ(*parse_find_missing_body(BodyEncoding::kJson, body.dump(), 3), d);
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, "{", 3).error().code, "invalid_json");
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, "[]", 3).error().code, "invalid_request");
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, R"({"digests": {}})", 3).error().code,
            "invalid_request");
  const auto bad = parse_find_missing_body(BodyEncoding::kJson, R"({"digests": ["sha256:00"]})", 3);
  EXPECT_EQ(bad.error().code, "invalid_digest");
  EXPECT_NE(bad.error().message.find("digests[0]"), std::string::npos);
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, R"({"digests": [1]})", 3).error().code,
            "invalid_digest");
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, body.dump(), 2).error().status, 413);
}

// Found by fuzz_serve_request in a configuration file (regression input
// fuzz/corpus/serve_request/regression-json-number-overflow; the same in a
// body: regression-json-body-number-overflow, made by hand): JSON with a
// number past a double's range (1e400) made nlohmann-json throw
// out_of_range, not parse_error; nothing caught it, so a find-missing body
// was answered 500 internal_error by the HTTP front and a configuration
// file killed `abf serve` with std::terminate.
TEST(ServeBody, JsonNumberOutOfRangeIsInvalidJson) {
  for (const std::string body :
       {R"({"digests": [1e400]})", R"({"digests": [], "n": -1e3080})", "1e400"}) {
    const auto refused = parse_find_missing_body(BodyEncoding::kJson, body, 3);
    ASSERT_FALSE(refused) << body;
    EXPECT_EQ(refused.error().status, 400) << body;
    EXPECT_EQ(refused.error().code, "invalid_json") << body;
    EXPECT_NE(refused.error().message.find("out of range"), std::string::npos)
        << refused.error().message;
  }
}

TEST(ServeBody, AnswersRoundTrip) {
  const auto d = test::member_digests(3);
  EXPECT_EQ(encode_missing(BodyEncoding::kBinary, d, 7), binary_of(d));
  EXPECT_EQ(encode_missing(BodyEncoding::kText, d, 7),
            d[0].hex() + "\n" + d[1].hex() + "\n" + d[2].hex() + "\n");
  const auto json = nlohmann::json::parse(encode_missing(BodyEncoding::kJson, d, 7));
  EXPECT_EQ(json["catalog_version"], 7);
  EXPECT_EQ(json["missing"][2], "sha256:" + d[2].hex());
  for (BodyEncoding e : {BodyEncoding::kBinary, BodyEncoding::kText}) {
    EXPECT_EQ(*parse_find_missing_body(e, encode_missing(e, d, 0), 3), d);
  }
  EXPECT_EQ(encode_missing(BodyEncoding::kJson, {}, 0), "{\"missing\":[],\"catalog_version\":0}\n");
}

// The answer written from the request's digests and the missing indices is
// byte for byte the answer written from the missing digests themselves.
TEST(ServeBody, AnswerFromIndicesIsTheAnswerOfTheMissingDigests) {
  const auto d = test::member_digests(5);
  for (const std::vector<std::uint32_t>& at :
       {std::vector<std::uint32_t>{}, {0}, {4}, {1, 3}, {0, 1, 2, 3, 4}}) {
    std::vector<Digest> missing;
    for (std::uint32_t i : at) missing.push_back(d[i]);
    for (BodyEncoding e : {BodyEncoding::kBinary, BodyEncoding::kText, BodyEncoding::kJson}) {
      EXPECT_EQ(encode_missing(e, d, at, 9), encode_missing(e, missing, 9))
          << static_cast<int>(e) << " " << at.size();
    }
  }
}

// The blob answer's bytes are what nlohmann's dump() made of it before.
TEST(ServeBody, BlobAnswerIsTheJsonDump) {
  const auto d = test::member_digests(2);
  for (const bool present : {true, false}) {
    for (const std::uint64_t version : {std::uint64_t{0}, std::uint64_t{7}, ~std::uint64_t{0}}) {
      const nlohmann::ordered_json body = {
          {"digest", "sha256:" + d[1].hex()}, {"present", present}, {"catalog_version", version}};
      EXPECT_EQ(encode_blob_answer(d[1], present, version), body.dump() + "\n");
    }
  }
}

TEST(ServeErrors, JsonAndGrpcCodes) {
  const auto json =
      nlohmann::json::parse(error_json(RequestError{400, "invalid_digest", "bad \xff byte"}));
  EXPECT_EQ(json["error"]["code"], "invalid_digest");
  EXPECT_EQ(grpc_status_for(400), 3);
  EXPECT_EQ(grpc_status_for(401), 16);
  EXPECT_EQ(grpc_status_for(403), 7);
  EXPECT_EQ(grpc_status_for(404), 5);
  EXPECT_EQ(grpc_status_for(413), 8);
  EXPECT_EQ(grpc_status_for(429), 8);
  EXPECT_EQ(grpc_status_for(503), 14);
  EXPECT_EQ(grpc_status_for(500), 13);
  EXPECT_TRUE(parse_grpc_digest(test::member_digest(0).hex(), 0, 0));
  EXPECT_EQ(parse_grpc_digest("sha256:" + test::member_digest(0).hex(), 0, 4)
                .error()
                .message.find("blob_digests[4]"),
            0u);
  EXPECT_EQ(parse_grpc_digest(test::member_digest(0).hex(), -1, 0).error().code, "invalid_digest");
}

TEST(ServeConfig, ParsesACompleteFile) {
  const std::string text = R"({
    "listen": "0.0.0.0:8443", "grpc_listen": "[::1]:9443",
    "token_file": "tokens", "tls_cert": "/etc/abf/cert.pem", "tls_key": "key.pem",
    "tenants": [{"name": "a", "snapshot": "a.abf", "db": "/srv/a.db", "key_file": "a.key"},
                {"name": "b", "snapshot": "b.abf", "db": "b.db", "index": "/srv/b.abfx"},
                {"name": "c", "snapshot": "c.abf", "db": "c.db", "index": "c.abfx"}],
    "limits": {"max_body_bytes": 1000, "max_digests_per_request": 10, "max_header_bytes": 100,
               "idle_timeout_seconds": 5, "request_timeout_seconds": 6},
    "rate_limit": {"requests_per_second": 2.5, "digests_per_second": 100, "burst_seconds": 3},
    "http_threads": 8, "log_level": "warn", "backend": "scalar", "shutdown_grace_seconds": 4})";
  auto config = parse_server_config(text, "serve.json", "/etc/abf");
  ASSERT_TRUE(config) << config.error().describe();
  EXPECT_EQ(config->http_listen, "0.0.0.0:8443");
  EXPECT_EQ(config->tenants.size(), 3u);
  EXPECT_EQ(config->tenants[0].snapshot, "/etc/abf/a.abf");
  EXPECT_EQ(config->tenants[0].db, "/srv/a.db");
  EXPECT_EQ(*config->tenants[0].key_file, "/etc/abf/a.key");
  EXPECT_FALSE(config->tenants[1].key_file);
  EXPECT_FALSE(config->tenants[0].index);
  EXPECT_EQ(*config->tenants[1].index, "/srv/b.abfx");
  EXPECT_EQ(*config->tenants[2].index, "/etc/abf/c.abfx");
  EXPECT_EQ(*config->token_file, "/etc/abf/tokens");
  EXPECT_EQ(*config->tls_cert, "/etc/abf/cert.pem");
  EXPECT_EQ(config->max_body_bytes, 1000u);
  EXPECT_EQ(config->max_digests, 10u);
  EXPECT_EQ(config->max_header_bytes, 100u);
  EXPECT_EQ(config->idle_timeout_seconds, 5u);
  EXPECT_DOUBLE_EQ(config->rate_limit.requests_per_second, 2.5);
  EXPECT_EQ(config->http_threads, 8u);
  EXPECT_EQ(config->log_level, "warn");
  const auto ipv6 = parse_listen_address(config->grpc_listen);
  EXPECT_EQ(ipv6->host, "::1");
  EXPECT_EQ(ipv6->port, 9443);
}

TEST(ServeConfig, NamesEveryMistake) {
  const auto error = [](const std::string& text) {
    auto config = parse_server_config(text, "s.json", "");
    return config ? std::string() : config.error().message;
  };
  const std::string tenant = R"({"name": "a", "snapshot": "a.abf", "db": "a.db"})";
  EXPECT_NE(error("{").find("not JSON"), std::string::npos);
  EXPECT_NE(error("{}").find("tenants"), std::string::npos);
  EXPECT_NE(error(R"({"tenants": []})").find("at least one"), std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + "," + tenant + "]}").find("given twice"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "limits": {"max_body": 1}})")
                .find("unknown key \"max_body\""),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "limits": {"max_body_bytes": -1}})")
                .find("max_body_bytes"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "listen": "nowhere"})").find("HOST:PORT"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "listen": "h:70000"})").find("0..65535"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "tls_cert": "c.pem"})").find("tls"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [{"name": "a/b", "snapshot": "s", "db": "d"}]})").find("name"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [{"name": "a", "db": "d"}]})").find("snapshot: required"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [{"name": "a", "snapshot": "s", "db": "d", "index": ""}]})")
                .find("tenants[0].index: empty path"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [{"name": "a", "snapshot": "s", "db": "d", "index": 3}]})")
                .find("index: expected a string"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [{"name": "a", "snapshot": "s", "db": "d", "indx": "i"}]})")
                .find("unknown key \"indx\""),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "log_level": "loud"})").find("log_level"),
            std::string::npos);
  EXPECT_NE(error(R"({"tenants": [)" + tenant + R"(], "backend": "gpu9"})").find("backend"),
            std::string::npos);
}

// Issue 23 F9: a repeated key was taken last-wins, silently.
TEST(ServeConfig, RepeatedKeysAreRefusedByName) {
  const auto error = [](const std::string& text) {
    auto config = parse_server_config(text, "s.json", "");
    return config ? std::string() : config.error().message;
  };
  const std::string tenant = R"({"name": "a", "snapshot": "a.abf", "db": "a.db"})";
  const std::string tenants = R"("tenants": [)" + tenant + "]";
  ASSERT_EQ(error("{" + tenants + "}"), "");
  EXPECT_EQ(error(R"({"listen": "127.0.0.1:1", )" + tenants + R"(, "listen": "127.0.0.1:2"})"),
            "s.json: key \"listen\" given twice");
  EXPECT_EQ(error("{" + tenants + ", " + tenants + "}"), "s.json: key \"tenants\" given twice");
  EXPECT_EQ(error("{" + tenants + R"(, "limits": {"max_body_bytes": 5, "max_body_bytes": 6}})"),
            "s.json: key \"max_body_bytes\" given twice in \"limits\"");
  EXPECT_EQ(error(R"({"tenants": [)" + tenant +
                  R"(, {"name": "b", "snapshot": "b", "db": "b", "db": "c"}]})"),
            "s.json: key \"db\" given twice in \"tenants\"");
  // The same key in two objects is no repeat.
  EXPECT_EQ(error(R"({"tenants": [)" + tenant + R"(, {"name": "b", "snapshot": "b", "db": "b"}],)"
                  R"( "limits": {"max_body_bytes": 5}, "rate_limit": {}})"),
            "");
}

// The same finding as ServeBody.JsonNumberOutOfRangeIsInvalidJson, in a
// configuration file: an error naming the file, not std::terminate.
TEST(ServeConfig, NumberOutOfRangeIsAnError) {
  const std::string tenant = R"({"name": "a", "snapshot": "a.abf", "db": "a.db"})";
  for (const std::string& text : {R"({"listen": 1e3080, "tenants": [)" + tenant + "]}",
                                  R"({"tenants": [)" + tenant + R"(], "http_threads": 1e400})"}) {
    const auto config = parse_server_config(text, "abf.json", "/base");
    ASSERT_FALSE(config) << text;
    EXPECT_EQ(config.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(config.error().message.find("abf.json: "), std::string::npos)
        << config.error().message;
    EXPECT_NE(config.error().message.find("out of range"), std::string::npos)
        << config.error().message;
  }
}

// A whole number wider than its field is an error, never cut to its low
// bits (4294967297 read as 1 thread).
TEST(ServeConfig, WholeNumberTooLargeForItsFieldIsAnError) {
  const std::string tenant = R"({"name": "a", "snapshot": "a.abf", "db": "a.db"})";
  const auto config = parse_server_config(
      R"({"tenants": [)" + tenant + R"(], "http_threads": 4294967297})", "abf.json", "/base");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(config.error().message.find("http_threads: 4294967297 is too large"), std::string::npos)
      << config.error().message;
}

TEST(ServeTokens, ParsesScopesAndFindsTokensByHash) {
  const std::string text =
      "# tokens\n"
      "token-aaaaaaaaaaaaaaaa a,b\n"
      "\n"
      "   token-bbbbbbbbbbbbbbbb *  \r\n"
      "token-cccccccccccccccc @admin\n";
  auto tokens = parse_token_file(text, "tokens");
  ASSERT_TRUE(tokens) << tokens.error().describe();
  ASSERT_EQ(tokens->size(), 3u);
  EXPECT_EQ((*tokens)[0].tenants, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*tokens)[0].line, 2u);
  EXPECT_TRUE((*tokens)[2].admin);
  EXPECT_TRUE((*tokens)[2].tenants.empty());
  EXPECT_EQ(find_token(*tokens, "token-bbbbbbbbbbbbbbbb"), &(*tokens)[1]);
  EXPECT_EQ(find_token(*tokens, "token-bbbbbbbbbbbbbbbB"), nullptr);
  EXPECT_EQ(find_token(*tokens, ""), nullptr);
  EXPECT_TRUE(token_allows((*tokens)[0], "b"));
  EXPECT_FALSE(token_allows((*tokens)[0], "c"));
  EXPECT_TRUE(token_allows((*tokens)[1], "anything"));
  EXPECT_FALSE(token_allows((*tokens)[2], "a"));
  // The id names a token in logs without revealing it.
  EXPECT_EQ((*tokens)[0].id.size(), 9u);
  EXPECT_EQ((*tokens)[0].id.find("aaaa"), std::string::npos);
}

TEST(ServeTokens, RefusesBadLinesWithoutQuotingTheToken) {
  const auto error = [](const std::string& text) {
    auto tokens = parse_token_file(text, "tokens");
    return tokens ? std::string() : tokens.error().message;
  };
  EXPECT_NE(error("short a\n").find("line 1: a token must be 16"), std::string::npos);
  EXPECT_NE(error("token-aaaaaaaaaaaaaaaa\n").find("expected"), std::string::npos);
  EXPECT_NE(error("token-aaaaaaaaaaaaaaaa a/b\n").find("scope"), std::string::npos);
  const std::string twice = error("token-aaaaaaaaaaaaaaaa a\n\ntoken-aaaaaaaaaaaaaaaa b\n");
  EXPECT_NE(twice.find("line 3: this token is given twice"), std::string::npos);
  EXPECT_EQ(twice.find("token-aaaa"), std::string::npos);
}

// Found by fuzz_serve_request (regression input
// fuzz/corpus/serve_request/regression-token-without-scope): a token
// followed by blanks and nothing else cut its scopes with
// remove_prefix(npos), undefined behaviour that in a release build read the
// byte before the blanks, the token's last character, as a scope: this
// line granted tenant "a".
TEST(ServeTokens, TokenFollowedOnlyByBlanksHasNoScope) {
  for (const std::string text :
       {"token-aaaaaaaaaaaaaaaa  ", "token-aaaaaaaaaaaaaaaa \n", "token-aaaaaaaaaaaaaaaa\t \r\n",
        "# tokens\ntoken-bbbbbbbbbbbbbbbb b\n  token-aaaaaaaaaaaaaaaa\t\n"}) {
    const auto tokens = parse_token_file(text, "tokens");
    ASSERT_FALSE(tokens) << "accepted '" << text << "', the last token with "
                         << tokens->back().tenants.size() << " tenants, the first '"
                         << (tokens->back().tenants.empty() ? "" : tokens->back().tenants[0])
                         << "'";
    EXPECT_EQ(tokens.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(tokens.error().message.find(": expected \"<token> <tenant>"), std::string::npos)
        << tokens.error().message;
  }
}

TEST(ServeTokens, FileReadableByOthersIsRefused) {
  test::TempDir dir("abf-serve-tokens");
  const auto path = dir.path() / "tokens";
  std::ofstream(path) << "token-aaaaaaaaaaaaaaaa a\n";
  ::chmod(path.c_str(), 0600);
  EXPECT_TRUE(read_token_file(path));
  ::chmod(path.c_str(), 0640);
  const auto refused = read_token_file(path);
  ASSERT_FALSE(refused);
  // Its own error, not a key file's (it said invalid_key before issue 37).
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(refused.error().message.find("tokens: the token file may be read or written by its "
                                         "group or others (mode 640); chmod 600 it"),
            std::string::npos)
      << refused.error().message;
  EXPECT_EQ(read_token_file(dir.path() / "none").error().code, ErrorCode::kIo);
}

// Issue 23 F10: an empty token file was accepted, and every request 401.
TEST(ServeTokens, FileWithoutTokensIsRefused) {
  test::TempDir dir("abf-serve-tokens");
  const auto path = dir.path() / "tokens";
  for (const char* text : {"", "\n", "# a comment\n\n   \n"}) {
    std::ofstream(path, std::ios::trunc) << text;
    ::chmod(path.c_str(), 0600);
    const auto refused = read_token_file(path);
    ASSERT_FALSE(refused) << text;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(refused.error().message.find(path.string() + ": the token file has no tokens"),
              std::string::npos)
        << refused.error().message;
  }
}

TEST(ServeTokens, OperationsScopes) {
  const std::string text =
      "token-aaaaaaaaaaaaaaaa a\n"
      "token-bbbbbbbbbbbbbbbb @metrics\n"
      "token-cccccccccccccccc @admin,a\n";
  auto tokens = parse_token_file(text, "tokens");
  ASSERT_TRUE(tokens) << tokens.error().describe();
  EXPECT_FALSE(token_may_read_operations((*tokens)[0]));
  EXPECT_TRUE(token_may_read_operations((*tokens)[1]));
  EXPECT_FALSE((*tokens)[1].admin);
  EXPECT_TRUE((*tokens)[1].tenants.empty());
  EXPECT_TRUE(token_may_read_operations((*tokens)[2]));  // @admin reads what @metrics may
  EXPECT_TRUE(token_allows((*tokens)[2], "a"));
  auto refused = parse_token_file("token-aaaaaaaaaaaaaaaa @ops\n", "tokens");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("@metrics or @admin"), std::string::npos);
}

TEST(ServeConfig, MetricsRelease) {
  const std::string base = R"({"tenants": [{"name": "a", "snapshot": "a.abf", "db": "a.db"}])";
  auto config = parse_server_config(base + "}", "c.json", "");
  ASSERT_TRUE(config) << config.error().describe();
  EXPECT_EQ(config->metrics_release_seconds, 60u);
  EXPECT_EQ(config->metrics_release_min_missing, 1000u);
  config = parse_server_config(
      base + R"(, "metrics_release": {"interval_seconds": 5, "min_missing_digests": 20}})",
      "c.json", "");
  ASSERT_TRUE(config) << config.error().describe();
  EXPECT_EQ(config->metrics_release_seconds, 5u);
  EXPECT_EQ(config->metrics_release_min_missing, 20u);
  auto refused = parse_server_config(base + R"(, "metrics_release": {"interval_seconds": 0}})",
                                     "c.json", "");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("metrics_release.interval_seconds: must be at least 1"),
            std::string::npos)
      << refused.error().message;
  refused = parse_server_config(base + R"(, "metrics_release": {"seconds": 5}})", "c.json", "");
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("unknown key \"seconds\""), std::string::npos);
}

// JSON bodies are read as a stream (SAX): what is refused is refused at the
// first mistake, and nesting is bounded (a DOM of `[[[...` cost 44 times
// the body's bytes).
TEST(ServeBody, JsonIsReadAsAStreamWithBoundedNesting) {
  const auto d = test::member_digests(3);
  const std::string deep = R"({"x": )" + std::string(100000, '[');
  const auto nested = parse_find_missing_body(BodyEncoding::kJson, deep, 3);
  ASSERT_FALSE(nested);
  EXPECT_EQ(nested.error().code, "invalid_json");
  EXPECT_NE(nested.error().message.find("nested deeper than 32"), std::string::npos)
      << nested.error().message;
  // An array at the top is refused at its first byte.
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, std::string(100000, '['), 3).error().code,
            "invalid_request");
  // Other keys are skipped, nested or not; "digests" may come anywhere.
  const std::string mixed = R"({"a": {"digests": 1, "b": [1, {"c": null}]}, "digests": ["sha256:)" +
                            d[0].hex() + R"("], "z": true})";
  EXPECT_EQ(*parse_find_missing_body(BodyEncoding::kJson, mixed, 3),
            std::vector<Digest>(d.begin(), d.begin() + 1));
  // Numbers where digests belong: refused at the first, whatever follows.
  std::string zeros = R"({"digests": [0)";
  for (int i = 0; i < 1000; ++i) zeros += ",0";
  const auto numbers = parse_find_missing_body(BodyEncoding::kJson, zeros + "]}", 3);
  ASSERT_FALSE(numbers);
  EXPECT_EQ(numbers.error().code, "invalid_digest");
  EXPECT_NE(numbers.error().message.find("digests[0]"), std::string::npos);
  // One digest past the limit stops the reading: 413 although the rest is not JSON.
  std::string many = R"({"digests": [)";
  for (int i = 0; i < 4; ++i) many += "\"" + d[i % 3].hex() + "\",";
  const auto over = parse_find_missing_body(BodyEncoding::kJson, many + "garbage", 3);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().status, 413);
  EXPECT_EQ(over.error().code, "too_many_digests");
  for (const std::string body :
       {R"({"digests": [], "digests": []})", R"({"digests": "x"})",
        R"({"digests": [["sha256:00"]]})", R"({"digests": [{}]})", R"("sha256:00")", "{}"}) {
    const auto refused = parse_find_missing_body(BodyEncoding::kJson, body, 3);
    ASSERT_FALSE(refused) << body;
    EXPECT_EQ(refused.error().status, 400) << body;
  }
  EXPECT_EQ(parse_find_missing_body(BodyEncoding::kJson, R"({"digests": []} x)", 3).error().code,
            "invalid_json");
}

// Protocol buffers' encoding, written out by hand for the tests below.
std::string varint(std::uint64_t value) {
  std::string out;
  for (; value >= 0x80; value >>= 7) out += static_cast<char>(value | 0x80);
  out += static_cast<char>(value);
  return out;
}
std::string field(int number, int wire_type) { return varint(number << 3 | wire_type); }
std::string length_field(int number, const std::string& bytes) {
  return field(number, 2) + varint(bytes.size()) + bytes;
}
std::string digest_message(const std::string& hash, std::int64_t size) {
  return length_field(1, hash) + field(2, 0) + varint(static_cast<std::uint64_t>(size));
}
std::span<const std::uint8_t> bytes_of(const std::string& text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

TEST(ServeGrpcWire, ReadsFieldsAsProtobufDoes) {
  const Digest one = sha256("one"), two = sha256("two");
  // The second entry: a wrong hash first (the last one given wins), an
  // unknown varint field 7, and its size after its hash.
  const std::string first = digest_message(one.hex(), 10);
  const std::string second =
      length_field(1, "not-a-digest") + field(7, 0) + varint(99) + digest_message(two.hex(), 20);
  const std::string request = field(3, 0) + varint(1) + length_field(2, first) +
                              field(9, 5) + std::string(4, 'x') +  // an unknown fixed32
                              length_field(1, "tenant") + length_field(2, second);
  auto wire = parse_find_missing_blobs(bytes_of(request), 100);
  ASSERT_TRUE(wire) << wire.error().message;
  EXPECT_EQ(wire->instance_name, "tenant");
  EXPECT_EQ(wire->digest_function, 1u);
  EXPECT_EQ(wire->count, 2u);
  EXPECT_FALSE(wire->digest_error);
  ASSERT_EQ(wire->digests.size(), 2u);
  EXPECT_EQ(wire->digests[0], one);
  EXPECT_EQ(wire->digests[1], two);
  // The answer holds the missing entries byte for byte as they were sent.
  const std::vector<std::uint32_t> missing = {1};
  std::string out(find_missing_blobs_response_size(*wire, missing), '\0');
  encode_find_missing_blobs_response(
      bytes_of(request), *wire, missing,
      std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size()));
  EXPECT_EQ(out, length_field(2, second));
  const std::vector<std::uint32_t> both = {0, 1};
  out.assign(find_missing_blobs_response_size(*wire, both), '\0');
  encode_find_missing_blobs_response(
      bytes_of(request), *wire, both,
      std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(out.data()), out.size()));
  EXPECT_EQ(out, length_field(2, first) + length_field(2, second));
  // An empty request is an empty message: no name, no digests.
  auto empty = parse_find_missing_blobs({}, 100);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->count, 0u);
  EXPECT_TRUE(empty->instance_name.empty());
}

TEST(ServeGrpcWire, BadDigestsAreNamedAndLimitsCounted) {
  const Digest one = sha256("one");
  std::string request = length_field(2, digest_message(one.hex(), 1)) +
                        length_field(2, digest_message("abc", 1)) +
                        length_field(2, digest_message(one.hex(), -1));
  auto wire = parse_find_missing_blobs(bytes_of(request), 100);
  ASSERT_TRUE(wire);
  ASSERT_TRUE(wire->digest_error);
  EXPECT_EQ(wire->digest_error->status, 400);
  EXPECT_EQ(wire->digest_error->code, "invalid_digest");
  EXPECT_NE(wire->digest_error->message.find("blob_digests[1]"), std::string::npos);
  request = length_field(2, digest_message(one.hex(), -1));  // -1: a 10-byte varint
  wire = parse_find_missing_blobs(bytes_of(request), 100);
  ASSERT_TRUE(wire && wire->digest_error);
  EXPECT_NE(wire->digest_error->message.find("size_bytes"), std::string::npos);
  // Past the limit, entries are counted, not decoded.
  request.clear();
  for (int i = 0; i < 5; ++i) request += length_field(2, digest_message(one.hex(), i));
  wire = parse_find_missing_blobs(bytes_of(request), 4);
  ASSERT_TRUE(wire);
  EXPECT_EQ(wire->count, 5u);
  EXPECT_TRUE(wire->digests.empty());
}

// The hex decoder against parse_hex_digest: every byte value at every
// position of a digest's 64 digits, in both cases.
TEST(ServeGrpcWire, DecodesHexAsParseHexDigestDoes) {
  for (const bool upper : {false, true}) {
    std::string hex = sha256("hex").hex();
    if (upper) std::transform(hex.begin(), hex.end(), hex.begin(), ::toupper);
    for (std::size_t position = 0; position < hex.size(); ++position) {
      for (int c = 0; c < 256; ++c) {
        std::string text = hex;
        text[position] = static_cast<char>(c);
        const std::string request = length_field(2, digest_message(text, 1));
        auto wire = parse_find_missing_blobs(bytes_of(request), 10);
        ASSERT_TRUE(wire);
        const auto expected = parse_hex_digest(text);
        ASSERT_EQ(expected.has_value(), !wire->digest_error) << position << " " << c;
        if (expected) {
          ASSERT_EQ(wire->digests.size(), 1u);
          ASSERT_EQ(wire->digests[0], *expected) << position << " " << c;
        }
      }
    }
  }
}

// Issue 23 F8: a digest sent as a varint was skipped, and the answer OK
// without it; protobuf refuses field number 0.
TEST(ServeGrpcWire, RefusesFieldZeroAndOurFieldsWithAnotherWireType) {
  const std::string digest = digest_message(sha256("one").hex(), 10);
  const std::pair<std::string, std::string> cases[] = {
      {length_field(2, digest) + field(2, 0) + varint(5),
       "field 2 (blob_digests) with wire type 0, not 2 at byte 70"},
      {field(1, 0) + varint(1), "field 1 (instance_name) with wire type 0, not 2 at byte 0"},
      {field(3, 2) + varint(0), "field 3 (digest_function) with wire type 2, not 0"},
      {field(0, 0) + varint(1), "field number 0 at byte 0"},
      {field(0, 2) + varint(0), "field number 0"},
      {length_field(2, field(1, 0) + varint(3)), "field 1 (hash) with wire type 0, not 2 at byte 2"},
      {length_field(2, length_field(1, "ab") + field(2, 2) + varint(0)),
       "field 2 (size_bytes) with wire type 2, not 0"},
      {length_field(2, field(0, 0) + varint(0)), "field number 0 at byte 2"},
  };
  for (const auto& [bytes, why] : cases) {
    auto wire = parse_find_missing_blobs(bytes_of(bytes), 100);
    ASSERT_FALSE(wire) << why;
    EXPECT_EQ(wire.error().status, 400);
    EXPECT_EQ(wire.error().code, "invalid_request");
    EXPECT_NE(wire.error().message.find(why), std::string::npos) << wire.error().message;
  }
  // Fields of other numbers, of any wire type, are still skipped.
  auto wire = parse_find_missing_blobs(
      bytes_of(field(4, 2) + varint(0) + field(9, 0) + varint(1) + length_field(2, digest)), 100);
  ASSERT_TRUE(wire) << wire.error().message;
  EXPECT_EQ(wire->digests.size(), 1u);
}

TEST(ServeGrpcWire, RefusesBytesThatAreNotAMessage) {
  const std::string name = length_field(1, "tenant");
  for (const std::string& bad :
       {name.substr(0, name.size() - 1),          // a field cut short
        std::string("\x0a\x80", 2),               // a truncated length varint
        field(2, 2) + std::string(11, '\xff'),    // a varint over 10 bytes
        field(5, 3),                              // a group
        field(4, 1) + "1234"}) {                  // a fixed64 cut short
    auto wire = parse_find_missing_blobs(bytes_of(bad), 100);
    ASSERT_FALSE(wire);
    EXPECT_EQ(wire.error().status, 400);
    EXPECT_EQ(wire.error().code, "invalid_request");
    EXPECT_NE(wire.error().message.find("at byte"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------
// The request head and chunked framing.

// Scans `head` in pieces of `step` bytes, as a connection delivers it.
RequestResult<bool> scan_in_steps(RequestHeadCheck& check, std::string_view head,
                                  std::size_t step) {
  RequestResult<bool> done = false;
  for (std::size_t end = std::min(step, head.size());; end = std::min(end + step, head.size())) {
    done = check.scan(head.substr(0, end));
    if (!done || *done || end == head.size()) return done;
  }
}

TEST(ServeHead, CompleteHeadsInAnyPieces) {
  const std::string body = "0123456789";
  for (const std::string& prefix :
       {std::string(), std::string("\r\n"), std::string("\r\n\r\n\r\n\r\n")}) {
    const std::string head =
        "POST /v1/t/find-missing?x=%20 HTTP/1.1\r\nHost: a\r\n"
        "Content-Length:  10 \r\nX-Tab: a\tb\xe9\r\nX-Empty:\r\n\r\n";
    const std::string bytes = prefix + head + body;
    for (std::size_t step = 1; step <= bytes.size(); ++step) {
      RequestHeadCheck check;
      auto done = scan_in_steps(check, bytes, step);
      ASSERT_TRUE(done) << step << ": " << done.error().message;
      ASSERT_TRUE(*done) << step;
      EXPECT_EQ(check.skipped(), prefix.size());
      EXPECT_EQ(check.end(), prefix.size() + head.size()) << step;
    }
  }
  RequestHeadCheck check;
  auto partial = check.scan("GET / HTTP/1.1\r\nHost: a\r\n");
  ASSERT_TRUE(partial);
  EXPECT_FALSE(*partial);
}

TEST(ServeHead, RefusesWhatCouldBeReadTwoWays) {
  const std::string get = "GET / HTTP/1.1\r\n";
  const std::pair<std::string, std::string> cases[] = {
      {get + "Content-Length: 5\r\nContent-Length: 9\r\n\r\n",
       "line 3: Content-Length appears more"},
      {get + "Content-Length: 5\r\ncontent-length: 5\r\n\r\n", "Content-Length appears more"},
      {get + "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n", "together with"},
      {get + "Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n", "together with"},
      {get + "Transfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n", "more than once"},
      {get + "Content-Length: +5\r\n\r\n", "not a decimal number"},
      {get + "Content-Length: 0x5\r\n\r\n", "not a decimal number"},
      {get + "Content-Length: 5, 5\r\n\r\n", "not a decimal number"},
      {get + "Content-Length: \r\n\r\n", "not a decimal number"},
      {get + "X: a" + std::string(1, '\0') + "b\r\n\r\n",
       "control character 0x00 in the value of X"},
      {get + "X: a\x7f\r\n\r\n", "control character 0x7f"},
      {get + "X: a\x1b[0m\r\n\r\n", "control character 0x1b"},
      {get + "X: a\rb\r\n\r\n", "a CR not followed by LF"},
      {get + "X : a\r\n\r\n", "not a token"},
      {get + "X\x01: a\r\n\r\n", "not a token"},
      {get + ": a\r\n\r\n", "not a token"},
      {get + "no colon\r\n\r\n", "without ':'"},
      {get + "X: a\r\n b\r\n\r\n", "line 3: a field line folded"},
      {get + "X: a\n\r\n", "bare LF"},
      {"GET / HTTP/1.1\n\n", "line 1: a line ends in a bare LF"},
      {"\n", "bare LF"},
      {"\r\n\r\n\r\n\r\n\r\nGET / HTTP/1.1\r\n\r\n", "line 5: more than 4 empty lines"},
      {"GET / HTTP/1.1 \r\n\r\n", "not `method SP target SP version`"},
      {"GET  / HTTP/1.1\r\n\r\n", "not `method SP target SP version`"},
      {"GET /\r\n\r\n", "not `method SP target SP version`"},
      {"garbage\r\n\r\n", "not `method SP target SP version`"},
      {"G\xc3\x89T / HTTP/1.1\r\n\r\n", "the method is not a token"},
      {"GET /\xc3\xa9 HTTP/1.1\r\n\r\n", "not visible ASCII"},
      {"GET /\x7f HTTP/1.1\r\n\r\n", "not visible ASCII"},
      {"GET / HTTP/1.10\r\n\r\n", "not HTTP/1.1 or HTTP/1.0"},
      {"GET / HTTPS/1.1\r\n\r\n", "not HTTP/1.1 or HTTP/1.0"},
      {"GET / HTTP/1.2\r\n\r\n", "not HTTP/1.1 or HTTP/1.0"},
      {"GET / HTTP/2.0\r\n\r\n", "not HTTP/1.1 or HTTP/1.0"},
      {"get / HTTP/1.1\r\n\r\n", "the method is not one of"},
      {"BREW / HTTP/1.1\r\n\r\n", "the method is not one of"},
  };
  for (const auto& [head, why] : cases) {
    for (const std::size_t step : {std::size_t{1}, std::size_t{7}, head.size()}) {
      RequestHeadCheck check;
      auto done = scan_in_steps(check, head, step);
      ASSERT_FALSE(done) << head;
      EXPECT_EQ(done.error().status, 400);
      EXPECT_EQ(done.error().code, "bad_request");
      EXPECT_NE(done.error().message.find(why), std::string::npos)
          << head << " -> " << done.error().message;
    }
  }
}

// A chunked encoding of `body` in random chunks, with random extensions and
// trailers.
std::string chunk_encode(std::string_view body, std::mt19937_64& random) {
  std::string out;
  while (!body.empty()) {
    const std::size_t n = std::min<std::size_t>(body.size(), 1 + random() % 300);
    char size[32];
    std::snprintf(size, sizeof size, random() % 2 ? "%zx" : "%zX", n);
    out += std::string(random() % 4 == 0 ? "000" : "") + size;
    if (random() % 4 == 0) out += random() % 2 ? ";name=value" : " \t;x";
    out += "\r\n";
    out.append(body.substr(0, n));
    out += "\r\n";
    body.remove_prefix(n);
  }
  out += "0\r\n";
  for (std::size_t i = random() % 3; i > 0; --i)
    out += "X-Trailer-" + std::to_string(i) + ": v\r\n";
  return out + "\r\n";
}

TEST(ServeChunked, DecodesRandomEncodingsInRandomPieces) {
  std::mt19937_64 random(23);
  const std::string next = "GET /healthz HTTP/1.1\r\n\r\n";  // pipelined: never consumed
  for (int round = 0; round < 300; ++round) {
    std::string body(random() % 2000, '\0');
    for (char& c : body) c = static_cast<char>(random());
    const std::string encoded = chunk_encode(body, random);
    const std::string bytes = encoded + next;
    ChunkedDecoder decoder(body.size(), 1000);
    std::string decoded;
    std::size_t at = 0;
    while (!decoder.done()) {
      ASSERT_LT(at, bytes.size());
      const std::size_t piece = std::min<std::size_t>(bytes.size() - at, 1 + random() % 64);
      auto used = decoder.feed(std::string_view(bytes).substr(at, piece), decoded);
      ASSERT_TRUE(used) << used.error().message;
      ASSERT_LE(*used, piece);
      if (*used < piece) {
        ASSERT_TRUE(decoder.done());
      }
      at += *used;
    }
    EXPECT_EQ(at, encoded.size()) << round;
    EXPECT_EQ(decoded, body) << round;
  }
}

TEST(ServeChunked, RefusesMalformedFramingAtOnce) {
  const std::pair<std::string, std::string> cases[] = {
      {"-5\r\n", "not hexadecimal"},
      {"0x10\r\n", "not hexadecimal"},
      {"+10\r\n", "not hexadecimal"},
      {"\r\n", "not hexadecimal"},
      {" 1\r\n", "not hexadecimal"},
      {"1 x\r\n", "not hexadecimal"},
      {"1;a\x01\r\n", "control character 0x01"},
      {"1\n", "bare LF"},
      {"1\r\nab", "chunk data not followed by CRLF"},
      {"1\r\na\n", "chunk data not followed by CRLF"},
      {"0\r\nno colon\r\n", "trailer line"},
      {"0\r\nX: a\n", "bare LF"},
      {"1" + std::string(5000, '0'), "longer than 4096"},
  };
  for (const auto& [bytes, why] : cases) {
    ChunkedDecoder decoder(100, 100);
    std::string body;
    auto used = decoder.feed(bytes, body);
    ASSERT_FALSE(used) << bytes;
    EXPECT_EQ(used.error().status, 400) << bytes;
    EXPECT_EQ(used.error().code, "invalid_chunked_body");
    EXPECT_NE(used.error().message.find(why), std::string::npos)
        << bytes << " -> " << used.error().message;
    EXPECT_NE(used.error().message.find("at byte"), std::string::npos);
  }
}

TEST(ServeChunked, LimitsTheBodyAndTheTrailers) {
  std::string body;
  ChunkedDecoder big(100, 100);
  auto used = big.feed("65\r\n", body);  // 101 bytes announced
  ASSERT_FALSE(used);
  EXPECT_EQ(used.error().code, "body_too_large");
  ChunkedDecoder huge(100, 100);
  used = huge.feed("10000000000000000\r\n", body);  // 2^64: 17 digits
  ASSERT_FALSE(used);
  EXPECT_EQ(used.error().code, "body_too_large");
  ChunkedDecoder zeros(100, 100);
  ASSERT_TRUE(zeros.feed("00000000000000000000001\r\na\r\n", body));  // leading zeros
  EXPECT_EQ(body, "a");
  body.clear();
  ChunkedDecoder pieces(100, 100);
  ASSERT_TRUE(pieces.feed("64\r\n" + std::string(100, 'a') + "\r\n", body));
  used = pieces.feed("1\r\n", body);
  ASSERT_TRUE(used);  // the size alone fits; its byte does not
  used = pieces.feed("a", body);
  ASSERT_FALSE(used);
  EXPECT_EQ(used.error().code, "body_too_large");
  ChunkedDecoder trailers(100, 20);
  body.clear();
  used = trailers.feed("0\r\nX: " + std::string(30, 'v') + "\r\n\r\n", body);
  ASSERT_FALSE(used);
  EXPECT_EQ(used.error().status, 431);
  ChunkedDecoder fits(100, 20);
  used = fits.feed("0\r\nX: vvvv\r\n\r\n", body);
  ASSERT_TRUE(used);
  EXPECT_TRUE(fits.done());
}

}  // namespace
}  // namespace abf::server
