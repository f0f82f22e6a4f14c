// `abf index` and `abf dedup --index` end to end through the abf binary
// (ABF_CLI): the output equals `--exact-only`'s on random input about half
// present, with index and snapshot at the same or different versions and
// removals between them; refusals of another catalog's index, a damaged
// one and bad options; `abf inspect` of an index.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;
using test::CliRun;

class CliIndexTest : public ::testing::Test {
 protected:
  fs::path path(const std::string& name) const { return dir_ / name; }
  CliRun abf(const std::string& args) { return test::run_cli(dir_.path(), args); }

  void write_hex(const std::string& name, std::span<const Digest> digests) {
    std::ofstream out(path(name));
    for (const Digest& digest : digests) out << digest.hex() << '\n';
  }
  void write_bin(const std::string& name, std::span<const Digest> digests) {
    std::ofstream(path(name), std::ios::binary)
        .write(reinterpret_cast<const char*>(digests.data()),
               static_cast<std::streamsize>(digests.size() * Digest::kSize));
  }
  void ok(const std::string& args) {
    const CliRun run = abf(args);
    ASSERT_EQ(run.status, 0) << args << "\n" << run.err;
  }

  // Catalog c.db: version 1 = members[0, 6000), 2 = removes [0, 500),
  // 3 = adds [6000, 10000). Candidates: every member (some removed) and as
  // many new digests, shuffled, as binary records in cand.bin.
  void make_catalog() {
    members_ = test::random_digests(10000, 101);
    ok("catalog init --db c.db");
    write_hex("v1.txt", std::span(members_).first(6000));
    write_hex("v2.txt", std::span(members_).first(500));
    write_hex("v3.txt", std::span(members_).subspan(6000));
    ok("catalog add --db c.db -i v1.txt");
    ok("catalog remove --db c.db -i v2.txt");
    ok("catalog add --db c.db -i v3.txt");
    std::vector<Digest> candidates = members_;
    auto fresh = test::random_digests(10000, 102);
    candidates.insert(candidates.end(), fresh.begin(), fresh.end());
    candidates.insert(candidates.end(), fresh.begin(), fresh.begin() + 100);  // repeats
    std::shuffle(candidates.begin(), candidates.end(), std::mt19937_64(103));
    write_bin("cand.bin", candidates);
  }

  test::TempDir dir_{"abf-cli-index"};
  std::vector<Digest> members_;
};

TEST_F(CliIndexTest, DedupWithIndexEqualsExactOnlyAtEveryVersionPair) {
  make_catalog();
  for (int v : {1, 2, 3}) {
    ok("build --from-catalog c.db --catalog-version " + std::to_string(v) +
       " -n 20000 -p 0.01 -o s" + std::to_string(v) + ".abf");
    ok("index --db c.db --version " + std::to_string(v) + " -o i" + std::to_string(v) + ".abfx");
  }
  ok("dedup -s s3.abf --db c.db -f bin -i cand.bin --exact-only -o exact.txt");
  const std::string exact = test::read_file(path("exact.txt"));
  // 10000 new + the 500 removed; nothing of the 9500 present.
  EXPECT_EQ(std::count(exact.begin(), exact.end(), '\n'), 10500);
  for (int s : {1, 2, 3}) {
    for (int i : {1, 2, 3}) {
      SCOPED_TRACE(testing::Message() << "snapshot " << s << ", index " << i);
      const std::string out = "out-" + std::to_string(s) + "-" + std::to_string(i) + ".txt";
      const CliRun run =
          abf("dedup -s s" + std::to_string(s) + ".abf --index i" + std::to_string(i) +
              ".abfx --db c.db -f bin -i cand.bin -o " + out + " --json");
      ASSERT_EQ(run.status, 0) << run.err;
      EXPECT_EQ(test::read_file(path(out)), exact);
      EXPECT_NE(run.out.find("\"index_version\": " + std::to_string(i)), std::string::npos)
          << run.out;
      if (i == 3) {
        // At the head itself: no SQLite lookup at all.
        EXPECT_NE(run.out.find("\"store_lookups\": 0"), std::string::npos) << run.out;
      }
    }
  }
  // `abf index` at the latest version by default, identical bytes.
  ok("index --db c.db -o latest.abfx");
  EXPECT_EQ(test::read_file(path("latest.abfx")), test::read_file(path("i3.abfx")));
}

TEST_F(CliIndexTest, DedupRefusesAnotherCatalogsIndex) {
  make_catalog();
  ok("build --from-catalog c.db -n 20000 -p 0.01 -o s.abf");
  ok("catalog init --db other.db");
  ok("catalog add --db other.db -i v1.txt");
  ok("index --db other.db -o other.abfx");
  const CliRun run = abf("dedup -s s.abf --index other.abfx --db c.db -f bin -i cand.bin");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("catalog_mismatch"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("other.abfx is of catalog"), std::string::npos) << run.err;
}

TEST_F(CliIndexTest, DedupRefusesAnIndexOfAnotherStateOfTheCatalog) {
  // A catalog copied at version 1 (a backup), then both advanced with
  // different digests: same id, a version 2 with other contents.
  const auto digests = test::random_digests(3000, 104);
  ok("catalog init --db c.db");
  write_hex("a.txt", std::span(digests).first(1000));
  write_hex("b.txt", std::span(digests).subspan(1000, 1000));
  write_hex("c.txt", std::span(digests).subspan(2000));
  ok("catalog add --db c.db -i a.txt");
  fs::copy_file(path("c.db"), path("restored.db"));
  ok("catalog add --db c.db -i b.txt");
  ok("catalog add --db restored.db -i c.txt");
  ok("index --db c.db -o c2.abfx");
  ok("build --from-catalog restored.db -n 5000 -p 0.01 -o r.abf");
  write_hex("cand.txt", digests);
  const CliRun run = abf("dedup -s r.abf --index c2.abfx --db restored.db -i cand.txt");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("catalog_mismatch"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("does not hold what"), std::string::npos) << run.err;
}

TEST_F(CliIndexTest, DedupRefusesADamagedIndex) {
  make_catalog();
  ok("build --from-catalog c.db -n 20000 -p 0.01 -o s.abf");
  ok("index --db c.db -o i.abfx");
  std::string damaged = test::read_file(path("i.abfx"));
  damaged[128 + 32 * 7 + 3] ^= 0x40;  // a bit of digest 7, in block 0
  std::ofstream(path("damaged.abfx"), std::ios::binary) << damaged;
  const CliRun run = abf("dedup -s s.abf --index damaged.abfx --db c.db -f bin -i cand.bin");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("index_block_checksum"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("block 0"), std::string::npos) << run.err;
}

TEST_F(CliIndexTest, IndexRefusesBadOptionsAndLeavesNothing) {
  make_catalog();
  CliRun run = abf("index --db c.db --version 9 -o x.abfx");
  EXPECT_EQ(run.status, 1) << run.err;
  EXPECT_NE(run.err.find("version 9 does not exist"), std::string::npos) << run.err;
  EXPECT_FALSE(fs::exists(path("x.abfx")));
  run = abf("index --db c.db --block-digests 3 -o x.abfx");
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_FALSE(fs::exists(path("x.abfx")));
  run = abf("index --db missing.db -o x.abfx");
  EXPECT_EQ(run.status, 1) << run.err;
  run = abf("index -o x.abfx");
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_FALSE(fs::exists(path("x.abfx")));
  // An existing index is replaced only whole: a failed run leaves it as it was.
  ok("index --db c.db --version 1 -o keep.abfx");
  const std::string before = test::read_file(path("keep.abfx"));
  run = abf("index --db c.db --version 9 -o keep.abfx");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(test::read_file(path("keep.abfx")), before);
}

TEST_F(CliIndexTest, InspectDescribesAndVerifiesAnIndex) {
  make_catalog();
  ok("index --db c.db --version 1 -o i.abfx");
  CliRun run = abf("inspect i.abfx --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\"magic\": \"ABFX\""), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"digest_count\": 6000"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"catalog_version\": 1"), std::string::npos) << run.out;
  std::string bytes = test::read_file(path("i.abfx"));
  bytes[3] = '9';
  std::ofstream(path("bad.abfx"), std::ios::binary) << bytes;
  run = abf("inspect bad.abfx");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("bad magic"), std::string::npos) << run.err;
}

// Index sets (abf index --shards): dedup answers byte for byte as with the
// single index and as --exact-only, at the head and behind it.
TEST_F(CliIndexTest, DedupWithAnIndexSetEqualsTheSingleIndexAndExactOnly) {
  make_catalog();
  ok("build --from-catalog c.db -n 20000 -p 0.01 -o s.abf");
  ok("dedup -s s.abf --db c.db -f bin -i cand.bin --exact-only -o exact.txt");
  const std::string exact = test::read_file(path("exact.txt"));
  ASSERT_EQ(std::count(exact.begin(), exact.end(), '\n'), 10500);
  for (int v : {1, 3}) {
    const std::string version = std::to_string(v);
    ok("index --db c.db --version " + version + " -o i" + version + ".abfx");
    ok("dedup -s s.abf --index i" + version + ".abfx --db c.db -f bin -i cand.bin -o single" +
       version + ".txt");
    EXPECT_EQ(test::read_file(path("single" + version + ".txt")), exact);
    for (int shards : {2, 3, 17}) {
      SCOPED_TRACE(testing::Message() << "version " << v << ", " << shards << " shards");
      const std::string set = "set" + version + "-" + std::to_string(shards) + ".abxs";
      ok("index --db c.db --version " + version + " --shards " + std::to_string(shards) +
         " -o " + set);
      const std::string out = "out-" + set + ".txt";
      const CliRun run =
          abf("dedup -s s.abf --index " + set + " --db c.db -f bin -i cand.bin -o " + out +
              " --json");
      ASSERT_EQ(run.status, 0) << run.err;
      EXPECT_EQ(test::read_file(path(out)), exact);
      EXPECT_EQ(test::read_file(path(out)), test::read_file(path("single" + version + ".txt")));
      EXPECT_NE(run.out.find("\"index_version\": " + version), std::string::npos) << run.out;
      if (v == 3) {
        EXPECT_NE(run.out.find("\"store_lookups\": 0"), std::string::npos) << run.out;
      }
    }
  }
  // Only the manifests and their shards are there.
  std::size_t shard_files = 0;
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    if (entry.path().extension() == ".abfx" &&
        entry.path().filename().string().find(".abxs.") != std::string::npos) {
      ++shard_files;
    }
  }
  EXPECT_EQ(shard_files, 2u * (2 + 3 + 17));
}

TEST_F(CliIndexTest, AnIndexSetReplacedLeavesOnlyTheNewShards) {
  make_catalog();
  ok("index --db c.db --version 1 --shards 5 -o c.abxs");
  ok("index --db c.db --version 3 --shards 2 -o c.abxs");
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("c.abxs")) names.push_back(name);
  }
  EXPECT_EQ(names.size(), 3u);
  const CliRun run = abf("inspect c.abxs --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\"shard_count\": 2"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"catalog_version\": 3"), std::string::npos) << run.out;
}

// --json's "bytes" is what is on disk: the index file, or a set's shard
// files (each an ABFX of its own count; the manifest left out).
TEST_F(CliIndexTest, JsonBytesAreTheFilesWritten) {
  make_catalog();
  for (const int shards : {1, 3, 7}) {
    SCOPED_TRACE("shards " + std::to_string(shards));
    const std::string out = "b" + std::to_string(shards) + ".abx";
    const CliRun run =
        abf("index --db c.db --shards " + std::to_string(shards) + " -o " + out + " --json");
    ASSERT_EQ(run.status, 0) << run.err;
    std::uintmax_t on_disk = 0;
    for (const auto& entry : fs::directory_iterator(dir_.path())) {
      const std::string name = entry.path().filename().string();
      if (shards == 1 ? name == out : (name.starts_with(out + ".") && name.ends_with(".abfx"))) {
        on_disk += entry.file_size();
      }
    }
    EXPECT_NE(run.out.find("\"bytes\": " + std::to_string(on_disk) + ","), std::string::npos)
        << run.out;
  }
}

TEST_F(CliIndexTest, IndexRefusesBadShardCounts) {
  make_catalog();
  for (const std::string bad : {"0", "65537", "-1", "x"}) {
    const CliRun run = abf("index --db c.db --shards " + bad + " -o x.abxs");
    EXPECT_EQ(run.status, 2) << bad << ": " << run.err;
  }
  const CliRun run = abf("index --db c.db --shards 3 -o -");
  EXPECT_EQ(run.status, 2) << run.err;
  EXPECT_NE(run.err.find("standard output"), std::string::npos) << run.err;
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    EXPECT_FALSE(entry.path().filename().string().starts_with("x.abxs")) << entry.path();
  }
}

TEST_F(CliIndexTest, InspectDescribesAndVerifiesAnIndexSet) {
  make_catalog();
  ok("index --db c.db --version 1 --shards 3 -o i.abxs");
  CliRun run = abf("inspect i.abxs --json");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("\"magic\": \"ABXS\""), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"shard_count\": 3"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("\"digest_count\": 6000"), std::string::npos) << run.out;
  run = abf("inspect i.abxs");
  ASSERT_EQ(run.status, 0) << run.err;
  EXPECT_NE(run.out.find("ABXS (exact index set)"), std::string::npos) << run.out;
  // A shard gone: refused, naming it.
  for (const auto& entry : fs::directory_iterator(dir_.path())) {
    if (entry.path().filename().string().ends_with(".00001.abfx")) fs::remove(entry.path());
  }
  run = abf("inspect i.abxs");
  EXPECT_EQ(run.status, 1);
  EXPECT_NE(run.err.find("index_set_shard_missing"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("shard 1 of 3"), std::string::npos) << run.err;
  ok("build --from-catalog c.db -n 20000 -p 0.01 -o s.abf");
  run = abf("dedup -s s.abf --index i.abxs --db c.db -f bin -i cand.bin");
  EXPECT_EQ(run.status, 1);
  EXPECT_EQ(run.out, "");
  EXPECT_NE(run.err.find("index_set_shard_missing"), std::string::npos) << run.err;
}

TEST_F(CliIndexTest, HelpTeachesWithExamples) {
  const CliRun run = abf("index --help");
  EXPECT_EQ(run.status, 0);
  EXPECT_NE(run.out.find("abf index --db catalog.db -o catalog.abfx"), std::string::npos);
  EXPECT_NE(run.out.find("abf dedup --snapshot c.abf --index catalog.abfx"), std::string::npos);
}

}  // namespace
}  // namespace abf
