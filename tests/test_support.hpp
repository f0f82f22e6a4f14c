// Shared helpers for the test executables: golden-vector files, digests.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <thread>
#include <string_view>
#include <vector>

#include "abf/digest.hpp"
#include "abf/scheme.hpp"

namespace abf::test {

// Polls `done` every `interval` until it holds (true) or `timeout` passes
// (false; the caller fails naming what it waited for). For a test that waits
// on another thread or process: it never assumes how long anything takes.
template <class Predicate>
bool wait_until(Predicate&& done, std::chrono::milliseconds timeout = std::chrono::seconds(60),
                std::chrono::microseconds interval = std::chrono::microseconds(200)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const bool last_chance = std::chrono::steady_clock::now() >= deadline;
    if (done()) return true;
    if (last_chance) return false;
    std::this_thread::sleep_for(interval);
  }
}

// A file under tests/data, e.g. data_path("vectors/layout.tsv"). The
// environment variable ABF_TEST_DATA, when set, replaces the built-in folder
// (and ABF_CLI the path of the abf binary), for test binaries run elsewhere.
std::filesystem::path data_path(std::string_view relative);

// The rows of a tab-separated file, '#' comment lines skipped.
std::vector<std::vector<std::string>> read_tsv(std::string_view relative);

// Splits "1,2,3" into numbers; "" gives none.
std::vector<std::uint64_t> split_numbers(std::string_view text);

// Parses a C99 hex float ("0x1.47ae147ae147bp-7") exactly.
double parse_hex_float(const std::string& text);

// Digest from 64 hex digits (the test fails on bad input).
Digest digest_from_hex(std::string_view hex);

// The golden vectors' digest sets: SHA-256("member:<i>"), SHA-256("non-member:<i>").
Digest member_digest(std::uint64_t i);
Digest non_member_digest(std::uint64_t i);
std::vector<Digest> member_digests(std::uint64_t count);

// Deterministic pseudo-random digests (splitmix64 of the seed).
std::vector<Digest> random_digests(std::size_t count, std::uint64_t seed);

// A digest whose first two big-endian words are h1 and h2.
Digest digest_with_words(std::uint64_t h1, std::uint64_t h2);

// A key of vectors/v2/key-fingerprints.tsv.
struct VectorKey {
  Key key;
  std::string hex;              // the key as the file writes it
  std::string fingerprint_hex;  // its keyFingerprint
};
std::vector<VectorKey> vector_keys();
// The key of vectors/v2/member-1000-keyed.abf: the vector key whose
// fingerprint that file's header carries.
VectorKey golden_key();
// A vector key other than golden_key().
VectorKey other_key();
// The catalogId of the version-2 golden files (header bytes 80..96 of
// vectors/v2/member-1000-v2.abf).
CatalogId golden_catalog_id();

// A set row of vectors/fingerprint.tsv (written by scripts/fingerprint-vectors).
struct FingerprintVector {
  std::string name;
  std::vector<Digest> digests;  // the multiset its selector names
  std::string fingerprint_hex;  // the expected ContentFingerprint::hex()
};
// Every set row, its selector expanded ("members A B [shard S I] [times T]").
std::vector<FingerprintVector> fingerprint_vectors();
// The row named `name`; a test failure (and an empty row) if there is none.
FingerprintVector fingerprint_vector(std::string_view name);

// A version-2 snapshot's bytes (a golden file, written before the content
// fingerprint existed) with the fingerprint of vectors/fingerprint.tsv's set
// `vector_name` in header bytes 104..120, contentFlags 1, header resealed:
// what a build of that set writes today.
std::string with_content_fingerprint(std::string snapshot, std::string_view vector_name);

// A new, empty folder in the temporary directory, named `prefix-XXXXXX`
// (mkdtemp: unique, so tests run in parallel). The caller removes it.
std::filesystem::path make_temp_dir(std::string_view prefix);

// A make_temp_dir folder that is removed, with all it holds, when this goes
// out of scope, also when an assertion ends the test early.
class TempDir {
 public:
  explicit TempDir(std::string_view prefix) : path_(make_temp_dir(prefix)) {}
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// What a run of the `abf` binary did.
struct CliRun {
  int status = -1;  // exit status; -1 if it did not exit normally
  std::string out;
  std::string err;
};

// Runs `abf <arguments>` (the binary at ABF_CLI) through /bin/sh with the
// working directory `directory`, standard input from /dev/null; stdout and
// stderr pass through files in `directory`. Arguments are shell words.
CliRun run_cli(const std::filesystem::path& directory, const std::string& arguments);

// Whole file contents (empty if missing).
std::string read_file(const std::filesystem::path& path);

// Writes `contents` to `path` (replacing it) and makes it mode 0600, as a key
// file must be; returns the path.
std::filesystem::path write_private_file(const std::filesystem::path& path,
                                         std::string_view contents);

// A schema-1 catalog database exactly as the code before catalog ids made it
// (its kCreateSchema), with member_digests(count) added as version 1 the way
// its add did (count 0: just the empty version 0).
void create_schema_one_catalog(const std::filesystem::path& path, std::uint64_t count);

}  // namespace abf::test
