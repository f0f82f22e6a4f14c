// ABFX exact index (docs/protocol.md, "Exact index (ABFX)"): the golden files
// of scripts/index-vectors, lookups against std::binary_search on random,
// adversarial and boundary inputs, and a distinct refusal for every way a
// file can be wrong.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
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

std::vector<std::uint8_t> bytes_of(const fs::path& path) {
  const std::string text = test::read_file(path);
  return {text.begin(), text.end()};
}

struct GoldenIndex {
  std::string file;
  std::vector<Digest> digests;  // sorted
  IndexIdentity identity;
  std::uint64_t file_size = 0;
};

// The rows of vectors/index/index.tsv.
std::vector<GoldenIndex> golden_indexes() {
  std::vector<GoldenIndex> out;
  for (const auto& row : test::read_tsv("vectors/index/index.tsv")) {
    EXPECT_EQ(row.size(), 7u);
    GoldenIndex g;
    g.file = row[0];
    std::uint64_t first = 0, end = 0;
    EXPECT_EQ(std::sscanf(row[1].c_str(), "members %lu %lu", &first, &end), 2);
    for (std::uint64_t i = first; i < end; ++i) g.digests.push_back(test::member_digest(i));
    std::sort(g.digests.begin(), g.digests.end());
    g.identity.catalog_id = *CatalogId::parse_hex(row[2]);
    g.identity.catalog_version = std::stoull(row[3]);
    g.identity.block_digests = static_cast<std::uint32_t>(std::stoul(row[4]));
    if (row[5] != "-") g.identity.content_fingerprint = *ContentFingerprint::parse_hex(row[5]);
    g.file_size = std::stoull(row[6]);
    out.push_back(std::move(g));
  }
  EXPECT_EQ(out.size(), 3u);
  return out;
}

fs::path golden_path(const std::string& file) { return test::data_path("vectors/index/" + file); }

TEST(IndexGolden, WriterProducesTheGoldenBytes) {
  test::TempDir dir("abf-index");
  for (const auto& g : golden_indexes()) {
    SCOPED_TRACE(g.file);
    const auto expected = bytes_of(golden_path(g.file));
    ASSERT_EQ(expected.size(), g.file_size);
    auto bytes = serialize_index(g.identity, g.digests);
    ASSERT_TRUE(bytes) << bytes.error().describe();
    EXPECT_EQ(*bytes, expected);
    // The streaming writer, fed one digest at a time, writes the same.
    const auto path = dir / g.file;
    auto writer = IndexWriter::create(path, g.identity, g.digests.size());
    ASSERT_TRUE(writer) << writer.error().describe();
    for (const Digest& d : g.digests) ASSERT_TRUE(writer->add(std::span(&d, 1)));
    ASSERT_TRUE(writer->commit());
    EXPECT_EQ(bytes_of(path), expected);
  }
}

TEST(IndexGolden, LoaderAcceptsTheGoldenFiles) {
  for (const auto& g : golden_indexes()) {
    for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
      SCOPED_TRACE(g.file);
      auto index = Index::load(golden_path(g.file), mode);
      ASSERT_TRUE(index) << index.error().describe();
      EXPECT_EQ(index->catalog_id(), g.identity.catalog_id);
      EXPECT_EQ(index->catalog_version(), g.identity.catalog_version);
      EXPECT_EQ(index->content_fingerprint(), g.identity.content_fingerprint);
      EXPECT_EQ(index->header().block_digests, g.identity.block_digests);
      EXPECT_EQ(index->size(), g.digests.size());
      ASSERT_EQ(index->digests().size(), g.digests.size());
      EXPECT_TRUE(std::equal(g.digests.begin(), g.digests.end(), index->digests().begin()));
      if (g.identity.content_fingerprint) {
        EXPECT_EQ(ContentFingerprint::of(index->digests()), *g.identity.content_fingerprint);
      }
      for (const Digest& d : g.digests) EXPECT_TRUE(index->contains(d));
      for (std::uint64_t i = 0; i < 100; ++i) {
        EXPECT_FALSE(index->contains(test::non_member_digest(i)));
      }
    }
  }
}

// --- lookups against std::binary_search -------------------------------------

void expect_matches_reference(const std::vector<Digest>& held, const std::vector<Digest>& queries,
                              std::uint32_t block_digests = kIndexDefaultBlockDigests) {
  std::vector<Digest> sorted = held;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  IndexIdentity identity;
  identity.block_digests = block_digests;
  identity.content_fingerprint = ContentFingerprint::of(sorted);
  auto bytes = serialize_index(identity, sorted);
  ASSERT_TRUE(bytes) << bytes.error().describe();
  auto index = Index::parse(*bytes);
  ASSERT_TRUE(index) << index.error().describe();
  ASSERT_EQ(index->size(), sorted.size());
  std::vector<std::uint8_t> got(queries.size() + 3, 7);
  ASSERT_TRUE(index->contains(queries, got));
  auto as_bool = std::make_unique<bool[]>(queries.size());
  ASSERT_TRUE(index->contains(queries, std::span<bool>(as_bool.get(), queries.size())));
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const bool expected = std::binary_search(sorted.begin(), sorted.end(), queries[i]);
    if (got[i] != (expected ? 1 : 0) || as_bool[i] != expected ||
        index->contains(queries[i]) != expected) {
      if (++mismatches < 5) {
        ADD_FAILURE() << "query " << i << " " << queries[i].hex() << ": expected " << expected
                      << ", batch " << int(got[i]) << ", single " << index->contains(queries[i]);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_EQ(got[queries.size()], 7);  // nothing written past the batch
}

// Members, their neighbours (one bit up and down in the last byte), and
// unrelated digests, shuffled.
std::vector<Digest> queries_for(const std::vector<Digest>& held, std::size_t extra,
                                std::uint64_t seed) {
  std::vector<Digest> queries = held;
  for (const Digest& d : held) {
    Digest up = d, down = d;
    up.bytes[31] ^= 1;
    down.bytes[0] ^= 0x80;
    queries.push_back(up);
    queries.push_back(down);
  }
  auto more = test::random_digests(extra, seed);
  queries.insert(queries.end(), more.begin(), more.end());
  queries.push_back(Digest{});
  Digest ones;
  ones.bytes.fill(0xFF);
  queries.push_back(ones);
  std::mt19937_64 rng(seed);
  std::shuffle(queries.begin(), queries.end(), rng);
  return queries;
}

TEST(IndexLookup, MatchesBinarySearchOnRandomDigests) {
  for (std::size_t n : {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 1000, 4095, 4096, 4097, 100000}) {
    SCOPED_TRACE(n);
    const auto held = test::random_digests(n, 1000 + n);
    expect_matches_reference(held, queries_for(held, 2000, n));
  }
}

TEST(IndexLookup, EmptyIndexAnswersAbsent) {
  expect_matches_reference({}, test::random_digests(100, 3));
  Index empty;
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_FALSE(empty.contains(Digest{}));
}

TEST(IndexLookup, SingleDigest) {
  for (const Digest& only : {Digest{}, test::member_digest(0)}) {
    expect_matches_reference({only}, queries_for({only}, 50, 9));
  }
}

TEST(IndexLookup, FirstAndLastDigestsAndTheExtremes) {
  std::vector<Digest> held = test::random_digests(5000, 11);
  Digest zero{}, ones;
  ones.bytes.fill(0xFF);
  held.push_back(zero);
  held.push_back(ones);
  std::sort(held.begin(), held.end());
  std::vector<Digest> queries = {held.front(), held.back(), held[1], held[held.size() - 2]};
  Digest almost_ones = ones;
  almost_ones.bytes[31] = 0xFE;
  Digest one{};
  one.bytes[31] = 1;
  queries.push_back(almost_ones);
  queries.push_back(one);
  expect_matches_reference(held, queries);
}

TEST(IndexLookup, AllDigestsInOneBucket) {
  // The same first 8 bytes for every digest: one radix bucket holds them all
  // and the lookup bisects it.
  std::vector<Digest> held = test::random_digests(20000, 21);
  for (Digest& d : held) std::memset(d.bytes.data(), 0x5A, 8);
  auto queries = queries_for(held, 1000, 22);
  for (Digest& d : queries) {
    if (d.bytes[1] != 0x5A) std::memset(d.bytes.data(), 0x5A, 8);  // same bucket, absent mostly
  }
  expect_matches_reference(held, queries);
}

TEST(IndexLookup, SharedPrefixesAndClusters) {
  // Digests differing only in their last bytes, in runs, beside uniform ones:
  // long buckets and empty ones side by side.
  std::vector<Digest> held;
  Digest base = test::member_digest(1);
  for (int i = 0; i < 3000; ++i) {
    Digest d = base;
    d.bytes[30] = static_cast<std::uint8_t>(i >> 8);
    d.bytes[31] = static_cast<std::uint8_t>(i);
    held.push_back(d);
  }
  for (int i = 0; i < 3000; ++i) {
    Digest d{};
    d.bytes[7] = static_cast<std::uint8_t>(i);  // keys 0..255: all in bucket 0
    d.bytes[8] = static_cast<std::uint8_t>(i >> 8);
    held.push_back(d);
  }
  auto uniform = test::random_digests(3000, 31);
  held.insert(held.end(), uniform.begin(), uniform.end());
  expect_matches_reference(held, queries_for(held, 3000, 32));
}

TEST(IndexLookup, EveryBlockSize) {
  const auto held = test::random_digests(777, 41);
  for (std::uint32_t block : {1u, 2u, 4u, 64u, 512u, 1024u, kIndexMaxBlockDigests}) {
    SCOPED_TRACE(block);
    expect_matches_reference(held, queries_for(held, 100, block), block);
  }
}

TEST(IndexLookup, BatchOfEverySmallSize) {
  const auto held = test::random_digests(300, 51);
  const auto all = queries_for(held, 300, 52);
  for (std::size_t n = 0; n <= 70; ++n) {
    expect_matches_reference(held, std::vector<Digest>(all.begin(), all.begin() + n));
  }
}

TEST(IndexLookup, RefusesAShortAnswerSpan) {
  Index index;
  std::vector<Digest> queries(3);
  std::vector<std::uint8_t> out(2);
  auto result = index.contains(queries, out);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
}

// --- writing -----------------------------------------------------------------

TEST(IndexWriter, RefusesUnsortedOrDuplicateDigests) {
  auto digests = test::random_digests(10, 61);
  std::sort(digests.begin(), digests.end());
  auto unsorted = digests;
  std::swap(unsorted[3], unsorted[4]);
  auto duplicate = digests;
  duplicate[5] = duplicate[4];
  for (const auto& bad : {unsorted, duplicate}) {
    auto bytes = serialize_index({}, bad);
    ASSERT_FALSE(bytes);
    EXPECT_EQ(bytes.error().code, ErrorCode::kInvalidArgument);
    EXPECT_NE(bytes.error().message.find("digest 4"), std::string::npos) << bytes.error().message;
  }
  // Across add() calls too, and nothing appears at the path.
  test::TempDir dir("abf-index");
  auto writer = IndexWriter::create(dir / "x.abfx", {}, 10);
  ASSERT_TRUE(writer);
  ASSERT_TRUE(writer->add(std::span(digests).first(5)));
  auto again = writer->add(std::span(digests).subspan(4, 1));
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("repeats digest 4"), std::string::npos);
  writer = IndexWriter::create(dir / "x.abfx", {}, 10);  // the failed one is dropped
  EXPECT_FALSE(fs::exists(dir / "x.abfx"));
}

TEST(IndexWriter, RefusesACountOtherThanAnnounced) {
  test::TempDir dir("abf-index");
  auto digests = test::random_digests(4, 62);
  std::sort(digests.begin(), digests.end());
  {
    auto writer = IndexWriter::create(dir / "x.abfx", {}, 3);
    ASSERT_TRUE(writer);
    auto added = writer->add(digests);
    ASSERT_FALSE(added);
    EXPECT_EQ(added.error().code, ErrorCode::kInvalidArgument);
  }
  {
    auto writer = IndexWriter::create(dir / "x.abfx", {}, 5);
    ASSERT_TRUE(writer);
    ASSERT_TRUE(writer->add(digests));
    auto committed = writer->commit();
    ASSERT_FALSE(committed);
    EXPECT_NE(committed.error().message.find("4 digests arrived, 5 were announced"),
              std::string::npos);
  }
  EXPECT_FALSE(fs::exists(dir / "x.abfx"));
}

TEST(IndexWriter, RefusesABadBlockSize) {
  for (std::uint32_t block : {0u, 3u, 4095u, kIndexMaxBlockDigests * 2}) {
    IndexIdentity identity;
    identity.block_digests = block;
    auto bytes = serialize_index(identity, {});
    ASSERT_FALSE(bytes);
    EXPECT_EQ(bytes.error().code, ErrorCode::kInvalidArgument);
  }
}

// --- strict loading: one code per rule ------------------------------------------

// The golden member-5 file (block size 2: three blocks).
std::vector<std::uint8_t> golden() { return bytes_of(golden_path("member-5.abfx")); }

void reseal_header(std::vector<std::uint8_t>& bytes) {
  std::memset(bytes.data() + 80, 0, 8);
  const std::uint64_t sum = XXH3_64bits(bytes.data(), 128);
  std::memcpy(bytes.data() + 80, &sum, 8);
}

// Recomputes the block table and its checksum from the digests as they are.
void reseal_body(std::vector<std::uint8_t>& bytes) {
  std::uint64_t count = 0, blocks = 0;
  std::uint32_t block = 0;
  std::memcpy(&count, bytes.data() + 56, 8);
  std::memcpy(&block, bytes.data() + 64, 4);
  std::memcpy(&blocks, bytes.data() + 72, 8);
  const std::size_t table = 128 + count * 32;
  for (std::uint64_t b = 0; b < blocks; ++b) {
    const std::uint64_t first = b * block;
    const std::uint64_t n = std::min<std::uint64_t>(block, count - first);
    const std::uint64_t sum = XXH3_64bits(bytes.data() + 128 + first * 32, n * 32);
    std::memcpy(bytes.data() + table + 8 * b, &sum, 8);
  }
  const std::uint64_t sum = XXH3_64bits(bytes.data() + table, blocks * 8);
  std::memcpy(bytes.data() + table + blocks * 8, &sum, 8);
}

void expect_refused(const std::vector<std::uint8_t>& bytes, ErrorCode code,
                    const std::string& says) {
  auto parsed = Index::parse(bytes);
  ASSERT_FALSE(parsed) << "accepted; expected " << to_string(code);
  EXPECT_EQ(parsed.error().code, code) << parsed.error().describe();
  EXPECT_NE(parsed.error().message.find(says), std::string::npos) << parsed.error().message;
  // And from a file, both ways.
  test::TempDir dir("abf-index-bad");
  const auto path = dir / "bad.abfx";
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = Index::load(path, mode);
    ASSERT_FALSE(loaded);
    EXPECT_EQ(loaded.error().code, code) << loaded.error().describe();
    EXPECT_NE(loaded.error().message.find(path.string()), std::string::npos);
  }
}

TEST(IndexLoad, GoldenIsAcceptedBeforeEachDamage) {
  ASSERT_TRUE(Index::parse(golden()));
  auto resealed = golden();
  reseal_header(resealed);
  reseal_body(resealed);
  EXPECT_EQ(resealed, golden());  // the helpers recompute exactly what is stored
}

TEST(IndexLoad, RefusesTruncatedFiles) {
  const auto bytes = golden();
  expect_refused({bytes.begin(), bytes.begin() + 0}, ErrorCode::kIndexTruncated, "0 bytes");
  expect_refused({bytes.begin(), bytes.begin() + 127}, ErrorCode::kIndexTruncated, "128-byte");
  expect_refused({bytes.begin(), bytes.begin() + 128}, ErrorCode::kIndexTruncated,
                 "header promises 320");
  expect_refused({bytes.begin(), bytes.end() - 1}, ErrorCode::kIndexTruncated,
                 "header promises 320");
}

TEST(IndexLoad, RefusesTrailingBytes) {
  auto bytes = golden();
  bytes.push_back(0);
  expect_refused(bytes, ErrorCode::kIndexTrailingBytes, "1 more");
}

TEST(IndexLoad, RefusesWrongMagic) {
  auto bytes = golden();
  bytes[3] = '1';  // an ABF1 snapshot's magic
  expect_refused(bytes, ErrorCode::kIndexBadMagic, "bad magic");
}

TEST(IndexLoad, RefusesOtherFormatVersions) {
  for (std::uint32_t version : {0u, 2u}) {
    auto bytes = golden();
    std::memcpy(bytes.data() + 4, &version, 4);
    reseal_header(bytes);
    expect_refused(bytes, ErrorCode::kIndexUnsupportedFormat,
                   "format version " + std::to_string(version));
  }
}

TEST(IndexLoad, RefusesAFlippedHeaderBit) {
  for (std::size_t byte : {8u, 16u, 33u, 45u, 56u, 64u, 72u, 80u, 100u, 127u}) {
    auto bytes = golden();
    bytes[byte] ^= 0x10;
    expect_refused(bytes, ErrorCode::kIndexHeaderChecksum, "header checksum mismatch");
  }
}

TEST(IndexLoad, RefusesEachInvalidHeaderField) {
  struct Case {
    std::size_t offset;
    std::uint64_t value;
    int width;
    std::string says;
  };
  const std::vector<Case> cases = {
      {8, 64, 4, "header size 64"},
      {12, 3, 4, "content flags"},
      {64, 3, 4, "block size 3"},
      {64, 0, 4, "block size 0"},
      {72, 4, 8, "block count 4 is not ceil(5 digests / 2) = 3"},
      {56, 7, 8, "block count 3 is not ceil(7 digests / 2) = 4"},  // the count mismatch
      {56, std::uint64_t{1} << 41, 8, "exceeds 2^40"},
      {68, 1, 4, "reserved header byte 68"},
      {120, 1, 1, "reserved header byte 120"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.says);
    auto bytes = golden();
    std::memcpy(bytes.data() + c.offset, &c.value, c.width);
    reseal_header(bytes);
    expect_refused(bytes, ErrorCode::kIndexInvalidHeader, c.says);
  }
  // A fingerprint without its flag.
  auto bytes = golden();
  std::memset(bytes.data() + 12, 0, 4);
  reseal_header(bytes);
  expect_refused(bytes, ErrorCode::kIndexInvalidHeader, "flags bit 0");
}

TEST(IndexLoad, RefusesACountTheFileDoesNotHold) {
  // Count 4 with blocks recomputed: the file has one digest (32 bytes) more
  // than the header promises.
  auto bytes = golden();
  const std::uint64_t count = 4;
  std::memcpy(bytes.data() + 56, &count, 8);
  const std::uint64_t blocks = 2;
  std::memcpy(bytes.data() + 72, &blocks, 8);
  reseal_header(bytes);
  expect_refused(bytes, ErrorCode::kIndexTrailingBytes, "more than the header promises");
}

TEST(IndexLoad, RefusesAFlippedBlockTableBit) {
  auto bytes = golden();
  bytes[128 + 5 * 32 + 9] ^= 1;  // block 1's checksum
  expect_refused(bytes, ErrorCode::kIndexBlockTableChecksum, "block table checksum mismatch");
  auto tail = golden();
  tail.back() ^= 0x80;  // the table's own checksum
  expect_refused(tail, ErrorCode::kIndexBlockTableChecksum, "block table checksum mismatch");
}

TEST(IndexLoad, RefusesAFlippedDigestBitNamingItsBlock) {
  for (std::size_t digest = 0; digest < 5; ++digest) {
    auto bytes = golden();
    bytes[128 + digest * 32 + 17] ^= 4;
    expect_refused(
        bytes, ErrorCode::kIndexBlockChecksum,
        "block " + std::to_string(digest / 2) + " (digests " + std::to_string(digest / 2 * 2));
  }
}

TEST(IndexLoad, RefusesUnsortedDigests) {
  auto bytes = golden();
  std::swap_ranges(bytes.begin() + 128 + 2 * 32, bytes.begin() + 128 + 3 * 32,
                   bytes.begin() + 128 + 3 * 32);
  reseal_body(bytes);
  expect_refused(bytes, ErrorCode::kIndexNotAscending, "digest 3");
}

TEST(IndexLoad, RefusesDuplicateDigests) {
  auto bytes = golden();
  std::copy(bytes.begin() + 128 + 32, bytes.begin() + 128 + 64, bytes.begin() + 128 + 64);
  reseal_body(bytes);
  expect_refused(bytes, ErrorCode::kIndexNotAscending, "digest 2");
  auto parsed = Index::parse(bytes);
  EXPECT_NE(parsed.error().message.find("repeats digest 1"), std::string::npos);
}

TEST(IndexLoad, RefusesWhatIsNotARegularFile) {
  test::TempDir dir("abf-index");
  auto loaded = Index::load(dir.path());
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kIo);
  auto missing = Index::load(dir / "missing.abfx");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);
}

TEST(IndexLoad, SaveAndLoadRoundTripBothModes) {
  test::TempDir dir("abf-index");
  auto digests = test::random_digests(10000, 71);
  std::sort(digests.begin(), digests.end());
  IndexIdentity identity;
  identity.catalog_id = test::golden_catalog_id();
  identity.catalog_version = 9;
  identity.content_fingerprint = ContentFingerprint::of(digests);
  identity.block_digests = 256;
  ASSERT_TRUE(save_index(dir / "i.abfx", identity, digests));
  for (LoadMode mode : {LoadMode::kAuto, LoadMode::kCopy, LoadMode::kMap}) {
    auto index = Index::load(dir / "i.abfx", mode);
    ASSERT_TRUE(index) << index.error().describe();
    EXPECT_EQ(index->size(), digests.size());
    EXPECT_EQ(index->catalog_version(), 9u);
    EXPECT_TRUE(std::equal(digests.begin(), digests.end(), index->digests().begin()));
    // 64-byte aligned digests in the copy, as in a mapping.
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(index->digests().data()) % 64, 0u);
  }
}

}  // namespace
}  // namespace abf
