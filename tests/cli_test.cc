// End-to-end tests of the `abf` binary on real files, bad input included.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("abf-cli-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path path(const std::string& name) const { return dir_ / name; }

  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path(name), std::ios::binary) << content;
  }

  CliRun abf(const std::string& arguments) const { return test::run_cli(dir_, arguments); }

  // Digest lines for `count` members.
  static std::string hex_lines(std::uint64_t count, std::uint64_t seed) {
    std::string text;
    for (const auto& d : test::random_digests(count, seed)) text += d.hex() + "\n";
    return text;
  }

  // Asserts a failure: non-zero exit, one line naming `code` on stderr.
  static void expect_failure(const CliRun& run, const std::string& code) {
    EXPECT_NE(run.status, 0);
    EXPECT_NE(run.err.find(code), std::string::npos) << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  }

  fs::path dir_;
};

TEST_F(CliTest, BuildsQueriesAndInspectsRealFiles) {
  write("members.txt", hex_lines(1000, 1));
  const CliRun build = abf("build --expected-items 2000 --fpp 0.01 --catalog-version 9 --input " +
                           path("members.txt").string() + " --output " + path("c.abf").string());
  ASSERT_EQ(build.status, 0) << build.err;

  // Members always come back `maybe`, in input order.
  const CliRun query = abf("query --snapshot " + path("c.abf").string() + " --input " +
                           path("members.txt").string());
  ASSERT_EQ(query.status, 0) << query.err;
  std::string expected;
  for (const auto& d : test::random_digests(1000, 1)) expected += d.hex() + "\tmaybe\n";
  EXPECT_EQ(query.out, expected);

  // The CLI answers exactly as the library does, on every backend.
  const auto absent = test::random_digests(5000, 2);
  std::string absent_text;
  for (const auto& d : absent) absent_text += "sha256:" + d.hex() + "\n";
  write("absent.txt", absent_text);
  auto filter = load_snapshot(path("c.abf"));
  ASSERT_TRUE(filter.has_value());
  std::string library_answers;
  for (const auto& d : absent) {
    library_answers += d.hex() + (filter->might_contain(d) ? "\tmaybe\n" : "\tabsent\n");
  }
  for (const std::string backend : {"scalar", "simd", "auto"}) {
    const CliRun answers =
        abf("query -s " + path("c.abf").string() + " --backend " + backend + " --input " +
            path("absent.txt").string() + " --output " + path("answers.tsv").string());
    ASSERT_EQ(answers.status, 0) << answers.err;
    EXPECT_EQ(test::read_file(path("answers.tsv")), library_answers) << backend;
  }

  const CliRun summary = abf("query -s " + path("c.abf").string() + " --summary --input " +
                             path("members.txt").string());
  EXPECT_EQ(summary.out, "total\t1000\nabsent\t0\nmaybe\t1000\n");

  const CliRun inspect = abf("inspect " + path("c.abf").string());
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  EXPECT_NE(inspect.out.find("catalog version       9"), std::string::npos) << inspect.out;
  const CliRun json = abf("inspect --json " + path("c.abf").string());
  ASSERT_EQ(json.status, 0);
  EXPECT_NE(json.out.find("\"inserted_item_count\": 1000"), std::string::npos) << json.out;
  EXPECT_NE(json.out.find("\"fill_ratio\""), std::string::npos);
}

TEST_F(CliTest, DigestOutputFeedsBuildAndQuery) {
  write("a.bin", "first artifact");
  write("b.bin", "second artifact");
  const CliRun digest = abf("digest " + path("a.bin").string() + " " + path("b.bin").string());
  ASSERT_EQ(digest.status, 0) << digest.err;
  EXPECT_EQ(digest.out.substr(0, 64), sha256(std::string_view("first artifact")).hex());
  EXPECT_NE(digest.out.find("  " + path("b.bin").string() + "\n"), std::string::npos);
  write("sums.txt", digest.out);
  ASSERT_EQ(abf("build -n 10 -p 0.001 --input " + path("sums.txt").string() + " --output " +
                path("s.abf").string())
                .status,
            0);
  const CliRun query =
      abf("query -s " + path("s.abf").string() + " --summary --input " + path("sums.txt").string());
  EXPECT_EQ(query.out, "total\t2\nabsent\t0\nmaybe\t2\n");
}

TEST_F(CliTest, BinaryInputWorksLikeHex) {
  std::string records;
  for (const auto& d : test::random_digests(100, 5)) {
    records.append(reinterpret_cast<const char*>(d.bytes.data()), 32);
  }
  write("d.bin", records);
  write("d.txt", hex_lines(100, 5));
  ASSERT_EQ(abf("build -n 100 -p 0.01 -f bin --input " + path("d.bin").string() + " -o " +
                path("bin.abf").string())
                .status,
            0);
  ASSERT_EQ(abf("build -n 100 -p 0.01 --input " + path("d.txt").string() + " -o " +
                path("hex.abf").string())
                .status,
            0);
  EXPECT_EQ(test::read_file(path("bin.abf")), test::read_file(path("hex.abf")));
}

TEST_F(CliTest, EmptyInputBuildsAnEmptyFilterAndQueriesToNothing) {
  write("empty.txt", "");
  ASSERT_EQ(abf("build -n 10 -p 0.01 --input " + path("empty.txt").string() + " -o " +
                path("e.abf").string())
                .status,
            0);
  const CliRun query =
      abf("query -s " + path("e.abf").string() + " --input " + path("empty.txt").string());
  EXPECT_EQ(query.status, 0);
  EXPECT_EQ(query.out, "");
}

TEST_F(CliTest, BadInputFailsClearlyAndWritesNothing) {
  const std::string good = hex_lines(3, 8);
  const std::string hex64 = good.substr(0, 64);
  struct Case {
    std::string name;
    std::string content;
    std::string format;
    std::string arguments;  // build options besides input/output
    std::string code;
  };
  const Case cases[] = {
      {"non-hex text", "hello, world\n", "hex", "-n 10 -p 0.01", "invalid_digest"},
      {"63 hex digits", good + hex64.substr(1) + "\n", "hex", "-n 10 -p 0.01", "invalid_digest"},
      {"65 hex digits", hex64 + "a\n", "hex", "-n 10 -p 0.01", "invalid_digest"},
      {"binary of 33 bytes", std::string(33, 'x'), "bin", "-n 10 -p 0.01", "invalid_digest"},
      {"too many digests", good, "hex", "-n 2 -p 0.01", "capacity_exceeded"},
      {"fpp of 1.5", good, "hex", "-n 10 -p 1.5", "invalid_false_positive_rate"},
      {"fpp of 0", good, "hex", "-n 10 -p 0", "invalid_false_positive_rate"},
      {"zero items", good, "hex", "-n 0 -p 0.01", "invalid_expected_item_count"},
      {"items above 2^30", good, "hex", "-n 1073741825 -p 0.01", "invalid_expected_item_count"},
      {"filter too large", good, "hex", "-n 1073741824 -p 0.000001", "filter_too_large"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    write("input", c.content);
    const CliRun run = abf("build " + c.arguments + " -f " + c.format + " --input " +
                           path("input").string() + " --output " + path("new.abf").string());
    expect_failure(run, c.code);
    EXPECT_FALSE(fs::exists(path("new.abf")));
    // An existing output file stays as it was.
    write("old.abf", "previous contents");
    const CliRun again = abf("build " + c.arguments + " -f " + c.format + " --input " +
                             path("input").string() + " --output " + path("old.abf").string());
    EXPECT_NE(again.status, 0);
    EXPECT_EQ(test::read_file(path("old.abf")), "previous contents");
  }
  for (const auto& entry : fs::directory_iterator(dir_)) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
  }
}

TEST_F(CliTest, MissingFilesAreClearErrors) {
  expect_failure(abf("build -n 10 -p 0.01 --input " + path("nope.txt").string() + " -o " +
                     path("x.abf").string()),
                 "io_error");
  EXPECT_FALSE(fs::exists(path("x.abf")));
  expect_failure(abf("query -s " + path("nope.abf").string() + " --input /dev/null"), "io_error");
  expect_failure(abf("inspect " + path("nope.abf").string()), "io_error");
  expect_failure(abf("digest " + path("nope.bin").string()), "io_error");
}

// Several input chunks (256 Ki digests each) and many output pieces: the
// read-ahead and the parallel formatting keep every line in input order.
TEST_F(CliTest, QueryAnswersSeveralChunksInInputOrder) {
  const std::size_t count = kAutoCudaMinBatch + 70'001;
  const auto digests = test::random_digests(count, 21);
  std::string records;
  records.reserve(count * sizeof(Digest));
  for (const auto& d : digests) records.append(reinterpret_cast<const char*>(d.bytes.data()), 32);
  write("candidates.bin", records);
  // Members: every 7th candidate, so answers alternate unpredictably.
  std::vector<Digest> members;
  for (std::size_t i = 0; i < count; i += 7) members.push_back(digests[i]);
  auto filter = build_filter(members, BloomSpec{members.size(), 0.01});
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  ASSERT_TRUE(save_snapshot(*filter, path("c.abf")).has_value());
  std::string expected;
  expected.reserve(count * 72);
  std::size_t maybe = 0;
  for (const auto& d : digests) {
    const bool hit = filter->might_contain(d);
    maybe += hit ? 1 : 0;
    expected += d.hex() + (hit ? "\tmaybe\n" : "\tabsent\n");
  }
  const CliRun run =
      abf("query -s " + path("c.abf").string() + " -f bin --input " +
          path("candidates.bin").string() + " --output " + path("answers.tsv").string());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_TRUE(test::read_file(path("answers.tsv")) == expected) << "answers differ";
  const CliRun summary = abf("query -s " + path("c.abf").string() + " -f bin --summary --input " +
                             path("candidates.bin").string());
  EXPECT_EQ(summary.out, "total\t" + std::to_string(count) + "\nabsent\t" +
                             std::to_string(count - maybe) + "\nmaybe\t" + std::to_string(maybe) +
                             "\n");

  // A torn last record, found in the second chunk: an error, and the
  // existing output stays as it was.
  write("candidates.bin", records + "torn");
  write("answers.tsv", "old answers");
  expect_failure(abf("query -s " + path("c.abf").string() + " -f bin --input " +
                     path("candidates.bin").string() + " --output " + path("answers.tsv").string()),
                 "invalid_digest");
  EXPECT_EQ(test::read_file(path("answers.tsv")), "old answers");
}

TEST_F(CliTest, BuildStreamsSeveralChunksWhileReadingAhead) {
  // Three chunks of 256 Ki digests (the read of each overlaps the insert of
  // the one before): the snapshot is the in-memory build's, byte for byte.
  const std::size_t count = 2 * (std::size_t{1} << 18) + 12'345;
  const auto digests = test::random_digests(count, 22);
  std::string records;
  records.reserve(count * sizeof(Digest));
  for (const auto& d : digests) records.append(reinterpret_cast<const char*>(d.bytes.data()), 32);
  write("members.bin", records);
  auto filter = build_filter(digests, BloomSpec{count, 0.01}, 4);
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  const auto expected = serialize_snapshot(*filter);
  const CliRun run =
      abf("build -n " + std::to_string(count) + " -p 0.01 --catalog-version 4 -f bin --input " +
          path("members.bin").string() + " --output " + path("c.abf").string());
  ASSERT_EQ(run.status, 0) << run.err;
  const std::string written = test::read_file(path("c.abf"));
  EXPECT_TRUE(written == std::string(expected.begin(), expected.end())) << "snapshot differs";

  // A torn last record, found in the third chunk: an error, and the
  // existing snapshot stays as it was.
  write("members.bin", records + "torn");
  write("c.abf", "old snapshot");
  expect_failure(abf("build -n " + std::to_string(count) + " -p 0.01 -f bin --input " +
                     path("members.bin").string() + " --output " + path("c.abf").string()),
                 "invalid_digest");
  EXPECT_EQ(test::read_file(path("c.abf")), "old snapshot");
  // One digest too many, also found only in the third chunk.
  write("members.bin", records);
  expect_failure(abf("build -n " + std::to_string(count - 1) + " -p 0.01 -f bin --input " +
                     path("members.bin").string() + " --output " + path("c.abf").string()),
                 "capacity_exceeded");
  EXPECT_EQ(test::read_file(path("c.abf")), "old snapshot");
}

TEST_F(CliTest, MalformedQueryDigestIsAnErrorNeverAbsent) {
  write("members.txt", hex_lines(10, 3));
  ASSERT_EQ(abf("build -n 10 -p 0.01 --input " + path("members.txt").string() + " -o " +
                path("c.abf").string())
                .status,
            0);
  write("candidates.txt", hex_lines(5, 4) + "xyz\n");
  write("answers.tsv", "old answers");
  const CliRun run =
      abf("query -s " + path("c.abf").string() + " --input " + path("candidates.txt").string() +
          " --output " + path("answers.tsv").string());
  expect_failure(run, "invalid_digest");
  EXPECT_NE(run.err.find("line 6"), std::string::npos) << run.err;
  EXPECT_EQ(test::read_file(path("answers.tsv")), "old answers");
}

TEST_F(CliTest, CorruptSnapshotIsRefused) {
  std::string bytes = test::read_file(test::data_path("vectors/member-1000.abf"));
  bytes[200] ^= 1;
  write("corrupt.abf", bytes);
  expect_failure(abf("inspect " + path("corrupt.abf").string()), "snapshot_payload_checksum");
  expect_failure(abf("query -s " + path("corrupt.abf").string() + " --input /dev/null"),
                 "snapshot_payload_checksum");
}

TEST_F(CliTest, GoldenSnapshotInspectsAsItsHeaderSays) {
  const CliRun run = abf("inspect --json " + test::data_path("vectors/member-1000.abf").string());
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\"catalog_version\": 42"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"bit_count\": 9600"), std::string::npos) << run.out;
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(abf("build --fpp 0.01 -o x").status, 2);  // --expected-items missing
  EXPECT_EQ(abf("frobnicate").status, 2);
  EXPECT_EQ(abf("query -s x --backend quantum").status, 2);
}

TEST_F(CliTest, VersionNamesBackendsAndTargets) {
  const CliRun run = abf("--version");
  EXPECT_EQ(run.status, 0);
  EXPECT_NE(run.out.find("backends: scalar, simd"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("simd target in use:"), std::string::npos) << run.out;
}

TEST_F(CliTest, DemoRunsTheMainJobOnASmallSet) {
  const CliRun run = abf("demo --items 20000 --fpp 0.01 --skip-dedup");
  ASSERT_EQ(run.status, 0) << run.err;
  for (const char* needle : {"layout", "fill ratio", "estimated", "observed", "resolution",
                             "false negatives     0 of", "simd"}) {
    EXPECT_NE(run.out.find(needle), std::string::npos) << needle << "\n" << run.out;
  }
}

}  // namespace
}  // namespace abf
