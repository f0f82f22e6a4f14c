// The admission pipeline both fronts of `abf serve` share
// (server/src/admission.hpp): its steps in docs/serve.md's order, each
// refusal before the parser is asked for what comes after it, what each
// step notes for the access line, and the line itself. On a real Core: a
// catalog and snapshot made with the abf binary, served as tenants "a"
// and "b".
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "admission.hpp"
#include "server_core.hpp"
#include "test_support.hpp"

namespace abf::server {
namespace {

constexpr std::string_view kTokenA = "Bearer token-for-tenant-a-only";
constexpr std::string_view kTokenAll = "Bearer token-for-every-tenant";

// A parser that hands the pipeline what a test gives it, and records what
// the pipeline asked for, in order.
class FakeRequest final : public TenantRequest {
 public:
  FakeRequest(std::string tenant, std::vector<Digest> digests)
      : tenant_(std::move(tenant)), digests_(std::move(digests)) {}

  RequestResult<std::string_view> tenant() override {
    asked.push_back("tenant");
    if (tenant_error) return std::unexpected(*tenant_error);
    return tenant_;
  }
  RequestResult<std::span<const Digest>> digests() override {
    asked.push_back("digests");
    if (digests_error) return std::unexpected(*digests_error);
    return digests_;
  }

  std::optional<RequestError> tenant_error, digests_error;
  std::vector<std::string> asked;

 private:
  std::string tenant_;
  std::vector<Digest> digests_;
};

class AdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(test::run_cli(dir_.path(), "catalog init --db c.db").status, 0);
    std::string lines;
    for (const Digest& digest : present_) lines += digest.hex() + "\n";
    test::write_private_file(dir_ / "in.txt", lines);
    ASSERT_EQ(test::run_cli(dir_.path(), "catalog add --db c.db --input in.txt").status, 0);
    ASSERT_EQ(
        test::run_cli(dir_.path(),
                      "build --from-catalog c.db --expected-items 1000 --fpp 0.01 --output a.abf")
            .status,
        0);
    std::filesystem::copy_file(dir_ / "a.abf", dir_ / "b.abf");
    test::write_private_file(dir_ / "tokens", std::string(kTokenA.substr(7)) + " a\n" +
                                                  std::string(kTokenAll.substr(7)) + " *\n");
  }

  // A Core serving tenants "a" and "b", with the token file when `tokens`,
  // logging to lines_.
  std::unique_ptr<Core> core(bool tokens, RateLimit limit = {}) {
    auto made = make_core(tokens, limit);
    EXPECT_TRUE(made.has_value()) << (made ? "" : made.error().describe());
    return made ? std::move(*made) : nullptr;
  }
  Result<std::unique_ptr<Core>> make_core(bool tokens, RateLimit limit = {}) {
    ServerConfig config;
    for (const std::string name : {"a", "b"}) {
      TenantConfig tenant;
      tenant.name = name;
      tenant.snapshot = dir_ / (name + ".abf");
      tenant.db = dir_ / "c.db";
      config.tenants.push_back(tenant);
    }
    if (tokens) config.token_file = dir_ / "tokens";
    config.rate_limit = limit;
    ServerOptions options;
    options.log_sink = [this](std::string_view line) {
      const std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
    };
    return Core::create(config, options);
  }

  // The access lines logged so far, parsed.
  std::vector<nlohmann::ordered_json> access_lines() {
    const std::lock_guard lock(mutex_);
    std::vector<nlohmann::ordered_json> out;
    for (const std::string& line : lines_) {
      auto parsed = nlohmann::ordered_json::parse(line);
      if (parsed.value("event", "") == "request") out.push_back(std::move(parsed));
    }
    return out;
  }

  test::TempDir dir_{"admission"};
  const std::vector<Digest> present_ = test::random_digests(3, 11);
  const std::vector<Digest> absent_ = test::random_digests(2, 12);
  std::mutex mutex_;
  std::vector<std::string> lines_;
};

std::vector<std::string> keys_of(const nlohmann::ordered_json& line) {
  std::vector<std::string> keys;
  for (const auto& [key, value] : line.items()) keys.push_back(key);
  return keys;
}

TEST_F(AdmissionTest, AnswersAnAdmittedRequestExactlyAndNotesEveryStep) {
  auto served = core(false);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  FakeRequest request("a", {present_[0], absent_[0], present_[1], absent_[1]});
  RequestNote note;
  auto outcome = admission.find_missing("", request, note);
  ASSERT_TRUE(outcome.has_value()) << outcome.error().message;
  EXPECT_EQ(outcome->missing, (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(outcome->catalog_version, 1u);
  EXPECT_EQ(request.asked, (std::vector<std::string>{"tenant", "digests"}));
  EXPECT_EQ(note.caller, "anonymous");
  EXPECT_EQ(note.tenant, "a");
  EXPECT_EQ(note.digests, 4u);
  EXPECT_EQ(note.missing, 2u);
  EXPECT_EQ(note.maybes, outcome->counts.maybe);
  EXPECT_TRUE(note.has_version);
  EXPECT_EQ(note.catalog_version, 1u);
  EXPECT_GE(note.answer_us, 0);
  EXPECT_EQ(note.error, "");
}

TEST_F(AdmissionTest, AdmitThenAnswerIsTheOneCall) {
  auto served = core(true);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  FakeRequest request("", {absent_[0], present_[2]});
  RequestNote note;
  auto admitted = admission.admit(kTokenA, request, note);
  ASSERT_TRUE(admitted.has_value()) << admitted.error().message;
  EXPECT_EQ(admitted->tenant().config.name, "a");  // the token's one tenant
  ASSERT_NE(admitted->caller().token, nullptr);
  EXPECT_EQ(note.caller, admitted->caller().id());
  EXPECT_EQ(admitted->digests().size(), 2u);
  EXPECT_EQ(note.answer_us, -1);
  auto outcome = admission.answer(*admitted, note);
  ASSERT_TRUE(outcome.has_value());
  EXPECT_EQ(outcome->missing, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(note.missing, 1u);
}

TEST_F(AdmissionTest, AnUnauthenticatedRequestIsReadNoFurther) {
  auto served = core(true);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  for (const auto& [authorization, code] :
       {std::pair<std::string_view, std::string_view>{"", "unauthenticated"},
        {"Bearer not-a-token-of-this-server", "invalid_token"},
        {"Basic dXNlcjpwYXNz", "invalid_authorization"}}) {
    FakeRequest request("a", {present_[0]});
    RequestNote note;
    auto outcome = admission.find_missing(authorization, request, note);
    ASSERT_FALSE(outcome.has_value());
    EXPECT_EQ(outcome.error().status, 401);
    EXPECT_EQ(outcome.error().code, code);
    EXPECT_TRUE(request.asked.empty());
    EXPECT_EQ(note.caller, "");
    EXPECT_EQ(note.tenant, "");
  }
}

TEST_F(AdmissionTest, AnotherTenantIsForbiddenWhetherOrNotItExistsAndItsDigestsAreNotRead) {
  auto served = core(true);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  for (const std::string name : {"b", "no-such-tenant"}) {
    FakeRequest request(name, {present_[0]});
    RequestNote note;
    auto outcome = admission.find_missing(kTokenA, request, note);
    ASSERT_FALSE(outcome.has_value());
    EXPECT_EQ(outcome.error().status, 403);
    EXPECT_EQ(outcome.error().code, "forbidden");
    EXPECT_EQ(request.asked, (std::vector<std::string>{"tenant"}));
    EXPECT_NE(note.caller, "");
    EXPECT_EQ(note.tenant, "");  // no label value for a name it may not see
  }
  FakeRequest request("no-such-tenant", {present_[0]});
  RequestNote note;
  auto outcome = admission.find_missing(kTokenAll, request, note);
  ASSERT_FALSE(outcome.has_value());
  EXPECT_EQ(outcome.error().status, 404);
  EXPECT_EQ(outcome.error().code, "unknown_tenant");
  EXPECT_EQ(note.tenant, "");
}

TEST_F(AdmissionTest, ARequestNamingNoTenantGetsTheCallersOnlyOne) {
  auto served = core(true);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  {
    FakeRequest request("", {present_[0]});
    RequestNote note;
    ASSERT_TRUE(admission.find_missing(kTokenA, request, note).has_value());
    EXPECT_EQ(note.tenant, "a");
  }
  // A "*" token, on a server of two tenants: there is no default.
  FakeRequest request("", {present_[0]});
  RequestNote note;
  auto outcome = admission.find_missing(kTokenAll, request, note);
  ASSERT_FALSE(outcome.has_value());
  EXPECT_EQ(outcome.error().status, 400);
  EXPECT_EQ(outcome.error().code, "invalid_request");
  EXPECT_EQ(request.asked, (std::vector<std::string>{"tenant"}));
  EXPECT_EQ(note.tenant, "");
}

TEST_F(AdmissionTest, TheParsersRefusalsComeBackAsTheyAre) {
  auto served = core(false);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  {
    FakeRequest request("a", {present_[0]});
    request.tenant_error = RequestError{400, "invalid_tenant", "not a name"};
    RequestNote note;
    auto outcome = admission.find_missing("", request, note);
    ASSERT_FALSE(outcome.has_value());
    EXPECT_EQ(outcome.error().code, "invalid_tenant");
    EXPECT_EQ(request.asked, (std::vector<std::string>{"tenant"}));
    EXPECT_EQ(note.tenant, "");
  }
  {
    FakeRequest request("a", {present_[0]});
    request.digests_error = RequestError{415, "unsupported_media_type", "no Content-Type"};
    RequestNote note;
    auto outcome = admission.find_missing("", request, note);
    ASSERT_FALSE(outcome.has_value());
    EXPECT_EQ(outcome.error().status, 415);
    EXPECT_EQ(outcome.error().code, "unsupported_media_type");
    EXPECT_EQ(outcome.error().message, "no Content-Type");
    EXPECT_EQ(note.tenant, "a");
    EXPECT_EQ(note.digests, 0u);
    EXPECT_EQ(note.answer_us, -1);
  }
}

TEST_F(AdmissionTest, AnEmptyRequestBucketRefusesBeforeTheDigestsAreRead) {
  auto served = core(true, RateLimit{.requests_per_second = 0.001, .burst_seconds = 1000});
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  FakeRequest first("a", {present_[0]});
  RequestNote first_note;
  ASSERT_TRUE(admission.find_missing(kTokenA, first, first_note).has_value());
  FakeRequest second("a", {present_[0]});
  RequestNote note;
  auto outcome = admission.find_missing(kTokenA, second, note);
  ASSERT_FALSE(outcome.has_value());
  EXPECT_EQ(outcome.error().status, 429);
  EXPECT_EQ(outcome.error().code, "rate_limited");
  EXPECT_GE(outcome.error().retry_after_seconds, 1);
  EXPECT_EQ(second.asked, (std::vector<std::string>{"tenant"}));
  EXPECT_EQ(note.tenant, "a");
  // Another token draws from its own bucket.
  FakeRequest other("a", {present_[0]});
  RequestNote other_note;
  EXPECT_TRUE(admission.find_missing(kTokenAll, other, other_note).has_value());
}

TEST_F(AdmissionTest, AnEmptyDigestBucketRefusesAfterTheDigestsAreRead) {
  auto served = core(true, RateLimit{.digests_per_second = 0.001, .burst_seconds = 1000});
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  // A batch larger than the bucket passes once (the bucket goes into debt)...
  FakeRequest first("a", {present_[0], present_[1], absent_[0]});
  RequestNote first_note;
  ASSERT_TRUE(admission.find_missing(kTokenA, first, first_note).has_value());
  // ... and the next waits.
  FakeRequest second("a", {present_[0], present_[1], absent_[0]});
  RequestNote note;
  auto outcome = admission.find_missing(kTokenA, second, note);
  ASSERT_FALSE(outcome.has_value());
  EXPECT_EQ(outcome.error().status, 429);
  EXPECT_EQ(outcome.error().code, "rate_limited");
  EXPECT_EQ(second.asked, (std::vector<std::string>{"tenant", "digests"}));
  EXPECT_EQ(note.digests, 3u);
  EXPECT_EQ(note.answer_us, -1);
}

// A tenant whose snapshot cannot be loaded stops the start (issue 37: it was
// served unready, every request 503 no_snapshot), naming the tenant and
// the file, as an index that cannot be used does.
TEST_F(AdmissionTest, ATenantWithoutASnapshotStopsTheStart) {
  std::filesystem::remove(dir_ / "b.abf");
  auto made = make_core(false);
  ASSERT_FALSE(made.has_value());
  EXPECT_NE(made.error().message.find("tenant b: "), std::string::npos) << made.error().describe();
  EXPECT_NE(made.error().message.find((dir_ / "b.abf").string()), std::string::npos)
      << made.error().describe();
}

TEST_F(AdmissionTest, FinishWritesEachFrontsAccessLineAndCountsIt) {
  auto served = core(false);
  ASSERT_NE(served, nullptr);
  Admission admission(*served);
  FakeRequest request("a", {present_[0], absent_[0]});
  RequestNote note;
  ASSERT_TRUE(admission.find_missing("", request, note).has_value());
  admission.finish(AccessLine{.front = "http",
                              .method = "POST",
                              .path = "/v1/a/find-missing",
                              .remote = "127.0.0.1",
                              .endpoint = Endpoint::kHttpFindMissing},
                   200, note, std::chrono::microseconds(250));
  RequestNote refused;
  refused.caller = "anonymous";
  refused.error = "unknown_tenant";
  admission.finish(AccessLine{.front = "grpc",
                              .method = "FindMissingBlobs",
                              .path = std::nullopt,
                              .remote = "ipv4:127.0.0.1:5",
                              .endpoint = Endpoint::kGrpcFindMissingBlobs},
                   404, refused, std::chrono::microseconds(7));
  const auto lines = access_lines();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(keys_of(lines[0]),
            (std::vector<std::string>{"ts", "level", "event", "front", "method", "path", "status",
                                      "tenant", "caller", "digests", "missing", "maybes",
                                      "catalog_version", "us", "answer_us", "remote"}));
  EXPECT_EQ(lines[0]["path"], "/v1/a/find-missing");
  EXPECT_EQ(lines[0]["status"], 200);
  EXPECT_EQ(lines[0]["tenant"], "a");
  EXPECT_EQ(lines[0]["digests"], 2);
  EXPECT_EQ(lines[0]["missing"], 1);
  EXPECT_EQ(lines[0]["us"], 250);
  EXPECT_EQ(keys_of(lines[1]),
            (std::vector<std::string>{"ts", "level", "event", "front", "method", "status", "tenant",
                                      "caller", "digests", "missing", "maybes", "error", "us",
                                      "remote"}));
  EXPECT_EQ(lines[1]["error"], "unknown_tenant");
  EXPECT_EQ(lines[1]["remote"], "ipv4:127.0.0.1:5");
  const std::string metrics = served->prometheus();
  EXPECT_NE(
      metrics.find(
          "artifact_bloom_serve_requests_total{front=\"http\",tenant=\"a\",status=\"200\"} 1"),
      std::string::npos);
  EXPECT_NE(metrics.find(
                "artifact_bloom_serve_requests_total{front=\"grpc\",tenant=\"\",status=\"404\"} 1"),
            std::string::npos);
}

}  // namespace
}  // namespace abf::server
