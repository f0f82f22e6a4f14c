// The one-line protocols 3 and 4 through the library's whole path: builds
// (build_filter and FilterBuilder, every host backend, chunked and
// parallel) against vectors/v3/builds-v3.tsv, the two golden snapshots
// loaded (copied and mapped) and written back byte for byte, and the
// formatVersion-2 rules of section 7 for protocols 3 and 4, each broken rule
// refused with its own error.
#include <gtest/gtest.h>
#include <tbb/global_control.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "abf/layout_blocked.hpp"
#include "abf/snapshot.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

std::vector<std::uint8_t> file_bytes(const std::string& relative) {
  const std::string text = test::read_file(test::data_path(relative));
  return {text.begin(), text.end()};
}

void reseal_header(std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint8_t> header(bytes.begin(), bytes.begin() + 128);
  std::memset(header.data() + 72, 0, 8);
  const std::uint64_t checksum = XXH3_64bits(header.data(), 128);
  std::memcpy(bytes.data() + 72, &checksum, 8);
}

template <class T>
void put(std::vector<std::uint8_t>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

const std::vector<Digest>& non_members() {
  static const std::vector<Digest> digests = [] {
    std::vector<Digest> d;
    for (std::uint64_t i = 0; i < 100'000; ++i) d.push_back(test::non_member_digest(i));
    return d;
  }();
  return digests;
}

std::vector<std::uint64_t> maybe_indices(const Filter& filter, Backend backend) {
  std::vector<Answer> answers(non_members().size());
  EXPECT_TRUE(filter.query(non_members(), answers, backend));
  std::vector<std::uint64_t> maybe;
  for (std::size_t i = 0; i < answers.size(); ++i) {
    if (answers[i] == Answer::kMaybe) maybe.push_back(i);
  }
  return maybe;
}

struct BuildRow {
  std::uint32_t protocol;
  std::optional<Key> key;
  std::uint64_t members;
  BloomSpec spec;
  std::uint64_t bit_count;
  std::uint32_t hash_count;
  std::uint64_t popcount;
  std::string payload_sha256;
  std::vector<std::uint64_t> maybe;
};

std::vector<BuildRow> build_rows() {
  std::vector<BuildRow> rows;
  for (const auto& r : test::read_tsv("vectors/v3/builds-v3.tsv")) {
    BuildRow row{static_cast<std::uint32_t>(std::stoul(r[0])),
                 r[0] == "4" ? std::optional<Key>(*Key::parse_hex(r[1])) : std::nullopt,
                 std::stoull(r[2]),
                 BloomSpec{std::stoull(r[3]), test::parse_hex_float(r[4])},
                 std::stoull(r[5]),
                 static_cast<std::uint32_t>(std::stoul(r[6])),
                 std::stoull(r[7]),
                 r[8],
                 test::split_numbers(r.size() > 9 ? r[9] : "")};
    rows.push_back(std::move(row));
  }
  return rows;
}

// The content fingerprint by its definition (PROTOCOL.md section 7): the
// sum of the library's XXH3-128 of each member, mod 2^128.
ContentFingerprint reference_fingerprint(const std::vector<Digest>& digests) {
  ContentFingerprint sum;
  for (const Digest& digest : digests) {
    const XXH128_hash_t hash = XXH3_128bits(digest.bytes.data(), Digest::kSize);
    sum += {.low = hash.low64, .high = hash.high64};
  }
  return sum;
}

void check_build(const Filter& filter, const BuildRow& row) {
  EXPECT_EQ(filter.content_fingerprint(), reference_fingerprint(test::member_digests(row.members)));
  EXPECT_EQ(filter.hash_protocol_version(), row.protocol);
  EXPECT_EQ(filter.bit_count(), row.bit_count);
  EXPECT_EQ(filter.hash_count(), row.hash_count);
  EXPECT_EQ(filter.popcount(), row.popcount);
  EXPECT_EQ(sha256(filter.payload()).hex(), row.payload_sha256);
  EXPECT_EQ(filter.scheme().key_fingerprint().is_zero(), !row.key.has_value());
  EXPECT_DOUBLE_EQ(filter.estimate_false_positive_rate(),
                   modeled3(row.members, row.bit_count / 512));
  for (const Backend backend : {Backend::kScalar, Backend::kSimd, Backend::kAuto}) {
    EXPECT_EQ(maybe_indices(filter, backend), row.maybe) << backend.name();
  }
  for (const Digest& member : test::member_digests(row.members)) {
    ASSERT_TRUE(filter.might_contain(member));
  }
}

TEST(BlockedFilter, EveryGoldenBuildOnEveryBackendWholeAndChunked) {
  const auto rows = build_rows();
  ASSERT_GE(rows.size(), 6u);
  for (const auto& row : rows) {
    SCOPED_TRACE("protocol " + std::to_string(row.protocol) + ", members " +
                 std::to_string(row.members));
    const auto members = test::member_digests(row.members);
    const BuildOptions options{.protocol = row.protocol, .key = row.key};
    for (const Backend backend : {Backend::kScalar, Backend::kSimd, Backend::kAuto}) {
      SCOPED_TRACE(std::string(backend.name()));
      auto filter = build_filter(members, row.spec, options, backend);
      ASSERT_TRUE(filter.has_value()) << filter.error().describe();
      check_build(*filter, row);
    }
    auto builder = FilterBuilder::create(row.spec, options);
    ASSERT_TRUE(builder.has_value()) << builder.error().describe();
    const Backend order[] = {Backend::kSimd, Backend::kScalar, Backend::kAuto};
    for (std::size_t offset = 0, c = 0; offset < members.size(); ++c) {
      const std::size_t size = std::min<std::size_t>(members.size() - offset, 1 + 397 * c);
      ASSERT_TRUE(builder->add(std::span(members).subspan(offset, size), order[c % 3]));
      offset += size;
    }
    auto chunked = std::move(*builder).finish();
    ASSERT_TRUE(chunked.has_value());
    check_build(*chunked, row);
  }
}

// Parallel builds are bit-exact with the reference at every thread count,
// payload and content fingerprint (which the SIMD lane sums in its insert
// pass, on each thread its part): every golden build under 1, 2, 3 and 4
// threads, whole and in chunks of 1,000 and 40,000 (below and above the
// SIMD lane's private-bitset batch).
TEST(BlockedFilter, ParallelBuildsEqualTheReferenceAtEveryThreadCount) {
  for (const auto& row : build_rows()) {
    const auto members = test::member_digests(row.members);
    const ContentFingerprint expected = reference_fingerprint(members);
    for (const std::size_t threads : {1u, 2u, 3u, 4u}) {
      SCOPED_TRACE("protocol " + std::to_string(row.protocol) + ", members " +
                   std::to_string(row.members) + ", " + std::to_string(threads) + " threads");
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
      auto filter =
          build_filter(members, row.spec, BuildOptions{.protocol = row.protocol, .key = row.key},
                       Backend::kSimd);
      ASSERT_TRUE(filter.has_value());
      EXPECT_EQ(sha256(filter->payload()).hex(), row.payload_sha256);
      EXPECT_EQ(filter->content_fingerprint(), expected);
      for (const std::size_t chunk : {std::size_t{1000}, std::size_t{40'000}}) {
        auto builder =
            FilterBuilder::create(row.spec, BuildOptions{.protocol = row.protocol, .key = row.key});
        ASSERT_TRUE(builder.has_value());
        for (std::size_t offset = 0; offset < members.size(); offset += chunk) {
          const std::size_t size = std::min(chunk, members.size() - offset);
          ASSERT_TRUE(builder->add(std::span(members).subspan(offset, size), Backend::kSimd));
        }
        auto chunked = std::move(*builder).finish();
        ASSERT_TRUE(chunked.has_value());
        EXPECT_EQ(sha256(chunked->payload()).hex(), row.payload_sha256) << "chunks of " << chunk;
        EXPECT_EQ(chunked->content_fingerprint(), expected) << "chunks of " << chunk;
      }
    }
  }
}

// Section 6's order: the spec first (section 3c's errors), then capacity.
TEST(BlockedFilter, BuildChecksTheSpecByTheBlockedRuleThenCapacity) {
  const auto members = test::member_digests(10);
  const BuildOptions blocked{.protocol = blocked::kProtocolBlocked, .key = std::nullopt};
  EXPECT_EQ(build_filter(members, {0, 0.01}, blocked).error().code,
            ErrorCode::kInvalidExpectedItemCount);
  EXPECT_EQ(build_filter(members, {10, 1.0}, blocked).error().code,
            ErrorCode::kInvalidFalsePositiveRate);
  EXPECT_EQ(build_filter(members, {9, 0.01}, blocked).error().code, ErrorCode::kCapacityExceeded);
  // n past the classic limit is a valid one-line spec (2^36 is its limit);
  // the builder allocates lazily zeroed memory, nothing is inserted here.
  auto big = FilterBuilder::create({(std::uint64_t{1} << 30) + 1, 0.9}, blocked);
  ASSERT_TRUE(big.has_value()) << big.error().describe();
  EXPECT_GT(big->info().scheme.bit_count(), std::uint64_t{1} << 30);
  EXPECT_EQ(FilterBuilder::create({(std::uint64_t{1} << 36) + 1, 0.5}, blocked).error().code,
            ErrorCode::kInvalidExpectedItemCount);
  // Protocol 4 needs its key, protocol 3 refuses one.
  EXPECT_EQ(build_filter(members, {10, 0.01}, BuildOptions{.protocol = 4, .key = std::nullopt}).error().code,
            ErrorCode::kKeyRequired);
  EXPECT_EQ(build_filter(members, {10, 0.01},
                         BuildOptions{.protocol = 3, .key = test::golden_key().key})
                .error()
                .code,
            ErrorCode::kKeyMismatch);
}

struct Golden {
  std::string file;
  std::uint32_t protocol;
};
const Golden kGolden[] = {{"vectors/v3/member-1000-v3.abf", 3}, {"vectors/v3/member-1000-v4.abf", 4}};

const BuildRow& row_of(const std::vector<BuildRow>& rows, std::uint32_t protocol) {
  for (const auto& row : rows) {
    if (row.protocol == protocol && row.members == 1000 && row.spec.expected_item_count == 1000) {
      return row;
    }
  }
  ADD_FAILURE() << "no 1000-member row for protocol " << protocol;
  return rows.front();
}

TEST(BlockedSnapshot, GoldenFilesLoadCopiedAndMappedAndAnswerAsTheirBuilds) {
  const auto rows = build_rows();
  for (const auto& golden : kGolden) {
    SCOPED_TRACE(golden.file);
    const BuildRow& row = row_of(rows, golden.protocol);
    for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
      LoadOptions options{.mode = mode, .key = std::nullopt};
      if (golden.protocol == 4) options.key = *Key::parse_hex("000102030405060708090a0b0c0d0e0f");
      auto filter = load_snapshot(test::data_path(golden.file), options);
      ASSERT_TRUE(filter.has_value()) << filter.error().describe();
      EXPECT_EQ(filter->catalog_version(), 42u);
      EXPECT_EQ(filter->catalog_id(), test::golden_catalog_id());
      ASSERT_TRUE(filter->content_fingerprint().has_value());
      EXPECT_EQ(*filter->content_fingerprint(),
                ContentFingerprint::of(test::member_digests(1000)));
      check_build(*filter, row);
      // Written back, byte for byte.
      const auto bytes = serialize_snapshot(*filter);
      EXPECT_EQ(bytes, file_bytes(golden.file));
    }
  }
}

TEST(BlockedSnapshot, ABuildSavesTheGoldenFileAndLoadsBack) {
  const auto rows = build_rows();
  test::TempDir dir("abf-blocked");
  // One thread (the SIMD lane's fused insert and fingerprint) and two.
  for (const std::size_t threads : {1u, 2u}) {
    for (const auto& golden : kGolden) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
      const BuildRow& row = row_of(rows, golden.protocol);
      auto filter = build_filter(test::member_digests(1000), row.spec,
                                 BuildOptions{.catalog_version = 42,
                                              .catalog_id = test::golden_catalog_id(),
                                              .protocol = golden.protocol,
                                              .key = row.key});
      ASSERT_TRUE(filter.has_value());
      const auto path = dir / ("p" + std::to_string(golden.protocol) + ".abf");
      ASSERT_TRUE(save_snapshot(*filter, path));
      EXPECT_EQ(test::read_file(path), test::read_file(test::data_path(golden.file)));
      auto back = load_snapshot(path, LoadOptions{.key = row.key});
      ASSERT_TRUE(back.has_value()) << back.error().describe();
      EXPECT_EQ(back->scheme(), filter->scheme());
    }
  }
}

TEST(BlockedSnapshot, AKeyedOneLineSnapshotOpensWithItsKeyOnly) {
  const auto path = test::data_path("vectors/v3/member-1000-v4.abf");
  EXPECT_EQ(load_snapshot(path).error().code, ErrorCode::kKeyRequired);
  EXPECT_EQ(load_snapshot(path, LoadOptions{.key = test::other_key().key}).error().code,
            ErrorCode::kKeyMismatch);
  EXPECT_EQ(load_snapshot(test::data_path("vectors/v3/member-1000-v3.abf"),
                          LoadOptions{.key = test::golden_key().key})
                .error()
                .code,
            ErrorCode::kKeyMismatch);
}

// Section 7's rules for protocols 3 and 4, each broken alone (checksums
// resealed), each refused with its own error.
TEST(BlockedSnapshot, EveryFormatVersionTwoRuleOfTheOneLineProtocols) {
  const auto original = file_bytes("vectors/v3/member-1000-v3.abf");
  const auto refused = [&](auto&& edit) {
    auto bytes = original;
    edit(bytes);
    reseal_header(bytes);
    const auto parsed = parse_snapshot(bytes);
    EXPECT_FALSE(parsed.has_value());
    return parsed.has_value() ? ErrorCode::kInvalidArgument : parsed.error().code;
  };
  // Format version 1 holds protocol 1 only.
  {
    auto bytes = original;
    put<std::uint32_t>(bytes, 4, 1);
    std::memset(bytes.data() + 80, 0, 48);  // version 1: bytes 80..128 reserved
    const std::uint64_t checksum = XXH3_64bits(bytes.data(), 72);
    std::memcpy(bytes.data() + 72, &checksum, 8);
    const auto parsed = parse_snapshot(bytes);
    ASSERT_FALSE(parsed.has_value());
    EXPECT_EQ(parsed.error().code, ErrorCode::kSnapshotUnsupportedHashProtocol)
        << parsed.error().describe();
  }
  // An unkeyed protocol 3 with a key fingerprint.
  EXPECT_EQ(refused([](auto& b) { b[96] = 1; }), ErrorCode::kSnapshotBadKeyFingerprint);
  // hashCount is 8.
  EXPECT_EQ(refused([](auto& b) { put<std::uint32_t>(b, 12, 7); }), ErrorCode::kSnapshotBadHashCount);
  EXPECT_EQ(refused([](auto& b) { put<std::uint32_t>(b, 12, 9); }), ErrorCode::kSnapshotBadHashCount);
  // bitCount a multiple of 512 in 512..2^40.
  EXPECT_EQ(refused([](auto& b) { put<std::uint64_t>(b, 24, 10240 - 64); }),
            ErrorCode::kSnapshotBadBitCount);
  EXPECT_EQ(refused([](auto& b) { put<std::uint64_t>(b, 24, (std::uint64_t{1} << 40) + 512); }),
            ErrorCode::kSnapshotBadBitCount);
  EXPECT_EQ(refused([](auto& b) { put<std::uint64_t>(b, 24, 0); }), ErrorCode::kSnapshotBadBitCount);
  // expectedItemCount 1..2^36.
  EXPECT_EQ(refused([](auto& b) { put<std::uint64_t>(b, 32, (std::uint64_t{1} << 36) + 1); }),
            ErrorCode::kSnapshotBadExpectedItemCount);
  // bitCount is section 3c's layout (a valid 3c bit count of another n).
  EXPECT_EQ(refused([](auto& b) { put<std::uint64_t>(b, 24, 10240 + 512); }),
            ErrorCode::kSnapshotLayoutMismatch);
  EXPECT_EQ(refused([](auto& b) { put<std::uint64_t>(b, 32, 2000); }),
            ErrorCode::kSnapshotLayoutMismatch);
  // A protocol-1 header over this payload: section 3's layout is another.
  EXPECT_EQ(refused([](auto& b) { put<std::uint32_t>(b, 8, 1); }),
            ErrorCode::kSnapshotLayoutMismatch);
  // An unknown protocol.
  EXPECT_EQ(refused([](auto& b) { put<std::uint32_t>(b, 8, 5); }),
            ErrorCode::kSnapshotUnsupportedHashProtocol);
}

}  // namespace
}  // namespace abf
