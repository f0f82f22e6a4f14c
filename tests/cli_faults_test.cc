// The abf binary against I/O faults: a full disk under every writing command
// (a 1 MiB tmpfs), and paths that are not the regular files they should be
// (a FIFO, a directory, a device) wherever a command reads one.
//
// Each command's run on the full disk must fail with one io_error line
// (exit 1), leave the old output byte-identical and leave no temporary file,
// with anonymous temporaries (O_TMPFILE) and with named ones
// (ABF_NO_O_TMPFILE=1). SIGKILL at random moments is tests/kill_harness.py.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sqlite3.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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

// The names in a folder.
std::set<std::string> names_in(const fs::path& dir) {
  std::set<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.insert(entry.path().filename());
  return names;
}

void write_binary(const fs::path& path, const std::vector<Digest>& digests) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const auto& d : digests) {
    out.write(reinterpret_cast<const char*>(d.bytes.data()), Digest::kSize);
  }
}

void write_hex(const fs::path& path, const std::vector<Digest>& digests) {
  std::ofstream out(path, std::ios::trunc);
  for (const auto& d : digests) out << d.hex() << '\n';
}

// One failure line on stderr naming `code` and containing `text`.
void expect_failure(const CliRun& run, const std::string& code, const std::string& text) {
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_NE(run.err.find(": " + code + ": "), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(text), std::string::npos) << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
}

// The environment prefixes every full-disk case runs under: anonymous
// temporaries, then named ones.
const std::vector<std::string> kTemporaryModes = {"", "ABF_NO_O_TMPFILE=1 "};

// ---------------------------------------------------------------- a full disk

// A 1 MiB tmpfs at <test folder>/small, in a mount namespace of this test
// process's own (unshare): the abf processes it starts see the mount, the
// rest of the machine never does, and the mount goes with the process even
// if it dies before TearDown. Needs root (CAP_SYS_ADMIN); skipped, saying
// why, where mounting is not allowed.
class FullDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "mounting a small tmpfs needs root (CAP_SYS_ADMIN)";
    if (::unshare(CLONE_NEWNS) != 0) {
      GTEST_SKIP() << "a private mount namespace (unshare CLONE_NEWNS) is not allowed here: "
                   << std::strerror(errno);
    }
    // Nothing mounted here propagates back to the machine's namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      GTEST_SKIP() << "cannot make the mount namespace private: " << std::strerror(errno);
    }
    fs::create_directories(small());
    if (::mount("tmpfs", small().c_str(), "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") != 0) {
      GTEST_SKIP() << "mounting a tmpfs is not allowed here: " << std::strerror(errno);
    }
    mounted_ = true;
  }
  void TearDown() override {
    if (mounted_) {
      EXPECT_EQ(::umount2(small().c_str(), MNT_DETACH), 0) << std::strerror(errno);
    }
  }

  fs::path small() const { return dir_ / "small"; }
  fs::path path(const std::string& name) const { return dir_ / name; }
  // The commands run in the test folder, not on the small disk: their
  // captured stdout and stderr must not need its space.
  CliRun shell(const std::string& script) const { return test::run_shell(dir_.path(), script); }

  // Runs `script` (which fails for lack of space) and checks it left the
  // small disk exactly as it was: the same names, the same bytes. SQLite's
  // own files beside a database (-wal, -shm, which a read-only connection
  // leaves and a writer removes as it closes) are left out.
  void expect_fails_and_leaves_the_disk(const std::string& script, const std::string& code,
                                        const std::string& text) {
    SCOPED_TRACE(script);
    const auto files = [&] {
      std::vector<std::pair<std::string, std::string>> found;
      for (const auto& name : names_in(small())) {
        if (name.ends_with(".db-wal") || name.ends_with(".db-shm")) continue;
        found.emplace_back(name, test::read_file(small() / name));
      }
      return found;
    };
    const auto before = files();
    expect_failure(shell(script), code, text);
    const auto after = files();
    ASSERT_EQ(after.size(), before.size()) << "names on the disk changed";
    for (std::size_t i = 0; i < before.size(); ++i) {
      EXPECT_EQ(after[i].first, before[i].first);
      EXPECT_TRUE(after[i].second == before[i].second) << before[i].first << " changed";
    }
  }

  test::TempDir dir_{"abf-cli-faults"};
  bool mounted_ = false;
};

const std::string kNoSpace = std::strerror(ENOSPC);

TEST_F(FullDisk, BuildFailsAndLeavesTheOldSnapshot) {
  write_binary(path("few.bin"), test::random_digests(100, 1));
  ASSERT_EQ(shell("$ABF build -n 1000 -p 0.01 -f bin -i few.bin -o small/c.abf").status, 0);
  for (const auto& mode : kTemporaryModes) {
    // n = 10^6 at p = 0.01: a 1.2 MB snapshot, more than the disk holds.
    expect_fails_and_leaves_the_disk(
        mode + "$ABF build -n 1000000 -p 0.01 -f bin -i few.bin -o small/c.abf", "io_error",
        "small/c.abf: write error: " + kNoSpace);
  }
  EXPECT_EQ(names_in(small()), std::set<std::string>{"c.abf"});
}

TEST_F(FullDisk, MergeFailsAndLeavesTheOldSnapshot) {
  write_binary(path("a.bin"), test::random_digests(1000, 2));
  write_binary(path("b.bin"), test::random_digests(1000, 3));
  ASSERT_EQ(shell("$ABF build -n 1000000 -p 0.01 -f bin -i a.bin -o a.abf && "
                  "$ABF build -n 1000000 -p 0.01 -f bin -i b.bin -o b.abf && "
                  "$ABF build -n 1000 -p 0.01 -f bin -i a.bin -o small/c.abf")
                .status,
            0);
  for (const auto& mode : kTemporaryModes) {
    expect_fails_and_leaves_the_disk(mode + "$ABF merge a.abf b.abf -o small/c.abf", "io_error",
                                     "small/c.abf: write error: " + kNoSpace);
  }
  EXPECT_EQ(names_in(small()), std::set<std::string>{"c.abf"});
}

// A set whose first shard fits and whose second does not: the written shard
// is removed again, the old set stays whole.
TEST_F(FullDisk, SetBuildFailsAndLeavesTheOldSet) {
  write_binary(path("few.bin"), test::random_digests(100, 4));
  ASSERT_EQ(shell("$ABF build -n 1000 -p 0.01 --shards 2 -f bin -i few.bin -o small/c.abfs").status,
            0);
  ASSERT_EQ(names_in(small()).size(), 3u);
  for (const auto& mode : kTemporaryModes) {
    // Two shards of about 600 kB each.
    expect_fails_and_leaves_the_disk(
        mode + "$ABF build -n 1000000 -p 0.01 --shards 2 -f bin -i few.bin -o small/c.abfs",
        "io_error", kNoSpace);
  }
  EXPECT_EQ(shell("$ABF inspect small/c.abfs").status, 0);
}

TEST_F(FullDisk, QueryOutputFailsAndLeavesTheOldAnswers) {
  // 40,000 answers of 72 bytes: 2.9 MB.
  write_hex(path("candidates.txt"), test::random_digests(40'000, 5));
  write_binary(path("few.bin"), test::random_digests(100, 6));
  ASSERT_EQ(shell("$ABF build -n 1000 -p 0.01 -f bin -i few.bin -o c.abf && "
                  "printf 'old answers\\n' > small/answers.tsv")
                .status,
            0);
  for (const auto& mode : kTemporaryModes) {
    expect_fails_and_leaves_the_disk(
        mode + "$ABF query -s c.abf -i candidates.txt --output small/answers.tsv", "io_error",
        "small/answers.tsv: write error: " + kNoSpace);
  }
  EXPECT_EQ(test::read_file(small() / "answers.tsv"), "old answers\n");
  // Answers for standard output staged in a full TMPDIR: the same error, and
  // nothing at all on standard output.
  const CliRun staged = shell("TMPDIR=small $ABF query -s c.abf -i candidates.txt > out.tsv");
  expect_failure(staged, "io_error", "(TMPDIR): write error: " + kNoSpace);
  EXPECT_EQ(fs::file_size(path("out.tsv")), 0u);
  EXPECT_EQ(names_in(small()), std::set<std::string>{"answers.tsv"});
}

// The integrity check SQLite runs over every page, and the latest version.
void expect_whole_catalog(const fs::path& db_path, std::uint64_t latest) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::vector<std::string> rows;
  sqlite3_exec(
      db, "PRAGMA integrity_check",
      [](void* out, int, char** values, char**) {
        static_cast<std::vector<std::string>*>(out)->push_back(values[0] ? values[0] : "");
        return 0;
      },
      &rows, nullptr);
  std::uint64_t max_version = 0;
  sqlite3_exec(
      db, "SELECT MAX(version) FROM versions",
      [](void* out, int, char** values, char**) {
        *static_cast<std::uint64_t*>(out) = std::stoull(values[0]);
        return 0;
      },
      &max_version, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(rows, std::vector<std::string>{"ok"});
  EXPECT_EQ(max_version, latest);
}

TEST_F(FullDisk, CatalogAddFailsAndLeavesTheCatalog) {
  write_binary(path("few.bin"), test::random_digests(100, 7));
  // 60,000 digests: rows and index of about 4 MB.
  write_binary(path("many.bin"), test::random_digests(60'000, 8));
  ASSERT_EQ(shell("$ABF catalog init --db small/c.db && "
                  "$ABF catalog add --db small/c.db -f bin -i few.bin")
                .status,
            0);
  for (const auto& mode : kTemporaryModes) {
    // SQLite's own files beside the database (-wal, -shm) may stay: each
    // run's are compared, as all the disk's files are.
    expect_fails_and_leaves_the_disk(mode + "$ABF catalog add --db small/c.db -f bin -i many.bin",
                                     "io_error", "database or disk is full");
    expect_whole_catalog(small() / "c.db", 1);
  }
  const CliRun stats = shell("$ABF catalog stats --db small/c.db --json");
  ASSERT_EQ(stats.status, 0) << stats.err;
  const auto json = nlohmann::json::parse(stats.out);
  EXPECT_EQ(json["latest_version"].get<std::uint64_t>(), 1u);
  EXPECT_EQ(json["live_artifacts"].get<std::uint64_t>(), 100u);
  // The disk is still usable: a change that fits goes in.
  write_binary(path("more.bin"), test::random_digests(100, 9));
  EXPECT_EQ(shell("$ABF catalog add --db small/c.db -f bin -i more.bin").out, "2\n");
  for (const auto& name : names_in(small())) {
    EXPECT_TRUE(name == "c.db" || name == "c.db-wal" || name == "c.db-shm") << name;
  }
}

TEST_F(FullDisk, DedupOutputFailsAndLeavesTheOldFile) {
  write_binary(path("few.bin"), test::random_digests(100, 10));
  write_hex(path("candidates.txt"), test::random_digests(40'000, 11));  // 2.6 MB of new lines
  ASSERT_EQ(shell("$ABF catalog init --db c.db && $ABF catalog add --db c.db -f bin -i few.bin && "
                  "$ABF build --from-catalog c.db -n 1000 -p 0.01 -o c.abf && "
                  "printf 'old\\n' > small/new.txt")
                .status,
            0);
  for (const auto& mode : kTemporaryModes) {
    expect_fails_and_leaves_the_disk(
        mode + "$ABF dedup -s c.abf --db c.db -i candidates.txt -o small/new.txt", "io_error",
        "small/new.txt: write error: " + kNoSpace);
  }
  EXPECT_EQ(names_in(small()), std::set<std::string>{"new.txt"});
}

// ------------------------------------------- paths that are not regular files

class NotAFile : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
    fs::create_directory(path("folder"));
    write_binary(path("few.bin"), test::random_digests(100, 12));
    ASSERT_EQ(shell("$ABF catalog init --db c.db >/dev/null 2>&1 && "
                    "$ABF catalog add --db c.db -f bin -i few.bin >/dev/null 2>&1 && "
                    "$ABF build --from-catalog c.db -n 1000 -p 0.01 -o c.abf >/dev/null 2>&1")
                  .status,
              0);
  }
  fs::path path(const std::string& name) const { return dir_ / name; }
  // Every command runs under timeout(1): one that waits on a FIFO ends with
  // 124 instead of hanging the test.
  CliRun shell(const std::string& script) const { return test::run_shell(dir_.path(), script); }
  CliRun abf(const std::string& arguments) const {
    return shell("timeout 20 $ABF " + arguments);
  }

  test::TempDir dir_{"abf-cli-not-a-file"};
};

// A FIFO (or a device) given as the catalog made SQLite wait for a writer
// that never comes: `catalog stats`, `dedup` and `build --from-catalog`
// hung, `catalog add` failed with "disk I/O error", and /dev/null passed
// for an empty SQLite database. Each is refused at once, naming what it is.
TEST_F(NotAFile, ACatalogThatIsNotARegularFileIsRefusedAtOnce) {
  for (const std::string db : {"fifo", "/dev/null"}) {
    SCOPED_TRACE(db);
    const std::string kind = db == "fifo" ? "is a FIFO" : "is a character device";
    for (const std::string& command :
         {"catalog stats --db " + db, "catalog add --db " + db + " -f bin -i few.bin",
          "catalog remove --db " + db + " -f bin -i few.bin", "catalog upgrade --db " + db,
          "dedup -s c.abf --db " + db + " -f bin -i few.bin",
          "build --from-catalog " + db + " -n 1000 -p 0.01 -o out.abf"}) {
      SCOPED_TRACE(command);
      expect_failure(abf(command), "catalog_error", "catalog " + db + ": " + kind);
    }
  }
  EXPECT_FALSE(fs::exists(path("out.abf")));
  // A link to the FIFO is the FIFO.
  fs::create_symlink("fifo", path("link.db"));
  expect_failure(abf("catalog stats --db link.db"), "catalog_error", "is a FIFO");
}

TEST_F(NotAFile, SnapshotsThatAreNotRegularFilesAreRefusedAtOnce) {
  for (const auto& [snapshot, kind] : {std::pair<std::string, std::string>{"fifo", "a FIFO"},
                                       {"folder", "a directory"},
                                       {"/dev/null", "a character device"}}) {
    SCOPED_TRACE(snapshot);
    const std::string refused = snapshot + ": is " + kind;
    expect_failure(abf("query -s " + snapshot + " -f bin -i few.bin"), "io_error", refused);
    expect_failure(abf("inspect " + snapshot), "io_error", refused);
    expect_failure(abf("merge c.abf " + snapshot + " -o out.abf"), "io_error", refused);
    expect_failure(abf("dedup -s " + snapshot + " --db c.db -f bin -i few.bin"), "io_error",
                   refused);
  }
  EXPECT_FALSE(fs::exists(path("out.abf")));
}

TEST_F(NotAFile, DigestInputThatIsADirectoryIsRefused) {
  for (const std::string& command :
       {std::string("build -n 1000 -p 0.01 -i folder -o out.abf"), std::string("query -s c.abf -i folder"),
        std::string("catalog add --db c.db -i folder"),
        std::string("dedup -s c.abf --db c.db -i folder"),
        std::string("query -s c.abf -f bin -i folder")}) {
    SCOPED_TRACE(command);
    expect_failure(abf(command), "io_error", "folder: is a directory");
  }
  EXPECT_FALSE(fs::exists(path("out.abf")));
}

// A FIFO of digests is a stream like standard input: read to its end.
TEST_F(NotAFile, DigestInputFromAFifoStreams) {
  const CliRun run =
      shell("cat few.bin > fifo & timeout 20 $ABF query -s c.abf -f bin -i fifo --summary --json");
  ASSERT_EQ(run.status, 0) << run.err;
  const auto json = nlohmann::json::parse(run.out);
  EXPECT_EQ(json["total"].get<std::uint64_t>(), 100u);
  EXPECT_EQ(json["maybe"].get<std::uint64_t>(), 100u);
}

}  // namespace
}  // namespace abf
