#include "test_support.hpp"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <xxhash.h>
#include <sys/wait.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "abf/fingerprint.hpp"
#include "abf/probe.hpp"

namespace abf::test {

namespace {
// The build's paths, unless the environment names others (a test binary
// carried to another machine, scripts/gpu-bundle).
std::string from_env(const char* name, const char* built_in) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : built_in;
}
}  // namespace

std::filesystem::path data_path(std::string_view relative) {
  return std::filesystem::path(from_env("ABF_TEST_DATA", ABF_TEST_DATA)) / relative;
}

std::vector<std::vector<std::string>> read_tsv(std::string_view relative) {
  std::ifstream in(data_path(relative));
  EXPECT_TRUE(in.good()) << "cannot open " << data_path(relative);
  std::vector<std::vector<std::string>> rows;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields;
    std::stringstream stream(line);
    std::string field;
    while (std::getline(stream, field, '\t')) fields.push_back(field);
    if (!line.empty() && line.back() == '\t') fields.emplace_back();
    rows.push_back(std::move(fields));
  }
  return rows;
}

std::vector<std::uint64_t> split_numbers(std::string_view text) {
  std::vector<std::uint64_t> numbers;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const auto item = text.substr(0, comma);
    std::uint64_t value = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
    EXPECT_TRUE(ec == std::errc() && end == item.data() + item.size()) << "bad number " << item;
    numbers.push_back(value);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return numbers;
}

double parse_hex_float(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  EXPECT_EQ(*end, '\0') << "bad hex float " << text;
  return value;
}

Digest digest_from_hex(std::string_view hex) {
  auto digest = parse_hex_digest(hex);
  EXPECT_TRUE(digest.has_value()) << hex;
  return digest.value_or(Digest{});
}

Digest member_digest(std::uint64_t i) { return sha256("member:" + std::to_string(i)); }
Digest non_member_digest(std::uint64_t i) { return sha256("non-member:" + std::to_string(i)); }

std::vector<Digest> member_digests(std::uint64_t count) {
  std::vector<Digest> digests;
  digests.reserve(count);
  for (std::uint64_t i = 0; i < count; ++i) digests.push_back(member_digest(i));
  return digests;
}

std::vector<FingerprintVector> fingerprint_vectors() {
  std::vector<FingerprintVector> vectors;
  for (const auto& row : read_tsv("vectors/fingerprint.tsv")) {
    if (row.at(0) != "set") continue;
    std::istringstream selector(row.at(2));
    std::string word;
    std::uint64_t begin = 0, end = 0, shards = 1, shard = 0, times = 1;
    while (selector >> word) {
      if (word == "members") {
        selector >> begin >> end;
      } else if (word == "shard") {
        selector >> shards >> shard;
      } else if (word == "times") {
        selector >> times;
      } else {
        ADD_FAILURE() << "fingerprint.tsv: unknown selector word " << word;
      }
    }
    FingerprintVector vector{row.at(1), {}, row.at(4)};
    for (std::uint64_t t = 0; t < times; ++t) {
      for (std::uint64_t i = begin; i < end; ++i) {
        const Digest digest = member_digest(i);
        if (probe::shard_of(digest.bytes.data(), static_cast<std::uint32_t>(shards)) == shard) {
          vector.digests.push_back(digest);
        }
      }
    }
    EXPECT_EQ(vector.digests.size(), std::stoull(row.at(3))) << row.at(1);
    vectors.push_back(std::move(vector));
  }
  EXPECT_FALSE(vectors.empty()) << "fingerprint.tsv has no set rows";
  return vectors;
}

FingerprintVector fingerprint_vector(std::string_view name) {
  for (auto& vector : fingerprint_vectors()) {
    if (vector.name == name) return vector;
  }
  ADD_FAILURE() << "fingerprint.tsv has no set " << name;
  return {};
}

std::string with_content_fingerprint(std::string snapshot, std::string_view vector_name) {
  const auto fingerprint = ContentFingerprint::parse_hex(fingerprint_vector(vector_name).fingerprint_hex);
  EXPECT_TRUE(fingerprint.has_value());
  EXPECT_GE(snapshot.size(), 128u);
  if (!fingerprint || snapshot.size() < 128) return snapshot;
  const auto stored = fingerprint->bytes();
  std::memcpy(snapshot.data() + 104, stored.data(), stored.size());
  const std::uint32_t flags = 1;
  std::memcpy(snapshot.data() + 120, &flags, 4);
  std::memset(snapshot.data() + 72, 0, 8);
  const std::uint64_t checksum = XXH3_64bits(snapshot.data(), 128);
  std::memcpy(snapshot.data() + 72, &checksum, 8);
  return snapshot;
}

std::vector<Digest> random_digests(std::size_t count, std::uint64_t seed) {
  std::vector<Digest> digests(count);
  std::uint64_t state = seed;
  auto next = [&state] {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  for (auto& digest : digests) {
    for (std::size_t i = 0; i < Digest::kSize; i += 8) {
      const std::uint64_t word = next();
      for (std::size_t b = 0; b < 8; ++b)
        digest.bytes[i + b] = static_cast<std::uint8_t>(word >> (8 * b));
    }
  }
  return digests;
}

Digest digest_with_words(std::uint64_t h1, std::uint64_t h2) {
  Digest digest;
  for (int b = 0; b < 8; ++b) {
    digest.bytes[b] = static_cast<std::uint8_t>(h1 >> (56 - 8 * b));
    digest.bytes[8 + b] = static_cast<std::uint8_t>(h2 >> (56 - 8 * b));
  }
  return digest;
}

CliRun run_cli(const std::filesystem::path& directory, const std::string& arguments) {
  const auto out = directory / ".abf-stdout";
  const auto err = directory / ".abf-stderr";
  const std::string command = "cd '" + directory.string() + "' && '" +
                              from_env("ABF_CLI", ABF_CLI) + "' " + arguments + " >'" +
                              out.string() + "' 2>'" + err.string() + "' </dev/null";
  const int raw = std::system(command.c_str());
  CliRun run{WIFEXITED(raw) ? WEXITSTATUS(raw) : -1, read_file(out), read_file(err)};
  std::filesystem::remove(out);
  std::filesystem::remove(err);
  return run;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::filesystem::path write_private_file(const std::filesystem::path& path,
                                         std::string_view contents) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    EXPECT_TRUE(out.good()) << "cannot write " << path;
  }
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}

void create_schema_one_catalog(const std::filesystem::path& path, std::uint64_t count) {
  std::string sql = R"sql(
PRAGMA application_id = 1094862403;
PRAGMA user_version = 1;
BEGIN;
CREATE TABLE abf_schema (version INTEGER NOT NULL);
INSERT INTO abf_schema (version) VALUES (1);
CREATE TABLE versions (
  version INTEGER PRIMARY KEY,
  operation TEXT NOT NULL,
  created_unix INTEGER NOT NULL,
  added INTEGER NOT NULL DEFAULT 0,
  removed INTEGER NOT NULL DEFAULT 0
);
INSERT INTO versions (version, operation, created_unix) VALUES (0, 'init', strftime('%s', 'now'));
CREATE TABLE artifacts (
  digest BLOB NOT NULL CHECK (length(digest) = 32),
  added_version INTEGER NOT NULL,
  removed_version INTEGER,
  PRIMARY KEY (digest, added_version)
) WITHOUT ROWID;
COMMIT;
)sql";
  if (count > 0) {
    sql += "BEGIN;\n";
    for (const Digest& digest : member_digests(count)) {
      sql += "INSERT INTO artifacts (digest, added_version) VALUES (X'" + digest.hex() + "', 1);\n";
    }
    sql +=
        "INSERT INTO versions (version, operation, created_unix, added, removed) VALUES (1, "
        "'add', strftime('%s', 'now'), " +
        std::to_string(count) + ", 0);\nCOMMIT;\n";
  }
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK) << path;
  char* message = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message), SQLITE_OK)
      << (message != nullptr ? message : "");
  sqlite3_free(message);
  sqlite3_close(db);
}

std::vector<VectorKey> vector_keys() {
  std::vector<VectorKey> keys;
  for (const auto& row : read_tsv("vectors/v2/key-fingerprints.tsv")) {
    auto key = Key::parse_hex(row.at(0));
    EXPECT_TRUE(key.has_value()) << row.at(0);
    if (key) keys.push_back(VectorKey{*key, row.at(0), row.at(1)});
  }
  return keys;
}

VectorKey golden_key() {
  const std::string file = read_file(data_path("vectors/v2/member-1000-keyed.abf"));
  EXPECT_GE(file.size(), 128u);
  KeyFingerprint stored;
  std::memcpy(stored.bytes.data(), file.data() + 96, 8);
  for (auto& key : vector_keys()) {
    if (key.fingerprint_hex == stored.hex()) return key;
  }
  ADD_FAILURE() << "no key of key-fingerprints.tsv has the keyed golden file's fingerprint "
                << stored.hex();
  return vector_keys().front();
}

VectorKey other_key() {
  const VectorKey golden = golden_key();
  for (auto& key : vector_keys()) {
    if (key.hex != golden.hex) return key;
  }
  ADD_FAILURE() << "key-fingerprints.tsv has a single key";
  return golden;
}

CatalogId golden_catalog_id() {
  const std::string file = read_file(data_path("vectors/v2/member-1000-v2.abf"));
  EXPECT_GE(file.size(), 128u);
  CatalogId id;
  std::memcpy(id.bytes.data(), file.data() + 80, 16);
  return id;
}

std::filesystem::path make_temp_dir(std::string_view prefix) {
  std::string pattern = (std::filesystem::temp_directory_path() / prefix).string() + "-XXXXXX";
  const char* made = ::mkdtemp(pattern.data());
  EXPECT_NE(made, nullptr) << "mkdtemp " << pattern << ": " << std::strerror(errno);
  return pattern;
}

TempDir::~TempDir() {
  std::error_code ignored;
  if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
}

}  // namespace abf::test
