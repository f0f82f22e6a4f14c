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

using namespace std::string_literals;

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
  for (const std::string flags : {"", "--tag", "--binary"}) {
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

// sha256sum -z: NUL-terminated lines, names as they are (newlines raw).
TEST_F(Sha256sumTest, DigestZeroPrintsExactlyWhatSha256sumZeroPrints) {
  const test::CliRun ours = sh("cd files && $ABF digest -z *");
  const test::CliRun theirs = sh("cd files && sha256sum -z *");
  ASSERT_EQ(ours.status, 0) << ours.err;
  ASSERT_EQ(theirs.status, 0) << theirs.err;
  EXPECT_EQ(ours.out, theirs.out);
  EXPECT_NE(ours.out.find("new\nline"s + '\0'), std::string::npos);  // unescaped
  EXPECT_EQ(sh("$ABF digest --zero < 'files/new\nline'").out,
            sh("sha256sum -z < 'files/new\nline'").out);
  EXPECT_EQ(sh("$ABF digest -z --json files/plain.bin").status, 2);
}

// issue 22: `sha256sum -z a b > z.txt; abf build ...` said "1 digests", and
// b's digest answered absent. Every reader takes NUL-terminated records
// (plain and --tag, names with newlines), and finds every digest.
TEST_F(Sha256sumTest, EveryCommandReadsNulTerminatedRecords) {
  const std::string n = std::to_string(digests_.size());
  // One more file, not in any snapshot or catalog: dedup's one new digest.
  ASSERT_EQ(sh("printf 'fresh' > fresh.bin").status, 0);
  const Digest fresh = sha256(std::string_view("fresh"));
  for (const std::string flags : {"-z", "-z --tag"}) {
    SCOPED_TRACE(flags);
    // The first file's name holds a newline: the first newline of the input
    // comes before its first NUL.
    ASSERT_EQ(sh("cd files && sha256sum " + flags + " 'new\nline' * > ../z.txt").status, 0);
    ASSERT_EQ(
        sh("cd files && sha256sum " + flags + " 'new\nline' * ../fresh.bin > ../zf.txt").status, 0);
    fs::remove(dir_ / "z.abf");
    const test::CliRun build = sh("$ABF build -n 100 -p 0.001 -i z.txt -o z.abf");
    ASSERT_EQ(build.status, 0) << build.err;
    // Every name once, "new\nline" twice.
    EXPECT_NE(build.out.find(std::to_string(digests_.size() + 1) + " digests"), std::string::npos)
        << build.out;
    const test::CliRun query = sh("$ABF query -s z.abf --summary < zf.txt");
    EXPECT_EQ(query.out, "total\t" + std::to_string(digests_.size() + 2) + "\nabsent\t1\nmaybe\t" +
                             std::to_string(digests_.size() + 1) + "\n")
        << query.err;
    fs::remove(dir_ / "c.db");
    ASSERT_EQ(test::run_cli(dir_, "catalog init --db c.db").status, 0);
    const test::CliRun add = sh("$ABF catalog add --db c.db --json -i z.txt");
    ASSERT_EQ(add.status, 0) << add.err;
    EXPECT_NE(add.out.find("\"added\": " + n), std::string::npos) << add.out;
    ASSERT_EQ(sh("$ABF build --from-catalog c.db -n 100 -p 0.001 -o cat.abf").status, 0);
    const test::CliRun dedup = sh("$ABF dedup -s cat.abf --db c.db -i zf.txt");
    ASSERT_EQ(dedup.status, 0) << dedup.err;
    EXPECT_EQ(dedup.out, fresh.hex() + "\n");
  }
}

// Text of lines with a NUL past the first MiB (so not NUL-terminated
// records): every reader refuses it, naming the line and the NUL's byte
// offset, and writes nothing.
TEST_F(Sha256sumTest, ANulInTextOfLinesIsAnErrorInEveryCommand) {
  std::string text;
  std::size_t lines = 0;
  for (; text.size() <= DigestReader::kMaxRecordBytes; ++lines) {
    text += digests_[lines % digests_.size()].hex() + "  x\n";
  }
  const std::size_t nul = text.size() + 64 + 3;
  text += digests_[0].hex() + "  a" + '\0' + digests_[1].hex() + "  b" + '\0';
  std::ofstream(dir_ / "lines.txt", std::ios::binary) << text;
  const std::string where = "lines.txt: line " + std::to_string(lines + 1) +
                            ": a NUL byte at byte offset " + std::to_string(nul) + ": ";
  ASSERT_EQ(test::run_cli(dir_, "catalog init --db c.db").status, 0);
  const test::CliRun snapshot =
      test::run_cli(dir_, "build --from-catalog c.db -n 10 -p 0.01 -o s.abf");
  ASSERT_EQ(snapshot.status, 0) << snapshot.err;
  for (const std::string command :
       {"build -n 100000 -p 0.01 -i lines.txt -o out.abf", "query -s s.abf -i lines.txt -o out.txt",
        "catalog add --db c.db -i lines.txt", "dedup -s s.abf --db c.db -i lines.txt -o out.txt"}) {
    SCOPED_TRACE(command);
    const test::CliRun run = test::run_cli(dir_, command);
    EXPECT_EQ(run.status, 1);
    EXPECT_NE(run.err.find("invalid_digest: " + where), std::string::npos) << run.err;
    EXPECT_FALSE(fs::exists(dir_ / "out.abf"));
    EXPECT_FALSE(fs::exists(dir_ / "out.txt"));
  }
  const test::CliRun stats = test::run_cli(dir_, "catalog stats --db c.db --json");
  EXPECT_NE(stats.out.find("\"latest_version\": 0"), std::string::npos) << stats.out;
}

// --tag: BSD-style lines, byte for byte sha256sum --tag's (escaped names
// included), and with -z its NUL-terminated records.
TEST_F(Sha256sumTest, DigestTagPrintsExactlyWhatSha256sumTagPrints) {
  for (const std::string flags : {"--tag", "--tag -z"}) {
    SCOPED_TRACE(flags);
    const test::CliRun ours = sh("cd files && $ABF digest " + flags + " *");
    const test::CliRun theirs = sh("cd files && sha256sum " + flags + " *");
    ASSERT_EQ(ours.status, 0) << ours.err;
    EXPECT_EQ(ours.out, theirs.out);
  }
  EXPECT_NE(sh("cd files && $ABF digest --tag *").out.find("\\SHA256 ("), std::string::npos);
  EXPECT_EQ(sh("$ABF digest --tag < files/plain.bin").out,
            sh("sha256sum --tag < files/plain.bin").out);
  EXPECT_EQ(sh("$ABF digest --tag --json files/plain.bin").status, 2);
}

// -c: what sha256sum -c prints on stdout, and its exit status, for lists of
// either form, all good, one changed, one missing; --quiet and --status.
TEST_F(Sha256sumTest, DigestCheckVerifiesAsSha256sumCheckDoes) {
  ASSERT_EQ(sh("cd files && sha256sum * > ../gnu.txt && sha256sum --tag * > ../tag.txt").status, 0);
  ASSERT_EQ(sh("cd files && $ABF digest -z * > ../zero.txt").status, 0);
  const auto compare = [&](const std::string& flags, int status) {
    for (const std::string list : {"gnu.txt", "tag.txt"}) {
      SCOPED_TRACE(flags + " " + list);
      const test::CliRun ours = sh("cd files && $ABF digest -c " + flags + " ../" + list);
      const test::CliRun theirs = sh("cd files && sha256sum -c " + flags + " ../" + list);
      EXPECT_EQ(ours.out, theirs.out);
      EXPECT_EQ(ours.status, theirs.status) << ours.err;
      EXPECT_EQ(ours.status, status) << ours.err;
      // And from standard input.
      EXPECT_EQ(sh("cd files && $ABF digest --check " + flags + " < ../" + list).out, theirs.out);
    }
  };
  compare("", 0);
  compare("--quiet", 0);
  const test::CliRun all = sh("cd files && $ABF digest -c ../gnu.txt");
  EXPECT_NE(all.out.find("plain.bin: OK\n"), std::string::npos) << all.out;
  EXPECT_NE(all.out.find("\\new\\nline: OK\n"), std::string::npos) << all.out;  // escaped
  EXPECT_EQ(all.err, "");
  // NUL-terminated records (found by their NUL, or said with -z): the same.
  const test::CliRun zero = sh("cd files && $ABF digest -c ../zero.txt");
  EXPECT_EQ(zero.out, all.out) << zero.err;
  EXPECT_EQ(zero.status, 0);
  EXPECT_EQ(sh("cd files && $ABF digest -c -z < ../zero.txt").out, all.out);

  // One file changed: FAILED, a warning with the count, exit 1.
  std::ofstream(dir_ / "files" / "plain.bin", std::ios::binary) << "changed";
  compare("", 1);
  compare("--quiet", 1);
  compare("--status", 1);
  const test::CliRun failed = sh("cd files && $ABF digest -c ../gnu.txt");
  EXPECT_NE(failed.out.find("plain.bin: FAILED\n"), std::string::npos) << failed.out;
  EXPECT_NE(failed.err.find("WARNING: 1 computed checksum did NOT match"), std::string::npos)
      << failed.err;
  EXPECT_EQ(sh("cd files && $ABF digest -c --status ../gnu.txt").err, "");
  // One file missing: FAILED open or read, reported, exit 1.
  fs::remove(dir_ / "files" / "plain.bin");
  compare("", 1);
  const test::CliRun missing = sh("cd files && $ABF digest -c ../tag.txt");
  EXPECT_NE(missing.out.find("plain.bin: FAILED open or read\n"), std::string::npos);
  EXPECT_NE(missing.err.find("WARNING: 1 listed file could not be read"), std::string::npos)
      << missing.err;
}

// -c refuses what is not a checksum line, naming it, and a list of none.
TEST_F(Sha256sumTest, DigestCheckRefusesImproperLines) {
  ASSERT_EQ(
      sh("cd files && sha256sum plain.bin > ../one.txt && echo 'not a line' >> ../one.txt").status,
      0);
  const test::CliRun improper = sh("cd files && $ABF digest -c ../one.txt");
  EXPECT_EQ(improper.status, 1);
  EXPECT_EQ(improper.out, "plain.bin: OK\n");
  EXPECT_NE(improper.err.find("../one.txt: line 2: not a SHA-256 checksum line"), std::string::npos)
      << improper.err;
  EXPECT_NE(improper.err.find("WARNING: 1 line is improperly formatted"), std::string::npos);
  ASSERT_EQ(sh("printf 'hello\\n\\n' > none.txt").status, 0);
  const test::CliRun none = sh("$ABF digest -c none.txt");
  EXPECT_EQ(none.status, 1);
  EXPECT_NE(none.err.find("none.txt: no properly formatted SHA-256 checksum lines found"),
            std::string::npos)
      << none.err;
  EXPECT_EQ(sh("$ABF digest -c missing.txt").status, 1);
  EXPECT_EQ(sh("$ABF digest --quiet files/plain.bin").status, 2);  // --quiet needs --check
}

}  // namespace
}  // namespace abf
