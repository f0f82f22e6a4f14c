// Dedup as a backup engineer does it, end to end through the abf binary
// (ABF_CLI), with no catalog: `abf index -i LIST` (hex, binary, standard
// input), `abf dedup --index FILE` without --db, alone and behind a
// snapshot, its refusals; `dedup --lines` keeping the input lines (file
// names); `abf digest -r` walking folders in sorted order, links skipped or
// followed (-L), names escaped as sha256sum escapes them. Every output is
// compared with one computed here from the same digests.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
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

class CliPlainListTest : public ::testing::Test {
 protected:
  fs::path path(const std::string& name) const { return dir_ / name; }
  CliRun abf(const std::string& args) { return test::run_cli(dir_.path(), args); }
  CliRun sh(const std::string& script) { return test::run_shell(dir_.path(), script); }
  void ok(const std::string& args) {
    const CliRun run = abf(args);
    ASSERT_EQ(run.status, 0) << args << "\n" << run.err;
  }
  void write_hex(const std::string& name, std::span<const Digest> digests) {
    std::ofstream out(path(name));
    for (const Digest& digest : digests) out << digest.hex() << '\n';
  }
  void write_bin(const std::string& name, std::span<const Digest> digests) {
    std::ofstream(path(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(digests.data()),
               static_cast<std::streamsize>(digests.size() * Digest::kSize));
  }

  // known: 5000 digests and 500 of them again (repeats), shuffled; cand:
  // 3000 of the known ones, 4000 new and 400 of those again, shuffled.
  void make_lists() {
    known_ = test::random_digests(5000, 201);
    std::vector<Digest> list = known_;
    list.insert(list.end(), known_.begin(), known_.begin() + 500);
    std::shuffle(list.begin(), list.end(), std::mt19937_64(202));
    write_hex("known.txt", list);
    write_bin("known.bin", list);
    const auto fresh = test::random_digests(4000, 203);
    candidates_.assign(known_.begin() + 1000, known_.begin() + 4000);
    candidates_.insert(candidates_.end(), fresh.begin(), fresh.end());
    candidates_.insert(candidates_.end(), fresh.begin() + 100, fresh.begin() + 500);
    std::shuffle(candidates_.begin(), candidates_.end(), std::mt19937_64(204));
    write_hex("cand.txt", candidates_);
    write_bin("cand.bin", candidates_);
  }

  // The candidates not in `known_`, each once, in input order, as hex lines.
  std::string expected_new() const {
    const std::set<Digest> known(known_.begin(), known_.end());
    std::set<Digest> seen;
    std::string out;
    for (const Digest& d : candidates_) {
      if (!known.contains(d) && seen.insert(d).second) out += d.hex() + "\n";
    }
    return out;
  }

  test::TempDir dir_{"abf-cli-plain-list"};
  std::vector<Digest> known_;
  std::vector<Digest> candidates_;
};

TEST_F(CliPlainListTest, IndexOfAListIsTheSameFromHexBinaryAndStandardInput) {
  make_lists();
  const CliRun run = abf("index -i known.txt -o hex.abfx --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\"read\": 5500"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"repeats\": 500"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"digest_count\": 5000"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"catalog_id\": null"), std::string::npos) << run.out;
  ok("index -f bin -i known.bin -o bin.abfx");
  ASSERT_EQ(sh("$ABF index -i - -o stdin.abfx < known.txt").status, 0);
  const std::string bytes = test::read_file(path("hex.abfx"));
  EXPECT_EQ(test::read_file(path("bin.abfx")), bytes);
  EXPECT_EQ(test::read_file(path("stdin.abfx")), bytes);
  // The index holds the distinct digests, ascending, with their fingerprint
  // and no catalog.
  auto index = Index::load(path("hex.abfx"));
  ASSERT_TRUE(index) << index.error().message;
  std::vector<Digest> sorted = known_;
  std::ranges::sort(sorted);
  EXPECT_TRUE(std::ranges::equal(index->digests(), sorted));
  EXPECT_TRUE(index->catalog_id().is_zero());
  EXPECT_EQ(index->catalog_version(), 0u);
  ASSERT_TRUE(index->content_fingerprint());
  EXPECT_EQ(*index->content_fingerprint(), ContentFingerprint::of(sorted));
  // A set of 3 shards of the list answers the same.
  ok("index -i known.txt --shards 3 -o set.abxs");
  ok("dedup --index set.abxs -i cand.txt -o from-set.txt");
  EXPECT_EQ(test::read_file(path("from-set.txt")), expected_new());
}

TEST_F(CliPlainListTest, DedupAgainstAnIndexAloneEqualsTheSetDifference) {
  make_lists();
  ok("index -i known.txt -o known.abfx");
  const std::string expected = expected_new();
  ASSERT_EQ(std::count(expected.begin(), expected.end(), '\n'), 4000);
  // No snapshot: the index answers every candidate.
  CliRun run = abf("dedup --index known.abfx -i cand.txt --json -o plain.txt");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(test::read_file(path("plain.txt")), expected);
  EXPECT_NE(run.out.find("\"filter\": false"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"snapshot_version\": null"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"exact_lookups\": 7400"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"repeats\": 400"), std::string::npos) << run.out;
  // Standard output, binary input, --exact-only: the same.
  run = abf("dedup --index known.abfx -f bin -i cand.bin");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected);
  EXPECT_NE(run.err.find("no catalog"), std::string::npos) << run.err;
  ok("dedup --index known.abfx -i cand.txt --exact-only -o exact.txt");
  EXPECT_EQ(test::read_file(path("exact.txt")), expected);
  // A snapshot of the same list (--distinct: the index holds each digest
  // once) in front: most candidates never reach the index.
  ok("build -i known.txt --distinct -n 5000 -p 0.01 -o known.abf");
  run = abf("dedup -s known.abf --index known.abfx -i cand.txt -o filtered.txt --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(test::read_file(path("filtered.txt")), expected);
  EXPECT_NE(run.out.find("\"filter\": true"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"snapshot_version\": 0"), std::string::npos) << run.out;
  const auto stats = nlohmann::json::parse(run.out);
  EXPECT_LT(stats["exact_lookups"].get<int>(), 3000 + 400);
  EXPECT_EQ(stats["present"].get<int>(), 3000);
  EXPECT_EQ(stats["index_lookups"], stats["exact_lookups"]);
  // The snapshot from standard input too.
  run = sh("$ABF dedup -s - --index known.abfx -i cand.txt < known.abf");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected);
}

TEST_F(CliPlainListTest, DedupRefusesASnapshotThatIsNotOfTheIndex) {
  make_lists();
  ok("index -i known.txt -o known.abfx");
  // Built without --distinct: 5500 insertions, not the index's 5000 digests.
  ok("build -i known.txt -n 6000 -p 0.01 -o repeats.abf");
  CliRun run = abf("dedup -s repeats.abf --index known.abfx -i cand.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("catalog_mismatch"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("--distinct"), std::string::npos) << run.err;
  // Of other digests.
  write_hex("other.txt", test::random_digests(5000, 205));
  ok("build -i other.txt -n 5000 -p 0.01 -o other.abf");
  run = abf("dedup -s other.abf --index known.abfx -i cand.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("catalog_mismatch"), std::string::npos) << run.err;
  // Of another version (or catalog id) than the index.
  ok("build -i known.txt --distinct -n 5000 -p 0.01 --catalog-version 3 -o v3.abf");
  run = abf("dedup -s v3.abf --index known.abfx -i cand.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("version 3"), std::string::npos) << run.err;
  // The right one passes, and is exact.
  ok("build -i known.txt --distinct -n 5000 -p 0.01 -o same.abf");
  ok("dedup -s same.abf --index known.abfx -i cand.txt -o same.txt");
  EXPECT_EQ(test::read_file(path("same.txt")), expected_new());
}

TEST_F(CliPlainListTest, IndexOfACatalogAnswersAloneAndSnapshotsOfItFit) {
  make_lists();
  ok("catalog init --db c.db");
  ok("catalog add --db c.db -i known.txt");
  ok("index --db c.db -o c.abfx");
  ok("build --from-catalog c.db -n 5000 -p 0.01 -o c.abf");
  for (const std::string args :
       {"--index c.abfx", "-s c.abf --index c.abfx", "-s c.abf --db c.db",
        "--db c.db --exact-only", "--db c.db", "--db c.db --index c.abfx"}) {
    SCOPED_TRACE(args);
    const CliRun run = abf("dedup " + args + " -i cand.txt");
    ASSERT_EQ(run.status, 0) << run.err;
    EXPECT_EQ(run.out, expected_new());
  }
  // A snapshot of the list (no catalog id) in front of the catalog's index:
  // another catalog.
  ok("build -i known.txt --distinct -n 5000 -p 0.01 -o list.abf");
  const CliRun run = abf("dedup -s list.abf --index c.abfx -i cand.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("catalog_mismatch"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("of no catalog"), std::string::npos) << run.err;
}

TEST_F(CliPlainListTest, UsageErrors) {
  make_lists();
  ok("index -i known.txt -o known.abfx");
  for (const std::string args : {
           "dedup -i cand.txt",                                      // no exact store
           "dedup -s x.abf -i cand.txt",                             // no exact store
           "dedup --index known.abfx -f bin -i cand.bin --lines",    // binary has no lines
           "index -i known.txt --db c.db -o x.abfx",                 // both sources
           "index -o x.abfx",                                        // neither
           "index -i known.txt --version 2 -o x.abfx",               // a list has no version
           "index -i known.txt -o known.txt",                        // overwrites its input
           "dedup --index known.abfx -i cand.txt -o known.abfx",     // overwrites the index
       }) {
    SCOPED_TRACE(args);
    const CliRun run = abf(args);
    EXPECT_EQ(run.status, 2) << run.err;
    EXPECT_EQ(run.out, "");
  }
  EXPECT_EQ(test::read_file(path("known.txt")).size(), 5500u * 65);
}

TEST_F(CliPlainListTest, DedupLinesPrintsTheInputLinesOfNewDigests) {
  make_lists();
  ok("index -i known.txt -o known.abfx");
  // sha256sum-style lines, names escaped where they must be, blank lines
  // and CRLF among them, and a last line without its newline.
  const std::set<Digest> known(known_.begin(), known_.end());
  std::string input;
  std::string expected;
  std::set<Digest> seen;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    const Digest& d = candidates_[i];
    std::string name = "dir/file " + std::to_string(i);
    if (i % 7 == 0) name += "\\back";
    if (i % 11 == 0) name += "\nnew";
    std::string line = sha256sum_line(d, name);
    if (i % 13 == 0) line.insert(line.size() - 1, "\r");
    if (i % 17 == 0) input += "\n";
    if (i + 1 == candidates_.size()) line.pop_back();
    input += line;
    if (!known.contains(d) && seen.insert(d).second) {
      expected += line.ends_with('\n') ? line : line + "\n";
    }
  }
  std::ofstream(path("sums.txt"), std::ios::binary) << input;
  CliRun run = abf("dedup --index known.abfx -i sums.txt --lines");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected);
  // Through a snapshot, from standard input: the same.
  ok("build -i known.txt --distinct -n 5000 -p 0.01 -o known.abf");
  run = sh("$ABF dedup -s known.abf --index known.abfx --lines < sums.txt");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected);
  // NUL-terminated records (sha256sum -z) come out as records.
  std::string records;
  std::string expected_records;
  seen.clear();
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    const Digest& d = candidates_[i];
    const std::string record = d.hex() + "  name\nwith newline " + std::to_string(i) + '\0';
    records += record;
    if (!known.contains(d) && seen.insert(d).second) expected_records += record;
  }
  std::ofstream(path("sums.z"), std::ios::binary) << records;
  run = abf("dedup --index known.abfx -i sums.z --lines");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected_records);
  // A malformed line is named, and nothing is written.
  std::ofstream(path("bad.txt"), std::ios::binary) << input.substr(0, 200) << "\nnot a digest\n";
  run = abf("dedup --index known.abfx -i bad.txt --lines");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("bad.txt: line"), std::string::npos) << run.err;
}

class CliDigestTreeTest : public CliPlainListTest {
 protected:
  void put(const std::string& name, const std::string& contents) {
    fs::create_directories((dir_.path() / "tree" / name).parent_path());
    std::ofstream(dir_.path() / "tree" / name, std::ios::binary) << contents;
  }
  // The line sha256sum prints for tree/<name>, whose contents put() wrote.
  std::string line(const std::string& shown, const std::string& name) {
    return sha256sum_line(sha256(test::read_file(dir_.path() / "tree" / name)), shown);
  }
  void make_tree() {
    put("b.txt", "bee");
    put("a.txt", "ay");
    put("back\\slash", "backslash");
    put("new\nline", "newline");
    put("sub/z.bin", "zed");
    put("sub/deeper/x", "ex");
    put("sub dir/y", "why");
    put("sub/copy-of-b", "bee");
    fs::create_directories(dir_.path() / "tree" / "empty-dir");
    fs::create_symlink("a.txt", dir_.path() / "tree" / "link-to-a");
    fs::create_directory_symlink("sub", dir_.path() / "tree" / "link-to-sub");
    ASSERT_EQ(::mkfifo((dir_.path() / "tree" / "fifo").c_str(), 0600), 0);
  }
};

TEST_F(CliDigestTreeTest, RecursiveWalksInSortedOrderSkippingLinks) {
  make_tree();
  const std::string expected =
      line("tree/a.txt", "a.txt") + line("tree/b.txt", "b.txt") +
      line("tree/back\\slash", "back\\slash") + line("tree/new\nline", "new\nline") +
      line("tree/sub/copy-of-b", "sub/copy-of-b") + line("tree/sub/deeper/x", "sub/deeper/x") +
      line("tree/sub/z.bin", "sub/z.bin") + line("tree/sub dir/y", "sub dir/y");
  CliRun run = abf("digest -r tree");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, expected);
  EXPECT_EQ(run.err, "");
  // A trailing slash is not doubled; the long name works the same.
  run = abf("digest --recursive tree/");
  EXPECT_EQ(run.out, expected);
  // -L follows the links, in their sorted places.
  const std::string followed =
      line("tree/a.txt", "a.txt") + line("tree/b.txt", "b.txt") +
      line("tree/back\\slash", "back\\slash") + line("tree/link-to-a", "a.txt") +
      line("tree/link-to-sub/copy-of-b", "sub/copy-of-b") +
      line("tree/link-to-sub/deeper/x", "sub/deeper/x") +
      line("tree/link-to-sub/z.bin", "sub/z.bin") + line("tree/new\nline", "new\nline") +
      line("tree/sub/copy-of-b", "sub/copy-of-b") + line("tree/sub/deeper/x", "sub/deeper/x") +
      line("tree/sub/z.bin", "sub/z.bin") + line("tree/sub dir/y", "sub dir/y");
  run = abf("digest -r -L tree");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_EQ(run.out, followed);
  // -z: names as they are, NUL-terminated.
  run = abf("digest -r -z tree/sub");
  EXPECT_EQ(run.out, sha256(std::string("bee")).hex() + "  tree/sub/copy-of-b" + '\0' +
                         sha256(std::string("ex")).hex() + "  tree/sub/deeper/x" + '\0' +
                         sha256(std::string("zed")).hex() + "  tree/sub/z.bin" + '\0');
  // Without -r a folder is an error; the files beside it are still hashed.
  run = abf("digest tree/a.txt tree");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, line("tree/a.txt", "a.txt"));
  EXPECT_NE(run.err.find("tree: is a directory (abf digest -r"), std::string::npos) << run.err;
  // -L needs -r; -r and -c do not go together.
  EXPECT_EQ(abf("digest -L tree").status, 2);
  EXPECT_EQ(abf("digest -r -c sums").status, 2);
}

TEST_F(CliDigestTreeTest, FollowingALinkBackIsALoopReportedNotWalked) {
  put("a.txt", "ay");
  put("sub/b.txt", "bee");
  fs::create_directory_symlink("..", dir_.path() / "tree" / "sub" / "up");
  const CliRun run = abf("digest -r -L tree");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, line("tree/a.txt", "a.txt") + line("tree/sub/b.txt", "sub/b.txt"));
  EXPECT_NE(run.err.find("tree/sub/up: a symbolic link back"), std::string::npos) << run.err;
  // Not followed, the link is just skipped.
  EXPECT_EQ(abf("digest -r tree").status, 0);
}

TEST_F(CliDigestTreeTest, DigestOfATreeThroughDedupListsTheNewFiles) {
  make_tree();
  // Known: what a.txt and sub/z.bin hold, indexed from standard input.
  ASSERT_EQ(sh("$ABF digest tree/a.txt tree/sub/z.bin | $ABF index -i - -o known.abfx").status, 0);
  const CliRun run = sh("$ABF digest -r tree | $ABF dedup --index known.abfx --lines");
  ASSERT_EQ(run.status, 0) << run.err;
  // copy-of-b holds b.txt's bytes: its digest is not new the second time.
  EXPECT_EQ(run.out, line("tree/b.txt", "b.txt") + line("tree/back\\slash", "back\\slash") +
                         line("tree/new\nline", "new\nline") +
                         line("tree/sub/deeper/x", "sub/deeper/x") +
                         line("tree/sub dir/y", "sub dir/y"));
}

}  // namespace
}  // namespace abf
