// The protocol table (abf/protocol/table.hpp): every row is dispatched, a
// version outside it is an error at every entry point (the builder's
// options, the layout rule, the layout limits, the snapshot loader and
// header reader, inspect, merge and query), never protocol 1, and the
// protocol a build takes is the one its options name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/probe.hpp"
#include "binary_format.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

// A version no row of the table has (the largest one plus a margin).
template <class... P>
constexpr std::uint32_t unknown_version(probe::ProtocolList<P...>) {
  return std::max({P::kVersion...}) + 6;
}
constexpr std::uint32_t kUnknown = unknown_version(probe::Protocols{});

template <class... P>
std::vector<std::uint32_t> versions(probe::ProtocolList<P...>) {
  return {P::kVersion...};
}

TEST(ProtocolTable, EveryRowDispatchesToItselfAndNothingElseDoes) {
  for (const std::uint32_t version : versions(probe::Protocols{})) {
    EXPECT_TRUE(probe::known_protocol(version)) << version;
    const std::uint32_t seen = probe::with_protocol(
        version, [](auto protocol) { return decltype(protocol)::kVersion; },
        [] { return std::uint32_t{0}; });
    EXPECT_EQ(seen, version);
  }
  EXPECT_EQ(probe::keyed_protocol(probe::kProtocolUnkeyed), false);
  EXPECT_EQ(probe::keyed_protocol(probe::kProtocolKeyed), true);
  for (const std::uint32_t version : {0u, kUnknown, 0xffffffffu}) {
    EXPECT_FALSE(probe::known_protocol(version)) << version;
    EXPECT_FALSE(probe::keyed_protocol(version)) << version;
    bool unknown = false;
    probe::with_protocol(
        version, [](auto) { ADD_FAILURE() << "an unknown version ran a row"; },
        [&] { unknown = true; });
    EXPECT_TRUE(unknown) << version;
  }
}

TEST(ProtocolTable, UnknownVersionIsRefusedByTheLayoutRuleAndLimits) {
  const auto layout = choose_layout({1000, 0.01}, kUnknown);
  ASSERT_FALSE(layout.has_value());
  EXPECT_EQ(layout.error().code, ErrorCode::kSnapshotUnsupportedHashProtocol);
  EXPECT_EQ(check_layout({9600, 7}, kUnknown), LayoutFault::kProtocol);
  EXPECT_TRUE(std::isnan(modeled_false_positive_rate({9600, 7}, 1000, kUnknown)));
  // Protocols 1 and 2 share the classic layout rule.
  EXPECT_EQ(*choose_layout({1000, 0.01}, probe::kProtocolUnkeyed),
            *choose_layout({1000, 0.01}, probe::kProtocolKeyed));
  const auto scheme = Scheme::of(kUnknown, {9600, 7}, std::nullopt);
  ASSERT_FALSE(scheme.has_value());
  EXPECT_EQ(scheme.error().code, ErrorCode::kSnapshotUnsupportedHashProtocol);
}

Key test_key() {
  std::uint8_t bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<std::uint8_t>(i);
  return Key::from_bytes(std::span<const std::uint8_t, 16>(bytes, 16));
}

TEST(ProtocolTable, BuildOptionsNameTheProtocolAndTheKeyIsItsParameter) {
  const BloomSpec spec{500, 0.01};
  const auto digests = test::random_digests(400, 7);
  const auto build = [&](const BuildOptions& options) -> Result<Filter> {
    auto builder = FilterBuilder::create(spec, options);
    if (!builder) return std::unexpected(builder.error());
    if (auto added = builder->add(digests, Backend::kScalar); !added) {
      return std::unexpected(added.error());
    }
    return std::move(*builder).finish();
  };
  BuildOptions unknown;
  unknown.protocol = kUnknown;
  ASSERT_FALSE(build(unknown).has_value());
  EXPECT_EQ(build(unknown).error().code, ErrorCode::kSnapshotUnsupportedHashProtocol);

  BuildOptions keyless_keyed;
  keyless_keyed.protocol = probe::kProtocolKeyed;
  ASSERT_FALSE(build(keyless_keyed).has_value());
  EXPECT_EQ(build(keyless_keyed).error().code, ErrorCode::kKeyRequired);

  BuildOptions keyed_unkeyed;
  keyed_unkeyed.protocol = probe::kProtocolUnkeyed;
  keyed_unkeyed.key = test_key();
  ASSERT_FALSE(build(keyed_unkeyed).has_value());
  EXPECT_EQ(build(keyed_unkeyed).error().code, ErrorCode::kKeyMismatch);

  // Named or chosen by key, the same filter.
  BuildOptions by_key;
  by_key.key = test_key();
  BuildOptions named = by_key;
  named.protocol = probe::kProtocolKeyed;
  const auto a = build(by_key);
  const auto b = build(named);
  ASSERT_TRUE(a.has_value() && b.has_value());
  EXPECT_EQ(a->hash_protocol_version(), probe::kProtocolKeyed);
  EXPECT_EQ(b->hash_protocol_version(), probe::kProtocolKeyed);
  EXPECT_TRUE(std::equal(a->payload().begin(), a->payload().end(), b->payload().begin(),
                         b->payload().end()));
  BuildOptions plain;
  plain.protocol = probe::kProtocolUnkeyed;
  const auto c = build(plain);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->hash_protocol_version(), probe::kProtocolUnkeyed);
  EXPECT_FALSE(std::equal(a->payload().begin(), a->payload().end(), c->payload().begin(),
                          c->payload().end()));
}

class UnknownProtocolFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = test::make_temp_dir("abf-protocol");
    // The golden formatVersion-2 snapshot with hashProtocolVersion (bytes
    // 8..12) set to a version outside the table and its header checksum
    // (bytes 72..80, over the 128 header bytes with itself zero) redone, so
    // the protocol is the first rule it breaks.
    std::string bytes = test::read_file(test::data_path("vectors/v2/member-1000-v2.abf"));
    ASSERT_GE(bytes.size(), 128u);
    auto* header = reinterpret_cast<std::uint8_t*>(bytes.data());
    detail::store_le<std::uint32_t>(header + 8, kUnknown);
    detail::store_le<std::uint64_t>(header + 72, detail::header_checksum_zeroed<128>(header, 72));
    std::ofstream(path(), std::ios::binary) << bytes;
    std::ofstream(good(), std::ios::binary)
        << test::read_file(test::data_path("vectors/v2/member-1000-v2.abf"));
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path path() const { return dir_ / "unknown.abf"; }
  fs::path good() const { return dir_ / "good.abf"; }

  static void expect_refused(const test::CliRun& run) {
    EXPECT_NE(run.status, 0);
    EXPECT_NE(run.err.find("snapshot_unsupported_hash_protocol"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("hash protocol version " + std::to_string(kUnknown)),
              std::string::npos)
        << run.err;
  }

  fs::path dir_;
};

TEST_F(UnknownProtocolFile, LoadAndHeaderReadRefuseIt) {
  for (const LoadMode mode : {LoadMode::kAuto, LoadMode::kCopy, LoadMode::kMap}) {
    const auto loaded = load_snapshot(path(), mode);
    ASSERT_FALSE(loaded.has_value());
    EXPECT_EQ(loaded.error().code, ErrorCode::kSnapshotUnsupportedHashProtocol)
        << loaded.error().describe();
  }
  const auto header = read_snapshot_header(path());
  ASSERT_FALSE(header.has_value());
  EXPECT_EQ(header.error().code, ErrorCode::kSnapshotUnsupportedHashProtocol);
}

TEST_F(UnknownProtocolFile, InspectMergeAndQueryRefuseIt) {
  expect_refused(test::run_cli(dir_, "inspect " + path().string()));
  expect_refused(test::run_cli(dir_, "inspect --json " + path().string()));
  expect_refused(test::run_cli(dir_, "merge " + good().string() + " " + path().string() +
                                         " -o " + (dir_ / "merged.abf").string()));
  EXPECT_FALSE(fs::exists(dir_ / "merged.abf"));
  expect_refused(test::run_cli(dir_, "query -s " + path().string() + " --input /dev/null"));
}

}  // namespace
}  // namespace abf
