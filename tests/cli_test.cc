// End-to-end tests of the `abf` binary on real files, bad input included.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

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
  EXPECT_TRUE(test::read_file(path("keyed.abf")) ==
              test::read_file(test::data_path("vectors/v2/member-1000-keyed.abf")))
      << "keyed snapshot differs from the golden file";
  EXPECT_NE(keyed.out.find("hash protocol 2 (key " + test::golden_key().fingerprint_hex + ")"),
            std::string::npos)
      << keyed.out;
  const CliRun plain = abf(golden_build_arguments() + " -o plain.abf");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_TRUE(test::read_file(path("plain.abf")) ==
              test::read_file(test::data_path("vectors/v2/member-1000-v2.abf")))
      << "unkeyed snapshot differs from the golden file";
}

TEST_F(CliTest, EveryKeyFileFormGivesTheSameKey) {
  write("members.txt", golden_member_lines());
  const test::VectorKey key = test::golden_key();
  std::string upper = key.hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  const std::string raw(reinterpret_cast<const char*>(key.key.bytes().data()), Key::kSize);
  const std::string golden = test::read_file(test::data_path("vectors/v2/member-1000-keyed.abf"));
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
  for (const auto& [mode, who] :
       {std::pair{fs::perms(0644), "others"}, std::pair{fs::perms(0640), "group"}}) {
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
  // One line per engine of the library's table, saying whether it runs here.
  for (const BackendInfo& engine : list_backends()) {
    const std::string line = "\n  " + std::string(engine.backend.name()) + ": " +
                             (engine.available ? "available (" : "unavailable (") + engine.detail +
                             ")";
    EXPECT_NE(run.out.find(line), std::string::npos) << line << "\n" << run.out;
  }
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
