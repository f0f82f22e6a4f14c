// The text line forms every digest reader accepts: GNU sha256sum's escaped
// lines and its --tag lines beside the bare and OCI forms, and the line
// abf digest prints (sha256sum_line). tests/cli_sha256sum_test.cc checks
// both directions against the real sha256sum.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

const std::string kHex = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

TEST(DigestLines, AcceptsEscapedAndTagLines) {
  const Digest expected = test::digest_from_hex(kHex);
  for (const std::string& line : std::initializer_list<std::string>{
           "\\" + kHex + "  back\\\\slash",
           "\\" + kHex + "  new\\nline",
           "\\" + kHex + "  carriage\\rreturn",
           "\\" + kHex + " *binary\\\\mode",
           "  \\" + kHex + "  leading blanks\r",
           "SHA256 (some file.tar) = " + kHex,
           "SHA256(no spaces)=" + kHex,
           "SHA256 (a) b) = c) = " + kHex,  // the name ends at the last ')'
           "SHA256 () = " + kHex,
           "\\SHA256 (new\\nline) = " + kHex,
           "SHA256 (plain\\name, not escaped) = " + kHex,
           "SHA256 (x) = " + kHex + "\r",
       }) {
    const auto parsed = parse_digest_line(line, 1);
    ASSERT_TRUE(parsed.has_value()) << line << ": " << parsed.error().describe();
    EXPECT_EQ(*parsed, expected) << line;
  }
}

TEST(DigestLines, RefusesMalformedEscapesAndTagLinesWithTheLine) {
  for (const std::string& line : std::initializer_list<std::string>{
           "\\" + kHex + "  bad\\xescape",       // only \\, \n and \r
           "\\" + kHex + "  trailing\\",         // a lone trailing backslash
           "\\" + kHex,                          // escaped, but no name
           "\\sha256:" + kHex,                   // the OCI form is never escaped
           "\\SHA256 (bad\\tescape) = " + kHex,  // the same rule in tag lines
           "SHA256 (x) " + kHex,                 // no '='
           "SHA256 (x = " + kHex,                // no ')'
           "SHA256 (x) = " + kHex.substr(1),     // 63 digits
           "SHA256 (x) = sha256:" + kHex,        // only hex after '='
           "SHA512 (x) = " + kHex + kHex,        // another algorithm
           "sha256 (x) = " + kHex,               // GNU writes the tag in capitals
       }) {
    const auto parsed = parse_digest_line(line, 23);
    ASSERT_FALSE(parsed.has_value()) << line;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidDigest);
    EXPECT_NE(parsed.error().message.find("line 23"), std::string::npos) << parsed.error().message;
  }
}

TEST(DigestLines, Sha256sumLineEscapesAsGnuDoes) {
  const Digest digest = test::digest_from_hex(kHex);
  EXPECT_EQ(sha256sum_line(digest, "plain name"), kHex + "  plain name\n");
  EXPECT_EQ(sha256sum_line(digest, "tab\there"), kHex + "  tab\there\n");  // tabs stay
  EXPECT_EQ(sha256sum_line(digest, "-"), kHex + "  -\n");
  EXPECT_EQ(sha256sum_line(digest, "a\\b"), "\\" + kHex + "  a\\\\b\n");
  EXPECT_EQ(sha256sum_line(digest, "a\nb"), "\\" + kHex + "  a\\nb\n");
  EXPECT_EQ(sha256sum_line(digest, "a\rb"), "\\" + kHex + "  a\\rb\n");
  EXPECT_EQ(sha256sum_line(digest, "\\\n\r"), "\\" + kHex + "  \\\\\\n\\r\n");
}

// What sha256sum_line prints parses back to the same digest, whatever the
// name (the property the fuzz target checks too).
TEST(DigestLines, PrintedLinesParseBack) {
  const auto digests = test::random_digests(64, 31);
  const std::vector<std::string> names = {"a",
                                          " leading space",
                                          "trailing space ",
                                          "*star",
                                          "back\\slash",
                                          "new\nline",
                                          "cr\rhere",
                                          "\\",
                                          "\n",
                                          "SHA256 (looks like a tag) = 00",
                                          "\\\\n",
                                          "()"};
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const std::string& name = names[i % names.size()];
    std::string line = sha256sum_line(digests[i], name);
    ASSERT_EQ(line.back(), '\n');
    line.pop_back();
    EXPECT_EQ(line.find('\n'), std::string::npos) << "one line for " << name;
    const auto parsed = parse_digest_line(line, 1);
    ASSERT_TRUE(parsed.has_value()) << line << ": " << parsed.error().describe();
    EXPECT_EQ(*parsed, digests[i]) << line;
  }
}

TEST(DigestLines, ReaderTakesEveryFormInOneStream) {
  const auto digests = test::random_digests(5, 32);
  const std::string text = digests[0].hex() + "\n" + "sha256:" + digests[1].hex() + "\r\n" +
                           sha256sum_line(digests[2], "x\\y") + "SHA256 (z) = " + digests[3].hex() +
                           "\n\n" + sha256sum_line(digests[4], "w");
  auto reader = DigestReader::from_memory(text, InputFormat::kHex, "mixed.txt");
  EXPECT_EQ(reader.read_all().value(), digests);
}

}  // namespace
}  // namespace abf
