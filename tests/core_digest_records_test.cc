// Text input whose records end with NUL (`sha256sum -z`, `abf digest -z`):
// the first record's terminator decides for the whole input, a name may
// hold newlines, and a NUL in newline-terminated text is an error naming
// its line and byte offset, never part of a name that hides the next
// digest (issue 22). Across the reader's 1 MiB chunks too.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using namespace std::string_literals;

constexpr std::size_t kChunk = std::size_t{1} << 20;  // DigestReader's read buffer

// `<hex>  <name>\0`, as sha256sum -z prints it.
std::string zero_record(const Digest& digest, const std::string& name) {
  return digest.hex() + "  " + name + '\0';
}

Result<std::vector<Digest>> read_memory(const std::string& text) {
  auto reader = DigestReader::from_memory(text, InputFormat::kHex, "z.txt");
  return reader.read_all();
}

Result<std::vector<Digest>> read_file(const fs::path& dir, const std::string& text) {
  const fs::path path = dir / "input.txt";
  std::ofstream(path, std::ios::binary) << text;
  auto reader = DigestReader::open(path, InputFormat::kHex);
  if (!reader) return std::unexpected(reader.error());
  // Small spans, so reads stop and resume around the chunk boundaries.
  std::vector<Digest> all;
  std::vector<Digest> span(3);
  while (true) {
    const auto got = reader->read(span);
    if (!got) return std::unexpected(got.error());
    if (*got == 0) break;
    all.insert(all.end(), span.begin(), span.begin() + static_cast<std::ptrdiff_t>(*got));
  }
  return all;
}

TEST(DigestRecords, NulTerminatedRecordsAreEachADigestNamesWithNewlinesIncluded) {
  const auto d = test::random_digests(5, 22);
  const std::string text = zero_record(d[0], "a") + zero_record(d[1], "new\nline") +
                           zero_record(d[2], "back\\slash") + "SHA256 (tag\nname) = " + d[3].hex() +
                           '\0' + zero_record(d[4], "\n");
  const auto read = read_memory(text);
  ASSERT_TRUE(read.has_value()) << read.error().describe();
  EXPECT_EQ(*read, d);
}

TEST(DigestRecords, BlankRecordsAFinalNewlineAndAnUnterminatedLastRecordAreRead) {
  const auto d = test::random_digests(3, 23);
  const std::string text = "\0"s + zero_record(d[0], "a") + "\0 \t\0"s + d[1].hex() + "\n\0"s +
                           "sha256:" + d[2].hex() + "\n";
  const auto read = read_memory(text);
  ASSERT_TRUE(read.has_value()) << read.error().describe();
  EXPECT_EQ(*read, d);
}

TEST(DigestRecords, ANulInTheFirstMiBMakesNulTerminatedRecords) {
  const auto d = test::random_digests(3, 24);
  // sha256sum -z with a newline in the first name: the first newline comes
  // before the first NUL, and still every record is read.
  const std::string text = zero_record(d[0], "new\nline") + zero_record(d[1], "a") +
                           zero_record(d[2], "\nleading newline");
  const auto read = read_memory(text);
  ASSERT_TRUE(read.has_value()) << read.error().describe();
  EXPECT_EQ(*read, d);
  // A blank line first changes nothing.
  const auto blank = read_memory("\n" + zero_record(d[0], "a"));
  ASSERT_TRUE(blank.has_value()) << blank.error().describe();
  EXPECT_EQ(*blank, std::vector<Digest>{d[0]});
  // Lines, then a NUL: the lines run into the first record, an error.
  const auto mixed = read_memory(d[0].hex() + "  a\n" + zero_record(d[1], "b"));
  ASSERT_FALSE(mixed.has_value());
  EXPECT_EQ(mixed.error().code, ErrorCode::kInvalidDigest);
  EXPECT_NE(mixed.error().message.find("z.txt: record 1 (byte offset 0): a line in it after the "
                                       "first is itself a digest line"),
            std::string::npos)
      << mixed.error().message;
  // Bare hex lines, the same.
  const auto bare = read_memory(d[0].hex() + "\n" + d[1].hex() + "\n" + '\0');
  ASSERT_FALSE(bare.has_value());
  EXPECT_NE(bare.error().message.find("record 1 (byte offset 0): a line in it after the first"),
            std::string::npos)
      << bare.error().message;
}

TEST(DigestRecords, WithoutANewlineFirstANulStartsNulTerminatedRecords) {
  const auto d = test::random_digests(1, 25);
  const auto two = read_memory(d[0].hex() + "  a" + '\0' + "junk");
  ASSERT_FALSE(two.has_value());
  EXPECT_NE(two.error().message.find("record 2 (byte offset 68)"), std::string::npos)
      << two.error().message;
}

TEST(DigestRecords, ANameLineThatIsADigestLineIsRefused) {
  const auto d = test::random_digests(3, 26);
  // `cat z.txt lines.txt`: newline-terminated lines after a NUL record run
  // into one record, whose name would hide their digests.
  const std::string first = zero_record(d[0], "a");
  const std::string text = first + d[1].hex() + "  b\n" + d[2].hex() + "  c\n";
  const auto read = read_memory(text);
  ASSERT_FALSE(read.has_value());
  EXPECT_EQ(read.error().code, ErrorCode::kInvalidDigest);
  EXPECT_NE(
      read.error().message.find("z.txt: record 2 (byte offset " + std::to_string(first.size()) +
                                "): a line in it after the first"),
      std::string::npos)
      << read.error().message;
  // Every form of digest line counts.
  for (const std::string& hidden : {d[2].hex(), "sha256:" + d[2].hex(),
                                    "SHA256 (x) = " + d[2].hex(), " " + d[2].hex() + " *bin\r"}) {
    const auto one = parse_digest_record(d[1].hex() + "  b\n" + hidden, 7, 100);
    ASSERT_FALSE(one.has_value()) << hidden;
    EXPECT_NE(one.error().message.find("record 7 (byte offset 100)"), std::string::npos);
  }
  // A name line that is not a digest line is a name.
  const auto kept = parse_digest_record(d[1].hex() + "  b\n" + d[2].hex().substr(1) + "\nc", 7, 0);
  ASSERT_TRUE(kept.has_value()) << kept.error().describe();
  EXPECT_EQ(*kept, d[1]);
}

TEST(DigestRecords, AMalformedRecordNamesItsNumberAndByteOffset) {
  const auto d = test::random_digests(1, 27);
  const std::string first = zero_record(d[0], "a");
  for (const std::string& bad :
       {"nope"s, d[0].hex() + "\n" + d[0].hex(), "md5:" + d[0].hex(), d[0].hex().substr(2)}) {
    const auto read = read_memory(first + "\0"s + bad + '\0');
    ASSERT_FALSE(read.has_value()) << bad;
    EXPECT_EQ(read.error().code, ErrorCode::kInvalidDigest);
    // The empty record between the two NULs counts as record 2.
    EXPECT_NE(read.error().message.find("z.txt: record 3 (byte offset " +
                                        std::to_string(first.size() + 1) + "): "),
              std::string::npos)
        << read.error().message;
  }
}

class DigestRecordChunks : public ::testing::Test {
 protected:
  test::TempDir dir_{"abf-records"};
  std::vector<Digest> d_ = test::random_digests(4, 28);
};

// The first NUL as the first MiB's last byte, after a newline in the first
// record's name: NUL-terminated input. One byte later it is outside the
// first MiB: text of lines, whose first line is too long.
TEST_F(DigestRecordChunks, TheFirstNulAtTheEndOfTheFirstMiB) {
  for (const std::size_t at : {kChunk - 2, kChunk - 1}) {
    SCOPED_TRACE(at);
    const std::string first = zero_record(d_[0], "x\n" + std::string(at - 68, 'n'));
    ASSERT_EQ(first.size(), at + 1);
    const std::string text = first + d_[1].hex() + "  b\nc" + '\0' + zero_record(d_[2], "c");
    const auto read = read_file(dir_.path(), text);
    ASSERT_TRUE(read.has_value()) << read.error().describe();
    EXPECT_EQ(*read, std::vector<Digest>(d_.begin(), d_.begin() + 3));
  }
  const auto long_one = read_file(dir_.path(), zero_record(d_[0], std::string(kChunk - 66, 'n')));
  ASSERT_FALSE(long_one.has_value());
  EXPECT_NE(long_one.error().message.find("line 1 is longer than 1048576 bytes"), std::string::npos)
      << long_one.error().message;
}

// A record, or its NUL, on either side of the chunk boundary: every digest
// read, in order.
TEST_F(DigestRecordChunks, RecordsSplitAcrossTheChunkBoundary) {
  // The second record's NUL at byte `at`: the third record's hex, name or
  // NUL then straddles the boundary, or the NUL is its last or first byte.
  for (const std::size_t at : {kChunk - 70, kChunk - 67, kChunk - 66, kChunk - 65, kChunk - 2,
                               kChunk - 1, kChunk, kChunk + 1, kChunk + 2}) {
    SCOPED_TRACE(at);
    const std::string first = zero_record(d_[0], "a\nb");
    const std::string second = zero_record(d_[1], std::string(at - first.size() - 67, 'x') + "\n");
    ASSERT_EQ(first.size() + second.size(), at + 1);
    const std::string text = first + second + zero_record(d_[2], "new\nline") + d_[3].hex();
    const auto read = read_file(dir_.path(), text);
    ASSERT_TRUE(read.has_value()) << read.error().describe();
    EXPECT_EQ(*read, d_);
  }
}

// Past the first MiB: a NUL in a line on either side of a read boundary is
// an error at its line and byte offset, and a digest line run into a
// NUL-terminated record across one is an error at the record.
TEST_F(DigestRecordChunks, ErrorsAcrossReadBoundariesNameTheRightPlace) {
  std::string lines;
  std::size_t count = 0;
  for (; lines.size() < kChunk + 100; ++count) lines += d_[count % 4].hex() + "\n";
  for (const std::size_t at : {kChunk + 1000, 2 * kChunk - 1, 2 * kChunk, 2 * kChunk + 1}) {
    SCOPED_TRACE(at);
    const std::string line = d_[1].hex() + "  " + std::string(at - lines.size() - 66, 'x');
    const auto read = read_file(dir_.path(), lines + line + '\0' + "tail\n" + d_[2].hex() + "\n");
    ASSERT_FALSE(read.has_value());
    EXPECT_NE(read.error().message.find("input.txt: line " + std::to_string(count + 1) +
                                        ": a NUL byte at byte offset " + std::to_string(at) + ": "),
              std::string::npos)
        << read.error().message;
  }
  std::string records;
  for (count = 0; records.size() < kChunk + 100; ++count)
    records += zero_record(d_[count % 4], "r");
  for (const std::size_t at : {2 * kChunk - 67, 2 * kChunk - 1, 2 * kChunk, 2 * kChunk + 1}) {
    SCOPED_TRACE(at);
    const std::string name = std::string(at - records.size() - 66, 'y') + "\n" + d_[2].hex();
    const auto run_in = read_file(dir_.path(), records + zero_record(d_[1], name) + records);
    ASSERT_FALSE(run_in.has_value());
    EXPECT_NE(run_in.error().message.find("input.txt: record " + std::to_string(count + 1) +
                                          " (byte offset " + std::to_string(records.size()) +
                                          "): a line in it after the first"),
              std::string::npos)
        << run_in.error().message;
  }
}

// Megabytes of NUL-terminated records read the same as the same digests in
// lines, and bytes_read ends at the input's size.
TEST_F(DigestRecordChunks, LargeNulTerminatedInputReadsLikeLines) {
  const auto digests = test::random_digests(30'000, 29);
  std::string zero;
  std::string lines;
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const std::string name = "dir/file " + std::to_string(i) + (i % 7 == 0 ? "\nsecond line" : "");
    zero += zero_record(digests[i], name);
    if (i % 7 != 0)
      lines += digests[i].hex() + "  " + name + "\n";
    else
      lines += sha256sum_line(digests[i], name);
  }
  ASSERT_GT(zero.size(), 2 * kChunk);
  const auto from_zero = read_file(dir_.path(), zero);
  ASSERT_TRUE(from_zero.has_value()) << from_zero.error().describe();
  EXPECT_EQ(*from_zero, digests);
  const auto from_lines = read_file(dir_.path(), lines);
  ASSERT_TRUE(from_lines.has_value()) << from_lines.error().describe();
  EXPECT_EQ(*from_lines, digests);
}

}  // namespace
}  // namespace abf
