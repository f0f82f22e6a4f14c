// Index sets (ABXS, docs/protocol.md section 14, "Index sets"): lookups
// equal to a std::set on random, adversarial and boundary splits; every
// shard holds exactly the digests section 13's rule sends it; writing is
// all or nothing and replaces the old set; a distinct refusal for every way
// a manifest or a shard can be wrong; a reader never sees a mix of sets.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "abf/abf.hpp"
#include "filter_set_internal.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

namespace fs = std::filesystem;

std::vector<std::uint8_t> bytes_of(const fs::path& path) {
  const std::string text = test::read_file(path);
  return {text.begin(), text.end()};
}

void write_bytes(const fs::path& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

std::vector<Digest> sorted_unique(std::vector<Digest> digests) {
  std::sort(digests.begin(), digests.end());
  digests.erase(std::unique(digests.begin(), digests.end()), digests.end());
  return digests;
}

IndexIdentity identity_of(std::span<const Digest> digests, std::uint64_t version = 7,
                          std::uint32_t block_digests = 4) {
  IndexIdentity identity;
  identity.catalog_id = *CatalogId::parse_hex("5f0c6e2a9b7d4e11a3c2d8f0e6b4a197");
  identity.catalog_version = version;
  identity.content_fingerprint = ContentFingerprint::of(digests);
  identity.block_digests = block_digests;
  return identity;
}

// Half held, half not, plus the extremes, shuffled.
std::vector<Digest> queries_for(const std::vector<Digest>& held, std::size_t absent,
                                std::uint64_t seed) {
  std::vector<Digest> queries = held;
  const auto more = test::random_digests(absent, seed);
  queries.insert(queries.end(), more.begin(), more.end());
  queries.push_back(Digest{});
  Digest ones;
  ones.bytes.fill(0xFF);
  queries.push_back(ones);
  std::mt19937_64 rng(seed);
  std::shuffle(queries.begin(), queries.end(), rng);
  return queries;
}

void expect_answers(const IndexSet& set, const std::vector<Digest>& held,
                    const std::vector<Digest>& queries) {
  EXPECT_EQ(set.size(), held.size());
  EXPECT_EQ(set.content_fingerprint(), ContentFingerprint::of(held));
  EXPECT_EQ(set.digests_fingerprint(), ContentFingerprint::of(held));
  const std::set<Digest> reference(held.begin(), held.end());
  std::vector<std::uint8_t> bytes(queries.size() + 1, 7);
  auto bools = std::make_unique<bool[]>(queries.size() + 1);
  ASSERT_TRUE(set.contains(queries, bytes));
  ASSERT_TRUE(set.contains(queries, std::span(bools.get(), queries.size())));
  for (std::size_t i = 0; i < queries.size(); ++i) {
    const bool expected = reference.contains(queries[i]);
    ASSERT_EQ(bytes[i], expected ? 1 : 0) << "query " << i;
    ASSERT_EQ(bools[i], expected) << "query " << i;
    ASSERT_EQ(set.contains(queries[i]), expected) << "query " << i;
  }
  EXPECT_EQ(bytes[queries.size()], 7);  // nothing past the answers
}

// The set of `held` split into `shards` in memory (IndexSet::from_shards of
// parsed ABFX bytes: no files, so 65,536 shards cost no fsyncs).
IndexSet in_memory(const std::vector<Digest>& held, std::uint32_t shards) {
  std::vector<std::vector<Digest>> parts(shards);
  for (const Digest& d : held) parts[probe::shard_of(d.bytes.data(), shards)].push_back(d);
  std::vector<Index> indexes;
  for (const auto& part : parts) {
    auto bytes = serialize_index(identity_of(part), part);
    EXPECT_TRUE(bytes);
    auto index = Index::parse(*bytes);
    EXPECT_TRUE(index);
    indexes.push_back(std::move(*index));
  }
  auto set = IndexSet::from_shards(std::move(indexes));
  EXPECT_TRUE(set) << set.error().describe();
  return std::move(*set);
}

// Compares every lookup path with a std::set: the set in memory, and (for
// S <= 64) written to files and loaded both ways.
void expect_matches_reference(const std::vector<Digest>& held_in, std::uint32_t shards,
                              const std::vector<Digest>& queries) {
  const auto held = sorted_unique(held_in);
  {
    SCOPED_TRACE("in memory");
    const IndexSet set = in_memory(held, shards);
    ASSERT_EQ(set.shard_count(), shards);
    expect_answers(set, held, queries);
  }
  if (shards > 64) return;
  test::TempDir dir("abf-idxset");
  const fs::path path = dir / "c.abxs";
  auto written = save_index_set(path, identity_of(held), shards, held);
  ASSERT_TRUE(written) << written.error().describe();
  EXPECT_EQ(written->digest_count, held.size());
  for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    SCOPED_TRACE(mode == LoadMode::kMap ? "mapped" : "copied");
    auto set = IndexSet::load(path, mode);
    ASSERT_TRUE(set) << set.error().describe();
    ASSERT_EQ(set->shard_count(), shards);
    expect_answers(*set, held, queries);
  }
}

TEST(IndexSetLookup, FromShardsRefusesMisroutedDigestsAndMixedCatalogs) {
  const auto held = sorted_unique(test::random_digests(100, 5));
  auto one = Index::parse(*serialize_index(identity_of(held), held));
  ASSERT_TRUE(one);
  auto misrouted = IndexSet::from_shards({*one, Index()});
  ASSERT_FALSE(misrouted);
  EXPECT_EQ(misrouted.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(misrouted.error().message.find("belongs to shard 1"), std::string::npos);
  auto mixed = IndexSet::from_shards({Index(), *one});
  ASSERT_FALSE(mixed);
  EXPECT_NE(mixed.error().message.find("shard 1 of 2: catalog"), std::string::npos);
  EXPECT_FALSE(IndexSet::from_shards({}));
  EXPECT_TRUE(IndexSet::from_shards({*one}));
}

// --- golden vectors -------------------------------------------------------------

// vectors/index/index-set.tsv: the manifest, then each shard file, of the
// set scripts/index-vectors writes (member-5 in 3 shards, a fixed buildId).
struct GoldenSet {
  std::vector<std::string> files;  // the manifest first
  std::vector<std::uint64_t> sizes;
  std::vector<Digest> digests;
  IndexIdentity identity;
  std::uint32_t shards = 0;
  std::uint64_t build_id = 0;
};

GoldenSet golden_set() {
  GoldenSet g;
  for (const auto& row : test::read_tsv("vectors/index/index-set.tsv")) {
    EXPECT_EQ(row.size(), 9u);
    if (g.files.empty()) {
      std::uint64_t first = 0, end = 0;
      EXPECT_EQ(std::sscanf(row[1].c_str(), "members %lu %lu", &first, &end), 2);
      for (std::uint64_t i = first; i < end; ++i) g.digests.push_back(test::member_digest(i));
      std::sort(g.digests.begin(), g.digests.end());
      g.identity.catalog_id = *CatalogId::parse_hex(row[2]);
      g.identity.catalog_version = std::stoull(row[3]);
      g.identity.block_digests = static_cast<std::uint32_t>(std::stoul(row[4]));
      g.identity.content_fingerprint = ContentFingerprint::of(g.digests);
      g.shards = static_cast<std::uint32_t>(std::stoul(row[5]));
      g.build_id = std::stoull(row[6], nullptr, 16);
    }
    g.files.push_back(row[7]);
    g.sizes.push_back(std::stoull(row[8]));
  }
  EXPECT_EQ(g.files.size(), 4u);
  return g;
}

TEST(IndexSetGolden, WriterProducesTheGoldenBytes) {
  const GoldenSet g = golden_set();
  ASSERT_EQ(g.files.size(), g.shards + 1);
  test::TempDir dir("abf-idxset-golden");
  auto written = save_index_set(dir / g.files[0], g.identity, g.shards, g.digests,
                                {.block_digests = g.identity.block_digests, .build_id = g.build_id});
  ASSERT_TRUE(written) << written.error().describe();
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, g.files.size());
  for (std::size_t i = 0; i < g.files.size(); ++i) {
    SCOPED_TRACE(g.files[i]);
    const auto expected = bytes_of(test::data_path("vectors/index/" + g.files[i]));
    ASSERT_EQ(expected.size(), g.sizes[i]);
    EXPECT_EQ(bytes_of(dir / g.files[i]), expected);
  }
}

TEST(IndexSetGolden, LoaderAcceptsTheGoldenSet) {
  const GoldenSet g = golden_set();
  for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto set = IndexSet::load(test::data_path("vectors/index/" + g.files[0]), mode);
    ASSERT_TRUE(set) << set.error().describe();
    EXPECT_EQ(set->shard_count(), g.shards);
    EXPECT_EQ(set->catalog_id(), g.identity.catalog_id);
    EXPECT_EQ(set->catalog_version(), g.identity.catalog_version);
    EXPECT_EQ(set->content_fingerprint(), g.identity.content_fingerprint);
    EXPECT_EQ(set->size(), g.digests.size());
    for (const Digest& d : g.digests) EXPECT_TRUE(set->contains(d));
    for (std::uint64_t i = 0; i < 20; ++i) EXPECT_FALSE(set->contains(test::non_member_digest(i)));
  }
  auto manifest = parse_index_set_manifest(bytes_of(test::data_path("vectors/index/" + g.files[0])));
  ASSERT_TRUE(manifest) << manifest.error().describe();
  EXPECT_EQ(manifest->build_id, g.build_id);
  for (std::uint32_t i = 0; i < g.shards; ++i) EXPECT_EQ(manifest->shards[i].file, g.files[i + 1]);
}

// --- lookups ------------------------------------------------------------------

TEST(IndexSetLookup, MatchesAStdSetOnRandomDigests) {
  for (std::uint32_t shards : {1u, 2u, 3u, 16u, 17u, 1000u}) {
    for (std::size_t n : {0, 1, 5, 100, 20000}) {
      SCOPED_TRACE(testing::Message() << "S = " << shards << ", n = " << n);
      const auto held = test::random_digests(n, 100 + n);
      expect_matches_reference(held, shards, queries_for(held, 500, shards + n));
    }
  }
}

TEST(IndexSetLookup, AllDigestsInOneShard) {
  // Bytes 24..32 zero: every digest routes to shard 0; the rest are empty.
  auto held = test::random_digests(3000, 7);
  for (Digest& d : held) std::memset(d.bytes.data() + 24, 0, 8);
  auto queries = queries_for(held, 1000, 8);
  for (std::size_t i = 0; i < queries.size(); i += 2) {
    std::memset(queries[i].bytes.data() + 24, 0, 8);  // half absent in shard 0 too
  }
  expect_matches_reference(held, 7, queries);
}

TEST(IndexSetLookup, MostShardsEmptyAtTheLargestCount) {
  const auto held = test::random_digests(5, 9);
  expect_matches_reference(held, kIndexSetMaxShardCount, queries_for(held, 300, 10));
  expect_matches_reference({}, kIndexSetMaxShardCount, queries_for({}, 100, 11));
}

TEST(IndexSetLookup, BatchesAroundTheSortThresholdAndBlockEdges) {
  const auto held = test::random_digests(2000, 12);
  const auto all = queries_for(held, 40000, 13);
  for (std::size_t n : {0, 1, 63, 64, 65, 16383, 16384, 16385, 32769}) {
    SCOPED_TRACE(n);
    expect_matches_reference(held, 2, std::vector<Digest>(all.begin(), all.begin() + n));
  }
}

TEST(IndexSetLookup, RefusesAShortAnswerSpan) {
  const auto held = sorted_unique(test::random_digests(10, 14));
  test::TempDir dir("abf-idxset");
  ASSERT_TRUE(save_index_set(dir / "c.abxs", identity_of(held), 3, held));
  auto set = IndexSet::load(dir / "c.abxs");
  ASSERT_TRUE(set);
  std::vector<Digest> queries(100);
  std::vector<std::uint8_t> out(99);
  auto result = set->contains(queries, out);
  ASSERT_FALSE(result);
  EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument);
}

// --- writing ------------------------------------------------------------------

TEST(IndexSetWrite, EachShardHoldsExactlyItsDigests) {
  const auto held = sorted_unique(test::random_digests(4000, 15));
  test::TempDir dir("abf-idxset");
  const std::uint32_t shards = 5;
  auto written = save_index_set(dir / "c.abxs", identity_of(held), shards, held,
                                {.block_digests = 8, .build_id = 0x0123456789abcdefULL});
  ASSERT_TRUE(written) << written.error().describe();
  auto manifest = parse_index_set_manifest(bytes_of(dir / "c.abxs"));
  ASSERT_TRUE(manifest) << manifest.error().describe();
  ASSERT_EQ(manifest->shard_count(), shards);
  EXPECT_EQ(manifest->build_id, 0x0123456789abcdefULL);
  for (std::uint32_t i = 0; i < shards; ++i) {
    EXPECT_EQ(manifest->shards[i].file,
              "c.abxs.0123456789abcdef.0000" + std::to_string(i) + ".abfx");
    // Each shard is an ordinary ABFX file: its own count and fingerprint.
    auto shard = Index::load(dir / manifest->shards[i].file);
    ASSERT_TRUE(shard) << shard.error().describe();
    std::vector<Digest> expected;
    for (const Digest& d : held) {
      if (probe::shard_of(d.bytes.data(), shards) == i) expected.push_back(d);
    }
    EXPECT_TRUE(std::ranges::equal(shard->digests(), expected));
    EXPECT_EQ(shard->content_fingerprint(), ContentFingerprint::of(expected));
    EXPECT_EQ(shard->catalog_version(), 7u);
    EXPECT_EQ(shard->header().block_digests, 8u);
    EXPECT_EQ(manifest->shards[i].digest_count, expected.size());
    EXPECT_EQ(manifest->shards[i].header_checksum, shard->header().header_checksum);
    EXPECT_EQ(manifest->shards[i].table_checksum, shard->table_checksum());
  }
}

TEST(IndexSetWrite, SeveralPassesWriteTheSameBytesAsOne) {
  const auto held = sorted_unique(test::random_digests(3000, 16));
  test::TempDir one("abf-idxset"), many("abf-idxset");
  auto a = save_index_set(one / "c.abxs", identity_of(held), 7, held, {.build_id = 42});
  auto b = save_index_set(many / "c.abxs", identity_of(held), 7, held,
                          {.max_open_shards = 2, .build_id = 42});
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->passes, 2u);
  EXPECT_EQ(b->passes, 5u);  // a count, then shards {0,1} {2,3} {4,5} {6}
  std::size_t files = 0;
  for (const auto& entry : fs::directory_iterator(one.path())) {
    ++files;
    EXPECT_EQ(bytes_of(entry.path()), bytes_of(many / entry.path().filename().string()))
        << entry.path();
  }
  EXPECT_EQ(files, 8u);
}

TEST(IndexSetWrite, ReplacesTheOldSetAndRemovesItsShards) {
  test::TempDir dir("abf-idxset");
  const fs::path path = dir / "c.abxs";
  const auto first = sorted_unique(test::random_digests(100, 17));
  const auto second = sorted_unique(test::random_digests(200, 18));
  ASSERT_TRUE(save_index_set(path, identity_of(first, 1), 4, first));
  ASSERT_TRUE(save_index_set(path, identity_of(second, 2), 3, second));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 4u);  // the manifest and the new set's 3 shards
  auto set = IndexSet::load(path);
  ASSERT_TRUE(set) << set.error().describe();
  EXPECT_EQ(set->catalog_version(), 2u);
  EXPECT_EQ(set->size(), 200u);
  // A plain index replaced by a set, and a set by a plain index.
  ASSERT_TRUE(save_index(dir / "p.abfx", identity_of(first), first));
  ASSERT_TRUE(save_index_set(dir / "p.abfx", identity_of(second), 2, second));
  auto replaced = IndexSet::load(dir / "p.abfx");
  ASSERT_TRUE(replaced) << replaced.error().describe();
  EXPECT_EQ(replaced->shard_count(), 2u);
}

TEST(IndexSetWrite, AFailedWriteLeavesNothingAndTheOldSetAsItWas) {
  test::TempDir dir("abf-idxset");
  const fs::path path = dir / "c.abxs";
  const auto held = sorted_unique(test::random_digests(500, 19));
  ASSERT_TRUE(save_index_set(path, identity_of(held), 3, held));
  const auto before = bytes_of(path);
  std::set<fs::path> files_before;
  for (const auto& entry : fs::directory_iterator(dir.path())) files_before.insert(entry.path());
  // A source that fails on its third pass: two groups of shards were
  // written by then.
  int calls = 0;
  auto failing = write_index_set(
      path, identity_of(held), 6,
      [&](const IndexDigestSink& sink) -> Result<void> {
        if (++calls == 3) return fail(ErrorCode::kCatalog, "the catalog went away");
        return sink(held);
      },
      {.max_open_shards = 2, .build_id = std::nullopt});
  ASSERT_FALSE(failing);
  EXPECT_EQ(failing.error().code, ErrorCode::kCatalog);
  // A source that delivers other digests on its second pass.
  auto other = sorted_unique(test::random_digests(500, 20));
  int passes = 0;
  auto changed = write_index_set(path, identity_of(held), 3, [&](const IndexDigestSink& sink) {
    return sink(++passes == 1 ? held : other);
  });
  ASSERT_FALSE(changed);
  EXPECT_EQ(changed.error().code, ErrorCode::kInvalidArgument);
  // A fingerprint the digests do not add up to.
  auto wrong = save_index_set(path, identity_of(other), 3, held);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("add up to"), std::string::npos);
  // Unsorted.
  std::vector<Digest> unsorted(held.rbegin(), held.rend());
  auto refused = save_index_set(path, identity_of(held), 3, unsorted);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(bytes_of(path), before);
  std::set<fs::path> files_after;
  for (const auto& entry : fs::directory_iterator(dir.path())) files_after.insert(entry.path());
  EXPECT_EQ(files_after, files_before);
}

TEST(IndexSetWrite, RefusesBadArguments) {
  test::TempDir dir("abf-idxset");
  const std::vector<Digest> none;
  for (std::uint32_t shards : {0u, kIndexSetMaxShardCount + 1}) {
    auto r = save_index_set(dir / "c.abxs", identity_of(none), shards, none);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().code, ErrorCode::kInvalidArgument);
  }
  auto to_stdout = save_index_set("-", identity_of(none), 2, none);
  ASSERT_FALSE(to_stdout);
  EXPECT_EQ(to_stdout.error().code, ErrorCode::kInvalidArgument);
  auto long_name = save_index_set(dir / std::string(228, 'x'), identity_of(none), 2, none);
  ASSERT_FALSE(long_name);
  EXPECT_EQ(long_name.error().code, ErrorCode::kInvalidArgument);
  EXPECT_TRUE(save_index_set(dir / std::string(227, 'x'), identity_of(none), 2, none));
}

// --- loading: the manifest's rules --------------------------------------------

// A set of 3 shards in `dir`, its manifest's bytes.
struct Fixture {
  test::TempDir dir{"abf-idxset-bad"};
  std::vector<Digest> held = sorted_unique(test::random_digests(300, 21));
  fs::path path = dir / "c.abxs";
  std::vector<std::uint8_t> manifest;
  Fixture() {
    auto written = save_index_set(path, identity_of(held), 3, held, {.build_id = 0xabc});
    EXPECT_TRUE(written) << written.error().describe();
    manifest = bytes_of(path);
  }
  IndexSetManifest parsed() const { return *parse_index_set_manifest(manifest); }
};

void reseal(std::vector<std::uint8_t>& bytes) {
  const std::uint64_t body = XXH3_64bits(bytes.data() + 128, bytes.size() - 128);
  std::memcpy(bytes.data() + 72, &body, 8);
  std::memset(bytes.data() + 80, 0, 8);
  const std::uint64_t header = XXH3_64bits(bytes.data(), 128);
  std::memcpy(bytes.data() + 80, &header, 8);
}

template <class T>
void put(std::vector<std::uint8_t>& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

void expect_refused(const Fixture& f, const std::vector<std::uint8_t>& bytes, ErrorCode code,
                    const std::string& says) {
  auto parsed = parse_index_set_manifest(bytes, "m");
  if (code == ErrorCode::kIndexSetManifestInvalid || code == ErrorCode::kIndexSetManifestTruncated ||
      code == ErrorCode::kIndexSetManifestChecksum ||
      code == ErrorCode::kIndexSetManifestUnsupportedFormat) {
    ASSERT_FALSE(parsed) << "parsed; expected " << to_string(code);
    EXPECT_EQ(parsed.error().code, code) << parsed.error().describe();
  }
  write_bytes(f.path, bytes);
  for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = IndexSet::load(f.path, mode);
    ASSERT_FALSE(loaded) << "loaded; expected " << to_string(code);
    EXPECT_EQ(loaded.error().code, code) << loaded.error().describe();
    EXPECT_NE(loaded.error().message.find(says), std::string::npos) << loaded.error().message;
    EXPECT_NE(loaded.error().message.find(f.path.string()), std::string::npos);
  }
}

TEST(IndexSetLoad, TheFixtureLoadsAndResealingChangesNothing) {
  Fixture f;
  ASSERT_TRUE(IndexSet::load(f.path));
  auto copy = f.manifest;
  reseal(copy);
  EXPECT_EQ(copy, f.manifest);
  EXPECT_EQ(encode_index_set_manifest(f.parsed()), f.manifest);
}

TEST(IndexSetLoad, RefusesATruncatedHeader) {
  Fixture f;
  for (std::size_t size : {0, 3, 4, 127}) {
    // Under 4 bytes there is no magic to see: the ABFX loader answers.
    const auto code =
        size < 4 ? ErrorCode::kIndexTruncated : ErrorCode::kIndexSetManifestTruncated;
    auto cut = std::vector<std::uint8_t>(f.manifest.begin(), f.manifest.begin() + size);
    write_bytes(f.path, cut);
    auto loaded = IndexSet::load(f.path);
    ASSERT_FALSE(loaded);
    EXPECT_EQ(loaded.error().code, code) << size << ": " << loaded.error().describe();
    auto parsed = parse_index_set_manifest(cut);
    ASSERT_FALSE(parsed);
    EXPECT_EQ(parsed.error().code, ErrorCode::kIndexSetManifestTruncated);
  }
}

TEST(IndexSetLoad, AFileWithoutTheMagicIsReadAsAnIndex) {
  Fixture f;
  auto bytes = f.manifest;
  bytes[3] = 'Z';
  auto parsed = parse_index_set_manifest(bytes);
  ASSERT_FALSE(parsed);
  EXPECT_EQ(parsed.error().code, ErrorCode::kIndexSetManifestInvalid);
  write_bytes(f.path, bytes);
  auto loaded = IndexSet::load(f.path);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kIndexBadMagic);
  // And a real ABFX file is a one-shard set.
  ASSERT_TRUE(save_index(f.path, identity_of(f.held), f.held));
  auto single = IndexSet::load(f.path);
  ASSERT_TRUE(single) << single.error().describe();
  EXPECT_EQ(single->shard_count(), 1u);
  EXPECT_EQ(single->size(), f.held.size());
  EXPECT_EQ(single->content_fingerprint(), ContentFingerprint::of(f.held));
}

TEST(IndexSetLoad, RefusesOtherFormatVersions) {
  Fixture f;
  for (std::uint32_t version : {0u, 2u}) {
    auto bytes = f.manifest;
    put<std::uint32_t>(bytes, 4, version);
    reseal(bytes);
    expect_refused(f, bytes, ErrorCode::kIndexSetManifestUnsupportedFormat, "format version");
  }
}

TEST(IndexSetLoad, RefusesFlippedChecksummedBits) {
  Fixture f;
  for (std::size_t offset : {8, 20, 56, 64, 80, 95, 100}) {
    auto bytes = f.manifest;
    bytes[offset] ^= 0x10;
    expect_refused(f, bytes, ErrorCode::kIndexSetManifestChecksum, "header checksum");
  }
  for (std::size_t offset : {std::size_t{128}, std::size_t{128 + 40}, f.manifest.size() - 1}) {
    auto bytes = f.manifest;
    bytes[offset] ^= 0x10;
    expect_refused(f, bytes, ErrorCode::kIndexSetManifestChecksum, "body checksum");
  }
}

TEST(IndexSetLoad, RefusesABodyOfTheWrongLength) {
  Fixture f;
  auto longer = f.manifest;
  longer.push_back(0);
  expect_refused(f, longer, ErrorCode::kIndexSetManifestInvalid, "more than the manifest header");
  const std::vector<std::uint8_t> shorter(f.manifest.begin(), f.manifest.end() - 1);
  expect_refused(f, shorter, ErrorCode::kIndexSetManifestTruncated, "promises");
  auto huge = f.manifest;
  put<std::uint64_t>(huge, 64, std::uint64_t{1} << 40);
  reseal(huge);
  expect_refused(f, huge, ErrorCode::kIndexSetManifestInvalid, "more than any manifest");
}

TEST(IndexSetLoad, RefusesEachInvalidHeaderField) {
  Fixture f;
  const auto edited = [&](auto edit) {
    auto bytes = f.manifest;
    edit(bytes);
    reseal(bytes);
    return bytes;
  };
  expect_refused(f, edited([](auto& b) { put<std::uint32_t>(b, 8, 0); }),
                 ErrorCode::kIndexSetManifestInvalid, "shard count 0");
  expect_refused(f, edited([](auto& b) { put<std::uint32_t>(b, 8, 65537); }),
                 ErrorCode::kIndexSetManifestInvalid, "shard count 65537");
  expect_refused(f, edited([](auto& b) { put<std::uint32_t>(b, 12, 3); }),
                 ErrorCode::kIndexSetManifestInvalid, "content flags");
  expect_refused(f, edited([](auto& b) { put<std::uint32_t>(b, 12, 0); }),
                 ErrorCode::kIndexSetManifestInvalid, "flags bit 0");
  expect_refused(f, edited([](auto& b) { put<std::uint64_t>(b, 56, (std::uint64_t{1} << 40) + 1); }),
                 ErrorCode::kIndexSetManifestInvalid, "exceeds 2^40");
  for (std::size_t offset : {96, 127}) {
    expect_refused(f, edited([&](auto& b) { b[offset] = 1; }), ErrorCode::kIndexSetManifestInvalid,
                   "reserved header byte " + std::to_string(offset));
  }
  expect_refused(f, edited([](auto& b) { put<std::uint32_t>(b, 8, 1000); }),
                 ErrorCode::kIndexSetManifestInvalid, "cannot hold 1000 shard entries");
}

TEST(IndexSetLoad, RefusesEachInvalidEntry) {
  Fixture f;
  const auto encoded = [&](auto edit) {
    auto m = f.parsed();
    edit(m);
    return encode_index_set_manifest(m);
  };
  // Through the encoder: the checksums and lengths stay right.
  expect_refused(f, encoded([](auto& m) { m.shards[1].digest_count = m.digest_count + 1; }),
                 ErrorCode::kIndexSetManifestInvalid, "shard entry 1: digest count");
  expect_refused(f, encoded([](auto& m) { m.shards[2].file = std::string(256, 'a'); }),
                 ErrorCode::kIndexSetManifestInvalid, "shard entry 2: name length 256");
  expect_refused(f, encoded([](auto& m) { m.shards[0].file = "sub/x.abfx"; }),
                 ErrorCode::kIndexSetManifestInvalid, "shard entry 0: file name holds a '/'");
  expect_refused(f, encoded([](auto& m) { m.shards[0].file = ".."; }),
                 ErrorCode::kIndexSetManifestInvalid, "is not a file name");
  expect_refused(f, encoded([](auto& m) { std::swap(m.shards[0], m.shards[1]); }),
                 ErrorCode::kIndexSetManifestInvalid, "is that of shard 1");
  expect_refused(f, encoded([](auto& m) { m.digest_count += 1; }),
                 ErrorCode::kIndexSetManifestInvalid, "sum to");
  expect_refused(f, encoded([](auto& m) { m.shards[2].file = m.shards[1].file = "x.abfx"; }),
                 ErrorCode::kIndexSetManifestInvalid, "as an earlier shard does");
  // Raw edits, resealed: entry reserved bytes, name length 0, a name past the
  // end, bytes after the last name.
  const auto raw = [&](auto edit) {
    auto bytes = f.manifest;
    edit(bytes);
    reseal(bytes);
    return bytes;
  };
  expect_refused(f, raw([](auto& b) { b[128 + 32 + 28] = 1; }), ErrorCode::kIndexSetManifestInvalid,
                 "shard entry 1: reserved");
  expect_refused(f, raw([](auto& b) { put<std::uint32_t>(b, 128 + 24, 0); }),
                 ErrorCode::kIndexSetManifestInvalid, "shard entry 0: name length 0");
  expect_refused(f, raw([](auto& b) { put<std::uint32_t>(b, 128 + 64 + 24, 200); }),
                 ErrorCode::kIndexSetManifestInvalid, "runs past the end");
  expect_refused(f, raw([](auto& b) {
                   b.push_back('z');
                   put<std::uint64_t>(b, 64, b.size() - 128);
                 }),
                 ErrorCode::kIndexSetManifestInvalid, "1 bytes after the last shard's name");
}

// --- loading: the shards --------------------------------------------------------

TEST(IndexSetLoad, RefusesAMissingShardNamingIt) {
  Fixture f;
  const auto m = f.parsed();
  fs::remove(f.dir / m.shards[1].file);
  auto loaded = IndexSet::load(f.path);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kIndexSetShardMissing);
  EXPECT_NE(loaded.error().message.find("shard 1 of 3 (" + m.shards[1].file + ")"),
            std::string::npos)
      << loaded.error().message;
}

TEST(IndexSetLoad, ADamagedShardAnswersItsOwnRuleNamingTheShard) {
  Fixture f;
  const auto m = f.parsed();
  const fs::path shard = f.dir / m.shards[2].file;
  auto bytes = bytes_of(shard);
  bytes[128 + 5] ^= 1;
  write_bytes(shard, bytes);
  auto loaded = IndexSet::load(f.path);
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kIndexBlockChecksum);
  EXPECT_NE(loaded.error().message.find("shard 2 of 3"), std::string::npos);
}

// Replaces shard `i` with a valid ABFX file of `digests` and `identity`, and
// points the manifest's entry at it (count and checksums), so only the rule
// under test can refuse it.
void substitute_shard(Fixture& f, std::uint32_t i, const IndexIdentity& identity,
                      const std::vector<Digest>& digests, bool fix_entry = true) {
  auto m = f.parsed();
  const fs::path file = f.dir / m.shards[i].file;
  fs::remove(file);
  auto writer = IndexWriter::create(file, identity, digests.size());
  ASSERT_TRUE(writer);
  ASSERT_TRUE(writer->add(digests));
  ASSERT_TRUE(writer->commit());
  if (fix_entry) {
    m.digest_count += digests.size();
    m.digest_count -= m.shards[i].digest_count;
    m.shards[i].digest_count = digests.size();
    m.shards[i].header_checksum = writer->header_checksum();
    m.shards[i].table_checksum = writer->table_checksum();
  }
  f.manifest = encode_index_set_manifest(m);
  write_bytes(f.path, f.manifest);
}

std::vector<Digest> shard_digests(const std::vector<Digest>& held, std::uint32_t i,
                                  std::uint32_t shards) {
  std::vector<Digest> out;
  for (const Digest& d : held) {
    if (probe::shard_of(d.bytes.data(), shards) == i) out.push_back(d);
  }
  return out;
}

void expect_shard_mismatch(const Fixture& f, const std::string& says) {
  for (LoadMode mode : {LoadMode::kCopy, LoadMode::kMap}) {
    auto loaded = IndexSet::load(f.path, mode);
    ASSERT_FALSE(loaded) << "loaded; expected a mismatch: " << says;
    EXPECT_EQ(loaded.error().code, ErrorCode::kIndexSetShardMismatch) << loaded.error().describe();
    EXPECT_NE(loaded.error().message.find(says), std::string::npos) << loaded.error().message;
  }
}

TEST(IndexSetLoad, RefusesAShardOfAnotherCatalogOrVersion) {
  {
    Fixture f;
    const auto mine = shard_digests(f.held, 1, 3);
    auto identity = identity_of(mine);
    identity.catalog_id.bytes[0] ^= 1;
    substitute_shard(f, 1, identity, mine);
    expect_shard_mismatch(f, "shard 1 of 3 (c.abxs.0000000000000abc.00001.abfx): catalogId");
  }
  {
    Fixture f;
    const auto mine = shard_digests(f.held, 0, 3);
    substitute_shard(f, 0, identity_of(mine, 8), mine);
    expect_shard_mismatch(f, "catalogVersion is 8, the manifest says 7");
  }
}

TEST(IndexSetLoad, RefusesAShardOtherThanItsEntry) {
  {
    // Fewer digests than the entry records.
    Fixture f;
    auto mine = shard_digests(f.held, 1, 3);
    mine.pop_back();
    substitute_shard(f, 1, identity_of(mine), mine, /*fix_entry=*/false);
    expect_shard_mismatch(f, "digestCount");
  }
  {
    Fixture f;
    auto m = f.parsed();
    m.shards[2].header_checksum ^= 1;
    write_bytes(f.path, encode_index_set_manifest(m));
    expect_shard_mismatch(f, "shard 2 of 3 (c.abxs.0000000000000abc.00002.abfx): headerChecksum");
  }
  {
    Fixture f;
    auto m = f.parsed();
    m.shards[0].table_checksum ^= 1;
    write_bytes(f.path, encode_index_set_manifest(m));
    expect_shard_mismatch(f, "shard 0 of 3 (c.abxs.0000000000000abc.00000.abfx): tableChecksum");
  }
}

TEST(IndexSetLoad, RefusesAMisroutedDigest) {
  // Shard 1 holds its own digests and one of shard 2's: a lookup of that
  // digest is asked of shard 2 and answered absent. The file itself is a
  // valid index and the manifest's counts and checksums agree with it.
  Fixture f;
  auto mine = shard_digests(f.held, 1, 3);
  const auto theirs = shard_digests(f.held, 2, 3);
  mine.push_back(theirs.front());
  std::sort(mine.begin(), mine.end());
  substitute_shard(f, 1, identity_of(mine), mine);
  expect_shard_mismatch(f, "belongs to shard 2 of 3");
}

TEST(IndexSetLoad, RefusesAFingerprintThatIsNotTheShardsSum) {
  Fixture f;
  auto m = f.parsed();
  m.content_fingerprint_bytes = ContentFingerprint::of(test::random_digests(1, 99));
  write_bytes(f.path, encode_index_set_manifest(m));
  expect_shard_mismatch(f, "contentFingerprint: the shards' fingerprints sum to");
  // No fingerprint in the manifest while every shard has one.
  m.content_flags = 0;
  m.content_fingerprint_bytes = {};
  write_bytes(f.path, encode_index_set_manifest(m));
  expect_shard_mismatch(f, "the manifest says none");
}

TEST(IndexSetLoad, ASetWithoutFingerprintsLoads) {
  test::TempDir dir("abf-idxset");
  const auto held = sorted_unique(test::random_digests(50, 23));
  auto identity = identity_of(held);
  identity.content_fingerprint = std::nullopt;
  ASSERT_TRUE(save_index_set(dir / "c.abxs", identity, 4, held));
  auto set = IndexSet::load(dir / "c.abxs");
  ASSERT_TRUE(set) << set.error().describe();
  EXPECT_FALSE(set->content_fingerprint().has_value());
  EXPECT_EQ(set->digests_fingerprint(), ContentFingerprint::of(held));
}

TEST(IndexSetLoad, RefusesWhatIsNotARegularFile) {
  test::TempDir dir("abf-idxset");
  auto loaded = IndexSet::load(dir.path());
  ASSERT_FALSE(loaded);
  EXPECT_EQ(loaded.error().code, ErrorCode::kIo);
  auto missing = IndexSet::load(dir / "missing.abxs");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kIo);
}

// --- concurrency ------------------------------------------------------------------

TEST(IndexSetConcurrency, ReaderSeesTheOldSetOrTheNewNeverAMix) {
  test::TempDir dir("abf-idxset-race");
  const fs::path path = dir / "c.abxs";
  // Shards of ~1 MiB, so a load takes long enough for writes to land inside it.
  const std::vector<std::vector<Digest>> contents{
      sorted_unique(test::random_digests(100000, 61)),
      sorted_unique(test::random_digests(100000, 62))};
  const std::uint64_t restarts_before = detail::index_set_load_restarts();
  const auto write = [&](std::uint64_t version) {
    const auto& held = contents[version % 2];
    return save_index_set(path, identity_of(held, version), 3, held);
  };
  ASSERT_TRUE(write(0).has_value());
  std::atomic<bool> done{false};
  std::atomic<int> writes{0};
  const auto restarts = [&] { return detail::index_set_load_restarts() - restarts_before; };
  std::atomic<int> loads{0};
  // Until some load has met a replaced set and started over and more than 5
  // loads were made beside the writes, at least 30 writes; at most 600 or
  // 30 s.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::thread writer([&] {
    for (std::uint64_t version = 1;
         (writes.load() < 30 || restarts() == 0 || loads.load() <= 5) && writes.load() < 600 &&
         std::chrono::steady_clock::now() < deadline;
         ++version) {
      auto written = write(version);
      EXPECT_TRUE(written.has_value()) << written.error().describe();
      writes.fetch_add(1);
    }
    done.store(true);
  });
  int replaced = 0;
  while (!done.load()) {
    auto loaded = IndexSet::load(path);
    if (!loaded) {
      EXPECT_EQ(loaded.error().code, ErrorCode::kIndexSetShardMissing) << loaded.error().describe();
      EXPECT_NE(loaded.error().message.find("replaced"), std::string::npos);
      ++replaced;
      continue;
    }
    ++loads;
    const std::uint64_t version = loaded->catalog_version();
    for (const Index& shard : loaded->shards()) ASSERT_EQ(shard.catalog_version(), version);
    ASSERT_EQ(loaded->content_fingerprint(), ContentFingerprint::of(contents[version % 2]));
  }
  writer.join();
  RecordProperty("loads", loads.load());
  RecordProperty("writes", writes.load());
  RecordProperty("restarts", static_cast<int>(restarts()));
  EXPECT_GT(loads.load(), 5);
  EXPECT_GE(writes.load(), 30);
  EXPECT_GT(restarts(), 0u) << "no load met a replaced set in " << writes.load() << " writes";
  EXPECT_LE(replaced, loads.load() / 10 + 1);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 4u);
}

}  // namespace
}  // namespace abf
