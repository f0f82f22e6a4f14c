// Digest parsing (docs/protocol.md section 2), streaming input and atomic output.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

const std::string kHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

std::string upper(std::string text) {
  for (char& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

TEST(Digest, ParsesEveryAcceptedLineForm) {
  const Digest expected = test::digest_from_hex(kHex);
  for (const std::string& line : std::initializer_list<std::string>{
           kHex, upper(kHex), "sha256:" + kHex, "  " + kHex + "\t", kHex + "\r",
           kHex + "  some file.tar", kHex + " *binary-mode name", "sha256:" + upper(kHex) + "\r",
           // The prefix in any case, and `abf query`'s answer lines.
           "SHA256:" + kHex, "Sha256:" + upper(kHex), kHex + "\tabsent", kHex + "\tmaybe\r",
           "  " + kHex + "\tmaybe  "}) {
    const auto parsed = parse_digest_line(line, 1);
    ASSERT_TRUE(parsed.has_value()) << line << ": " << parsed.error().describe();
    EXPECT_EQ(*parsed, expected) << line;
  }
  EXPECT_EQ(expected.hex(), kHex);
}

TEST(Digest, RejectsWrongLengthNonHexAndOtherAlgorithmsWithTheLine) {
  for (const std::string& line : std::initializer_list<std::string>{
           kHex.substr(1), kHex + "0", "g" + kHex.substr(1), "sha512:" + kHex, "md5:" + kHex,
           "sha256:", kHex + " one-space-name", "hello world",
           kHex.substr(0, 32) + " " + kHex.substr(32), "SHA512:" + kHex, "sha-256:" + kHex,
           kHex + "\tpresent", kHex + "\tmaybe absent", kHex + "\t\tmaybe", kHex + "\tMAYBE",
           "\\" + kHex + "\tmaybe", kHex.substr(1) + "\tmaybe",
           "g" + kHex.substr(1) + "\tabsent"}) {
    const auto parsed = parse_digest_line(line, 17);
    ASSERT_FALSE(parsed.has_value()) << line;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidDigest);
    EXPECT_NE(parsed.error().message.find("line 17"), std::string::npos) << parsed.error().message;
  }
}

TEST(Digest, Sha256MatchesTheStandardTestVector) {
  EXPECT_EQ(sha256(std::string_view("abc")).hex(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestReader, ReadsHexSkippingBlankLinesAcrossChunks) {
  std::string text =
      "\n" + kHex + "\n\n  \nsha256:" + kHex + "\r\n" + kHex + "  name";  // no final newline
  auto reader = DigestReader::from_memory(text, InputFormat::kHex);
  std::vector<Digest> out(2);
  EXPECT_EQ(reader.read(out).value(), 2u);
  EXPECT_EQ(reader.read(out).value(), 1u);
  EXPECT_EQ(reader.read(out).value(), 0u);
}

// Empty input once handed memchr a null pointer (UBSan: "null pointer passed
// as argument 1, which is declared to never be null").
TEST(DigestReader, EmptyInputInMemoryHasNoDigests) {
  for (const InputFormat format : {InputFormat::kHex, InputFormat::kBinary}) {
    auto reader = DigestReader::from_memory("", format);
    std::vector<Digest> out(4);
    EXPECT_EQ(reader.read(out).value(), 0u);
    EXPECT_EQ(reader.read_all().value().size(), 0u);
    EXPECT_EQ(reader.bytes_read(), 0u);
  }
}

TEST(DigestReader, ReportsTheLineOfAMalformedDigest) {
  const std::string text = kHex + "\n" + kHex + "\n" + kHex.substr(2) + "\n";
  auto reader = DigestReader::from_memory(text, InputFormat::kHex, "input.txt");
  const auto all = reader.read_all();
  ASSERT_FALSE(all.has_value());
  EXPECT_EQ(all.error().code, ErrorCode::kInvalidDigest);
  EXPECT_NE(all.error().message.find("input.txt: line 3"), std::string::npos)
      << all.error().message;
}

TEST(DigestReader, RejectsBinaryInputThatIsNotWholeRecords) {
  std::string bytes(33, '\x01');
  auto reader = DigestReader::from_memory(bytes, InputFormat::kBinary, "x.bin");
  const auto all = reader.read_all();
  ASSERT_FALSE(all.has_value());
  EXPECT_EQ(all.error().code, ErrorCode::kInvalidDigest);
  EXPECT_NE(all.error().message.find("byte offset 32"), std::string::npos) << all.error().message;
}

TEST(DigestReader, StreamsLargeFilesInBoundedChunks) {
  // 3 MiB of hex lines crosses the 1 MiB read buffer several times, lines
  // split at arbitrary points.
  const auto digests = test::random_digests(50'000, 4);
  std::string text;
  for (const auto& d : digests) text += d.hex() + "\n";
  const test::TempDir dir("abf-reader");
  const fs::path path = dir / "digests.txt";
  {
    auto file = AtomicFile::create(path);
    ASSERT_TRUE(file.has_value());
    ASSERT_TRUE(file->write(text).has_value());
    ASSERT_TRUE(file->commit().has_value());
  }
  auto reader = DigestReader::open(path, InputFormat::kHex);
  ASSERT_TRUE(reader.has_value());
  EXPECT_EQ(reader->size_hint(), text.size());
  std::vector<Digest> all;
  std::vector<Digest> chunk(777);
  while (true) {
    const auto got = reader->read(chunk);
    ASSERT_TRUE(got.has_value());
    if (*got == 0) break;
    all.insert(all.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(*got));
  }
  EXPECT_EQ(all, digests);
  EXPECT_EQ(reader->bytes_read(), text.size());
}

TEST(DigestReader, MissingFileIsAnIoErrorNamingIt) {
  const auto reader = DigestReader::open("/nonexistent/digests.txt", InputFormat::kHex);
  ASSERT_FALSE(reader.has_value());
  EXPECT_EQ(reader.error().code, ErrorCode::kIo);
  EXPECT_NE(reader.error().message.find("/nonexistent/digests.txt"), std::string::npos);
}

TEST(AtomicFile, UncommittedOutputLeavesTheOldFileAlone) {
  const test::TempDir dir("abf-atomic");
  const fs::path path = dir / "output.txt";
  {
    auto file = AtomicFile::create(path);
    ASSERT_TRUE(file->write("old").has_value());
    ASSERT_TRUE(file->commit().has_value());
  }
  {
    auto file = AtomicFile::create(path);
    ASSERT_TRUE(file->write("new and unfinished").has_value());
  }  // destroyed without commit
  EXPECT_EQ(test::read_file(path), "old");
  for (const auto& entry : fs::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path(), path) << "left behind";
  }
}

}  // namespace
}  // namespace abf
