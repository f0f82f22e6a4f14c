// merge_filters and `abf merge`: the snapshots of a partition of a digest set
// merge into the snapshot of the whole set, and every mismatch is refused.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
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

Filter build(std::span<const Digest> digests, const BloomSpec& spec, std::uint64_t version = 42) {
  auto filter = build_filter(digests, spec, version, Backend::kScalar);
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

// Splits `digests` at random cut points into `parts` pieces (some may be empty).
std::vector<std::vector<Digest>> partition(const std::vector<Digest>& digests, std::size_t parts,
                                           std::uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<std::vector<Digest>> pieces(parts);
  for (const auto& digest : digests) pieces[random() % parts].push_back(digest);
  return pieces;
}

MergeOptions version_option(std::uint64_t version) {
  MergeOptions options;
  options.catalog_version = version;
  return options;
}

MergeOptions labels_option(std::vector<std::string> labels) {
  MergeOptions options;
  options.labels = std::move(labels);
  return options;
}

void expect_same_snapshot(const Filter& merged, const Filter& whole) {
  EXPECT_TRUE(std::ranges::equal(merged.payload(), whole.payload()));
  EXPECT_EQ(merged.inserted_item_count(), whole.inserted_item_count());
  EXPECT_EQ(merged.catalog_version(), whole.catalog_version());
  EXPECT_EQ(serialize_snapshot(merged), serialize_snapshot(whole));
}

TEST(MergeFilters, PartitionMergesIntoTheWholeSetsSnapshot) {
  for (const auto& row : test::read_tsv("vectors/builds.tsv")) {
    const std::uint64_t members = std::stoull(row[0]);
    const BloomSpec spec{.expected_item_count = std::stoull(row[1]),
                         .target_fpp = test::parse_hex_float(row[2])};
    const auto digests = test::member_digests(members);
    const Filter whole = build(digests, spec);
    for (const std::size_t parts : {1, 2, 3, 7}) {
      std::vector<Filter> filters;
      for (const auto& piece : partition(digests, parts, members + parts)) {
        filters.push_back(build(piece, spec));
      }
      auto merged = merge_filters(filters);
      ASSERT_TRUE(merged.has_value()) << merged.error().describe();
      expect_same_snapshot(*merged, whole);
      const auto* bytes = merged->payload().data();
      EXPECT_EQ(sha256(std::span(bytes, merged->payload().size())).hex(), row[6]);
    }
  }
}

// Digests in more than one piece count once per piece (as duplicates do in
// one build), and the bits are still the union's.
TEST(MergeFilters, OverlappingPiecesSumTheirCounts) {
  const auto digests = test::random_digests(3000, 1);
  const BloomSpec spec{.expected_item_count = 10000, .target_fpp = 0.01};
  const std::span all(digests);
  const Filter a = build(all.subspan(0, 2000), spec);
  const Filter b = build(all.subspan(1000, 2000), spec);
  std::vector<Digest> both(all.begin(), all.begin() + 2000);
  both.insert(both.end(), all.begin() + 1000, all.end());
  auto merged = merge_filters(std::vector{a, b});
  ASSERT_TRUE(merged.has_value());
  expect_same_snapshot(*merged, build(both, spec));
  EXPECT_EQ(merged->inserted_item_count(), 4000u);
}

TEST(MergeFilters, ExplicitCatalogVersionMergesDifferentVersions) {
  const auto digests = test::random_digests(200, 2);
  const BloomSpec spec{.expected_item_count = 200, .target_fpp = 0.01};
  const std::span all(digests);
  const std::vector filters{build(all.subspan(0, 100), spec, 41),
                            build(all.subspan(100), spec, 42)};
  auto refused = merge_filters(filters);
  ASSERT_FALSE(refused.has_value());
  EXPECT_EQ(refused.error().code, ErrorCode::kIncompatibleFilters);
  EXPECT_NE(refused.error().message.find("catalogVersion"), std::string::npos);

  auto merged = merge_filters(filters, version_option(43));
  ASSERT_TRUE(merged.has_value()) << merged.error().describe();
  expect_same_snapshot(*merged, build(digests, spec, 43));
}

Filter with_info(const Filter& base, const FilterInfo& info);

// Issue 22, item 2: a merge never labels its result with a catalogVersion
// its catalog-bound inputs do not all have.
TEST(MergeFilters, CatalogBoundInputsKeepTheirVersion) {
  const auto digests = test::random_digests(200, 21);
  const BloomSpec spec{.expected_item_count = 200, .target_fpp = 0.01};
  const std::span all(digests);
  const auto bound = [&](std::span<const Digest> part, std::uint64_t version) {
    auto filter = build_filter(part, spec,
                               BuildOptions{.catalog_version = version,
                                            .catalog_id = test::golden_catalog_id(),
                                            .key = std::nullopt});
    EXPECT_TRUE(filter.has_value());
    return std::move(*filter);
  };
  const std::vector one{bound(all, 1)};
  auto relabelled = merge_filters(one, version_option(3));
  ASSERT_FALSE(relabelled.has_value());
  EXPECT_EQ(relabelled.error().code, ErrorCode::kIncompatibleFilters);
  EXPECT_NE(relabelled.error().message.find("catalogVersion 3 is not input 1's: it has "
                                            "catalogVersion 1 of catalog " +
                                            test::golden_catalog_id().hex()),
            std::string::npos)
      << relabelled.error().message;
  // Parts at different versions of one catalog do not merge, named or not.
  const std::vector mixed{bound(all.first(100), 1), bound(all.subspan(100), 2)};
  for (const auto& options : {MergeOptions{}, version_option(2), version_option(1)}) {
    auto refused = merge_filters(mixed, options);
    ASSERT_FALSE(refused.has_value());
    EXPECT_EQ(refused.error().code, ErrorCode::kIncompatibleFilters);
    EXPECT_NE(refused.error().message.find("catalogVersion"), std::string::npos);
  }
  // Naming the version they all have is allowed (and changes nothing).
  const std::vector same{bound(all.first(100), 2), bound(all.subspan(100), 2)};
  auto merged = merge_filters(same, version_option(2));
  ASSERT_TRUE(merged.has_value()) << merged.error().describe();
  EXPECT_EQ(serialize_snapshot(*merged), serialize_snapshot(bound(all, 2)));
}

// The merged fingerprint is the sum of the parts' (exact for the multiset
// union, overlaps included); a part without one leaves the result without.
TEST(MergeFilters, TheFingerprintIsTheSumWhenEveryPartHasOne) {
  const auto vector = test::fingerprint_vector("member-1000");
  const BloomSpec spec{.expected_item_count = 2000, .target_fpp = 0.01};
  std::vector<Filter> parts;
  for (const auto& piece : partition(vector.digests, 5, 22)) parts.push_back(build(piece, spec));
  auto merged = merge_filters(parts);
  ASSERT_TRUE(merged.has_value());
  ASSERT_TRUE(merged->content_fingerprint().has_value());
  EXPECT_EQ(merged->content_fingerprint()->hex(), vector.fingerprint_hex);
  // Overlapping parts: the multiset union, as insertedItemCount counts it.
  const std::vector overlapping{build(std::span(vector.digests).first(600), spec),
                                build(std::span(vector.digests).subspan(400), spec)};
  auto union_of = merge_filters(overlapping);
  ASSERT_TRUE(union_of.has_value());
  EXPECT_EQ(union_of->content_fingerprint(),
            ContentFingerprint::of(std::span(vector.digests).first(600)) +
                ContentFingerprint::of(std::span(vector.digests).subspan(400)));
  // A part loaded from a file written before fingerprints: none.
  FilterInfo info = parts[0].info();
  info.content_fingerprint.reset();
  parts[0] = with_info(parts[0], info);
  auto unknown = merge_filters(parts);
  ASSERT_TRUE(unknown.has_value());
  EXPECT_FALSE(unknown->content_fingerprint().has_value());
  EXPECT_TRUE(std::ranges::equal(unknown->payload(), merged->payload()));
}

// Parts that are each plausible can OR into more bits than their summed
// count can set; the merge refuses to make a file no loader accepts.
TEST(MergeFilters, RefusesAResultWithMoreBitsThanItsCountAllows) {
  const BloomSpec spec{.expected_item_count = 10'000, .target_fpp = 0.01};
  const auto digests = test::random_digests(10'000, 23);
  const Filter full = build(digests, spec);
  FilterInfo info = full.info();
  info.inserted_item_count = 1;  // one insertion cannot set these bits
  auto forged = Filter::from_words(info, std::shared_ptr<const std::uint64_t>(
                                             std::make_shared<Filter>(full), full.words().data()),
                                   full.words().size());
  ASSERT_TRUE(forged.has_value());
  const std::vector parts{*forged};
  auto merged = merge_filters(parts);
  ASSERT_FALSE(merged.has_value());
  EXPECT_EQ(merged.error().code, ErrorCode::kSnapshotImplausibleFill);
  EXPECT_NE(merged.error().message.find("the merged filter: 1 insertions set"), std::string::npos)
      << merged.error().message;
}

// A filter like `base` but with one header field changed.
Filter with_info(const Filter& base, const FilterInfo& info) {
  auto words = allocate_words(info.layout().bit_count / 64);
  const auto source = base.words();
  std::copy_n(source.begin(), std::min<std::size_t>(source.size(), info.layout().bit_count / 64),
              words.get());
  auto filter = Filter::from_words(info, std::move(words), info.layout().bit_count / 64);
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

TEST(MergeFilters, RefusesEveryMismatchWithAClearError) {
  const auto digests = test::random_digests(100, 3);
  const BloomSpec spec{.expected_item_count = 1000, .target_fpp = 0.01};
  const Filter base = build(digests, spec);
  struct Case {
    std::string field;
    FilterInfo info;
  };
  std::vector<Case> cases;
  FilterInfo info = base.info();
  info.scheme = *Scheme::unkeyed({info.layout().bit_count + 64, info.layout().hash_count});
  cases.push_back({"bitCount", info});
  info = base.info();
  info.scheme = *Scheme::unkeyed({info.layout().bit_count, info.layout().hash_count + 1});
  cases.push_back({"hashCount", info});
  info = base.info();
  info.spec.expected_item_count += 1;
  cases.push_back({"expectedItemCount", info});
  info = base.info();
  info.spec.target_fpp = std::nextafter(info.spec.target_fpp, 1.0);  // one ulp
  cases.push_back({"targetFpp", info});
  info = base.info();
  info.catalog_version += 1;
  cases.push_back({"catalogVersion", info});

  for (const auto& c : cases) {
    const Filter other = with_info(base, c.info);
    for (const bool other_first : {false, true}) {
      const std::vector filters =
          other_first ? std::vector{other, base, base} : std::vector{base, base, other};
      auto merged = merge_filters(filters, labels_option({"a.abf", "b.abf", "c.abf"}));
      ASSERT_FALSE(merged.has_value()) << c.field;
      EXPECT_EQ(merged.error().code, ErrorCode::kIncompatibleFilters) << c.field;
      const auto& message = merged.error().message;
      EXPECT_NE(message.find(c.field), std::string::npos) << message;
      EXPECT_NE(message.find(other_first ? "b.abf" : "c.abf"), std::string::npos) << message;
      EXPECT_NE(message.find("a.abf"), std::string::npos) << message;
    }
  }
}

TEST(MergeFilters, RefusesASumAboveCapacity) {
  const auto digests = test::random_digests(101, 4);
  const BloomSpec spec{.expected_item_count = 100, .target_fpp = 0.01};
  const std::span all(digests);
  const std::vector filters{build(all.subspan(0, 60), spec), build(all.subspan(60, 40), spec),
                            build(all.subspan(100, 1), spec)};
  auto exactly_full = merge_filters(std::span(filters).first(2));
  ASSERT_TRUE(exactly_full.has_value());
  EXPECT_EQ(exactly_full->inserted_item_count(), 100u);
  auto merged = merge_filters(filters);
  ASSERT_FALSE(merged.has_value());
  EXPECT_EQ(merged.error().code, ErrorCode::kCapacityExceeded);
  EXPECT_NE(merged.error().message.find("input 3"), std::string::npos) << merged.error().message;
}

TEST(MergeFilters, RefusesNoInputsAndMislabelledInputs) {
  auto none = merge_filters({});
  ASSERT_FALSE(none.has_value());
  EXPECT_EQ(none.error().code, ErrorCode::kInvalidArgument);
  const Filter one =
      build(test::random_digests(5, 5), {.expected_item_count = 5, .target_fpp = 0.1});
  auto labels = merge_filters(std::vector{one, one}, labels_option({"only-one"}));
  ASSERT_FALSE(labels.has_value());
  EXPECT_EQ(labels.error().code, ErrorCode::kInvalidArgument);
}

TEST(MergeFilters, OneInputIsACopy) {
  const Filter one =
      build(test::random_digests(50, 6), {.expected_item_count = 50, .target_fpp = 0.1});
  auto merged = merge_filters(std::vector{one});
  ASSERT_TRUE(merged.has_value());
  expect_same_snapshot(*merged, one);
}

// ---- abf merge, end to end through the binary --------------------------

class MergeCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(ABF_CLI)) GTEST_SKIP() << "no abf binary at " << ABF_CLI;
    dir_ = test::make_temp_dir("abf-merge-test");
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  std::string save(const Filter& filter, const std::string& name) {
    const auto path = dir_ / name;
    EXPECT_TRUE(save_snapshot(filter, path).has_value());
    return path.string();
  }

  void write_bytes(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    std::ofstream out(dir_ / name, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }

  // Runs `abf <arguments>`; returns the exit status, stderr in `errors`.
  int abf(const std::string& arguments, std::string* errors = nullptr) {
    const test::CliRun run = test::run_cli(dir_, arguments);
    if (errors != nullptr) *errors = run.err;
    return run.status;
  }

  fs::path dir_;
};

TEST_F(MergeCommand, MergedPartitionIsTheWholeSnapshotByteForByte) {
  const auto digests = test::random_digests(5000, 7);
  const BloomSpec spec{.expected_item_count = 5000, .target_fpp = 0.001};
  std::string inputs;
  std::size_t index = 0;
  for (const auto& piece : partition(digests, 4, 8)) {
    inputs += save(build(piece, spec), "part-" + std::to_string(index++) + ".abf") + " ";
  }
  const auto out = (dir_ / "merged.abf").string();
  std::string errors;
  ASSERT_EQ(abf("merge " + inputs + "--output " + out, &errors), 0) << errors;
  EXPECT_EQ(test::read_file(out), test::read_file(save(build(digests, spec), "whole.abf")));

  // --catalog-version names the result's version.
  ASSERT_EQ(
      abf("merge " + inputs + "--output " + out + " --catalog-version 43 --threads 1", &errors), 0)
      << errors;
  EXPECT_EQ(test::read_file(out), test::read_file(save(build(digests, spec, 43), "v43.abf")));
}

TEST_F(MergeCommand, MismatchFailsAndLeavesNoOutput) {
  const auto digests = test::random_digests(100, 9);
  const auto a = save(build(digests, {.expected_item_count = 100, .target_fpp = 0.01}), "a.abf");
  const auto b = save(build(digests, {.expected_item_count = 101, .target_fpp = 0.01}), "b.abf");
  const auto out = dir_ / "merged.abf";
  std::string errors;
  EXPECT_EQ(abf("merge " + a + " " + b + " --output " + out.string(), &errors), 1);
  EXPECT_NE(errors.find("incompatible_filters"), std::string::npos) << errors;
  EXPECT_NE(errors.find("b.abf"), std::string::npos) << errors;
  EXPECT_FALSE(fs::exists(out));

  // Over capacity.
  EXPECT_EQ(abf("merge " + a + " " + a + " --output " + out.string(), &errors), 1);
  EXPECT_NE(errors.find("capacity_exceeded"), std::string::npos) << errors;
  EXPECT_FALSE(fs::exists(out));
}

// A snapshot of another hashProtocolVersion puts its bits elsewhere: it is
// refused when loaded, before any merging, with the file named.
TEST_F(MergeCommand, RefusesAKeyedInputWithoutItsKey) {
  const auto digests = test::random_digests(100, 10);
  const BloomSpec spec{.expected_item_count = 100, .target_fpp = 0.01};
  const auto a = save(build(digests, spec), "a.abf");
  auto keyed = build_filter(digests, spec, BuildOptions{.key = test::golden_key().key});
  ASSERT_TRUE(keyed.has_value());
  const auto b = save(*keyed, "keyed.abf");
  const auto out = dir_ / "merged.abf";
  std::string errors;
  EXPECT_EQ(abf("merge " + a + " " + b + " --output " + out.string(), &errors), 1);
  EXPECT_NE(errors.find("keyed.abf"), std::string::npos) << errors;
  EXPECT_NE(errors.find("key_required"), std::string::npos) << errors;
  EXPECT_FALSE(fs::exists(out));
}

// A filter of `digests` under `options` (the scalar reference build).
Filter build_with(std::span<const Digest> digests, const BloomSpec& spec,
                  const BuildOptions& options) {
  auto filter = build_filter(digests, spec, options, Backend::kScalar);
  EXPECT_TRUE(filter.has_value()) << filter.error().describe();
  return std::move(*filter);
}

TEST_F(MergeCommand, MergesKeyedPartsOnlyWithTheirKey) {
  const auto digests = test::random_digests(3000, 11);
  const BloomSpec spec{.expected_item_count = 3000, .target_fpp = 0.01};
  const test::VectorKey key = test::golden_key();
  const BuildOptions options{
      .catalog_version = 7, .catalog_id = test::golden_catalog_id(), .key = key.key};
  std::string inputs;
  std::size_t index = 0;
  for (const auto& piece : partition(digests, 3, 12)) {
    inputs +=
        save(build_with(piece, spec, options), "part-" + std::to_string(index++) + ".abf") + " ";
  }
  test::write_private_file(dir_ / "k.key", key.hex + "\n");
  test::write_private_file(dir_ / "other.key", test::other_key().hex + "\n");
  const auto out = (dir_ / "merged.abf").string();
  std::string errors;
  ASSERT_EQ(abf("merge " + inputs + "--key-file k.key --output " + out, &errors), 0) << errors;
  // The keyed whole, catalog id included, byte for byte.
  EXPECT_EQ(test::read_file(out),
            test::read_file(save(build_with(digests, spec, options), "whole.abf")));
  fs::remove(out);
  EXPECT_EQ(abf("merge " + inputs + "--output " + out, &errors), 1);
  EXPECT_NE(errors.find("key_required"), std::string::npos) << errors;
  EXPECT_NE(errors.find("part-0.abf"), std::string::npos) << errors;
  EXPECT_EQ(abf("merge " + inputs + "--key-file other.key --output " + out, &errors), 1);
  EXPECT_NE(errors.find("key_mismatch"), std::string::npos) << errors;
  EXPECT_EQ(errors.find(key.hex), std::string::npos) << errors;
  EXPECT_EQ(errors.find(test::other_key().hex), std::string::npos) << errors;
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(MergeCommand, RefusesPartsOfDifferentCatalogIds) {
  const auto digests = test::random_digests(200, 13);
  const BloomSpec spec{.expected_item_count = 200, .target_fpp = 0.01};
  CatalogId other = test::golden_catalog_id();
  other.bytes[3] ^= 0x10;
  const auto half = std::span(digests).first(100);
  const auto rest = std::span(digests).subspan(100);
  const auto a = save(build_with(half, spec,
                                 BuildOptions{.catalog_version = 5,
                                              .catalog_id = test::golden_catalog_id(),
                                              .key = std::nullopt}),
                      "ours.abf");
  const auto b =
      save(build_with(rest, spec,
                      BuildOptions{.catalog_version = 5, .catalog_id = other, .key = std::nullopt}),
           "theirs.abf");
  const auto none = save(build(rest, spec, 5), "none.abf");
  const auto out = dir_ / "merged.abf";
  for (const auto& second : {b, none}) {
    SCOPED_TRACE(second);
    std::string errors;
    EXPECT_EQ(abf("merge " + a + " " + second + " --output " + out.string(), &errors), 1);
    EXPECT_NE(errors.find("incompatible_filters"), std::string::npos) << errors;
    EXPECT_NE(errors.find("catalogId"), std::string::npos) << errors;
    EXPECT_NE(errors.find(test::golden_catalog_id().hex()), std::string::npos) << errors;
    EXPECT_FALSE(fs::exists(out));
  }
  std::string errors;
  EXPECT_EQ(abf("merge " + a + " " + b + " --output " + out.string(), &errors), 1);
  EXPECT_NE(errors.find(other.hex()), std::string::npos) << errors;
}

// Issue 22's reproduction: `abf merge pa_v1.abf --catalog-version 3 -o
// x.abf` with a catalog-bound input fails, exit 1, and writes nothing.
TEST_F(MergeCommand, RefusesToRelabelACatalogsSnapshot) {
  const auto digests = test::random_digests(200, 24);
  const BloomSpec spec{.expected_item_count = 200, .target_fpp = 0.01};
  const auto pa = save(build_with(digests, spec,
                                  BuildOptions{.catalog_version = 1,
                                               .catalog_id = test::golden_catalog_id(),
                                               .key = std::nullopt}),
                       "pa_v1.abf");
  const auto out = dir_ / "x.abf";
  std::string errors;
  EXPECT_EQ(abf("merge " + pa + " --catalog-version 3 -o " + out.string(), &errors), 1);
  EXPECT_NE(errors.find("incompatible_filters"), std::string::npos) << errors;
  EXPECT_NE(errors.find("catalogVersion 3 is not " + pa + "'s: it has catalogVersion 1"),
            std::string::npos)
      << errors;
  EXPECT_FALSE(fs::exists(out));
  // Its own version is fine; an unbound snapshot may still be relabelled.
  EXPECT_EQ(abf("merge " + pa + " --catalog-version 1 -o " + out.string(), &errors), 0) << errors;
  const auto unbound = save(build(digests, spec, 1), "unbound.abf");
  EXPECT_EQ(abf("merge " + unbound + " --catalog-version 3 -o " + out.string(), &errors), 0)
      << errors;
  auto relabelled = load_snapshot(out);
  ASSERT_TRUE(relabelled.has_value());
  EXPECT_EQ(relabelled->catalog_version(), 3u);
  EXPECT_EQ(relabelled->content_fingerprint(), ContentFingerprint::of(digests));
}

TEST_F(MergeCommand, UsageErrorsExitTwo) {
  EXPECT_EQ(abf("merge --output x.abf"), 2);      // no inputs
  EXPECT_EQ(abf("merge - - --output x.abf"), 2);  // standard input twice
}

// A missing input is a runtime error (1) naming the file, as in every other
// command; it used to be a usage error (2) here alone.
TEST_F(MergeCommand, MissingInputIsARuntimeError) {
  std::string errors;
  EXPECT_EQ(abf("merge " + (dir_ / "missing.abf").string() + " --output x.abf", &errors), 1);
  EXPECT_NE(errors.find("io_error"), std::string::npos) << errors;
  EXPECT_NE(errors.find("missing.abf"), std::string::npos) << errors;
  EXPECT_FALSE(fs::exists(dir_ / "x.abf"));
}

}  // namespace
}  // namespace abf
