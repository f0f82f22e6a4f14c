// abf digest against the real GNU sha256sum (coreutils 9.1 on Debian 12),
// both directions, on names with spaces, backslashes, newlines, carriage
// returns and tabs: our output is byte for byte sha256sum's and passes
// `sha256sum -c`; sha256sum's output, plain and --tag, is read by build,
// query and catalog add.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "cli_shell.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

class Sha256sumTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::system("sha256sum --version >/dev/null 2>&1") != 0) {
      GTEST_SKIP() << "GNU sha256sum (coreutils) is not installed";
    }
    dir_ = test::make_temp_dir("abf-sha256sum");
    fs::create_directories(dir_ / "files");
    // Every kind of name sha256sum treats specially, and plain ones.
    const std::vector<std::string> names = {
        "plain.bin", "with space", "back\\slash",        "new\nline",       "carriage\rreturn",
        "tab\tname", "\\",         "two\\\\ of\n\nthem", "trailing space ", "(parens) = x"};
    for (std::size_t i = 0; i < names.size(); ++i) {
      std::ofstream(dir_ / "files" / names[i], std::ios::binary)
          << "artifact " << i << std::string(i * 100, 'x');
      digests_.push_back(sha256(test::read_file(dir_ / "files" / names[i])));
    }
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  test::CliRun sh(const std::string& script) const { return test::run_shell(dir_, script); }

  fs::path dir_;
  std::vector<Digest> digests_;
};

TEST_F(Sha256sumTest, DigestPrintsExactlyWhatSha256sumPrints) {
  const test::CliRun ours = sh("cd files && $ABF digest *");
  const test::CliRun theirs = sh("cd files && sha256sum *");
  ASSERT_EQ(ours.status, 0) << ours.err;
  ASSERT_EQ(theirs.status, 0) << theirs.err;
  EXPECT_EQ(ours.out, theirs.out);
  // Escaped lines are there to compare: a backslash starts some of them.
  EXPECT_NE(ours.out.find("\n\\"), std::string::npos) << ours.out;
  // Standard input, named "-", both ways.
  EXPECT_EQ(sh("$ABF digest < 'files/with space'").out, sh("sha256sum < 'files/with space'").out);
  EXPECT_EQ(sh("printf '' | $ABF digest -").out, sh("printf '' | sha256sum -").out);
}

TEST_F(Sha256sumTest, Sha256sumChecksWhatDigestPrinted) {
  ASSERT_EQ(sh("cd files && $ABF digest * > ../sums.txt").status, 0);
  const test::CliRun check = sh("cd files && sha256sum --strict -c ../sums.txt");
  EXPECT_EQ(check.status, 0) << check.out << check.err;
  EXPECT_EQ(check.err, "");
}

// What sha256sum prints, plain and --tag, every reader of abf takes, and
// finds the same digests in.
TEST_F(Sha256sumTest, ReadersTakeWhatSha256sumPrints) {
  std::string expected_text;
  for (const Digest& d : digests_) expected_text += d.hex() + "\n";
  for (const std::string& flags : {"", "--tag", "--binary"}) {
    SCOPED_TRACE(flags);
    ASSERT_EQ(sh("cd files && sha256sum " + flags + " * > ../sums.txt").status, 0);
    auto reader = DigestReader::open(dir_ / "sums.txt", InputFormat::kHex);
    ASSERT_TRUE(reader.has_value()) << reader.error().describe();
    auto read = reader->read_all();
    ASSERT_TRUE(read.has_value()) << read.error().describe();
    std::vector<Digest> sorted = *read;
    std::vector<Digest> expected = digests_;
    std::ranges::sort(sorted);
    std::ranges::sort(expected);
    EXPECT_EQ(sorted, expected);
    // The command line: build from them, every one a member.
    const test::CliRun build =
        test::run_cli(dir_, "build -n 100 -p 0.001 -i sums.txt -o sums.abf --distinct --json");
    ASSERT_EQ(build.status, 0) << build.err;
    EXPECT_NE(build.out.find("\"inserted_item_count\": " + std::to_string(digests_.size())),
              std::string::npos)
        << build.out;
    const test::CliRun query =
        sh("sha256sum " + flags + " files/* | $ABF query -s sums.abf --summary");
    EXPECT_EQ(query.out, "total\t" + std::to_string(digests_.size()) + "\nabsent\t0\nmaybe\t" +
                             std::to_string(digests_.size()) + "\n")
        << query.err;
    // And the catalog, through standard input.
    fs::remove(dir_ / "c.db");
    ASSERT_EQ(test::run_cli(dir_, "catalog init --db c.db").status, 0);
    const test::CliRun add = sh("$ABF catalog add --db c.db --json < sums.txt");
    ASSERT_EQ(add.status, 0) << add.err;
    EXPECT_NE(add.out.find("\"added\": " + std::to_string(digests_.size())), std::string::npos)
        << add.out;
  }
}

}  // namespace
}  // namespace abf
