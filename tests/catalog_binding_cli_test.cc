// A snapshot bound to what its catalog version holds (issue 22), end to end
// through the `abf` binary (ABF_CLI): `abf catalog stats` reports the
// content fingerprint each version keeps, `abf catalog upgrade` computes it
// for a catalog made before it.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "abf/abf.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

using test::CliRun;

class CatalogBindingCliTest : public ::testing::Test {
 protected:
  fs::path path(const std::string& name) const { return dir_ / name; }

  // Runs `abf <args>` in the test directory.
  CliRun abf(const std::string& args) { return test::run_cli(dir_.path(), args); }

  void write_hex(const std::string& name, const std::vector<Digest>& digests) {
    std::ofstream out(path(name));
    for (const Digest& digest : digests) out << digest.hex() << '\n';
  }

  // Runs SQL on a database with a plain connection.
  void exec_sql(const std::string& name, const char* sql) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path(name).c_str(), &db), SQLITE_OK);
    char* message = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql, nullptr, nullptr, &message), SQLITE_OK)
        << (message ? message : "");
    sqlite3_free(message);
    sqlite3_close(db);
  }

  test::TempDir dir_{"abf-binding-cli"};
};

TEST_F(CatalogBindingCliTest, StatsReportsTheLatestVersionsFingerprint) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto members = test::member_digests(40);
  write_hex("m.txt", members);
  write_hex("gone.txt", {members[0], members[1]});
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  ASSERT_EQ(abf("catalog remove --db c.db -i gone.txt").status, 0);
  const std::string expected = ContentFingerprint::of(std::span(members).subspan(2)).hex();
  const CliRun json = abf("catalog stats --db c.db --json");
  ASSERT_EQ(json.status, 0) << json.err;
  EXPECT_EQ(nlohmann::json::parse(json.out)["fingerprint"].get<std::string>(), expected);
  EXPECT_EQ(nlohmann::json::parse(json.out)["schema_version"].get<int>(), 3);
  const CliRun text = abf("catalog stats --db c.db");
  ASSERT_EQ(text.status, 0) << text.err;
  EXPECT_NE(text.out.find("fingerprint      " + expected), std::string::npos) << text.out;
}

TEST_F(CatalogBindingCliTest, UpgradeComputesTheFingerprintsOfASchemaTwoCatalog) {
  ASSERT_EQ(abf("catalog init --db c.db").status, 0);
  const auto members = test::member_digests(30);
  write_hex("m.txt", members);
  ASSERT_EQ(abf("catalog add --db c.db -i m.txt").status, 0);
  exec_sql("c.db",
           "PRAGMA journal_mode = DELETE; BEGIN;"
           "ALTER TABLE versions DROP COLUMN fingerprint;"
           "ALTER TABLE versions DROP COLUMN item_count;"
           "UPDATE abf_schema SET version = 2; PRAGMA user_version = 2; COMMIT;");
  const std::string expected = ContentFingerprint::of(members).hex();
  // Read-only, it is walked: the same fingerprint, schema 2 still.
  const CliRun before = abf("catalog stats --db c.db --json");
  ASSERT_EQ(before.status, 0) << before.err;
  EXPECT_EQ(nlohmann::json::parse(before.out)["schema_version"].get<int>(), 2);
  EXPECT_EQ(nlohmann::json::parse(before.out)["fingerprint"].get<std::string>(), expected);
  const CliRun upgraded = abf("catalog upgrade --db c.db");
  ASSERT_EQ(upgraded.status, 0) << upgraded.err;
  EXPECT_NE(upgraded.err.find("upgraded from schema version 2 to 3"), std::string::npos)
      << upgraded.err;
  const CliRun after = abf("catalog stats --db c.db --json");
  EXPECT_EQ(nlohmann::json::parse(after.out)["schema_version"].get<int>(), 3);
  EXPECT_EQ(nlohmann::json::parse(after.out)["fingerprint"].get<std::string>(), expected);
  EXPECT_NE(abf("catalog upgrade --db c.db").err.find("already at schema version 3"),
            std::string::npos);
}

}  // namespace
}  // namespace abf::service
