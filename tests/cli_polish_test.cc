// The command's small things (issue 27): exit statuses, unknown options,
// counts in scientific notation, words, terminals, query output read back,
// progress only on a terminal, snake_case everywhere; an output never
// overwrites an input (issue 33: shards, key files, a catalog's -wal).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "cli_shell.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class CliPolishTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("abf-polish"); }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path path(const std::string& name) const { return dir_ / name; }

  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
  }

  CliRun abf(const std::string& arguments) const { return test::run_cli(dir_, arguments); }
  CliRun sh(const std::string& script) const { return test::run_shell(dir_, script); }

  static std::string hex_lines(std::uint64_t count, std::uint64_t seed) {
    std::string text;
    for (const auto& d : test::random_digests(count, seed)) text += d.hex() + "\n";
    return text;
  }

  // Whether `script -qec` (util-linux) is here to give a command a terminal.
  static bool have_script() {
    return std::system("script -qec true /dev/null >/dev/null 2>&1") == 0;
  }

  fs::path dir_;
};

// A usage error: exit 2, the command named, a pointer at --help, and `what`.
void expect_usage(const CliRun& run, const std::string& what, const std::string& label) {
  EXPECT_EQ(run.status, 2) << label << "\n" << run.err;
  EXPECT_NE(run.err.find(what), std::string::npos) << label << "\n" << run.err;
  EXPECT_NE(run.err.find("--help' for more information"), std::string::npos) << label << run.err;
  EXPECT_EQ(run.out, "") << label;
}

TEST_F(CliPolishTest, OutOfRangeValuesAreUsageErrorsInEveryCommand) {
  write("members.txt", hex_lines(10, 1));
  const std::string build = "build -i members.txt -o out.abf ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {build + "-n 0 -p 0.01", "--expected-items: '0' is too small"},
      // One snapshot holds 2^30; a set (--shards) 2^46.
      {build + "-n 1073741825 -p 0.01",
       "invalid_expected_item_count: expected item count "
       "1073741825 is outside 1..2^30"},
      {build + "-n 70368744177665 -p 0.01 --shards auto",
       "--expected-items: '70368744177665' is too large"},
      {build + "-n 10 -p 0", "--fpp: '0' is outside 0 < p < 1"},
      {build + "-n 10 -p 1", "--fpp: '1' is outside 0 < p < 1"},
      {build + "-n 10 -p -0.5", "--fpp"},
      {build + "-n 10 -p nan", "--fpp: 'nan' is outside 0 < p < 1"},
      {build + "-n 10 -p 0.01x", "--fpp: '0.01x' is not a number"},
      // n and p in range, but no filter of 2^30 bits holds them.
      {build + "-n 1e9 -p 1e-9", "filter_too_large: n = 1000000000 at p = 1e-09 needs about"},
      {"build --from-catalog c.db -o out.abf -n 0 -p 0.01", "--expected-items"},
      {build + "-n 10 -p 0.01 --threads 0", "--threads"},
      {"demo --items 0", "--items: '0' is too small"},
      {"demo --fpp 1.5", "--fpp: '1.5' is outside 0 < p < 1"},
      {"demo --items 1e9 --fpp 1e-9", "filter_too_large"},
      // Every numeric option in the same words, never CLI11's own
      // ("Value 0.9 not in range", "Could not convert").
      {"bench --fpp 0.9",
       "--fpp: '0.9' is outside 1e-09..0.5 (the false-positive rate of every scenario)"},
      {"bench --fpp 0", "--fpp: '0' is outside 1e-09..0.5"},
      {"bench --fpp nan", "--fpp: 'nan' is outside 1e-09..0.5"},
      {"bench --fpp 0.01x", "--fpp: '0.01x' is not a number; expected 1e-09..0.5"},
      {"bench --repetitions 0", "--repetitions: '0' is too small; expected an integer in 1..1,000"},
      {"bench --repetitions 1001", "--repetitions: '1001' is too large"},
      {"bench --threads 0", "--threads: '0' is too small; expected an integer in 1..4,096"},
      {"query -s x.abf --threads 5000", "--threads: '5000' is too large"},
      {"serve -s x.abf --db c.db --rate-limit-rps -1",
       "--rate-limit-rps: '-1' is outside 0..1e+15"},
      {"serve -s x.abf --db c.db --rate-limit-dps 1e16",
       "--rate-limit-dps: '1e16' is outside 0..1e+15"},
      {"serve -s x.abf --db c.db --rate-limit-dps inf", "--rate-limit-dps: 'inf' is outside"},
      {"serve -s x.abf --db c.db --rate-limit-rps fast",
       "--rate-limit-rps: 'fast' is not a number"},
      {"serve -s x.abf --db c.db --listen 127.0.0.1:70000",
       "--listen: listen address \"127.0.0.1:70000\": port must be 0..65535"},
      {"serve -s x.abf --db c.db --grpc-listen 127.0.0.1:99999", "--grpc-listen: listen address"},
      {"catalog stats --db c.db --busy-timeout -1", "--busy-timeout: '-1' is negative"},
      {"catalog stats --db c.db --busy-timeout 1e9", "--busy-timeout: '1e9' is too large"},
      {"index --db c.db -o x.abfx --version -1", "--version: '-1' is negative"},
      {"index --db c.db -o x.abfx --block-digests 99999999999",
       "--block-digests: '99999999999' is too large"},
      // Unsigned options: -1 is refused, never read as 2^64 - 1.
      {build + "-n 10 -p 0.01 --catalog-version -1", "--catalog-version: '-1' is negative"},
      {"merge a.abf b.abf -o m.abf --catalog-version -1", "--catalog-version: '-1' is negative"},
      {"dedup -s x.abf --db c.db --head-cache-digests -1",
       "--head-cache-digests: '-1' is negative"},
      {"serve -s x.abf --db c.db --follow --follow-lag-versions 0",
       "--follow-lag-versions: '0' is too small"},
      {"serve -s x.abf --db c.db --max-digests -5", "--max-digests: '-5' is negative"},
      {"dedup -s x.abf --db c.db --threads 0", "--threads"},
  };
  for (const auto& [arguments, what] : cases) {
    const CliRun run = abf(arguments);
    expect_usage(run, what, arguments);
    EXPECT_EQ(run.err.find("not in range"), std::string::npos) << arguments << run.err;
    EXPECT_EQ(run.err.find("Could not convert"), std::string::npos) << arguments << run.err;
  }
  EXPECT_FALSE(fs::exists(path("out.abf")));
  // A runtime failure stays 1: a missing input file.
  EXPECT_EQ(abf("build -n 10 -p 0.01 -i missing.txt -o out.abf").status, 1);
}

TEST_F(CliPolishTest, UnknownOptionIsNamedWithTheNearestBeforeAnythingElse) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Would be "--snapshot is required" if required options came first.
      {"query --snapshott c.abf",
       "abf query: unknown option '--snapshott'; did you mean "
       "'--snapshot'?"},
      {"query --snapshott=c.abf", "unknown option '--snapshott'; did you mean '--snapshot'?"},
      {"build -n 10 -p 0.01 -o x.abf --inptu m.txt",
       "abf build: unknown option '--inptu'; did you mean '--input'?"},
      // Even with a bad value elsewhere on the line.
      {"build -n 1.5 -p 0.01 -o x.abf --distnct", "did you mean '--distinct'?"},
      {"catalog add --dbb c.db", "abf catalog add: unknown option '--dbb'; did you mean '--db'?"},
      {"--verison", "abf: unknown option '--verison'; did you mean '--version'?"},
      {"query -s c.abf --summray", "did you mean '--summary'?"},
  };
  for (const auto& [arguments, what] : cases) expect_usage(abf(arguments), what, arguments);
  // Nothing close: no guess, and none for a one-letter option.
  const CliRun far = abf("query -s c.abf --zzzzzzzz");
  expect_usage(far, "abf query: unknown option '--zzzzzzzz'\n", "far");
  const CliRun letter = abf("query -s c.abf -q");
  expect_usage(letter, "abf query: unknown option '-q'\n", "letter");
  // A known option with a missing required one still says what is missing.
  expect_usage(abf("query --input x.txt"), "--snapshot is required", "required");
}

TEST_F(CliPolishTest, CountsTakeScientificNotationThatDenotesAnInteger) {
  write("members.txt", hex_lines(10, 1));
  const std::vector<std::pair<std::string, std::uint64_t>> accepted = {
      {"1e3", 1000},
      {"2.5e3", 2500},
      {"1E3", 1000},
      {"1e+3", 1000},
      {"1000.0", 1000},
      {"10000e-1", 1000},
      {"0.5e2", 50},
      {"1234", 1234},
      {"2.5e6", 2500000},
      {"1073741824", 1073741824},
      {"1.073741824e9", 1073741824}};
  for (const auto& [text, value] : accepted) {
    // -n in a catalog-less dry run: the summary names expected_item_count.
    const CliRun run = abf("build -n " + text + " -p 0.9 -i members.txt -o out.abf --json");
    ASSERT_EQ(run.status, 0) << text << ": " << run.err;
    EXPECT_EQ(nlohmann::json::parse(run.out)["expected_item_count"], value) << text;
  }
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"1.5", "'1.5' is not a whole number"},
      {"2.5e0", "not a whole number"},
      {"1e-3", "not a whole number"},
      {"1e30", "'1e30' is too large"},
      {"7.0368744177665e13", "too large"},
      {"1e99999999999", "too large"},
      {"99999999999999999999999", "too large"},
      {"-5", "'-5' is negative"},
      {"1e", "'1e' is not a number"},
      {"e3", "is not a number"},
      {"0x10", "is not a number"},
      {"1,000", "is not a number"},
      {"0e5", "'0e5' is too small"},
  };
  for (const auto& [text, what] : refused) {
    const CliRun run = abf("build -n " + text + " -p 0.01 -i members.txt -o out.abf");
    expect_usage(run, what, text);
    EXPECT_NE(run.err.find("expected an integer in 1..70,368,744,177,664"), std::string::npos)
        << run.err;
  }
  // demo --items reads counts the same way.
  expect_usage(abf("demo --items 2.5"), "'2.5' is not a whole number", "demo");
}

TEST_F(CliPolishTest, CountsArePluralisedByNumber) {
  const auto digests = test::random_digests(2, 7);
  write("one.txt", digests[0].hex() + "\n");
  write("two.txt", digests[0].hex() + "\n" + digests[1].hex() + "\n");
  write("repeat.txt", digests[0].hex() + "\n" + digests[0].hex() + "\n");
  const std::regex wrong("\\b1 (digests|repeats|snapshots|versions|added digests)\\b");

  const CliRun one = abf("build -n 10 -p 0.01 -i one.txt -o one.abf");
  ASSERT_EQ(one.status, 0) << one.err;
  EXPECT_NE(one.out.find(": 1 digest, repeats included"), std::string::npos) << one.out;
  const CliRun two = abf("build -n 10 -p 0.01 -i two.txt -o two.abf");
  EXPECT_NE(two.out.find(": 2 digests, repeats included"), std::string::npos) << two.out;
  const CliRun distinct = abf("build -n 10 -p 0.01 -i repeat.txt -o r.abf --distinct");
  ASSERT_EQ(distinct.status, 0) << distinct.err;
  EXPECT_NE(distinct.out.find(": 1 distinct digest (1 repeat among 2 read, dropped)"),
            std::string::npos)
      << distinct.out;
  const CliRun merged = abf("merge one.abf -o m.abf");
  ASSERT_EQ(merged.status, 0) << merged.err;
  EXPECT_NE(merged.out.find("merged 1 snapshot, 1 digest (the parts'"), std::string::npos)
      << merged.out;
  // Over capacity by one: "more than --expected-items 1 digest".
  const CliRun over = abf("build -n 1 -p 0.01 -i two.txt -o o.abf");
  EXPECT_EQ(over.status, 1);
  EXPECT_NE(over.err.find("more than --expected-items 1 digest "), std::string::npos) << over.err;
  for (const CliRun* run : {&one, &two, &distinct, &merged, &over}) {
    EXPECT_FALSE(std::regex_search(run->out + run->err, wrong)) << run->out << run->err;
  }
  // A dedup whose snapshot is one version behind its catalog.
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i one.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 10 -p 0.01 -o c.abf").status, 0);
  write("other.txt", test::random_digests(3, 8)[2].hex() + "\n");
  ASSERT_EQ(abf("catalog add --db c.db -i other.txt").status, 0);
  const CliRun dedup = abf("dedup -s c.abf --db c.db -i two.txt");
  ASSERT_EQ(dedup.status, 0) << dedup.err;
  EXPECT_NE(dedup.err.find("behind the catalog by 1 version and 1 added digest:"),
            std::string::npos)
      << dedup.err;
  EXPECT_FALSE(std::regex_search(dedup.err, wrong)) << dedup.err;
}

TEST_F(CliPolishTest, Sha256PrefixIsReadInAnyCase) {
  const auto digests = test::random_digests(4, 3);
  std::string members;
  for (const auto& d : digests) members += d.hex() + "\n";
  write("members.txt", members);
  ASSERT_EQ(abf("build -n 10 -p 0.01 -i members.txt -o c.abf").status, 0);
  std::string mixed;
  std::string expected;
  const std::vector<std::string> prefixes = {"SHA256:", "Sha256:", "sha256:", "sHa256:"};
  for (std::size_t i = 0; i < digests.size(); ++i) {
    mixed += prefixes[i] + digests[i].hex() + "\n";
    expected += digests[i].hex() + "\tmaybe\n";
  }
  write("mixed.txt", mixed);
  const CliRun run = abf("query -s c.abf -i mixed.txt");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected);
  // Another algorithm, in any case, is still named and refused.
  write("sha512.txt", "SHA512:" + digests[0].hex() + "\n");
  const CliRun other = abf("query -s c.abf -i sha512.txt");
  EXPECT_EQ(other.status, 1);
  EXPECT_NE(other.err.find("line 1: unsupported digest algorithm 'SHA512' (only sha256)"),
            std::string::npos)
      << other.err;
}

TEST_F(CliPolishTest, SummaryLostToAFullStdoutSaysTheOutputWasWritten) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  write("members.txt", hex_lines(100, 4));
  for (const std::string extra : {"", " --json"}) {
    fs::remove(path("c.abf"));
    const CliRun run =
        sh("$ABF build -n 1000 -p 0.01 -i members.txt -o c.abf" + extra + " > /dev/full");
    EXPECT_EQ(run.status, 1) << extra;
    EXPECT_NE(
        run.err.find("abf build: io_error: c.abf was written, but printing the summary failed: "
                     "<stdout>: write error: No space left on device"),
        std::string::npos)
        << run.err;
    // The snapshot is whole and in place, as the message says.
    const CliRun inspect = abf("inspect c.abf --json");
    ASSERT_EQ(inspect.status, 0) << inspect.err;
    EXPECT_EQ(nlohmann::json::parse(inspect.out)["inserted_item_count"], 100);
  }
  ASSERT_EQ(abf("build -n 1000 -p 0.01 -i members.txt -o d.abf").status, 0);
  const CliRun merge = sh("$ABF merge c.abf d.abf -o m.abf > /dev/full");
  EXPECT_EQ(merge.status, 1);
  EXPECT_NE(merge.err.find("m.abf was written, but printing the summary failed"), std::string::npos)
      << merge.err;
  EXPECT_TRUE(fs::exists(path("m.abf")));
}

TEST_F(CliPolishTest, BinaryToATerminalIsRefusedAndToAPipeWritten) {
  write("members.txt", hex_lines(10, 5));
  // Piped: the snapshot, byte for byte what a file gets.
  const CliRun piped =
      sh("$ABF build -n 100 -p 0.01 -i members.txt -o - 2>err.txt | cat > piped.abf");
  ASSERT_EQ(piped.status, 0) << test::read_file(path("err.txt"));
  ASSERT_EQ(abf("build -n 100 -p 0.01 -i members.txt -o file.abf").status, 0);
  EXPECT_EQ(test::read_file(path("piped.abf")), test::read_file(path("file.abf")));
  if (!have_script()) GTEST_SKIP() << "script (util-linux) is not installed: no terminal to test";
  // On a terminal: refused, nothing binary written there, exit 2.
  for (const std::string command :
       {"build -n 100 -p 0.01 -i members.txt -o -", "merge file.abf -o -"}) {
    const CliRun tty = sh("script -qec \"$ABF " + command + "\" /dev/null; echo \"rc=$?\"");
    EXPECT_NE(tty.out.find("refusing to write binary to a terminal"), std::string::npos)
        << command << "\n"
        << tty.out;
    EXPECT_NE(tty.out.find("redirect or use -o FILE"), std::string::npos) << tty.out;
    EXPECT_NE(tty.out.find("rc=2"), std::string::npos) << tty.out;
    EXPECT_EQ(tty.out.find("ABF1"), std::string::npos) << tty.out;
  }
}

TEST_F(CliPolishTest, QueryOutputIsReadBackAsInput) {
  write("members.txt", hex_lines(50, 6));
  std::string candidates = hex_lines(50, 6) + hex_lines(200, 7);
  write("candidates.txt", candidates);
  ASSERT_EQ(abf("build -n 100 -p 0.01 -i members.txt -o c.abf").status, 0);
  const CliRun first = abf("query -s c.abf -i candidates.txt -o answers.tsv");
  ASSERT_EQ(first.status, 0) << first.err;
  // Its own answers, asked again: the same answers, in the same order.
  const CliRun again = abf("query -s c.abf -i answers.tsv");
  ASSERT_EQ(again.status, 0) << again.err;
  EXPECT_EQ(again.out, test::read_file(path("answers.tsv")));
  // And in a pipe, and into build (the digests, not the answers, count).
  const CliRun piped = sh("$ABF query -s c.abf -i candidates.txt | $ABF query -s c.abf");
  EXPECT_EQ(piped.out, again.out) << piped.err;
  const CliRun build = abf("build -n 1000 -p 0.01 -i answers.tsv -o b.abf --json");
  ASSERT_EQ(build.status, 0) << build.err;
  EXPECT_EQ(nlohmann::json::parse(build.out)["inserted_item_count"], 250);
  // Only those two words: anything else after a tab is still refused.
  const std::string hex = test::random_digests(1, 8)[0].hex();
  for (const std::string& bad : {hex + "\tpresent", hex + "\tmaybe absent", hex + "\t\tmaybe",
                                 "\\" + hex + "\tmaybe", hex + "\tMAYBE"}) {
    write("bad.txt", bad + "\n");
    const CliRun run = abf("query -s c.abf -i bad.txt");
    EXPECT_EQ(run.status, 1) << bad;
    EXPECT_NE(run.err.find("invalid_digest: bad.txt: line 1"), std::string::npos) << run.err;
  }
}

TEST_F(CliPolishTest, ProgressOnlyOnATerminal) {
  write("members.txt", hex_lines(2000, 9));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("build -n 10000 -p 0.01 -i members.txt -o seed.abf").status, 0);
  const std::vector<std::string> commands = {
      "build -n 10000 -p 0.01 -i members.txt -o c.abf",
      "query -s seed.abf -i members.txt -o answers.tsv",
      "catalog add --db c.db -i members.txt",
      "dedup -s cat.abf --db c.db -i members.txt -o new.txt",
  };
  // Piped (as every test runs): stderr has the reports, never a progress line
  // nor its terminal codes.
  for (const auto& command : commands) {
    if (command.starts_with("dedup")) {
      ASSERT_EQ(abf("build --from-catalog c.db -n 10000 -p 0.01 -o cat.abf").status, 0);
    }
    const CliRun run = abf(command);
    ASSERT_EQ(run.status, 0) << command << ": " << run.err;
    EXPECT_EQ(run.err.find('\033'), std::string::npos) << command << ": " << run.err;
    EXPECT_EQ(run.err.find('\r'), std::string::npos) << command << ": " << run.err;
  }
  if (!have_script()) GTEST_SKIP() << "script (util-linux) is not installed: no terminal to test";
  // On a terminal, each clears its line at the end ("\r\033[K"): the line was
  // there to clear. The same commands, stdout still a file.
  for (const auto& command : commands) {
    const CliRun tty = sh("script -qec \"$ABF " + command + " > /dev/null\" /dev/null");
    EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos) << command << ": " << tty.out;
  }
}

// An output that names one of the command's own inputs is refused before
// anything is written (an attacker's review destroyed a catalog with
// `build --from-catalog c.db -o c.db`): exit 2, the input intact.
TEST_F(CliPolishTest, AnOutputThatIsAnInputIsRefusedAndTheInputKept) {
  write("m.txt", hex_lines(200, 41));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 1000 -p 0.01 -o c.abf").status, 0);
  ASSERT_EQ(abf("index --db c.db -o c.abfx").status, 0);
  const auto bytes = [&](const std::string& name) {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string db = bytes("c.db"), snapshot = bytes("c.abf"), input = bytes("m.txt");
  // A second name for the catalog: the same file is found by identity.
  fs::create_hard_link(path("c.db"), path("link.db"));
  const struct {
    std::string arguments, what;
  } cases[] = {
      {"build --from-catalog c.db -n 1000 -p 0.01 -o c.db",
       "--output c.db is the same file as --from-catalog c.db"},
      {"build -n 1000 -p 0.01 -i m.txt -o m.txt", "is the same file as --input m.txt"},
      {"dedup -s c.abf --db c.db -i m.txt -o link.db", "is the same file as --db c.db"},
      {"dedup -s c.abf --db c.db -i m.txt -o /dev/null --stats-json c.abf",
       "--stats-json c.abf is the same file as --snapshot"},
      {"dedup -s c.abf --db c.db --index c.abfx -i m.txt -o c.abfx", "is the same file as --index"},
      {"query -s c.abf -i m.txt -o c.abf", "is the same file as --snapshot c.abf"},
      {"merge c.abf -o c.abf", "is the same file as input c.abf"},
      {"index --db c.db -o ./c.db", "is the same file as --db c.db"},
  };
  for (const auto& c : cases) expect_usage(abf(c.arguments), c.what, c.arguments);
  EXPECT_EQ(bytes("c.db"), db);
  EXPECT_EQ(bytes("c.abf"), snapshot);
  EXPECT_EQ(bytes("m.txt"), input);
  EXPECT_EQ(abf("catalog stats --db c.db").status, 0);
}

// Issue 33: the rule covers every file a command reads or holds, not only
// the paths it was given. Each case below exited 0 and destroyed its input:
// an output onto a shard a set's manifest names, onto the key file, onto
// the catalog's -wal (and the other files SQLite keeps beside it).
class SameFileTest : public CliPolishTest {
 protected:
  std::string bytes(const std::string& name) const {
    std::ifstream in(path(name), std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  // Every file in the folder and its bytes.
  std::map<std::string, std::string> folder() const {
    std::map<std::string, std::string> files;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.is_regular_file()) files[entry.path().filename()] = bytes(entry.path().filename());
    }
    return files;
  }
  // The names of the files added, removed or changed since `before`.
  std::string changed_since(const std::map<std::string, std::string>& before) const {
    const auto now = folder();
    std::string names;
    for (const auto& [name, content] : now) {
      const auto was = before.find(name);
      if (was == before.end() || was->second != content) names += " " + name;
    }
    for (const auto& [name, content] : before) {
      if (!now.contains(name)) names += " " + name + " (removed)";
    }
    return names;
  }
};

TEST_F(SameFileTest, AnOutputOntoAShardOfAnInputSetIsRefused) {
  write("m.txt", hex_lines(300, 51));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 1000 -p 0.01 --shards 3 -o c.abfs").status, 0);
  ASSERT_EQ(abf("index --db c.db --shards 3 -o c.abxs").status, 0);
  const auto set = read_set_manifest(path("c.abfs"));
  ASSERT_TRUE(set) << set.error().describe();
  const auto index = [&] {
    const std::string manifest = bytes("c.abxs");
    return parse_index_set_manifest(
        std::span(reinterpret_cast<const std::uint8_t*>(manifest.data()), manifest.size()));
  }();
  ASSERT_TRUE(index) << index.error().describe();
  ASSERT_EQ(set->shard_count(), 3u);
  ASSERT_EQ(index->shard_count(), 3u);
  const std::string shard = set->shards[1].file;
  const std::string index_shard = index->shards[1].file;
  // A copy of the manifest names the same shards: writing a set over the
  // original removes them (the shards of the set it replaces).
  fs::copy_file(path("c.abfs"), path("copy.abfs"));
  const std::string of_set =
      " is the same file as shard 1 of 3 of --snapshot c.abfs (" + shard + ")";
  const struct {
    std::string arguments, what;
  } cases[] = {
      {"query -s c.abfs -i m.txt -o " + shard, "--output " + shard + of_set},
      {"dedup -s c.abfs --db c.db -i m.txt -o " + shard, "--output " + shard + of_set},
      {"dedup -s c.abfs --db c.db -i m.txt -o /dev/null --stats-json " + shard,
       "--stats-json " + shard + of_set},
      {"merge c.abfs c.abfs -o " + shard,
       "--output " + shard + " is the same file as shard 1 of 3 of input c.abfs"},
      {"dedup -s c.abfs --db c.db --index c.abxs -i m.txt -o /dev/null --stats-json " + index_shard,
       "--stats-json " + index_shard + " is the same file as shard 1 of 3 of --index c.abxs (" +
           index_shard + ")"},
      {"dedup -s c.abfs --db c.db --index c.abxs -i m.txt -o " + index_shard,
       "is the same file as shard 1 of 3 of --index c.abxs"},
      {"merge copy.abfs -o c.abfs",
       "shard 0 of 3 of --output c.abfs (" + set->shards[0].file +
           "), which writing a set there removes, is the same file as shard 0 of 3 of input "
           "copy.abfs"},
  };
  const auto before = folder();
  for (const auto& c : cases) expect_usage(abf(c.arguments), c.what, c.arguments);
  EXPECT_EQ(changed_since(before), "");
  // The sets still load and answer.
  EXPECT_EQ(abf("query -s c.abfs -i m.txt --summary").status, 0);
  const CliRun dedup = abf("dedup -s copy.abfs --db c.db --index c.abxs -i m.txt");
  EXPECT_EQ(dedup.status, 0) << dedup.err;
  EXPECT_EQ(dedup.out, "");
  // Any other name is fine.
  const CliRun fine = abf("query -s c.abfs -i m.txt -o answers.tsv");
  EXPECT_EQ(fine.status, 0) << fine.err;
}

TEST_F(SameFileTest, AnOutputOntoTheKeyFileIsRefused) {
  write("m.txt", hex_lines(200, 52));
  ASSERT_EQ(abf("key generate -o k.key").status, 0);
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 1000 -p 0.01 --key-file k.key -o c.abf").status, 0);
  fs::create_symlink("k.key", path("key.link"));
  const std::string what = "--output k.key is the same file as --key-file k.key";
  const struct {
    std::string arguments, what;
  } cases[] = {
      {"build -n 1000 -p 0.01 -i m.txt --key-file k.key -o k.key", what},
      {"build --from-catalog c.db -n 1000 -p 0.01 --key-file k.key -o k.key", what},
      {"build --from-catalog c.db -n 1000 -p 0.01 --shards 2 --key-file k.key -o k.key", what},
      {"query -s c.abf -i m.txt --key-file k.key -o k.key", what},
      {"query -s c.abf -i m.txt --key-file k.key -o key.link",
       "--output key.link is the same file as --key-file k.key"},
      {"dedup -s c.abf --db c.db -i m.txt --key-file k.key -o k.key", what},
      {"dedup -s c.abf --db c.db -i m.txt --key-file k.key -o /dev/null --stats-json k.key",
       "--stats-json k.key is the same file as --key-file k.key"},
      {"merge c.abf --key-file k.key -o k.key", what},
  };
  const auto before = folder();
  for (const auto& c : cases) expect_usage(abf(c.arguments), c.what, c.arguments);
  EXPECT_EQ(changed_since(before), "");
  EXPECT_EQ(abf("query -s c.abf -i m.txt --key-file k.key --summary").status, 0);
}

// With the catalog held open (as abf serve holds it), its newest versions
// live in c.db-wal until the last connection closes: an output written over
// it lost them. The output is refused whether or not the command reads the
// catalog, and for the -shm, -journal and super-journal names too, which
// need not exist yet.
TEST_F(SameFileTest, AnOutputOntoTheCatalogsWalOrItsOtherFilesIsRefused) {
  write("m1.txt", hex_lines(100, 53));
  write("m2.txt", hex_lines(100, 54));
  write("m3.txt", hex_lines(100, 55));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i m1.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 1000 -p 0.01 -o c.abf").status, 0);
  sqlite3* held = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path("c.db").c_str(), &held, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  // A read transaction left open: the catalog's newest versions stay in
  // c.db-wal, where no checkpoint can move them past it.
  ASSERT_EQ(
      sqlite3_exec(held, "BEGIN; SELECT count(*) FROM sqlite_master", nullptr, nullptr, nullptr),
      SQLITE_OK);
  ASSERT_EQ(abf("catalog add --db c.db -i m2.txt").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i m3.txt").status, 0);
  ASSERT_TRUE(fs::exists(path("c.db-wal")));
  ASSERT_GT(fs::file_size(path("c.db-wal")), 0u);
  // A link to the journal, which does not exist: written, it would be made.
  fs::create_symlink("c.db-journal", path("journal.link"));
  fs::create_hard_link(path("c.db-wal"), path("wal.hardlink"));
  const struct {
    std::string arguments, what;
  } cases[] = {
      // The catalog is none of query's inputs: the database beside says what.
      {"query -s c.abf -i m1.txt -o c.db-wal",
       "--output c.db-wal is the write-ahead log of the SQLite database "},
      {"query -s c.abf -i m1.txt -o c.db-shm", "is the shared-memory index of the SQLite database"},
      {"query -s c.abf -i m1.txt -o c.db-journal",
       "is the rollback journal of the SQLite database"},
      {"query -s c.abf -i m1.txt -o journal.link",
       "is the rollback journal of the SQLite database"},
      {"query -s c.abf -i m1.txt -o c.db-mj0A1B2C9D3", "is a super-journal of the SQLite database"},
      {"build -n 1000 -p 0.01 -i m1.txt -o c.db-wal", "is the write-ahead log of the SQLite"},
      {"merge c.abf -o c.db-wal", "is the write-ahead log of the SQLite"},
      {"key generate -o c.db-journal", "is the rollback journal of the SQLite database"},
      {"demo --items 1000 --skip-dedup -o c.db-wal", "is the write-ahead log of the SQLite"},
      // Commands that read the catalog name it as their input.
      {"dedup -s c.abf --db c.db -i m1.txt -o c.db-wal",
       "--output c.db-wal is the same file as the write-ahead log of the catalog --db c.db "
       "(c.db-wal)"},
      {"dedup -s c.abf --db c.db -i m1.txt -o /dev/null --stats-json c.db-shm",
       "--stats-json c.db-shm is the same file as the shared-memory index of the catalog --db "
       "c.db"},
      {"dedup -s c.abf --db c.db -i m1.txt -o wal.hardlink",
       "--output wal.hardlink is the same file as the write-ahead log of the catalog --db c.db"},
      {"build --from-catalog c.db -n 1000 -p 0.01 -o c.db-wal",
       "is the same file as the write-ahead log of the catalog --from-catalog c.db"},
      {"build --from-catalog c.db -n 1000 -p 0.01 -o c.db-mj0A1B2C9D3",
       "is the same file as a super-journal of the catalog --from-catalog c.db"},
      {"index --db c.db -o c.db-journal",
       "is the same file as the rollback journal of the catalog --db c.db"},
      {"index --db c.db --shards 2 -o c.db-wal", "the write-ahead log of the catalog --db c.db"},
      // The catalog's own writes: its input may be none of its files.
      {"catalog add --db c.db -i c.db-wal",
       "the write-ahead log of the catalog --db c.db (c.db-wal) is the same file as --input "
       "c.db-wal"},
  };
  const auto before = folder();
  for (const auto& c : cases) expect_usage(abf(c.arguments), c.what, c.arguments);
  EXPECT_EQ(changed_since(before), "");
  ASSERT_EQ(sqlite3_exec(held, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_close(held), SQLITE_OK);
  const CliRun stats = abf("catalog stats --db c.db --json");
  ASSERT_EQ(stats.status, 0) << stats.err;
  EXPECT_EQ(nlohmann::json::parse(stats.out)["latest_version"], 3);
  EXPECT_EQ(nlohmann::json::parse(stats.out)["live_artifacts"], 300);
  // Names that only look alike are files like any other: no database
  // "answers" beside "answers-wal", and "c.db-mj0A1B2C9D" is one digit short.
  for (const std::string name : {"answers-wal", "c.db-mj0A1B2C9D", "c.db-walx"}) {
    const CliRun run = abf("query -s c.abf -i m1.txt -o " + name);
    EXPECT_EQ(run.status, 0) << name << ": " << run.err;
  }
}

// abf serve --follow writes each tenant's snapshot: it may be none of the
// files the server reads.
TEST_F(SameFileTest, ServeFollowRefusesASnapshotThatIsAnotherInput) {
  write("m.txt", hex_lines(100, 56));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  ASSERT_EQ(abf("build --from-catalog c.db -n 1000 -p 0.01 -o c.abf").status, 0);
  fs::create_hard_link(path("c.abf"), path("tokens"));
  const auto before = folder();
  // Bounded: were the server to start, it would be stopped.
  expect_usage(sh("timeout 60 $ABF serve -s c.abf --db c.db --follow --token-file tokens "
                  "--listen 127.0.0.1:0"),
               "--follow rewrites each tenant's snapshot, and --snapshot c.abf is the same file "
               "as --token-file tokens",
               "serve");
  EXPECT_EQ(changed_since(before), "");
}

TEST_F(CliPolishTest, DemoNamesEveryRatioInSnakeCase) {
  const CliRun run = abf("demo --items 2000 --fpp 0.01");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("negative_bypass_ratio "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("observed_false_positive_rate "), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("false_discovery_ratio "), std::string::npos) << run.out;
  // No camelCase word anywhere (a lower-case letter then an upper-case one),
  // paths aside: the temporary folder's name (abf-demo-XXXXXX) is random.
  const std::regex camel("(^|[ (,])[a-z]+[A-Z][A-Za-z]*\\b");
  std::smatch found;
  EXPECT_FALSE(std::regex_search(run.out, found, camel)) << found.str() << "\n" << run.out;
}

}  // namespace
}  // namespace abf
