// `abf build --layout blocked` as a user runs it: the 1,000-member build
// writes vectors/v3's golden payload (protocol 3, and 4 with --key-file),
// queries answer as builds-v3.tsv says, --from-catalog builds a blocked
// snapshot of the catalog, `abf bench --protocol` takes lists, and what the
// blocked layout does not do yet is a usage error.
#include <gtest/gtest.h>

#include <string>

#include "abf/digest.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

std::string members_text(std::uint64_t count) {
  std::string text;
  for (const Digest& d : test::member_digests(count)) text += d.hex() + "\n";
  return text;
}

void write(const std::filesystem::path& path, const std::string& text) {
  test::write_private_file(path, text);
}

TEST(CliBlocked, BuildWritesTheGoldenPayloadAndQueriesAnswerAsItsBuild) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(1000));
  std::string absent;
  for (std::uint64_t i = 0; i < 20'000; ++i) absent += test::non_member_digest(i).hex() + "\n";
  write(dir / "n.txt", absent);
  write(dir / "k.key", "000102030405060708090a0b0c0d0e0f\n");
  struct Case {
    std::string extra;
    std::string golden;
    std::string protocol;
  };
  for (const Case& c : {Case{"", "vectors/v3/member-1000-v3.abf", "3"},
                        Case{" --key-file k.key", "vectors/v3/member-1000-v4.abf", "4"}}) {
    SCOPED_TRACE(c.golden);
    const auto built = test::run_cli(dir.path(), "build -n 1000 -p 0.01 --layout blocked -i m.txt -o b.abf" +
                                                     c.extra);
    ASSERT_EQ(built.status, 0) << built.err;
    EXPECT_NE(built.out.find("hash protocol " + c.protocol), std::string::npos) << built.out;
    const std::string mine = test::read_file(dir / "b.abf");
    const std::string golden = test::read_file(test::data_path(c.golden));
    ASSERT_EQ(mine.size(), golden.size());
    EXPECT_EQ(mine.substr(128), golden.substr(128)) << "payload";
    // Absent digests: exactly the golden build's false positives below 20,000.
    std::size_t expected_maybe = 0;
    for (const auto& row : test::read_tsv("vectors/v3/builds-v3.tsv")) {
      if (row[0] == c.protocol && row[2] == "1000" && row[3] == "1000") {
        for (const auto i : test::split_numbers(row.size() > 9 ? row[9] : "")) expected_maybe += i < 20'000;
      }
    }
    ASSERT_GT(expected_maybe, 0u);
    const auto queried = test::run_cli(dir.path(), "query -s b.abf -i n.txt --summary" + c.extra);
    ASSERT_EQ(queried.status, 0) << queried.err;
    EXPECT_NE(queried.out.find("maybe\t" + std::to_string(expected_maybe)), std::string::npos)
        << queried.out;
    const auto members = test::run_cli(dir.path(), "query -s b.abf -i m.txt --summary" + c.extra);
    EXPECT_NE(members.out.find("absent\t0"), std::string::npos) << members.out;
  }
}

TEST(CliBlocked, FromCatalogBuildsABlockedSnapshotOfTheCatalog) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(1000));
  ASSERT_EQ(test::run_cli(dir.path(), "catalog init --db c.db").status, 0);
  ASSERT_EQ(test::run_cli(dir.path(), "catalog add --db c.db -i m.txt").status, 0);
  const auto built =
      test::run_cli(dir.path(), "build --from-catalog c.db -n 1000 -p 0.01 --layout blocked -o c.abf");
  ASSERT_EQ(built.status, 0) << built.err;
  EXPECT_NE(built.out.find("hash protocol 3"), std::string::npos) << built.out;
  EXPECT_EQ(test::read_file(dir / "c.abf").substr(128),
            test::read_file(test::data_path("vectors/v3/member-1000-v3.abf")).substr(128));
}

TEST(CliBlocked, WhatTheBlockedLayoutDoesNotDoIsAUsageError) {
  test::TempDir dir("abf-cli-blocked");
  write(dir / "m.txt", members_text(10));
  const auto sharded =
      test::run_cli(dir.path(), "build -n 10 -p 0.01 --layout blocked --shards 2 -i m.txt -o s.abfs");
  EXPECT_EQ(sharded.status, 2);
  EXPECT_NE(sharded.err.find("--shards"), std::string::npos) << sharded.err;
  const auto bad = test::run_cli(dir.path(), "build -n 10 -p 0.01 --layout diagonal -i m.txt -o x.abf");
  EXPECT_EQ(bad.status, 2) << bad.err;
  const auto low = test::run_cli(dir.path(), "build -n 10 -p 0.00001 --layout blocked -i m.txt -o l.abf");
  EXPECT_EQ(low.status, 0) << low.err;
  EXPECT_NE(low.err.find("classic layout"), std::string::npos) << low.err;
  const auto protocol = test::run_cli(dir.path(), "bench --protocol 1,5 --scenario l2");
  EXPECT_EQ(protocol.status, 2) << protocol.err;
}

}  // namespace
}  // namespace abf
