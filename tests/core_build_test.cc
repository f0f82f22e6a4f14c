// Whole builds (docs/protocol.md sections 5 and 6) against builds.tsv, and the
// design's own checks: no false negatives, the modeled rate holds, capacity
// and determinism.
#include <gtest/gtest.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "abf/abf.hpp"
#include "abf/cuda/controls.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

const std::vector<Digest>& non_members() {
  static const std::vector<Digest> digests = [] {
    std::vector<Digest> all;
    for (std::uint64_t i = 0; i < 100'000; ++i) all.push_back(test::non_member_digest(i));
    return all;
  }();
  return digests;
}

std::vector<std::uint64_t> maybe_indices(const Filter& filter, Backend backend) {
  std::vector<Answer> answers(non_members().size());
  EXPECT_TRUE(filter.query(non_members(), answers, backend).has_value());
  std::vector<std::uint64_t> indices;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i] == Answer::kMaybe) indices.push_back(i);
  }
  return indices;
}

TEST(Build, MatchesEveryGoldenBuild) {
  const auto rows = test::read_tsv("vectors/builds.tsv");
  ASSERT_GE(rows.size(), 6u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 8u);
    SCOPED_TRACE("members = " + row[0] + ", n = " + row[1]);
    const auto members = test::member_digests(std::stoull(row[0]));
    const BloomSpec spec{std::stoull(row[1]), test::parse_hex_float(row[2])};
    for (const Backend backend : {Backend::kScalar, Backend::kSimd}) {
      SCOPED_TRACE(std::string(to_string(backend)));
      auto filter = build_filter(members, spec, 0, backend);
      ASSERT_TRUE(filter.has_value()) << filter.error().describe();
      EXPECT_EQ(filter->bit_count(), std::stoull(row[3]));
      EXPECT_EQ(filter->hash_count(), std::stoul(row[4]));
      EXPECT_EQ(filter->popcount(), std::stoull(row[5]));
      EXPECT_EQ(sha256(filter->payload()).hex(), row[6]);
      EXPECT_EQ(filter->inserted_item_count(), members.size());
      const auto expected = test::split_numbers(row[7]);
      EXPECT_EQ(maybe_indices(*filter, Backend::kScalar), expected);
      EXPECT_EQ(maybe_indices(*filter, Backend::kSimd), expected);
    }
  }
}

// v2/builds-v2.tsv: keyed builds, through build_filter on every host
// backend and through a FilterBuilder fed uneven chunks by mixed backends.
TEST(Build, MatchesEveryKeyedGoldenBuild) {
  const auto rows = test::read_tsv("vectors/v2/builds-v2.tsv");
  ASSERT_GE(rows.size(), 4u);
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 9u);
    SCOPED_TRACE("key " + row[0] + ", members = " + row[1] + ", n = " + row[2]);
    const Key key = *Key::parse_hex(row[0]);
    const auto members = test::member_digests(std::stoull(row[1]));
    const BloomSpec spec{std::stoull(row[2]), test::parse_hex_float(row[3])};
    const auto check = [&](const Filter& filter) {
      EXPECT_EQ(filter.hash_protocol_version(), 2u);
      EXPECT_EQ(filter.scheme().key_fingerprint(), key_fingerprint(key));
      EXPECT_EQ(filter.bit_count(), std::stoull(row[4]));
      EXPECT_EQ(filter.hash_count(), std::stoul(row[5]));
      EXPECT_EQ(filter.popcount(), std::stoull(row[6]));
      EXPECT_EQ(sha256(filter.payload()).hex(), row[7]);
      std::vector<Answer> answers(20'000);
      const auto expected = test::split_numbers(row[8]);
      for (const Backend backend : {Backend::kScalar, Backend::kSimd}) {
        ASSERT_TRUE(filter.query(std::span(non_members()).first(answers.size()), answers, backend));
        std::vector<std::uint64_t> maybe;
        for (std::size_t i = 0; i < answers.size(); ++i) {
          if (answers[i] == Answer::kMaybe) maybe.push_back(i);
        }
        EXPECT_EQ(maybe, expected) << backend.name();
      }
    };
    for (const Backend backend : {Backend::kScalar, Backend::kSimd, Backend::kAuto}) {
      SCOPED_TRACE(std::string(backend.name()));
      auto filter = build_filter(members, spec, BuildOptions{.key = key}, backend);
      ASSERT_TRUE(filter.has_value()) << filter.error().describe();
      check(*filter);
    }
    auto builder = FilterBuilder::create(spec, BuildOptions{.key = key});
    ASSERT_TRUE(builder.has_value());
    const Backend order[] = {Backend::kSimd, Backend::kScalar, Backend::kAuto};
    for (std::size_t offset = 0, c = 0; offset < members.size(); ++c) {
      const std::size_t size = std::min<std::size_t>(members.size() - offset, 1 + 397 * c);
      ASSERT_TRUE(builder->add(std::span(members).subspan(offset, size), order[c % 3]));
      offset += size;
    }
    auto chunked = std::move(*builder).finish();
    ASSERT_TRUE(chunked.has_value());
    check(*chunked);
  }
}

// The same digests under another key, or none, set other bits: the key
// decides the positions.
TEST(Build, EachKeyPlacesTheBitsItsOwnWay) {
  const auto members = test::random_digests(2000, 31);
  const BloomSpec spec{2000, 0.01};
  auto unkeyed = build_filter(members, spec);
  ASSERT_TRUE(unkeyed.has_value());
  std::vector<std::string> payloads{sha256(unkeyed->payload()).hex()};
  for (const auto& key : test::vector_keys()) {
    auto keyed = build_filter(members, spec, BuildOptions{.key = key.key});
    ASSERT_TRUE(keyed.has_value());
    EXPECT_EQ(keyed->bit_count(), unkeyed->bit_count()) << "the layout ignores the key";
    payloads.push_back(sha256(keyed->payload()).hex());
    std::vector<Answer> answers(members.size());
    ASSERT_TRUE(keyed->query(members, answers));
    EXPECT_EQ(std::ranges::count(answers, Answer::kDefinitelyNot), 0);
  }
  std::ranges::sort(payloads);
  EXPECT_EQ(std::ranges::unique(payloads).begin(), payloads.end()) << "two keys set the same bits";
}

TEST(Build, HasNoFalseNegatives) {
  const auto members = test::random_digests(50'000, 7);
  auto filter = build_filter(members, {50'000, 0.01});
  ASSERT_TRUE(filter.has_value());
  std::vector<Answer> answers(members.size());
  for (const Backend backend : {Backend::kScalar, Backend::kSimd}) {
    ASSERT_TRUE(filter->query(members, answers, backend).has_value());
    EXPECT_EQ(std::ranges::count(answers, Answer::kDefinitelyNot), 0);
  }
  for (const Digest& digest : members) ASSERT_TRUE(filter->might_contain(digest));
}

TEST(Build, ObservedRateStaysWithinFiveSigmaOfTheModel) {
  // n = 20,000, p = 0.01, 200,000 absent probes: resolution 5e-6 per probe.
  const auto members = test::random_digests(20'000, 11);
  auto filter = build_filter(members, {20'000, 0.01});
  ASSERT_TRUE(filter.has_value());
  const auto absent = test::random_digests(200'000, 12);
  std::vector<Answer> answers(absent.size());
  ASSERT_TRUE(filter->query(absent, answers).has_value());
  const double observed =
      static_cast<double>(std::ranges::count(answers, Answer::kMaybe)) / absent.size();
  const double model = filter->estimate_false_positive_rate();
  const double sigma = std::sqrt(model * (1 - model) / absent.size());
  EXPECT_LE(observed, model + 5 * sigma) << "model " << model << ", sigma " << sigma;
  EXPECT_GT(observed, 0.0);  // a filter answering `absent` to everything would pass the bound
  EXPECT_NEAR(filter->fill_ratio(), 0.5, 0.02);
}

TEST(Build, RejectsMoreDigestsThanExpected) {
  const auto digests = test::random_digests(101, 3);
  auto filter = build_filter(digests, {100, 0.01});
  ASSERT_FALSE(filter.has_value());
  EXPECT_EQ(filter.error().code, ErrorCode::kCapacityExceeded);
}

TEST(Build, ChecksTheSpecBeforeCapacity) {
  const auto digests = test::random_digests(10, 3);
  EXPECT_EQ(build_filter(digests, {5, 1.5}).error().code, ErrorCode::kInvalidFalsePositiveRate);
  EXPECT_EQ(build_filter(digests, {(1ull << 30) + 1, 0.1}).error().code,
            ErrorCode::kInvalidExpectedItemCount);
}

TEST(Build, BuilderDetectsCapacityWhileStreamingAndKeepsEarlierChunks) {
  auto builder = FilterBuilder::create({10, 0.01});
  ASSERT_TRUE(builder.has_value());
  const auto digests = test::random_digests(11, 5);
  ASSERT_TRUE(builder->add(std::span(digests).first(6)).has_value());
  const auto over = builder->add(std::span(digests).subspan(6));
  ASSERT_FALSE(over.has_value());
  EXPECT_EQ(over.error().code, ErrorCode::kCapacityExceeded);
  EXPECT_EQ(builder->inserted_item_count(), 6u);
  ASSERT_TRUE(builder->add(std::span(digests).subspan(6, 4)).has_value());
  EXPECT_EQ(builder->inserted_item_count(), 10u);
}

TEST(Build, EmptyInputBuildsAnEmptyFilter) {
  auto filter = build_filter({}, {1000, 0.01});
  ASSERT_TRUE(filter.has_value());
  EXPECT_EQ(filter->popcount(), 0u);
  EXPECT_EQ(filter->inserted_item_count(), 0u);
  EXPECT_EQ(filter->estimate_false_positive_rate(), 0.0);
}

TEST(Build, CountsDuplicatesAsInserted) {
  const auto one = test::random_digests(1, 9);
  const std::vector<Digest> twice = {one[0], one[0]};
  auto filter = build_filter(twice, {10, 0.01});
  ASSERT_TRUE(filter.has_value());
  EXPECT_EQ(filter->inserted_item_count(), 2u);
}

TEST(Build, SameInputAndSpecGiveTheSameBytesInAnyOrderOnAnyBackend) {
  auto digests = test::random_digests(30'000, 21);
  const BloomSpec spec{40'000, 0.001};
  auto reference = build_filter(digests, spec, 7, Backend::kScalar);
  ASSERT_TRUE(reference.has_value());
  const auto expected = serialize_snapshot(*reference);
  std::mt19937_64 rng(5);
  for (const Backend backend : {Backend::kScalar, Backend::kSimd, Backend::kAuto}) {
    std::ranges::shuffle(digests, rng);
    auto filter = build_filter(digests, spec, 7, backend);
    ASSERT_TRUE(filter.has_value());
    EXPECT_EQ(serialize_snapshot(*filter), expected) << to_string(backend);
  }
}

TEST(Build, BuilderWithPrivateLanesEqualsTheScalarBuildForAnyThreadCount) {
  // Chunks above the lane threshold (32 Ki digests), of uneven sizes, over
  // several add() calls: lanes persist across calls and are ORed in finish().
  const auto digests = test::random_digests(200'000, 31);
  const BloomSpec spec{250'000, 0.01};
  auto reference = build_filter(digests, spec, 3, Backend::kScalar);
  ASSERT_TRUE(reference.has_value());
  const auto expected = serialize_snapshot(*reference);
  for (const int threads : {1, 2, 3, 4, 7}) {
    tbb::task_arena arena(threads);
    arena.execute([&] {
      auto builder = FilterBuilder::create(spec, 3);
      ASSERT_TRUE(builder.has_value());
      std::size_t offset = 0;
      for (const std::size_t size : {40'000u, 1u, 100'000u, 33'333u, 26'666u}) {
        ASSERT_TRUE(builder->add(std::span(digests).subspan(offset, size), Backend::kSimd));
        offset += size;
      }
      ASSERT_EQ(offset, digests.size());
      auto finished = std::move(*builder).finish();
      ASSERT_TRUE(finished.has_value()) << finished.error().describe();
      EXPECT_EQ(serialize_snapshot(*finished), expected) << threads << " threads";
    });
  }
}

TEST(Query, RejectsAnAnswerBufferShorterThanTheBatch) {
  auto filter = build_filter({}, {10, 0.01});
  ASSERT_TRUE(filter.has_value());
  const auto digests = test::random_digests(3, 1);
  std::vector<Answer> answers(2);
  EXPECT_EQ(filter->query(digests, answers).error().code, ErrorCode::kInvalidArgument);
}

TEST(Query, CudaWithoutADeviceIsAClearError) {
  if (backend_available(Backend::kCuda)) GTEST_SKIP() << "a CUDA device is present";
  auto filter = build_filter({}, {10, 0.01});
  ASSERT_TRUE(filter.has_value());
  const auto digests = test::random_digests(3, 1);
  std::vector<Answer> answers(3);
  const auto result = filter->query(digests, answers, Backend::kCuda);
  ASSERT_FALSE(result.has_value());
  EXPECT_EQ(result.error().code, ErrorCode::kBackendUnavailable);
}

// The engine table is the one list of backends: every name parses, the
// list is the table's, an unknown name is refused with the names known.
TEST(Backend, TheEngineTableNamesEveryBackend) {
  const auto backends = list_backends();
  const auto names = backend_names();
  ASSERT_EQ(names.size(), backends.size() + 1);
  EXPECT_EQ(names.front(), "auto");
  for (std::size_t i = 0; i < backends.size(); ++i) {
    EXPECT_EQ(backends[i].backend.name(), names[i + 1]);
    EXPECT_EQ(Backend::parse(names[i + 1]).value(), backends[i].backend);
    EXPECT_FALSE(backends[i].summary.empty());
    EXPECT_FALSE(backends[i].detail.empty());
    EXPECT_EQ(backends[i].available, backend_available(backends[i].backend));
  }
  for (const Backend known : {Backend::kScalar, Backend::kSimd, Backend::kCuda}) {
    EXPECT_NE(std::ranges::find(names, std::string(known.name())), names.end()) << known.name();
  }
  const auto unknown = Backend::parse("gpu");
  ASSERT_FALSE(unknown.has_value());
  for (const auto& name : names) {
    EXPECT_NE(unknown.error().message.find(name), std::string::npos) << unknown.error().message;
  }
}

// ABF_BACKEND names an engine exactly as --backend does: an engine that
// cannot run here fails the same way, instead of falling back.
TEST(Backend, TheEnvironmentFailsExactlyAsARequestByName) {
  if (backend_available(Backend::kCuda)) GTEST_SKIP() << "a CUDA device is present";
  auto filter = build_filter(test::random_digests(10, 3), {10, 0.01});
  ASSERT_TRUE(filter.has_value());
  const auto digests = test::random_digests(3, 4);
  std::vector<Answer> answers(3);
  const auto by_name = filter->query(digests, answers, Backend::kCuda);
  ::setenv("ABF_BACKEND", "cuda", 1);
  const auto by_environment = filter->query(digests, answers);
  auto builder = FilterBuilder::create({10, 0.01});
  const auto build_by_environment = builder->add(digests);
  ::unsetenv("ABF_BACKEND");
  ASSERT_FALSE(by_name.has_value());
  ASSERT_FALSE(by_environment.has_value());
  ASSERT_FALSE(build_by_environment.has_value());
  EXPECT_EQ(by_environment.error().code, by_name.error().code);
  EXPECT_EQ(build_by_environment.error().code, ErrorCode::kBackendUnavailable);
  EXPECT_NE(by_environment.error().message.find("ABF_BACKEND"), std::string::npos)
      << by_environment.error().message;
}

TEST(Backend, ParsesNamesAndHonoursTheEnvironment) {
  EXPECT_EQ(parse_backend("simd").value(), Backend::kSimd);
  EXPECT_EQ(parse_backend("gpu").error().code, ErrorCode::kInvalidArgument);
  ::setenv("ABF_BACKEND", "scalar", 1);
  EXPECT_EQ(resolve_backend(Backend::kAuto, 10).value(), Backend::kScalar);
  EXPECT_EQ(resolve_backend(Backend::kSimd, 10).value(), Backend::kSimd);
  ::setenv("ABF_BACKEND", "bogus", 1);
  EXPECT_EQ(resolve_backend(Backend::kAuto, 10).error().code, ErrorCode::kInvalidArgument);
  ::unsetenv("ABF_BACKEND");
  EXPECT_NE(resolve_backend(Backend::kAuto, 10).value(), Backend::kAuto);
}

// kAuto's GPU rule (given a device): large batches only, and queries only
// against filters past the CPU's caches; builds at any filter size.
TEST(Backend, AutoSendsOnlyLargeBatchesAndLargeQueryFiltersToTheGpu) {
  static_assert(!auto_prefers_cuda(kAutoCudaMinBatch - 1, 0));
  static_assert(auto_prefers_cuda(kAutoCudaMinBatch, 0));
  static_assert(!auto_prefers_cuda(kAutoCudaMinBatch, kAutoCudaMinQueryFilterBytes - 8));
  static_assert(auto_prefers_cuda(kAutoCudaMinBatch, kAutoCudaMinQueryFilterBytes));
  static_assert(!auto_prefers_cuda(kAutoCudaMinBatch - 1, kAutoCudaMinQueryFilterBytes));
  // Without a device kAuto never answers CUDA, whatever the batch.
  if (!backend_available(Backend::kCuda)) {
    EXPECT_EQ(resolve_backend(Backend::kAuto, kAutoCudaMinBatch, std::uint64_t{1} << 27).value(),
              Backend::kSimd);
  }
}

}  // namespace
}  // namespace abf
