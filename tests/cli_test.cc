// End-to-end tests of the `abf` binary on real files, bad input included.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/cuda/controls.hpp"
#include "cli_shell.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

// 1234 -> "1,234", as the summaries print counts.
std::string with_commas_for_test(std::uint64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(i, ",");
  return digits;
}

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = test::make_temp_dir("abf-cli"); }
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
      // Out-of-range n and p are usage errors (exit 2, two lines): below.
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
  // n and p out of range, or no filter of 2^30 bits for them: usage errors
  // (exit 2), and nothing written either.
  const std::pair<std::string, std::string> usage_cases[] = {
      {"-n 10 -p 1.5", "--fpp"},
      {"-n 10 -p 0", "--fpp"},
      {"-n 0 -p 0.01", "--expected-items"},
      {"-n 1073741825 -p 0.01", "invalid_expected_item_count"},
      {"-n 1073741824 -p 0.000001", "filter_too_large"},
  };
  write("input", good);
  for (const auto& [arguments, what] : usage_cases) {
    SCOPED_TRACE(arguments);
    const CliRun run = abf("build " + arguments + " --input " + path("input").string() +
                           " --output " + path("old.abf").string());
    EXPECT_EQ(run.status, 2);
    EXPECT_NE(run.err.find(what), std::string::npos) << run.err;
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

// Issue 22: `abf build` (from a file, and --shards), `abf merge` of disjoint
// parts and `abf inspect` all give member-1000's content fingerprint as
// vectors/fingerprint.tsv has it; a file without one shows null / "none".
TEST_F(CliTest, BuildShardsMergeAndInspectCarryTheContentFingerprint) {
  const auto vector = test::fingerprint_vector("member-1000");
  std::string all, first, second;
  for (std::size_t i = 0; i < vector.digests.size(); ++i) {
    (i < 500 ? first : second) += vector.digests[i].hex() + "\n";
    all += vector.digests[i].hex() + "\n";
  }
  write("all.txt", all);
  write("first.txt", first);
  write("second.txt", second);
  const auto fingerprint_of = [&](const std::string& file) {
    const CliRun run = abf("inspect --json " + path(file).string());
    EXPECT_EQ(run.status, 0) << run.err;
    const auto json = nlohmann::json::parse(run.out, nullptr, false);
    return json.is_discarded() || json["content_fingerprint"].is_null()
               ? std::string("null")
               : json["content_fingerprint"].get<std::string>();
  };
  ASSERT_EQ(abf("build -n 1000 -p 0.01 -i all.txt -o all.abf").status, 0);
  EXPECT_EQ(fingerprint_of("all.abf"), vector.fingerprint_hex);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --shards 3 -i all.txt -o all.abfs").status, 0);
  EXPECT_EQ(fingerprint_of("all.abfs"), vector.fingerprint_hex);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 -i first.txt -o first.abf").status, 0);
  ASSERT_EQ(abf("build -n 1000 -p 0.01 -i second.txt -o second.abf").status, 0);
  EXPECT_EQ(fingerprint_of("first.abf"),
            test::fingerprint_vector("member-1000-first-half").fingerprint_hex);
  const CliRun merged = abf("merge first.abf second.abf -o merged.abf --json");
  ASSERT_EQ(merged.status, 0) << merged.err;
  EXPECT_EQ(nlohmann::json::parse(merged.out)["content_fingerprint"], vector.fingerprint_hex);
  EXPECT_EQ(fingerprint_of("merged.abf"), vector.fingerprint_hex);
  EXPECT_EQ(test::read_file(path("merged.abf")), test::read_file(path("all.abf")));
  const CliRun text = abf("inspect " + path("all.abf").string());
  EXPECT_NE(text.out.find("content fingerprint   " + vector.fingerprint_hex), std::string::npos)
      << text.out;
  write("golden.abf", test::read_file(test::data_path("vectors/member-1000.abf")));
  EXPECT_EQ(fingerprint_of("golden.abf"), "null");
  const CliRun golden = abf("inspect " + path("golden.abf").string());
  EXPECT_NE(golden.out.find("content fingerprint   none"), std::string::npos) << golden.out;
}

// ---- Keys, catalog ids and the new header fields (protocol v2) -------------

// member_digests(1000) as hex lines: the golden files' digests.
std::string golden_member_lines() {
  std::string text;
  for (const Digest& digest : test::member_digests(1000)) text += digest.hex() + "\n";
  return text;
}

// The build of the v2 golden files: n = 1000, p = 0.01, catalog version 42,
// the golden catalog id.
std::string golden_build_arguments() {
  return "build -n 1000 -p 0.01 --catalog-version 42 --catalog-id " +
         test::golden_catalog_id().hex() + " -i members.txt";
}

TEST_F(CliTest, BuildWritesTheVersionTwoGoldenSnapshots) {
  write("members.txt", golden_member_lines());
  test::write_private_file(path("golden.key"), test::golden_key().hex + "\n");
  const CliRun keyed = abf(golden_build_arguments() + " --key-file golden.key -o keyed.abf");
  ASSERT_EQ(keyed.status, 0) << keyed.err;
  // The golden files predate the content fingerprint; a build writes it too.
  EXPECT_TRUE(test::read_file(path("keyed.abf")) ==
              test::with_content_fingerprint(
                  test::read_file(test::data_path("vectors/v2/member-1000-keyed.abf")),
                  "member-1000"))
      << "keyed snapshot differs from the golden file";
  EXPECT_NE(keyed.out.find("hash protocol 2 (key " + test::golden_key().fingerprint_hex + ")"),
            std::string::npos)
      << keyed.out;
  const CliRun plain = abf(golden_build_arguments() + " -o plain.abf");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_TRUE(test::read_file(path("plain.abf")) ==
              test::with_content_fingerprint(
                  test::read_file(test::data_path("vectors/v2/member-1000-v2.abf")),
                  "member-1000"))
      << "unkeyed snapshot differs from the golden file";
}

TEST_F(CliTest, EveryKeyFileFormGivesTheSameKey) {
  write("members.txt", golden_member_lines());
  const test::VectorKey key = test::golden_key();
  std::string upper = key.hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string raw(reinterpret_cast<const char*>(key.key.bytes().data()), Key::kSize);
  const std::string golden = test::with_content_fingerprint(
      test::read_file(test::data_path("vectors/v2/member-1000-keyed.abf")), "member-1000");
  for (const std::string& contents : {key.hex + "\n", key.hex, upper + "\n", raw}) {
    SCOPED_TRACE(contents.size());
    test::write_private_file(path("k.key"), contents);
    const CliRun run = abf(golden_build_arguments() + " --key-file k.key -o k.abf");
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_TRUE(test::read_file(path("k.abf")) == golden);
  }
}

TEST_F(CliTest, KeyFileReadableByOthersOrMalformedIsRefused) {
  write("members.txt", golden_member_lines());
  test::write_private_file(path("k.key"), test::golden_key().hex + "\n");
  for (const auto& [mode, who] : {std::pair{fs::perms(0644), "readable by others"},
                                  std::pair{fs::perms(0640), "readable by its group"},
                                  std::pair{fs::perms(0602), "writable by others"},
                                  std::pair{fs::perms(0620), "writable by its group"}}) {
    SCOPED_TRACE(who);
    fs::permissions(path("k.key"), mode);
    for (const std::string& command :
         {golden_build_arguments() + " --key-file k.key -o k.abf",
          "query -s " + test::data_path("vectors/v2/member-1000-keyed.abf").string() +
              " -i members.txt --key-file k.key -o answers.tsv"}) {
      const CliRun run = abf(command);
      expect_failure(run, "invalid_key");
      EXPECT_NE(run.err.find(who), std::string::npos) << run.err;
      EXPECT_NE(run.err.find("chmod 600"), std::string::npos) << run.err;
    }
  }
  EXPECT_FALSE(fs::exists(path("k.abf")));
  EXPECT_FALSE(fs::exists(path("answers.tsv")));
  // Not a key: 31 hex digits, non-hex, missing.
  test::write_private_file(path("short.key"), test::golden_key().hex.substr(1) + "\n");
  expect_failure(abf(golden_build_arguments() + " --key-file short.key -o k.abf"), "invalid_key");
  test::write_private_file(path("text.key"), std::string(32, 'z') + "\n");
  expect_failure(abf(golden_build_arguments() + " --key-file text.key -o k.abf"), "invalid_key");
  expect_failure(abf(golden_build_arguments() + " --key-file missing.key -o k.abf"), "io_error");
  EXPECT_FALSE(fs::exists(path("k.abf")));
}

TEST_F(CliTest, KeyGenerateWritesAPrivateKeyAndPrintsItsFingerprint) {
  const CliRun run = abf("key generate --output new.key");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(fs::status(path("new.key")).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  auto key = read_key_file(path("new.key"));
  ASSERT_TRUE(key.has_value()) << key.error().describe();
  EXPECT_EQ(run.out, key_fingerprint(*key).hex() + "\n");
  // A second key is another key; an existing file is never replaced.
  const std::string first = test::read_file(path("new.key"));
  const CliRun again = abf("key generate --output new.key");
  expect_failure(again, "io_error");
  EXPECT_NE(again.err.find("exists"), std::string::npos) << again.err;
  EXPECT_EQ(again.out, "");
  EXPECT_EQ(test::read_file(path("new.key")), first);
  const CliRun second = abf("key generate --output second.key");
  ASSERT_EQ(second.status, 0) << second.err;
  EXPECT_NE(test::read_file(path("second.key")), first);
  EXPECT_NE(second.out, run.out);
  EXPECT_EQ(abf("key generate").status, 2);  // --output missing
}

TEST_F(CliTest, KeyedSnapshotAnswersOnlyWithItsKey) {
  write("members.txt", hex_lines(2000, 31));
  const auto candidates = test::random_digests(5000, 32);
  std::string candidate_text;
  for (const auto& d : candidates) candidate_text += d.hex() + "\n";
  write("candidates.txt", candidate_text);
  test::write_private_file(path("k.key"), test::golden_key().hex + "\n");
  test::write_private_file(path("other.key"), test::other_key().hex + "\n");
  const CliRun built = abf("build -n 2000 -p 0.01 -i members.txt --key-file k.key -o k.abf");
  ASSERT_EQ(built.status, 0) << built.err;

  // The answers of the scalar reference, opened with the key.
  LoadOptions options;
  options.key = test::golden_key().key;
  auto filter = load_snapshot(path("k.abf"), options);
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  ASSERT_EQ(filter->hash_protocol_version(), 2u);
  std::string expected;
  for (const auto& d : candidates) {
    expected += d.hex() + (filter->might_contain(d) ? "\tmaybe\n" : "\tabsent\n");
  }
  for (const std::string& backend : backend_names()) {
    if (!backend_available(*parse_backend(backend))) continue;
    SCOPED_TRACE(backend);
    const CliRun run = abf("query -s k.abf -i candidates.txt --key-file k.key --backend " +
                           backend + " -o answers.tsv");
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_TRUE(test::read_file(path("answers.tsv")) == expected) << "answers differ";
  }
  const CliRun members = abf("query -s k.abf -i members.txt --key-file k.key --summary");
  EXPECT_EQ(members.out, "total\t2000\nabsent\t0\nmaybe\t2000\n");

  fs::remove(path("answers.tsv"));
  expect_failure(abf("query -s k.abf -i candidates.txt -o answers.tsv"), "key_required");
  expect_failure(abf("query -s k.abf -i candidates.txt --key-file other.key -o answers.tsv"),
                 "key_mismatch");
  EXPECT_FALSE(fs::exists(path("answers.tsv")));
  // A key for an unkeyed snapshot would be silently unused: refused too.
  ASSERT_EQ(abf("build -n 2000 -p 0.01 -i members.txt -o plain.abf").status, 0);
  expect_failure(abf("query -s plain.abf -i candidates.txt --key-file k.key"), "key_mismatch");
}

TEST_F(CliTest, InspectShowsFormatProtocolCatalogIdAndKeyFingerprint) {
  const std::string zero_id(32, '0');
  const std::string zero_fingerprint(16, '0');
  struct Case {
    std::string file;
    std::string key_option;
    unsigned format;
    unsigned protocol;
    std::string catalog_id;
    std::string fingerprint;
  };
  test::write_private_file(path("k.key"), test::golden_key().hex + "\n");
  const Case cases[] = {
      {"vectors/member-1000.abf", "", 1, 1, zero_id, zero_fingerprint},
      {"vectors/v2/member-1000-v2.abf", "", 2, 1, test::golden_catalog_id().hex(),
       zero_fingerprint},
      {"vectors/v2/member-1000-keyed.abf", " --key-file k.key", 2, 2,
       test::golden_catalog_id().hex(), test::golden_key().fingerprint_hex},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string file = test::data_path(c.file).string();
    const CliRun json = abf("inspect --json " + file + c.key_option);
    ASSERT_EQ(json.status, 0) << json.err;
    const auto parsed = nlohmann::json::parse(json.out);
    EXPECT_EQ(parsed["format_version"].get<unsigned>(), c.format);
    EXPECT_EQ(parsed["hash_protocol_version"].get<unsigned>(), c.protocol);
    EXPECT_EQ(parsed["catalog_id"].get<std::string>(), c.catalog_id);
    EXPECT_EQ(parsed["key_fingerprint"].get<std::string>(), c.fingerprint);
    EXPECT_EQ(parsed["catalog_version"].get<std::uint64_t>(), 42u);
    const CliRun text = abf("inspect " + file + c.key_option);
    ASSERT_EQ(text.status, 0) << text.err;
    for (const std::string& line :
         {"format version        " + std::to_string(c.format),
          "hash protocol version " + std::to_string(c.protocol),
          "catalog id            " + c.catalog_id, "key fingerprint       " + c.fingerprint}) {
      EXPECT_NE(text.out.find(line), std::string::npos) << line << "\n" << text.out;
    }
  }
  // The keyed file without its key, or with another: refused, as everywhere.
  const std::string keyed = test::data_path("vectors/v2/member-1000-keyed.abf").string();
  expect_failure(abf("inspect " + keyed), "key_required");
  test::write_private_file(path("other.key"), test::other_key().hex + "\n");
  expect_failure(abf("inspect --json " + keyed + " --key-file other.key"), "key_mismatch");
}

// The key reaches no output of any command, in success or failure, and no
// snapshot: neither its hex (either case) nor its raw bytes.
TEST_F(CliTest, KeyNeverAppearsInAnyOutputOrSnapshot) {
  ASSERT_EQ(abf("key generate --output k.key").status, 0);
  auto generated = read_key_file(path("k.key"));
  ASSERT_TRUE(generated.has_value());
  test::write_private_file(path("golden.key"), test::golden_key().hex + "\n");
  write("members.txt", golden_member_lines());
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  ASSERT_EQ(abf("catalog add --db c.db -i members.txt").status, 0);
  const std::string keyed_golden = test::data_path("vectors/v2/member-1000-keyed.abf").string();
  const std::string commands[] = {
      "build -n 1000 -p 0.01 -i members.txt --key-file k.key -o k.abf",
      "build -n 2000 -p 0.01 -i members.txt --key-file k.key -o big.abf",
      "build --from-catalog c.db -n 1000 -p 0.01 --key-file k.key -o cat.abf",
      "query -s k.abf -i members.txt --key-file k.key --summary",
      "query -s k.abf -i members.txt --key-file golden.key",
      "query -s k.abf -i members.txt",
      "inspect k.abf --key-file k.key",
      "inspect --json k.abf --key-file k.key",
      "inspect k.abf --key-file golden.key",
      "inspect " + keyed_golden + " --key-file k.key",
      "merge k.abf -o m.abf --key-file k.key",
      "merge k.abf big.abf -o m.abf --key-file k.key",
      "merge k.abf -o m.abf --key-file golden.key",
      "dedup -s cat.abf --db c.db -i members.txt --key-file k.key",
      "dedup -s cat.abf --db c.db -i members.txt --key-file golden.key",
      "dedup -s cat.abf --db c.db -i members.txt",
      "key generate --output k.key",
  };
  const Key keys[] = {*generated, test::golden_key().key};
  const auto forms = [](const Key& key) {
    std::string lower;
    for (const std::uint8_t byte : key.bytes()) {
      static constexpr char kDigits[] = "0123456789abcdef";
      lower += kDigits[byte >> 4];
      lower += kDigits[byte & 15];
    }
    std::string upper = lower;
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return std::vector<std::string>{
        lower, upper, std::string(reinterpret_cast<const char*>(key.bytes().data()), Key::kSize)};
  };
  for (const std::string& command : commands) {
    const CliRun run = abf(command);
    for (const Key& key : keys) {
      for (const std::string& form : forms(key)) {
        EXPECT_EQ(run.out.find(form), std::string::npos) << command << "\n" << run.out;
        EXPECT_EQ(run.err.find(form), std::string::npos) << command << "\n" << run.err;
      }
    }
  }
  for (const char* snapshot : {"k.abf", "big.abf", "cat.abf", "m.abf"}) {
    ASSERT_TRUE(fs::exists(path(snapshot))) << snapshot;
    const std::string bytes = test::read_file(path(snapshot));
    for (const std::string& form : forms(*generated)) {
      EXPECT_EQ(bytes.find(form), std::string::npos) << snapshot;
    }
  }
}

TEST_F(CliTest, BuildCatalogIdIsRecordedAndChecked) {
  write("members.txt", hex_lines(10, 41));
  const std::string id = test::golden_catalog_id().hex();
  std::string upper = id;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_EQ(abf("build -n 10 -p 0.01 -i members.txt --catalog-id " + upper + " -o c.abf").status,
            0);
  auto filter = load_snapshot(path("c.abf"));
  ASSERT_TRUE(filter.has_value());
  EXPECT_EQ(filter->catalog_id(), test::golden_catalog_id());
  // Without it, none.
  ASSERT_EQ(abf("build -n 10 -p 0.01 -i members.txt -o none.abf").status, 0);
  EXPECT_TRUE(load_snapshot(path("none.abf"))->catalog_id().is_zero());
  // Not 32 hex digits: a usage error, nothing written.
  for (const std::string& bad : {id.substr(1), id + "0", std::string(32, 'g')}) {
    EXPECT_EQ(abf("build -n 10 -p 0.01 -i members.txt --catalog-id " + bad + " -o bad.abf").status,
              2)
        << bad;
  }
  EXPECT_FALSE(fs::exists(path("bad.abf")));
}

TEST_F(CliTest, BackendOptionsAcceptExactlyTheLibrarysNames) {
  write("members.txt", hex_lines(10, 42));
  ASSERT_EQ(abf("build -n 10 -p 0.01 -i members.txt -o c.abf").status, 0);
  for (const std::string& name : backend_names()) {
    SCOPED_TRACE(name);
    const bool runs = backend_available(*parse_backend(name));
    for (const std::string& command :
         {"query -s c.abf -i members.txt --summary --backend " + name,
          "build -n 10 -p 0.01 -i members.txt -o b.abf --backend " + name}) {
      const CliRun run = abf(command);
      if (runs) {
        EXPECT_EQ(run.status, 0) << command << ": " << run.err;
      } else {
        expect_failure(run, "backend_unavailable");
      }
    }
  }
  for (const char* command : {"query", "build", "dedup"}) {
    const CliRun help = abf(std::string(command) + " --help");
    for (const std::string& name : backend_names()) {
      EXPECT_NE(help.out.find(name), std::string::npos) << name << "\n" << help.out;
    }
  }
  for (const char* command :
       {"query -s c.abf", "build -n 10 -p 0.01 -o x.abf", "dedup -s c.abf --db c.db"}) {
    EXPECT_EQ(abf(std::string(command) + " --backend quantum").status, 2) << command;
  }
}

// The help texts become the man pages at build time (package/make-man-pages),
// so they must not carry the build machine's core count.
TEST_F(CliTest, ThreadsHelpNamesNoCoreCount) {
  for (const char* command : {"build", "query", "dedup", "merge", "demo", "bench"}) {
    const CliRun help = abf(std::string(command) + " --help");
    ASSERT_EQ(help.status, 0) << command;
    const auto at = help.out.find("--threads");
    ASSERT_NE(at, std::string::npos) << command << "\n" << help.out;
    EXPECT_NE(help.out.find("every core", at), std::string::npos) << command << "\n" << help.out;
    EXPECT_FALSE(std::regex_search(help.out, std::regex("[0-9]+ cores"))) << command << "\n"
                                                                          << help.out;
  }
}

TEST_F(CliTest, UsageErrorsExitTwo) {
  EXPECT_EQ(abf("build --fpp 0.01 -o x").status, 2);  // --expected-items missing
  EXPECT_EQ(abf("frobnicate").status, 2);
  EXPECT_EQ(abf("query -s x --backend quantum").status, 2);
}

TEST_F(CliTest, DemoRunsTheMainJobOnASmallSet) {
  const CliRun run = abf("demo --items 20000 --fpp 0.01 --skip-dedup");
  ASSERT_EQ(run.status, 0) << run.err;
  for (const char* needle : {"layout", "fill ratio", "estimated", "observed", "resolution",
                             "false negatives     0 of", "simd", "layouts side by side",
                             "bits/digest  modeled fpp  observed fpp", "\n  classic  1  ",
                             "\n  blocked  3  "}) {
    EXPECT_NE(run.out.find(needle), std::string::npos) << needle << "\n" << run.out;
  }
}

// The side-by-side rows are the golden builds: n = 1,000 members at p = 0.01
// (vectors/builds.tsv for classic, vectors/v3/builds-v3.tsv for blocked),
// their false positives among the first 1,000 non-members, and the model.
TEST_F(CliTest, DemoShowsClassicAndBlockedSideBySideAsTheirGoldenBuilds) {
  const CliRun run = abf("demo --items 1000 --fpp 0.01 --skip-dedup --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  const nlohmann::json& layouts = json["layouts"];
  ASSERT_EQ(layouts.size(), 2u) << run.out;
  struct Golden {
    std::uint64_t bit_count = 0;
    std::uint32_t hash_count = 0;
    std::uint64_t false_positives = 0;
  };
  const auto golden_of = [](const std::vector<std::string>& row, std::size_t m_column,
                            std::size_t fp_column) {
    Golden g{std::stoull(row[m_column]), static_cast<std::uint32_t>(std::stoul(row[m_column + 1]))};
    for (const auto i : test::split_numbers(row.size() > fp_column ? row[fp_column] : "")) {
      g.false_positives += i < 1000;
    }
    return g;
  };
  std::optional<Golden> classic;
  std::optional<Golden> one_line;
  for (const auto& row : test::read_tsv("vectors/builds.tsv")) {
    if (row[0] == "1000" && row[1] == "1000") classic = golden_of(row, 3, 7);
  }
  for (const auto& row : test::read_tsv("vectors/v3/builds-v3.tsv")) {
    if (row[0] == "3" && row[2] == "1000" && row[3] == "1000") one_line = golden_of(row, 5, 9);
  }
  ASSERT_TRUE(classic && one_line);
  const std::vector<std::pair<std::string, Golden>> expected = {{"classic", *classic},
                                                                {"blocked", *one_line}};
  for (std::size_t i = 0; i < 2; ++i) {
    const nlohmann::json& row = layouts[i];
    SCOPED_TRACE(expected[i].first);
    EXPECT_EQ(row["layout"], expected[i].first);
    EXPECT_EQ(row["hash_protocol_version"], i == 0 ? 1 : 3);
    EXPECT_EQ(row["bit_count"], expected[i].second.bit_count);
    EXPECT_EQ(row["hash_count"], expected[i].second.hash_count);
    EXPECT_DOUBLE_EQ(row["bits_per_digest"].get<double>(),
                     static_cast<double>(expected[i].second.bit_count) / 1000);
    EXPECT_EQ(row["false_positives"], expected[i].second.false_positives);
    EXPECT_DOUBLE_EQ(row["observed_fpp"].get<double>(),
                     static_cast<double>(expected[i].second.false_positives) / 1000);
    EXPECT_EQ(row["false_negatives"], 0);
    // The model of the filter the library builds of the same digests.
    BuildOptions options;
    options.protocol = row["hash_protocol_version"].get<std::uint32_t>();
    auto built = build_filter(test::member_digests(1000), {1000, 0.01}, options);
    ASSERT_TRUE(built);
    EXPECT_DOUBLE_EQ(row["estimated_fpp"].get<double>(), built->estimate_false_positive_rate());
    for (const char* rate : {"build_per_second", "absent_per_second", "present_per_second"}) {
      EXPECT_GT(row[rate].get<double>(), 0.0) << rate;
    }
  }
}

// ---- CLI conventions (issue 13) and lost or partial output (issue 14) -----

// Every key of a JSON report, at any depth, is snake_case.
void expect_snake_case_keys(const nlohmann::json& json, const std::string& where) {
  if (json.is_object()) {
    for (const auto& [key, value] : json.items()) {
      bool snake = !key.empty();
      for (const char c : key)
        snake = snake && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
      EXPECT_TRUE(snake) << where << ": key '" << key << "'";
      expect_snake_case_keys(value, where);
    }
  } else if (json.is_array()) {
    for (const auto& value : json) expect_snake_case_keys(value, where);
  }
}

TEST_F(CliTest, BuildToStdoutWritesOnlyTheSnapshot) {
  write("members.txt", hex_lines(500, 51));
  ASSERT_EQ(abf("build -n 1000 -p 0.01 -i members.txt -o file.abf").status, 0);
  // The issue's case: `-o - > f.abf`, then inspect f.abf.
  const CliRun build = abf("build -n 1000 -p 0.01 -i members.txt -o -");
  ASSERT_EQ(build.status, 0) << build.err;
  EXPECT_TRUE(build.out == test::read_file(path("file.abf"))) << "stdout is not the snapshot";
  EXPECT_NE(build.err.find("wrote <stdout>: 500 digests"), std::string::npos) << build.err;
  write("f.abf", build.out);
  EXPECT_EQ(abf("inspect f.abf").status, 0);
  // --json too: the report goes to stderr, the snapshot alone to stdout.
  const CliRun json = abf("build -n 1000 -p 0.01 -i members.txt -o - --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_TRUE(json.out == build.out);
  EXPECT_EQ(nlohmann::json::parse(json.err)["output"], "-");
  // merge: the same rule.
  const CliRun merge = abf("merge file.abf -o -");
  ASSERT_EQ(merge.status, 0) << merge.err;
  EXPECT_TRUE(merge.out == build.out);
  EXPECT_NE(merge.err.find("wrote <stdout>: merged 1 snapshot, "), std::string::npos) << merge.err;
}

TEST_F(CliTest, DashReadsSnapshotsFromStandardInput) {
  write("members.txt", hex_lines(300, 52));
  write("candidates.txt", hex_lines(300, 52) + hex_lines(200, 53));
  ASSERT_EQ(abf("build -n 1000 -p 0.01 --catalog-version 7 -i members.txt -o c.abf").status, 0);
  const CliRun from_file = abf("inspect c.abf --json");
  const CliRun inspect = test::run_shell(dir_, "$ABF inspect - --json < c.abf");
  ASSERT_EQ(inspect.status, 0) << inspect.err;
  auto file_json = nlohmann::json::parse(from_file.out);
  auto stdin_json = nlohmann::json::parse(inspect.out);
  EXPECT_EQ(stdin_json["path"], "-");
  file_json.erase("path");
  stdin_json.erase("path");
  EXPECT_EQ(stdin_json, file_json);
  const CliRun text = test::run_shell(dir_, "$ABF inspect - < c.abf");
  EXPECT_NE(text.out.find("snapshot              <stdin>"), std::string::npos) << text.out;
  // A pipeline: build to stdout, query from stdin.
  const CliRun piped =
      test::run_shell(dir_,
                      "$ABF build -n 1000 -p 0.01 -i members.txt -o - 2>/dev/null | "
                      "$ABF query -s - -i candidates.txt --summary");
  const CliRun direct = abf("query -s c.abf -i candidates.txt --summary");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out, direct.out);
  // merge takes one input from stdin.
  const CliRun merged =
      test::run_shell(dir_, "$ABF merge - c.abf -o m.abf --catalog-version 7 < c.abf");
  ASSERT_EQ(merged.status, 0) << merged.err;
  // A corrupt snapshot on stdin is refused like a file, saying where.
  std::string bytes = test::read_file(path("c.abf"));
  bytes[200] ^= 1;
  write("corrupt.abf", bytes);
  const CliRun corrupt = test::run_shell(dir_, "$ABF inspect - < corrupt.abf");
  expect_failure(corrupt, "snapshot_payload_checksum");
  EXPECT_NE(corrupt.err.find("<stdin>"), std::string::npos) << corrupt.err;
  // Standard input can feed only one argument.
  EXPECT_EQ(test::run_shell(dir_, "$ABF query -s - < c.abf").status, 2);
  EXPECT_EQ(test::run_shell(dir_, "$ABF merge - - -o x.abf < c.abf").status, 2);
}

TEST_F(CliTest, UnknownCommandsSuggestTheClosest) {
  const CliRun typo = abf("qurey -s c.abf");
  EXPECT_EQ(typo.status, 2);
  EXPECT_NE(typo.err.find("unknown command 'qurey'; did you mean 'query'?"), std::string::npos)
      << typo.err;
  const CliRun nested = abf("catalog stat --db c.db");
  EXPECT_EQ(nested.status, 2);
  EXPECT_NE(nested.err.find("abf catalog: unknown command 'stat'; did you mean 'stats'?"),
            std::string::npos)
      << nested.err;
  const CliRun prefix = abf("insp c.abf");
  EXPECT_NE(prefix.err.find("did you mean 'inspect'?"), std::string::npos) << prefix.err;
  const CliRun far = abf("frobnicate");
  EXPECT_EQ(far.status, 2);
  EXPECT_NE(far.err.find("unknown command 'frobnicate'; the commands are demo, build, query"),
            std::string::npos)
      << far.err;
  const CliRun none = abf("");
  EXPECT_EQ(none.status, 2);
  EXPECT_NE(none.err.find("a command is required: demo, build"), std::string::npos) << none.err;
  EXPECT_EQ(abf("--help").status, 0);
}

// 0 ok, 1 runtime error (a missing file included), 2 usage: the same rule in
// every command.
TEST_F(CliTest, EveryCommandFollowsOneExitCodeRule) {
  write("members.txt", hex_lines(10, 54));
  ASSERT_EQ(abf("build -n 10 -p 0.01 -i members.txt -o c.abf").status, 0);
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  for (const std::string missing : {
           "build -n 10 -p 0.01 -i nope.txt -o x.abf",
           "build --from-catalog nope.db -n 10 -p 0.01 -o x.abf",
           "query -s nope.abf -i members.txt",
           "query -s c.abf -i nope.txt",
           "inspect nope.abf",
           "merge nope.abf -o x.abf",
           "merge c.abf nope.abf -o x.abf",
           "digest nope.bin",
           "dedup -s nope.abf --db c.db -i members.txt",
           "dedup -s c.abf --db nope.db -i members.txt",
           "catalog add --db nope.db -i members.txt",
           "catalog add --db c.db -i nope.txt",
           "catalog stats --db nope.db",
           "query -s c.abf -i members.txt --key-file nope.key",
       }) {
    const CliRun run = abf(missing);
    EXPECT_EQ(run.status, 1) << missing << ": " << run.err;
    EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << missing << ": " << run.err;
  }
  EXPECT_FALSE(fs::exists(path("x.abf")));
  for (const std::string usage : {
           "build -p 0.01 -o x.abf",
           "query",
           "inspect",
           "merge -o x.abf",
           "catalog add",
           "build -n 10 -p 0.01 -i members.txt -o x.abf --bogus",
           "query -s c.abf --json",
           "catalog stats --db -",
           "dedup -s c.abf --db - -i members.txt",
           "key generate -o -",
           "query -s c.abf --key-file -",
           "demo --output -",
           "build --from-catalog c.db --distinct -n 10 -p 0.01 -o x.abf",
       }) {
    EXPECT_EQ(abf(usage).status, 2) << usage;
  }
}

// A failed write or flush of standard output is exit 1 with an error, in
// every command that prints something (issue 14: they all exited 0).
TEST_F(CliTest, LostStandardOutputIsAFailure) {
  if (!fs::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  write("members.txt", hex_lines(100, 56));
  write("blob", "some artifact");
  ASSERT_EQ(abf("build -n 100 -p 0.01 -i members.txt -o c.abf").status, 0);
  for (const std::string command : {
           "digest blob",
           "digest blob --json",
           "inspect c.abf",
           "inspect c.abf --json",
           "build -n 100 -p 0.01 -i members.txt -o b.abf",
           "build -n 100 -p 0.01 -i members.txt -o b.abf --json",
           "build -n 100 -p 0.01 -i members.txt -o -",
           "merge c.abf -o m.abf",
           "merge c.abf -o -",
           "query -s c.abf -i members.txt",
           "query -s c.abf -i members.txt --summary",
           "query -s c.abf -i members.txt --summary --json",
           "key generate -o new.key",
           "--help",
           "--version",
           "build --help",
       }) {
    const CliRun run = test::run_shell(dir_, "$ABF " + command + " > /dev/full");
    EXPECT_EQ(run.status, 1) << command << ": " << run.err;
    EXPECT_NE(run.err.find("No space left on device"), std::string::npos)
        << command << ": " << run.err;
  }
  // The files were still written: only the report was lost, and the error
  // says what was done.
  EXPECT_TRUE(fs::exists(path("b.abf")));
  EXPECT_TRUE(fs::exists(path("m.abf")));
  EXPECT_TRUE(fs::exists(path("new.key")));
  EXPECT_NE(test::run_shell(dir_, "$ABF key generate -o other.key > /dev/full")
                .err.find("wrote other.key, but printing its fingerprint failed"),
            std::string::npos);
}

// Answers for standard output are staged: a bad line late in the input
// (after 65,536 good ones, which were written to stdout before) leaves
// stdout empty; a good run writes exactly what --output FILE would.
TEST_F(CliTest, FailedQueryWritesNothingToStandardOutput) {
  write("members.txt", hex_lines(1000, 57));
  ASSERT_EQ(abf("build -n 1000 -p 0.01 -i members.txt -o c.abf").status, 0);
  const std::string good = hex_lines(100'000, 58);  // 7.2 MB of answers: staged on disk
  write("good.txt", good);
  write("bad.txt", good + "not a digest\n");
  const CliRun bad = abf("query -s c.abf -i bad.txt");
  expect_failure(bad, "invalid_digest");
  EXPECT_NE(bad.err.find("line 100001"), std::string::npos) << bad.err;
  EXPECT_EQ(bad.out.size(), 0u);
  const CliRun ok = abf("query -s c.abf -i good.txt");
  ASSERT_EQ(ok.status, 0) << ok.err;
  ASSERT_EQ(abf("query -s c.abf -i good.txt -o answers.tsv").status, 0);
  EXPECT_EQ(std::count(ok.out.begin(), ok.out.end(), '\n'), 100'000);
  EXPECT_GT(ok.out.size(), std::size_t{1} << 20);  // more than the staging memory
  EXPECT_TRUE(ok.out == test::read_file(path("answers.tsv"))) << "staged output differs";
  // Staging needs TMPDIR once the output passes 1 MiB: an unusable one is a
  // clear error, and stdout still gets nothing.
  const CliRun no_tmp = test::run_shell(
      dir_, "TMPDIR=" + path("missing").string() + " $ABF query -s c.abf -i good.txt");
  expect_failure(no_tmp, "TMPDIR");
  EXPECT_EQ(no_tmp.out.size(), 0u);
  // Small answers never touch TMPDIR.
  write("few.txt", hex_lines(10, 58));
  EXPECT_EQ(test::run_shell(
                dir_, "TMPDIR=" + path("missing").string() + " $ABF query -s c.abf -i few.txt")
                .status,
            0);
}

TEST_F(CliTest, DigestWithoutFilesReadsStandardInput) {
  write("blob", "piped artifact");
  const std::string hex = sha256(std::string_view("piped artifact")).hex();
  const CliRun piped = test::run_shell(dir_, "$ABF digest < blob");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_EQ(piped.out, hex + "  -\n");
  EXPECT_EQ(test::run_shell(dir_, "cat blob | $ABF digest -").out, hex + "  -\n");
  const CliRun json = abf("digest blob --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out),
            nlohmann::json::parse(R"({"files": [{"file": "blob", "sha256": ")" + hex + R"("}]})"));
  // A file that cannot be read is reported; the others are still hashed.
  const CliRun partial = abf("digest nope blob");
  EXPECT_EQ(partial.status, 1);
  EXPECT_EQ(partial.out, hex + "  blob\n");
  EXPECT_NE(partial.err.find("nope"), std::string::npos) << partial.err;
}

// build says whether its count includes repeats; --distinct drops them, so
// insertedItemCount is the distinct count and the snapshot is the build of
// the distinct digests, byte for byte.
TEST_F(CliTest, BuildReportsRepeatsAndDistinctDropsThem) {
  const auto digests = test::random_digests(932, 59);
  std::string text;
  std::string distinct_text;
  for (const auto& d : digests) distinct_text += d.hex() + "\n";
  for (std::size_t i = 0; i < 1285; ++i) text += digests[(i * 7) % 932].hex() + "\n";
  for (std::size_t i = 0; i < 932; i += 2) text += "sha256:" + digests[i].hex() + "\n";
  write("with-repeats.txt", text);
  write("distinct.txt", distinct_text);
  const std::size_t read = 1285 + 466;

  const CliRun plain = abf("build -n 2000 -p 0.01 -i with-repeats.txt -o plain.abf");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.out.find(with_commas_for_test(read) + " digests, repeats included (not checked"),
            std::string::npos)
      << plain.out;
  const auto plain_json = nlohmann::json::parse(
      abf("build -n 2000 -p 0.01 -i with-repeats.txt -o plain.abf --json").out);
  EXPECT_EQ(plain_json["inserted_item_count"], read);
  EXPECT_EQ(plain_json["repeats_checked"], false);
  EXPECT_TRUE(plain_json["repeats"].is_null());

  const CliRun distinct = abf("build -n 2000 -p 0.01 -i with-repeats.txt -o d.abf --distinct");
  ASSERT_EQ(distinct.status, 0) << distinct.err;
  EXPECT_NE(distinct.out.find("932 distinct digests (" + with_commas_for_test(read - 932) +
                              " repeats among " + with_commas_for_test(read) + " read, dropped)"),
            std::string::npos)
      << distinct.out;
  ASSERT_EQ(abf("build -n 2000 -p 0.01 -i distinct.txt -o once.abf").status, 0);
  EXPECT_TRUE(test::read_file(path("d.abf")) == test::read_file(path("once.abf")))
      << "--distinct differs from a build of the distinct digests";
  EXPECT_EQ(load_snapshot(path("d.abf"))->inserted_item_count(), 932u);
  const auto json = nlohmann::json::parse(
      abf("build -n 2000 -p 0.01 -i with-repeats.txt -o d.abf --distinct --json").out);
  EXPECT_EQ(json["input_digests"], read);
  EXPECT_EQ(json["repeats"], read - 932);
  EXPECT_EQ(json["repeats_checked"], true);
  EXPECT_EQ(json["inserted_item_count"], 932);
  // Capacity counts distinct digests: 932 fit in 1000 with --distinct only.
  EXPECT_EQ(abf("build -n 1000 -p 0.01 -i with-repeats.txt -o small.abf --distinct").status, 0);
  expect_failure(abf("build -n 1000 -p 0.01 -i with-repeats.txt -o small2.abf"),
                 "capacity_exceeded");
  expect_failure(abf("build -n 900 -p 0.01 -i with-repeats.txt -o small3.abf --distinct"),
                 "capacity_exceeded");
  EXPECT_FALSE(fs::exists(path("small3.abf")));
}

// Progress shows on a terminal only: under script(1) (a pseudo-terminal) a
// digest of a slow pipe and a slow catalog add show their lines; with
// stderr a file, as in every other test here, nothing but errors appears.
// The pipe stays open until the line has appeared (or 30 s have passed), so
// a busy machine that wakes the progress thread late still shows it; the
// first line comes after a second of work, never sooner.
TEST_F(CliTest, ProgressShowsOnATerminalOnly) {
  if (std::system("script --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "no script(1)";
  write("members.txt", hex_lines(20, 66));
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  // A pipe that ends with `last` once `line` and a digit are in the
  // terminal's log (script -f writes it as it comes; its header names the
  // command, where the pattern's [0-9] matches nothing).
  const auto slow_until = [](const std::string& line, const std::string& last) {
    return "(n=0; while [ $n -lt 600 ] && ! grep -qs \"" + line +
           "[0-9]\" tty.log; do sleep 0.05; n=$((n+1)); done; " + last + ")";
  };
  const CliRun tty = test::run_shell(
      dir_, "script -qfec '" + slow_until("hashing - (", "echo x") +
                " | '\"$ABF\"' digest' tty.log; "
                "script -qfaec '" + slow_until("adding to c.db (", "cat members.txt") +
                " | '\"$ABF\"' catalog add --db c.db' tty.log");
  ASSERT_EQ(tty.status, 0) << tty.err;
  for (const std::string label : {"hashing - ", "adding to c.db "}) {
    std::smatch seconds;
    const std::regex line(std::regex_replace(label, std::regex("[.()]"), "\\$&") +
                          "\\(([0-9]+\\.[0-9])s\\)");
    ASSERT_TRUE(std::regex_search(tty.out, seconds, line)) << label << "\n" << tty.out;
    EXPECT_GE(std::stod(seconds[1]), 1.0) << tty.out;  // the first line, after a second
  }
  const CliRun file = test::run_shell(dir_, "(sleep 1.2; echo x) | $ABF digest");
  ASSERT_EQ(file.status, 0);
  EXPECT_EQ(file.err, "");
}

// Every command that reports something has --json, with snake_case keys.
TEST_F(CliTest, EveryJsonReportUsesSnakeCaseKeys) {
  write("members.txt", hex_lines(50, 60));
  write("blob", "x");
  const std::vector<std::string> commands = {
      "build -n 100 -p 0.01 -i members.txt -o c.abf --json",
      "build -n 100 -p 0.01 -i members.txt -o d.abf --distinct --json",
      "query -s c.abf -i members.txt --summary --json",
      "merge c.abf -o m.abf --json",
      "digest blob --json",
      "inspect c.abf --json",
      "catalog init --db c.db --json",
      "catalog add --db c.db -i members.txt --json",
      "catalog remove --db c.db -i members.txt --json",
      "catalog stats --db c.db --json",
      "catalog upgrade --db c.db --json",
      "build --from-catalog c.db -n 100 -p 0.01 -o cat.abf --json",
      "dedup -s cat.abf --db c.db -i members.txt -o new.txt --json",
      "key generate -o k.key --json",
      "bench --scenario l2 --backend scalar --threads 1 --repetitions 1 --json",
  };
  for (const std::string& command : commands) {
    const CliRun run = abf(command);
    ASSERT_EQ(run.status, 0) << command << ": " << run.err;
    nlohmann::json json;
    ASSERT_NO_THROW(json = nlohmann::json::parse(run.out)) << command << ": " << run.out;
    EXPECT_TRUE(json.is_object()) << command;
    expect_snake_case_keys(json, command);
  }
}

// Issue 24: the demo's dedup figures are three runs of abf dedup's own job
// (SQLite alone, filter + SQLite, filter + exact index) on one candidate
// file, each with its timings, and all three give the same answer: the one
// the candidates were made to have.
TEST_F(CliTest, DemoJsonTimesThreeWaysOfDedupThatAgree) {
  // 2,999 candidates: i = 0, 100, ..., 2,900 are catalog members (30, the
  // count rounded up), the other 2,969 new.
  constexpr std::uint64_t kItems = 2999;
  constexpr std::uint64_t kPresent = 30;
  const CliRun run = abf("demo --items 2999 --fpp 0.01 --threads 1 --json");
  ASSERT_EQ(run.status, 0) << run.err;
  nlohmann::json json;
  ASSERT_NO_THROW(json = nlohmann::json::parse(run.out)) << run.out;
  expect_snake_case_keys(json, "demo --json");
  EXPECT_EQ(json["false_negatives"], 0);
  const nlohmann::json& dedup = json["dedup"];
  ASSERT_TRUE(dedup.is_object()) << run.out;
  EXPECT_EQ(dedup["threads"], 1);
  EXPECT_EQ(dedup["candidates"], kItems);
  EXPECT_EQ(dedup["catalog_digests"], kItems);
  EXPECT_EQ(dedup["index_digests"], kItems);
  EXPECT_EQ(dedup["expected_new"], kItems - kPresent);
  EXPECT_EQ(dedup["same_output"], true);
  const nlohmann::json& ways = dedup["ways"];
  ASSERT_EQ(ways.size(), 3u) << run.out;
  const std::vector<std::string> names = {"exact_only", "filter_sqlite", "filter_index"};
  const double baseline = ways[0]["wall_seconds"].get<double>();
  const double cpu_baseline = ways[0]["cpu_seconds"].get<double>();
  for (std::size_t w = 0; w < ways.size(); ++w) {
    const nlohmann::json& way = ways[w];
    const nlohmann::json& stats = way["stats"];
    SCOPED_TRACE(names[w]);
    EXPECT_EQ(way["way"], names[w]);
    // The same answer each way: the count built into the candidates.
    EXPECT_EQ(stats["new"], kItems - kPresent);
    EXPECT_EQ(stats["present"], kPresent);
    EXPECT_EQ(stats["repeats"], 0);
    EXPECT_EQ(stats["total"], kItems);
    const double wall = way["wall_seconds"].get<double>();
    ASSERT_GT(wall, 0.0);
    EXPECT_GT(way["cpu_seconds"].get<double>(), 0.0);
    EXPECT_NEAR(way["ns_per_digest"].get<double>(), wall / kItems * 1e9, 1e-6 * wall * 1e9);
    EXPECT_NEAR(way["speedup_over_exact_only"].get<double>(), baseline / wall,
                1e-9 * baseline / wall);
    EXPECT_NEAR(way["cpu_speedup_over_exact_only"].get<double>(),
                cpu_baseline / way["cpu_seconds"].get<double>(),
                1e-9 * cpu_baseline / way["cpu_seconds"].get<double>());
    // The whole job: at least the part bulk_dedup times itself.
    EXPECT_GE(wall, stats["seconds"].get<double>());
  }
  // SQLite alone asks about every candidate; the filter ways only about
  // its maybes, the same ones either way; the index answers all of them.
  EXPECT_EQ(ways[0]["filter"], false);
  EXPECT_EQ(ways[0]["index"], false);
  EXPECT_EQ(ways[0]["stats"]["exact_lookups"], kItems);
  EXPECT_EQ(ways[0]["stats"]["negative"], 0);
  EXPECT_FALSE(ways[0]["stats"].contains("index_lookups"));
  const nlohmann::json& filter = ways[1]["stats"];
  EXPECT_EQ(ways[1]["filter"], true);
  EXPECT_EQ(ways[1]["index"], false);
  EXPECT_EQ(filter["negative"].get<std::uint64_t>() + filter["maybe"].get<std::uint64_t>(), kItems);
  EXPECT_EQ(filter["exact_lookups"], filter["maybe"]);
  EXPECT_GE(filter["maybe"].get<std::uint64_t>(), kPresent);
  EXPECT_LT(filter["maybe"].get<std::uint64_t>(), kItems / 10);  // p = 0.01: about 60
  const nlohmann::json& indexed = ways[2]["stats"];
  EXPECT_EQ(ways[2]["filter"], true);
  EXPECT_EQ(ways[2]["index"], true);
  EXPECT_EQ(indexed["maybe"], filter["maybe"]);
  EXPECT_EQ(indexed["index_lookups"], filter["maybe"]);
  EXPECT_EQ(indexed["store_lookups"], 0);
  const CliRun skipped = abf("demo --items 2000 --fpp 0.01 --skip-dedup --json");
  ASSERT_EQ(skipped.status, 0) << skipped.err;
  EXPECT_TRUE(nlohmann::json::parse(skipped.out)["dedup"].is_null()) << skipped.out;
}

TEST_F(CliTest, DemoPrintsTheThreeWaysOfDedupSideBySide) {
  const CliRun run = abf("demo --items 2999 --fpp 0.01 --threads 1");
  ASSERT_EQ(run.status, 0) << run.err;
  for (const char* needle :
       {"wall s  speedup     CPU s  speedup   ns/digest   exact lookups", "  SQLite only  ",
        "  filter + SQLite  ", "  filter + index  ", "1 thread", "2,999 SQLite\n",
        " index, 0 SQLite\n",
        "same output   yes: 2,969, 2,969 and 2,969 new digests (2,969 "
        "expected), the three files byte for byte equal"}) {
    EXPECT_NE(run.out.find(needle), std::string::npos) << needle << "\n" << run.out;
  }
  const CliRun skipped = abf("demo --items 2000 --fpp 0.01 --skip-dedup");
  ASSERT_EQ(skipped.status, 0) << skipped.err;
  EXPECT_EQ(skipped.out.find("Part 2"), std::string::npos) << skipped.out;
}

}  // namespace
}  // namespace abf
