// ABF1 snapshots (docs/protocol.md section 7): the golden files of both format
// versions and both protocols, and a distinct refusal for every way a file
// can be wrong.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> file_bytes(const std::string& relative) {
  const std::string text = test::read_file(test::data_path(relative));
  return {text.begin(), text.end()};
}

std::vector<std::uint8_t> golden_bytes() { return file_bytes("vectors/member-1000.abf"); }
std::vector<std::uint8_t> golden_v2_bytes() { return file_bytes("vectors/v2/member-1000-v2.abf"); }
std::vector<std::uint8_t> golden_keyed_bytes() {
  return file_bytes("vectors/v2/member-1000-keyed.abf");
}

// The builds.tsv row the golden snapshot was made from.
std::vector<std::string> golden_row() {
  for (const auto& row : test::read_tsv("vectors/builds.tsv")) {
    if (row[0] == "1000" && row[1] == "1000") return row;
  }
  ADD_FAILURE() << "builds.tsv has no 1000/1000 row";
  return {};
}

// The v2/builds-v2.tsv row of the keyed golden snapshot: key 0001..0f,
// 1000 members, n = 1000.
std::vector<std::string> golden_keyed_row() {
  for (const auto& row : test::read_tsv("vectors/v2/builds-v2.tsv")) {
    if (row[0] == test::golden_key().hex && row[1] == "1000" && row[2] == "1000") return row;
  }
  ADD_FAILURE() << "builds-v2.tsv has no row for the golden key with 1000/1000";
  return {};
}

Key golden_key() { return test::golden_key().key; }
CatalogId golden_catalog_id() { return test::golden_catalog_id(); }

// Recomputes the header checksum of either format version.
void reseal_header(std::vector<std::uint8_t>& bytes) {
  std::uint32_t version = 0;
  std::memcpy(&version, bytes.data() + 4, 4);
  std::uint64_t checksum = 0;
  if (version == 1) {
    checksum = XXH3_64bits(bytes.data(), 72);
  } else {
    std::vector<std::uint8_t> header(bytes.begin(), bytes.begin() + 128);
    std::memset(header.data() + 72, 0, 8);
    checksum = XXH3_64bits(header.data(), 128);
  }
  std::memcpy(bytes.data() + 72, &checksum, 8);
}

template <class T>
void put(std::vector<std::uint8_t>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

// `bytes` (a version-2 golden file) with the content fingerprint of the
// member-1000 vector in its header, flagged present, resealed.
std::vector<std::uint8_t> with_member_1000_fingerprint(std::vector<std::uint8_t> bytes) {
  const auto fingerprint =
      ContentFingerprint::parse_hex(test::fingerprint_vector("member-1000").fingerprint_hex);
  EXPECT_TRUE(fingerprint.has_value());
  if (!fingerprint) return bytes;
  const auto stored = fingerprint->bytes();
  std::memcpy(bytes.data() + 104, stored.data(), stored.size());
  put<std::uint32_t>(bytes, 120, 1);
  reseal_header(bytes);
  return bytes;
}

// A folder of this test's own, removed when the test ends.
class SnapshotFiles : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("abf-snapshot-test"); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path file(const std::string& name) const { return dir_ / name; }
  fs::path dir_;
};

std::vector<std::uint8_t> file_bytes_at(const fs::path& path) {
  const std::string text = test::read_file(path);
  return {text.begin(), text.end()};
}

void write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Every maybe among SHA-256("non-member:<i>"), i < limit.
std::vector<std::uint64_t> non_member_maybes(const Filter& filter, std::uint64_t limit) {
  std::vector<std::uint64_t> maybe;
  for (std::uint64_t i = 0; i < limit; ++i) {
    if (filter.might_contain(test::non_member_digest(i))) maybe.push_back(i);
  }
  return maybe;
}

TEST(Snapshot, GoldenFileLoadsAndAnswersAsItsBuild) {
  const auto row = golden_row();
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap, LoadMode::kAuto}) {
    auto filter = load_snapshot(test::data_path("vectors/member-1000.abf"), mode);
    ASSERT_TRUE(filter.has_value()) << filter.error().describe();
    EXPECT_EQ(filter->catalog_version(), 42u);
    EXPECT_EQ(filter->bit_count(), std::stoull(row[3]));
    EXPECT_EQ(filter->hash_count(), std::stoul(row[4]));
    EXPECT_EQ(filter->popcount(), std::stoull(row[5]));
    EXPECT_EQ(sha256(filter->payload()).hex(), row[6]);
    std::vector<std::uint64_t> maybe;
    for (std::uint64_t i = 0; i < 100'000; ++i) {
      if (filter->might_contain(test::non_member_digest(i))) maybe.push_back(i);
    }
    EXPECT_EQ(maybe, test::split_numbers(row[7]));
    for (const Digest& member : test::member_digests(1000)) {
      ASSERT_TRUE(filter->might_contain(member));
    }
  }
}

TEST(Snapshot, GoldenVersion2FilesLoadAndAnswerAsTheirBuilds) {
  const auto row = golden_row();
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto filter = load_snapshot(test::data_path("vectors/v2/member-1000-v2.abf"), mode);
    ASSERT_TRUE(filter.has_value()) << filter.error().describe();
    EXPECT_EQ(filter->hash_protocol_version(), 1u);
    EXPECT_EQ(filter->catalog_id(), golden_catalog_id());
    EXPECT_TRUE(filter->scheme().key_fingerprint().is_zero());
    EXPECT_EQ(sha256(filter->payload()).hex(), row[6]);
    EXPECT_EQ(non_member_maybes(*filter, 100'000), test::split_numbers(row[7]));
  }
  const auto keyed_row = golden_keyed_row();
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto filter = load_snapshot(test::data_path("vectors/v2/member-1000-keyed.abf"),
                                LoadOptions{.mode = mode, .key = golden_key()});
    ASSERT_TRUE(filter.has_value()) << filter.error().describe();
    EXPECT_EQ(filter->hash_protocol_version(), 2u);
    EXPECT_EQ(filter->catalog_version(), 42u);
    EXPECT_EQ(filter->catalog_id(), golden_catalog_id());
    EXPECT_EQ(filter->scheme().key_fingerprint().hex(), test::golden_key().fingerprint_hex);
    EXPECT_EQ(filter->bit_count(), std::stoull(keyed_row[4]));
    EXPECT_EQ(filter->hash_count(), std::stoul(keyed_row[5]));
    EXPECT_EQ(filter->popcount(), std::stoull(keyed_row[6]));
    EXPECT_EQ(sha256(filter->payload()).hex(), keyed_row[7]);
    EXPECT_EQ(non_member_maybes(*filter, 20'000), test::split_numbers(keyed_row[8]));
    for (const Digest& member : test::member_digests(1000)) {
      ASSERT_TRUE(filter->might_contain(member));
    }
  }
}

TEST(Snapshot, AKeyedSnapshotOpensWithItsKeyOnly) {
  const auto path = test::data_path("vectors/v2/member-1000-keyed.abf");
  const auto bytes = golden_keyed_bytes();
  const auto without = load_snapshot(path);
  ASSERT_FALSE(without.has_value());
  EXPECT_EQ(without.error().code, ErrorCode::kKeyRequired) << without.error().describe();
  EXPECT_EQ(parse_snapshot(bytes).error().code, ErrorCode::kKeyRequired);

  const test::VectorKey other_key = test::other_key();
  const Key other = other_key.key;
  const auto wrong = load_snapshot(path, LoadOptions{.key = other});
  ASSERT_FALSE(wrong.has_value());
  EXPECT_EQ(wrong.error().code, ErrorCode::kKeyMismatch) << wrong.error().describe();
  EXPECT_EQ(parse_snapshot(bytes, other).error().code, ErrorCode::kKeyMismatch);
  // The message names both fingerprints and never the key.
  EXPECT_NE(wrong.error().message.find(test::golden_key().fingerprint_hex), std::string::npos);
  EXPECT_EQ(wrong.error().message.find(other_key.hex), std::string::npos);
  EXPECT_EQ(wrong.error().message.find(test::golden_key().hex), std::string::npos);

  // A key given for an unkeyed snapshot is refused too.
  const auto unkeyed = load_snapshot(test::data_path("vectors/v2/member-1000-v2.abf"),
                                     LoadOptions{.key = golden_key()});
  ASSERT_FALSE(unkeyed.has_value());
  EXPECT_EQ(unkeyed.error().code, ErrorCode::kKeyMismatch) << unkeyed.error().describe();

  // The header needs no key.
  const auto header = read_snapshot_header(path);
  ASSERT_TRUE(header.has_value()) << header.error().describe();
  EXPECT_EQ(header->hash_protocol_version, 2u);
  EXPECT_EQ(header->key_fingerprint.hex(), test::golden_key().fingerprint_hex);
}

TEST(Snapshot, OurBuildsSerializeToTheGoldenBytes) {
  const BloomSpec spec{1000, test::parse_hex_float(golden_row()[2])};
  auto unkeyed =
      build_filter(test::member_digests(1000), spec,
                   BuildOptions{.catalog_version = 42, .catalog_id = golden_catalog_id()});
  ASSERT_TRUE(unkeyed.has_value());
  // The golden files predate the content fingerprint (bytes 104..124 zero):
  // a build writes the same bytes with the fingerprint of its 1,000 members
  // (vectors/fingerprint.tsv, from an independent implementation) and
  // contentFlags bit 0 there.
  EXPECT_EQ(serialize_snapshot(*unkeyed), with_member_1000_fingerprint(golden_v2_bytes()));
  for (const Backend backend : {Backend::kScalar, Backend::kSimd}) {
    auto keyed = build_filter(
        test::member_digests(1000), spec,
        BuildOptions{.catalog_version = 42, .catalog_id = golden_catalog_id(), .key = golden_key()},
        backend);
    ASSERT_TRUE(keyed.has_value());
    EXPECT_EQ(serialize_snapshot(*keyed), with_member_1000_fingerprint(golden_keyed_bytes()))
        << backend.name();
  }
}

TEST(Snapshot, AVersion1FileIsRewrittenAsVersion2WithTheSamePayload) {
  auto v1 = parse_snapshot(golden_bytes());
  ASSERT_TRUE(v1.has_value()) << v1.error().describe();
  EXPECT_TRUE(v1->catalog_id().is_zero()) << "a version-1 file names no catalog";
  const auto rewritten = serialize_snapshot(*v1);
  auto expected = golden_v2_bytes();
  // The version-2 golden file names its catalog; with a zero id the header
  // differs in those 16 bytes and the checksum only.
  std::memset(expected.data() + 80, 0, 16);
  reseal_header(expected);
  EXPECT_EQ(rewritten, expected);
}

TEST_F(SnapshotFiles, SaveAndLoadRoundTrip) {
  const Key key = *Key::parse_hex("0f0e0d0c0b0a09080706050403020100");
  auto filter = build_filter(test::random_digests(5000, 1), {10'000, 0.001},
                             BuildOptions{.catalog_version = 77, .key = key});
  ASSERT_TRUE(filter.has_value());
  const fs::path path = file("round-trip.abf");
  ASSERT_TRUE(save_snapshot(*filter, path).has_value());
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = load_snapshot(path, LoadOptions{.mode = mode, .key = key});
    ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
    EXPECT_EQ(serialize_snapshot(*loaded), serialize_snapshot(*filter));
    EXPECT_TRUE(loaded->scheme() == filter->scheme());
    EXPECT_EQ(loaded->info().spec.target_fpp, 0.001);
  }
  const auto header = read_snapshot_header(path);
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->catalog_version, 77u);
  EXPECT_EQ(header->inserted_item_count, 5000u);
  fs::remove(path);
}

TEST(Snapshot, TheGoldenFilesCarryNoContentFingerprint) {
  for (const auto& bytes : {golden_bytes(), golden_v2_bytes()}) {
    auto filter = parse_snapshot(bytes);
    ASSERT_TRUE(filter.has_value()) << filter.error().describe();
    EXPECT_FALSE(filter->content_fingerprint().has_value());
    auto header = parse_snapshot_header(bytes);
    ASSERT_TRUE(header.has_value());
    EXPECT_FALSE(header->content_fingerprint().has_value());
    // Saved again, it still says it does not know.
    EXPECT_FALSE(parse_snapshot(serialize_snapshot(*filter))->content_fingerprint().has_value());
  }
}

TEST_F(SnapshotFiles, TheContentFingerprintSurvivesSaveLoadAndMap) {
  const auto vector = test::fingerprint_vector("member-1000");
  auto filter = build_filter(vector.digests, {2000, 0.001}, BuildOptions{.catalog_version = 5});
  ASSERT_TRUE(filter.has_value());
  ASSERT_TRUE(filter->content_fingerprint().has_value());
  EXPECT_EQ(filter->content_fingerprint()->hex(), vector.fingerprint_hex);
  const Filter copy = *filter;  // copies share it
  EXPECT_EQ(copy.content_fingerprint(), filter->content_fingerprint());
  const fs::path path = file("fingerprinted.abf");
  ASSERT_TRUE(save_snapshot(*filter, path).has_value());
  const auto bytes = file_bytes_at(path);
  std::uint32_t flags = 0;
  std::memcpy(&flags, bytes.data() + 120, 4);
  EXPECT_EQ(flags, 1u);
  EXPECT_EQ(ContentFingerprint::from_bytes(std::span<const std::uint8_t, 16>(bytes.data() + 104, 16))
                .hex(),
            vector.fingerprint_hex);
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = load_snapshot(path, mode);
    ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
    EXPECT_EQ(loaded->content_fingerprint(), filter->content_fingerprint());
  }
  auto header = read_snapshot_header(path);
  ASSERT_TRUE(header.has_value()) << header.error().describe();
  EXPECT_EQ(header->content_fingerprint(), filter->content_fingerprint());
  EXPECT_EQ(snapshot_header(*filter).content_fingerprint(), filter->content_fingerprint());
}

// Issue 22, item 3: a payload zeroed with both checksums recomputed (2,000
// insertions, 0 bits set) must not load, by any path.
TEST_F(SnapshotFiles, AZeroedPayloadWithRecomputedChecksumsIsRefused) {
  auto filter = build_filter(test::member_digests(2000), {2000, 0.01}, BuildOptions{});
  ASSERT_TRUE(filter.has_value());
  auto bytes = serialize_snapshot(*filter);
  std::fill(bytes.begin() + 128, bytes.end(), 0);
  put<std::uint64_t>(bytes, 64, XXH3_64bits(bytes.data() + 128, bytes.size() - 128));
  reseal_header(bytes);
  ASSERT_TRUE(parse_snapshot_header(bytes).has_value()) << "the header itself is valid";
  auto parsed = parse_snapshot(bytes);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().code, ErrorCode::kSnapshotImplausibleFill);
  EXPECT_NE(parsed.error().message.find("2000 insertions set 0 of"), std::string::npos)
      << parsed.error().message;
  const fs::path path = file("zeroed.abf");
  write_file(path, bytes);
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = load_snapshot(path, mode);
    ASSERT_FALSE(loaded.has_value());
    EXPECT_EQ(loaded.error().code, ErrorCode::kSnapshotImplausibleFill);
  }
  auto header = read_snapshot_header(path);
  ASSERT_FALSE(header.has_value());
  EXPECT_EQ(header.error().code, ErrorCode::kSnapshotImplausibleFill);
}

// Issue 22, item 3: k, n and p changed together so that the layout rule
// still holds. 2,000 distinct digests built at n = 4,000, p = 0.01 (m =
// 38,400, k = 7); the header then claims n = 2,000 and a p whose layout is
// the same m with a larger k, so most members would answer Definitely Not.
// Such a file passes every rule a loader can check without knowing the
// insertions were distinct; check_fill with kDistinctInsertions refuses it.
TEST(Snapshot, ForgedHashCountFailsTheDistinctInsertionsCheck) {
  const auto members = test::member_digests(2000);
  auto filter = build_filter(members, {4000, 0.01}, BuildOptions{});
  ASSERT_TRUE(filter.has_value());
  ASSERT_TRUE(check_fill(*filter, FillCheck::kDistinctInsertions).has_value());
  // Search (n', p') with n' >= 2,000 and the same m but k' > k.
  std::optional<std::pair<BloomSpec, Layout>> forged;
  for (std::uint64_t n = 2000; n <= 4000 && !forged; n += 25) {
    for (int e = 40; e < 240 && !forged; ++e) {
      const double p = std::pow(10.0, -e / 40.0);
      auto layout = choose_layout({n, p});
      if (layout && layout->bit_count == filter->bit_count() &&
          layout->hash_count > filter->hash_count() + 3) {
        forged = {{n, p}, *layout};
      }
    }
  }
  ASSERT_TRUE(forged.has_value()) << "no (n, p) gives m = " << filter->bit_count() << " with a larger k";
  auto bytes = serialize_snapshot(*filter);
  put<std::uint32_t>(bytes, 12, forged->second.hash_count);
  put<std::uint64_t>(bytes, 32, forged->first.expected_item_count);
  put<double>(bytes, 48, forged->first.target_fpp);
  reseal_header(bytes);
  auto loaded = parse_snapshot(bytes);
  ASSERT_TRUE(loaded.has_value()) << "every rule short of distinctness holds: "
                                  << loaded.error().describe();
  std::size_t missing = 0;
  for (const Digest& member : members) missing += loaded->might_contain(member) ? 0 : 1;
  EXPECT_GT(missing, 1000u) << "the forgery is what the issue describes";
  auto checked = check_fill(*loaded, FillCheck::kDistinctInsertions, "forged.abf");
  ASSERT_FALSE(checked.has_value());
  EXPECT_EQ(checked.error().code, ErrorCode::kSnapshotImplausibleFill);
  EXPECT_NE(checked.error().message.find("forged.abf: 2000 insertions set"), std::string::npos)
      << checked.error().message;
  EXPECT_TRUE(check_fill(*loaded, FillCheck::kAnyInsertions).has_value());
}

TEST_F(SnapshotFiles, SaveIntoAMissingDirectoryFailsAndCreatesNothing) {
  auto filter = build_filter({}, {10, 0.01});
  const fs::path path = file("no-such-dir") / "x.abf";
  const auto saved = save_snapshot(*filter, path);
  ASSERT_FALSE(saved.has_value());
  EXPECT_EQ(saved.error().code, ErrorCode::kIo);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(SnapshotFiles, SaveReplacesAnExistingFileWhole) {
  const fs::path path = file("replace.abf");
  write_file(path, {1, 2, 3});
  auto filter = build_filter(test::random_digests(10, 2), {10, 0.01});
  ASSERT_TRUE(save_snapshot(*filter, path).has_value());
  EXPECT_EQ(fs::file_size(path), 128 + filter->bit_count() / 8);
  for (const auto& entry : fs::directory_iterator(path.parent_path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos)
        << "temporary file left behind: " << entry.path();
  }
  fs::remove(path);
}

struct Corruption {
  const char* name;
  void (*apply)(std::vector<std::uint8_t>&);
  ErrorCode expected;
  bool version1_only = false;  // a rule of version 1's layout of the header
};

// Rules of both versions, applied to the version-1 golden file.
const Corruption kCorruptions[] = {
    {"header shorter than 128 bytes", [](auto& b) { b.resize(100); },
     ErrorCode::kSnapshotTruncated},
    {"empty file", [](auto& b) { b.clear(); }, ErrorCode::kSnapshotTruncated},
    {"wrong magic", [](auto& b) { b[0] = 'X'; }, ErrorCode::kSnapshotBadMagic},
    {"format version 3",
     [](auto& b) {
       put<std::uint32_t>(b, 4, 3);
       reseal_header(b);
     },
     ErrorCode::kSnapshotUnsupportedFormat},
    {"format version 2 with a version-1 checksum", [](auto& b) { put<std::uint32_t>(b, 4, 2); },
     ErrorCode::kSnapshotHeaderChecksum, true},
    {"header byte flipped", [](auto& b) { b[20] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"header checksum flipped", [](auto& b) { b[72] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"hash protocol 2 in format version 1",
     [](auto& b) {
       put<std::uint32_t>(b, 8, 2);
       reseal_header(b);
     },
     ErrorCode::kSnapshotUnsupportedHashProtocol, true},
    {"hash count 0",
     [](auto& b) {
       put<std::uint32_t>(b, 12, 0);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadHashCount},
    {"hash count 33",
     [](auto& b) {
       put<std::uint32_t>(b, 12, 33);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadHashCount},
    {"bit count not a multiple of 64",
     [](auto& b) {
       put<std::uint64_t>(b, 24, 9601);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadBitCount},
    {"bit count above 2^30",
     [](auto& b) {
       put<std::uint64_t>(b, 24, (1ull << 30) + 64);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadBitCount},
    {"expected items 0",
     [](auto& b) {
       put<std::uint64_t>(b, 32, 0);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadExpectedItemCount},
    {"inserted above expected",
     [](auto& b) {
       put<std::uint64_t>(b, 40, 1001);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadInsertedItemCount},
    {"target fpp 1.0",
     [](auto& b) {
       put<double>(b, 48, 1.0);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadTargetFpp},
    {"target fpp NaN",
     [](auto& b) {
       put<double>(b, 48, std::numeric_limits<double>::quiet_NaN());
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadTargetFpp},
    {"hash count 7 changed to 8: not the layout of (n, p)",
     [](auto& b) {
       put<std::uint32_t>(b, 12, 8);
       reseal_header(b);
     },
     ErrorCode::kSnapshotLayoutMismatch},
    {"bit count one word larger, payload to match: not the layout of (n, p)",
     [](auto& b) {
       put<std::uint64_t>(b, 24, 9664);
       put<std::uint64_t>(b, 56, 1208);
       b.insert(b.end(), 8, 0);
       reseal_header(b);
     },
     ErrorCode::kSnapshotLayoutMismatch},
    {"target fpp doubled: not the layout of (n, p)",
     [](auto& b) {
       double p = 0;
       std::memcpy(&p, b.data() + 48, 8);
       put<double>(b, 48, p * 2);
       reseal_header(b);
     },
     ErrorCode::kSnapshotLayoutMismatch},
    {"payload length off by 8",
     [](auto& b) {
       put<std::uint64_t>(b, 56, 1208);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadPayloadLength},
    {"reserved byte set", [](auto& b) { b[127] = 1; }, ErrorCode::kSnapshotReservedNotZero, true},
    {"payload truncated", [](auto& b) { b.pop_back(); }, ErrorCode::kSnapshotPayloadTruncated},
    {"payload extended", [](auto& b) { b.push_back(0); }, ErrorCode::kSnapshotTrailingBytes},
    {"payload bit flipped", [](auto& b) { b[128 + 500] ^= 0x10; },
     ErrorCode::kSnapshotPayloadChecksum},
    {"payload checksum flipped",
     [](auto& b) {
       b[64] ^= 1;
       reseal_header(b);
     },
     ErrorCode::kSnapshotPayloadChecksum},
    // Issue 22: checksums that hold over a payload no build writes.
    {"payload zeroed, checksums recomputed (1,000 insertions, 0 bits)",
     [](auto& b) {
       std::fill(b.begin() + 128, b.end(), 0);
       const std::uint64_t checksum = XXH3_64bits(b.data() + 128, b.size() - 128);
       put<std::uint64_t>(b, 64, checksum);
       reseal_header(b);
     },
     ErrorCode::kSnapshotImplausibleFill},
    {"inserted item count 0 over a filled payload",
     [](auto& b) {
       put<std::uint64_t>(b, 40, 0);
       reseal_header(b);
     },
     ErrorCode::kSnapshotImplausibleFill},
    {"inserted item count 100 over 1,000 insertions' bits (more than 7 x 100)",
     [](auto& b) {
       put<std::uint64_t>(b, 40, 100);
       reseal_header(b);
     },
     ErrorCode::kSnapshotImplausibleFill},
    {"inserted item count 720: 5,003 bits is below 7 x 720 but far above the model's 3,922",
     [](auto& b) {
       put<std::uint64_t>(b, 40, 720);
       reseal_header(b);
     },
     ErrorCode::kSnapshotImplausibleFill},
};

// Version 2's own rules, applied to the version-2 golden file (protocol 1).
const Corruption kVersion2Corruptions[] = {
    {"header byte flipped", [](auto& b) { b[20] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"catalog id byte flipped", [](auto& b) { b[85] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"reserved byte flipped", [](auto& b) { b[110] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"version-1 checksum",
     [](auto& b) {
       const std::uint64_t checksum = XXH3_64bits(b.data(), 72);
       std::memcpy(b.data() + 72, &checksum, 8);
     },
     ErrorCode::kSnapshotHeaderChecksum},
    {"hash protocol 9 (no such protocol)",
     [](auto& b) {
       put<std::uint32_t>(b, 8, 9);
       reseal_header(b);
     },
     ErrorCode::kSnapshotUnsupportedHashProtocol},
    {"hash protocol 0",
     [](auto& b) {
       put<std::uint32_t>(b, 8, 0);
       reseal_header(b);
     },
     ErrorCode::kSnapshotUnsupportedHashProtocol},
    {"protocol 1 with a key fingerprint",
     [](auto& b) {
       b[96] = 0x82;
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadKeyFingerprint},
    {"hash count 7 changed to 8",
     [](auto& b) {
       put<std::uint32_t>(b, 12, 8);
       reseal_header(b);
     },
     ErrorCode::kSnapshotLayoutMismatch},
    {"a content fingerprint byte without its flag",
     [](auto& b) {
       b[104] = 1;
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadContentFingerprint},
    {"the last content fingerprint byte without its flag",
     [](auto& b) {
       b[119] = 0x80;
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadContentFingerprint},
    {"content flags bit 1",
     [](auto& b) {
       b[120] = 2;
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadContentFingerprint},
    {"content flags bit 31, fingerprint flagged",
     [](auto& b) {
       b[120] = 1;
       b[123] = 0x80;
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadContentFingerprint},
    {"first reserved byte set",
     [](auto& b) {
       b[124] = 1;
       reseal_header(b);
     },
     ErrorCode::kSnapshotReservedNotZero},
    {"last reserved byte set",
     [](auto& b) {
       b[127] = 1;
       reseal_header(b);
     },
     ErrorCode::kSnapshotReservedNotZero},
    {"payload bit flipped", [](auto& b) { b[128 + 500] ^= 0x10; },
     ErrorCode::kSnapshotPayloadChecksum},
    {"payload truncated", [](auto& b) { b.pop_back(); }, ErrorCode::kSnapshotPayloadTruncated},
};

void expect_refused(const fs::path& dir, std::vector<std::uint8_t> bytes,
                    const Corruption& corruption) {
  SCOPED_TRACE(corruption.name);
  corruption.apply(bytes);
  const auto parsed = parse_snapshot(bytes);
  ASSERT_FALSE(parsed.has_value());
  EXPECT_EQ(parsed.error().code, corruption.expected) << parsed.error().describe();

  const fs::path path = dir / "corrupt.abf";
  write_file(path, bytes);
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    const auto loaded = load_snapshot(path, mode);
    ASSERT_FALSE(loaded.has_value());
    EXPECT_EQ(loaded.error().code, corruption.expected) << loaded.error().describe();
    EXPECT_NE(loaded.error().message.find(path.string()), std::string::npos)
        << "the error should name the file: " << loaded.error().message;
  }
  fs::remove(path);
}

TEST_F(SnapshotFiles, RefusesEveryCorruptionWithItsOwnError) {
  for (const Corruption& corruption : kCorruptions) {
    expect_refused(dir_, golden_bytes(), corruption);
    // The rules of both versions hold for version 2 as well.
    if (!corruption.version1_only) expect_refused(dir_, golden_v2_bytes(), corruption);
  }
  for (const Corruption& corruption : kVersion2Corruptions) {
    expect_refused(dir_, golden_v2_bytes(), corruption);
  }
}

// kAuto used to map files of 64 MiB and more: zeroing the payload in place
// then made members answer absent, and truncating it killed the process
// with SIGBUS. A loaded filter must answer as it was verified, whatever
// happens to its file.
TEST_F(SnapshotFiles, AnAutoLoadedFilterIgnoresChangesToItsFile) {
  const auto members = test::member_digests(1000);
  const auto others = test::random_digests(20'000, 9);
  // n = 40,000,000 at p = 0.001: 72 MiB of bits, above the old threshold;
  // and a small one.
  for (const BloomSpec spec : {BloomSpec{40'000'000, 0.001}, BloomSpec{2000, 0.01}}) {
    SCOPED_TRACE(spec.expected_item_count);
    const fs::path path = file("served.abf");
    std::vector<Answer> expected(others.size());
    std::string payload_hash;
    {
      // Only the loaded filter outlives this block.
      auto built = build_filter(members, spec);
      ASSERT_TRUE(built.has_value());
      ASSERT_TRUE(save_snapshot(*built, path).has_value());
      ASSERT_TRUE(built->query(others, expected).has_value());
      payload_hash = sha256(built->payload()).hex();
    }

    auto loaded = load_snapshot(path);
    ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
    const auto answers_exactly = [&] {
      for (const Digest& member : members) ASSERT_TRUE(loaded->might_contain(member));
      std::vector<Answer> answers(others.size());
      ASSERT_TRUE(loaded->query(others, answers).has_value());
      EXPECT_EQ(answers, expected);
      EXPECT_EQ(sha256(loaded->payload()).hex(), payload_hash);
    };
    {
      // Zero the payload in place, through another descriptor.
      std::fstream out(path, std::ios::in | std::ios::out | std::ios::binary);
      out.seekp(kSnapshotHeaderSize);
      const std::vector<char> zeros(loaded->payload().size(), 0);
      out.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
    }
    answers_exactly();
    fs::resize_file(path, 0);
    answers_exactly();
    fs::remove(path);
  }
}

void write_header_claiming(const fs::path& path, std::uint64_t bit_count,
                           std::uint64_t payload_length, std::uint64_t file_size) {
  auto bytes = golden_v2_bytes();
  bytes.resize(kSnapshotHeaderSize);
  put<std::uint64_t>(bytes, 24, bit_count);
  put<std::uint64_t>(bytes, 56, payload_length);
  reseal_header(bytes);
  write_file(path, bytes);
  fs::resize_file(path, file_size);  // sparse: costs no disk
}

// The peak resident set, in KiB.
long peak_rss_kib() {
  struct rusage usage {};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

// Bytes this process has read through read(2) and its kin (rchar of
// /proc/self/io), or -1 where the kernel does not say.
long long bytes_read() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = -1;
  while (io >> key >> value) {
    if (key == "rchar:") return value;
  }
  return -1;
}

// Refused from the header: nothing of a claimed (or sparse 5 GB) payload is
// read (bytes read, not seconds, which a busy machine stretches) or mapped in
// (peak memory).
TEST_F(SnapshotFiles, HostileHeadersAreRefusedQuicklyInLittleMemory) {
  struct Hostile {
    const char* name;
    std::uint64_t bit_count, payload_length, file_size;
    ErrorCode expected;
  };
  const std::uint64_t gib = std::uint64_t{1} << 30;
  const Hostile cases[] = {
      {"a 2^40-byte payload claimed (bitCount to match)", std::uint64_t{1} << 43,
       std::uint64_t{1} << 40, 4096, ErrorCode::kSnapshotBadBitCount},
      {"a 2^40-byte payload claimed (bitCount 9600)", 9600, std::uint64_t{1} << 40,
       (std::uint64_t{1} << 40) + 128, ErrorCode::kSnapshotBadPayloadLength},
      {"a sparse 5 GB file behind a valid header", 9600, 1200, 5 * gib,
       ErrorCode::kSnapshotTrailingBytes},
      {"bitCount and payloadLength disagree", 9600, 1208, 128 + 1208,
       ErrorCode::kSnapshotBadPayloadLength},
      {"a payload shorter than promised", 9600, 1200, 128 + 600,
       ErrorCode::kSnapshotPayloadTruncated},
  };
  const long rss_before = peak_rss_kib();
  const long long read_before = bytes_read();
  ASSERT_GE(read_before, 0) << "/proc/self/io has no rchar";
  const auto start = std::chrono::steady_clock::now();
  for (const Hostile& hostile : cases) {
    SCOPED_TRACE(hostile.name);
    const fs::path path = file("hostile.abf");
    if (hostile.file_size > (std::uint64_t{1} << 36)) {
      // No filesystem here takes a 2^40-byte file, even sparse: use the
      // largest it does (the header is refused before the size matters).
      std::error_code ec;
      write_header_claiming(path, hostile.bit_count, hostile.payload_length, 128);
      fs::resize_file(path, hostile.file_size, ec);
    } else {
      write_header_claiming(path, hostile.bit_count, hostile.payload_length, hostile.file_size);
    }
    for (const LoadMode mode : {LoadMode::kAuto, LoadMode::kCopy, LoadMode::kMap}) {
      const auto loaded = load_snapshot(path, mode);
      ASSERT_FALSE(loaded.has_value());
      EXPECT_EQ(loaded.error().code, hostile.expected) << loaded.error().describe();
    }
    const auto header = read_snapshot_header(path);
    ASSERT_FALSE(header.has_value());
    EXPECT_EQ(header.error().code, hostile.expected) << header.error().describe();
    fs::remove(path);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const long grew_kib = peak_rss_kib() - rss_before;
  const long long read_kib = (bytes_read() - read_before) / 1024;
  // Each case writes its file from a golden snapshot (1.3 KB read) and
  // loads three ways; reading a claimed payload would be 5 GB.
  EXPECT_LE(read_kib, 4 * 1024) << "refusing hostile headers read " << read_kib << " KiB";
  EXPECT_LE(grew_kib, 4 * 1024) << "refusing hostile headers took " << grew_kib << " KiB";
  RecordProperty("rss_growth_kib", static_cast<int>(grew_kib));
  RecordProperty("read_kib", static_cast<int>(read_kib));
  RecordProperty("milliseconds", static_cast<int>(seconds * 1000));
}

// A FIFO once hung every reader: it was opened, blocking, before anything
// checked that it was a regular file.
TEST_F(SnapshotFiles, AFifoDeviceOrDirectoryIsRefusedAtOnce) {
  const fs::path fifo = file("snapshot.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::alarm(30);  // a hang fails the test instead of stalling the suite
  for (const auto& [path, kind] : std::initializer_list<std::pair<fs::path, std::string>>{
           {fifo, "a FIFO"}, {"/dev/null", "a character device"}, {dir_, "a directory"}}) {
    SCOPED_TRACE(path.string());
    for (const LoadMode mode : {LoadMode::kAuto, LoadMode::kCopy, LoadMode::kMap}) {
      const auto loaded = load_snapshot(path, mode);
      ASSERT_FALSE(loaded.has_value());
      EXPECT_EQ(loaded.error().code, ErrorCode::kIo);
      EXPECT_NE(loaded.error().message.find(kind), std::string::npos) << loaded.error().message;
      EXPECT_NE(loaded.error().message.find("not a regular snapshot file"), std::string::npos);
    }
    const auto header = read_snapshot_header(path);
    ASSERT_FALSE(header.has_value());
    EXPECT_EQ(header.error().code, ErrorCode::kIo);
  }
  ::alarm(0);
}

TEST(Snapshot, MissingFileIsAnIoError) {
  const auto loaded = load_snapshot("/nonexistent/abf/x.abf");
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, ErrorCode::kIo);
}

}  // namespace
}  // namespace abf
