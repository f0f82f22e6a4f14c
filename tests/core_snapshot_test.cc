// ABF1 snapshots (PROTOCOL.md section 7): the golden file, and a distinct
// refusal for every way a file can be wrong.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> golden_bytes() {
  const std::string text = test::read_file(test::data_path("vectors/member-1000.abf"));
  return {text.begin(), text.end()};
}

// The builds.tsv row the golden snapshot was made from.
std::vector<std::string> golden_row() {
  for (const auto& row : test::read_tsv("vectors/builds.tsv")) {
    if (row[0] == "1000" && row[1] == "1000") return row;
  }
  ADD_FAILURE() << "builds.tsv has no 1000/1000 row";
  return {};
}

void reseal_header(std::vector<std::uint8_t>& bytes) {
  const std::uint64_t checksum = XXH3_64bits(bytes.data(), 72);
  std::memcpy(bytes.data() + 72, &checksum, 8);
}

template <class T>
void put(std::vector<std::uint8_t>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof(T));
}

fs::path temp_file(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("abf-snapshot-test-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir / name;
}

void write_file(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
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

TEST(Snapshot, OurBuildSerializesToTheGoldenBytes) {
  auto filter =
      build_filter(test::member_digests(1000), {1000, test::parse_hex_float(golden_row()[2])}, 42);
  ASSERT_TRUE(filter.has_value());
  EXPECT_EQ(serialize_snapshot(*filter), golden_bytes());
}

TEST(Snapshot, SaveAndLoadRoundTrip) {
  auto filter = build_filter(test::random_digests(5000, 1), {10'000, 0.001}, 77);
  ASSERT_TRUE(filter.has_value());
  const fs::path path = temp_file("round-trip.abf");
  ASSERT_TRUE(save_snapshot(*filter, path).has_value());
  for (const LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = load_snapshot(path, mode);
    ASSERT_TRUE(loaded.has_value()) << loaded.error().describe();
    EXPECT_EQ(serialize_snapshot(*loaded), serialize_snapshot(*filter));
    EXPECT_EQ(loaded->info().spec.target_fpp, 0.001);
  }
  const auto header = read_snapshot_header(path);
  ASSERT_TRUE(header.has_value());
  EXPECT_EQ(header->catalog_version, 77u);
  EXPECT_EQ(header->inserted_item_count, 5000u);
  fs::remove(path);
}

TEST(Snapshot, SaveIntoAMissingDirectoryFailsAndCreatesNothing) {
  auto filter = build_filter({}, {10, 0.01});
  const fs::path path = temp_file("no-such-dir") / "x.abf";
  const auto saved = save_snapshot(*filter, path);
  ASSERT_FALSE(saved.has_value());
  EXPECT_EQ(saved.error().code, ErrorCode::kIo);
  EXPECT_FALSE(fs::exists(path));
}

TEST(Snapshot, SaveReplacesAnExistingFileWhole) {
  const fs::path path = temp_file("replace.abf");
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
};

const Corruption kCorruptions[] = {
    {"header shorter than 128 bytes", [](auto& b) { b.resize(100); },
     ErrorCode::kSnapshotTruncated},
    {"empty file", [](auto& b) { b.clear(); }, ErrorCode::kSnapshotTruncated},
    {"wrong magic", [](auto& b) { b[0] = 'X'; }, ErrorCode::kSnapshotBadMagic},
    {"format version 2",
     [](auto& b) {
       put<std::uint32_t>(b, 4, 2);
       reseal_header(b);
     },
     ErrorCode::kSnapshotUnsupportedFormat},
    {"header byte flipped", [](auto& b) { b[20] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"header checksum flipped", [](auto& b) { b[72] ^= 1; }, ErrorCode::kSnapshotHeaderChecksum},
    {"hash protocol 2",
     [](auto& b) {
       put<std::uint32_t>(b, 8, 2);
       reseal_header(b);
     },
     ErrorCode::kSnapshotUnsupportedHashProtocol},
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
    {"payload length off by 8",
     [](auto& b) {
       put<std::uint64_t>(b, 56, 1208);
       reseal_header(b);
     },
     ErrorCode::kSnapshotBadPayloadLength},
    {"reserved byte set", [](auto& b) { b[127] = 1; }, ErrorCode::kSnapshotReservedNotZero},
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
};

TEST(Snapshot, RefusesEveryCorruptionWithItsOwnError) {
  for (const Corruption& corruption : kCorruptions) {
    SCOPED_TRACE(corruption.name);
    auto bytes = golden_bytes();
    corruption.apply(bytes);
    const auto parsed = parse_snapshot(bytes);
    ASSERT_FALSE(parsed.has_value());
    EXPECT_EQ(parsed.error().code, corruption.expected) << parsed.error().describe();

    const fs::path path = temp_file("corrupt.abf");
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
}

TEST(Snapshot, MissingFileIsAnIoError) {
  const auto loaded = load_snapshot("/nonexistent/abf/x.abf");
  ASSERT_FALSE(loaded.has_value());
  EXPECT_EQ(loaded.error().code, ErrorCode::kIo);
}

}  // namespace
}  // namespace abf
