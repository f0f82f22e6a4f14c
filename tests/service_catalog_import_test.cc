// SqliteCatalog::add and remove as they write: input read in sorted runs
// (ABF_TEST_CATALOG_RUN_DIGESTS makes the runs small, so a few thousand
// digests cross many run boundaries), rows inserted many to a statement,
// no presence check while the table has no row. Every version is compared
// with the in-memory reference store (MemoryRepository): its digests, its
// item count and content fingerprint, the counts each change reports, with
// repeats inside a run, across runs, of digests present before, removed
// before and added again.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/service/artifact_repository.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "test_support.hpp"

namespace abf::service {
namespace {

namespace fs = std::filesystem;

// Sets (or, with nullptr, clears) the run size for the scope.
class RunDigests {
 public:
  explicit RunDigests(const char* value) {
    if (value == nullptr) {
      ::unsetenv("ABF_TEST_CATALOG_RUN_DIGESTS");
    } else {
      ::setenv("ABF_TEST_CATALOG_RUN_DIGESTS", value, 1);
    }
  }
  ~RunDigests() { ::unsetenv("ABF_TEST_CATALOG_RUN_DIGESTS"); }
};

// `digests` with `repeats` of them again, at random places, shuffled.
std::vector<Digest> with_repeats(std::vector<Digest> digests, std::size_t repeats,
                                 std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t n = digests.size();
  for (std::size_t i = 0; i < repeats && n != 0; ++i) digests.push_back(digests[rng() % n]);
  std::shuffle(digests.begin(), digests.end(), rng);
  return digests;
}

std::vector<Digest> walk(SqliteCatalog& catalog, std::uint64_t version) {
  std::vector<Digest> out;
  auto walked = catalog.for_each_digest_at_version(version, [&](std::span<const Digest> chunk) {
    out.insert(out.end(), chunk.begin(), chunk.end());
    return Result<void>{};
  });
  EXPECT_TRUE(walked) << walked.error().describe();
  return out;
}

class CatalogImportTest : public ::testing::TestWithParam<const char*> {
 protected:
  test::TempDir dir_{"abf-catalog-import"};
};

TEST_P(CatalogImportTest, EveryVersionIsTheReferenceStoresWithItsCounts) {
  const RunDigests runs(GetParam());
  auto catalog = SqliteCatalog::create(dir_ / "c.db");
  ASSERT_TRUE(catalog) << catalog.error().describe();
  MemoryRepository reference;
  const auto pool = test::random_digests(12000, 301);
  // The steps: (add?, digests, repeats among them).
  struct Step {
    bool add;
    std::vector<Digest> digests;
    std::size_t repeats;
  };
  const auto slice = [&](std::size_t from, std::size_t to) {
    return std::vector<Digest>(pool.begin() + static_cast<std::ptrdiff_t>(from),
                               pool.begin() + static_cast<std::ptrdiff_t>(to));
  };
  std::vector<Step> steps = {
      {true, slice(0, 5000), 700},       // into an empty catalog, repeats across runs
      {true, slice(3000, 9000), 500},    // 2000 present, 4000 new
      {false, slice(1000, 4000), 300},   // removes
      {true, slice(0, 2000), 100},       // 1000 removed before (added again), 1000 present
      {false, slice(8000, 12000), 50},   // 1000 present, 3000 never added
      {true, slice(9000, 12000), 0},     // new ones, no repeats
      {false, slice(0, 12000), 0},       // everything
      {true, slice(0, 12000), 2000},     // everything again, into a table of closed rows
  };
  for (std::size_t s = 0; s < steps.size(); ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s);
    const Step& step = steps[s];
    const auto input = with_repeats(step.digests, step.repeats, 400 + s);
    const auto before = reference.digests_at_version(reference.latest_version().value());
    const std::uint64_t v = step.add ? reference.add(input) : reference.remove(input);
    auto change = step.add ? catalog->add(input) : catalog->remove(input);
    ASSERT_TRUE(change) << change.error().describe();
    EXPECT_EQ(change->version, v);
    const auto after = reference.digests_at_version(v);
    const std::uint64_t changed =
        step.add ? after.size() - before.size() : before.size() - after.size();
    EXPECT_EQ(change->requested, input.size());
    EXPECT_EQ(change->changed, changed);
    EXPECT_EQ(change->unchanged, input.size() - changed);
    EXPECT_EQ(walk(*catalog, v), after);
    auto content = catalog->content_at_version(v);
    ASSERT_TRUE(content) << content.error().describe();
    EXPECT_EQ(content->item_count, after.size());
    EXPECT_EQ(content->fingerprint, ContentFingerprint::of(after));
    // Point lookups agree, for the pool and at every version so far.
    for (std::uint64_t w = 1; w <= v; w += 3) {
      const auto at_w = reference.digests_at_version(w);
      std::unique_ptr<bool[]> got(new bool[pool.size()]);
      ASSERT_TRUE(catalog->exists_at_version(pool, w, std::span<bool>(got.get(), pool.size())));
      for (std::size_t i = 0; i < pool.size(); ++i) {
        ASSERT_EQ(got[i], std::ranges::binary_search(at_w, pool[i])) << "version " << w;
      }
    }
  }
  // A reader sees the same.
  auto reader = SqliteCatalog::open(dir_ / "c.db", {.read_only = true});
  ASSERT_TRUE(reader);
  EXPECT_EQ(walk(*reader, reader->latest_version().value()),
            reference.digests_at_version(reference.latest_version().value()));
}

// Runs of one digest, of 7, of 1000, and the default (one run here).
INSTANTIATE_TEST_SUITE_P(RunSizes, CatalogImportTest,
                         ::testing::Values("1", "7", "1000", nullptr));

TEST(CatalogImport, AMalformedDigestInALaterRunRollsTheWholeChangeBack) {
  const RunDigests runs("100");
  test::TempDir dir("abf-catalog-import");
  auto catalog = SqliteCatalog::create(dir / "c.db");
  ASSERT_TRUE(catalog);
  const auto digests = test::random_digests(1000, 302);
  std::string text;
  for (const Digest& d : digests) text += d.hex() + "\n";
  text += "not a digest\n";
  auto reader = DigestReader::from_memory(text, InputFormat::kHex, "<text>");
  auto change = catalog->add(reader);
  ASSERT_FALSE(change);
  EXPECT_EQ(change.error().code, ErrorCode::kInvalidDigest);
  EXPECT_EQ(catalog->latest_version().value(), 0u);
  EXPECT_TRUE(walk(*catalog, 0).empty());
  // And the catalog takes the same digests afterwards.
  auto again = catalog->add(digests);
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->changed, 1000u);
}

}  // namespace
}  // namespace abf::service
