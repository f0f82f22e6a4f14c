// The exact duplicate handling behind `abf build --distinct` and `abf
// dedup` (cli/distinct.cpp, the abf_cli_distinct library): the external sort across
// many spilled runs, the set of digests already written and its hex lines;
// and, through the binary, dedup's output staged for standard output.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cli_shell.hpp"
#include "distinct.hpp"
#include "test_support.hpp"

namespace abf::cli {
namespace {

namespace fs = std::filesystem;

// Digests with many repeats: `count` draws from `distinct` values.
std::vector<Digest> with_repeats(std::size_t count, std::size_t distinct, std::uint64_t seed) {
  const auto pool = test::random_digests(distinct, seed);
  std::vector<Digest> out;
  for (std::size_t i = 0; i < count; ++i) out.push_back(pool[(i * 7919 + i / 3) % distinct]);
  return out;
}

struct Collected {
  std::vector<Digest> digests;
  std::size_t calls = 0;
  std::size_t largest = 0;
};

Result<void> collect(DistinctDigests& distinct, Collected& out, std::size_t chunk) {
  return distinct.finish(
      [&](std::span<const Digest> digests) -> Result<void> {
        out.digests.insert(out.digests.end(), digests.begin(), digests.end());
        ++out.calls;
        out.largest = std::max(out.largest, digests.size());
        return {};
      },
      chunk);
}

TEST(DistinctDigests, MergesSpilledRunsIntoAscendingDistinctDigests) {
  const test::TempDir temp("abf-distinct");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  // Runs of 1,000: about 60 of them spill to the temporary file, and the
  // last stays in memory.
  for (const std::size_t distinct_count : {1u, 999u, 1000u, 1001u, 20'000u, 60'000u}) {
    SCOPED_TRACE(distinct_count);
    const auto input = with_repeats(60'000, distinct_count, distinct_count);
    DistinctDigests distinct(dir.string(), 1000);
    // Added in uneven pieces.
    for (std::size_t begin = 0, step = 1; begin < input.size();
         begin += step, step = step * 3 % 997 + 1) {
      const std::size_t count = std::min(step, input.size() - begin);
      ASSERT_TRUE(distinct.add(std::span(input.data() + begin, count)).has_value());
    }
    Collected out;
    ASSERT_TRUE(collect(distinct, out, 777).has_value());
    std::set<Digest> expected(input.begin(), input.end());
    EXPECT_TRUE(std::ranges::equal(out.digests, expected));
    EXPECT_EQ(distinct.input_count(), input.size());
    EXPECT_EQ(distinct.distinct_count(), expected.size());
    EXPECT_LE(out.largest, 777u);
    if (distinct_count >= 20'000) {
      EXPECT_GT(distinct.spilled_runs(), 10u);
    }
  }
  // The temporary file had no name: nothing is left in the folder.
  EXPECT_TRUE(fs::is_empty(dir));
}

TEST(DistinctDigests, SmallInputStaysInMemory) {
  DistinctDigests distinct("/nonexistent-folder", 1000);
  const auto input = with_repeats(1500, 300, 3);  // runs cut to 300 never spill
  ASSERT_TRUE(distinct.add(input).has_value());
  Collected out;
  ASSERT_TRUE(collect(distinct, out, 64).has_value());
  EXPECT_EQ(out.digests.size(), 300u);
  EXPECT_EQ(distinct.spilled_runs(), 0u);
}

TEST(DistinctDigests, UnusableTemporaryFolderIsAClearError) {
  DistinctDigests distinct("/nonexistent-folder", 1000);
  const auto input = test::random_digests(5000, 4);
  const auto added = distinct.add(input);
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kIo);
  EXPECT_NE(added.error().message.find("/nonexistent-folder"), std::string::npos);
  EXPECT_NE(added.error().message.find("TMPDIR"), std::string::npos);
}

TEST(DistinctDigests, SinkErrorsStopTheMerge) {
  const test::TempDir temp("abf-distinct");  // removed also when an assertion ends the test
  const fs::path& dir = temp.path();
  DistinctDigests distinct(dir.string(), 1000);
  ASSERT_TRUE(distinct.add(test::random_digests(10'000, 5)).has_value());
  std::size_t calls = 0;
  const auto finished = distinct.finish(
      [&](std::span<const Digest>) -> Result<void> {
        ++calls;
        return fail(ErrorCode::kCapacityExceeded, "full");
      },
      100);
  ASSERT_FALSE(finished.has_value());
  EXPECT_EQ(finished.error().code, ErrorCode::kCapacityExceeded);
  EXPECT_EQ(calls, 1u);
}

TEST(DigestSet, KeepsEachDigestOnceAcrossGrowth) {
  DigestSet set;
  const auto digests = test::random_digests(10'000, 6);
  for (const Digest& d : digests) EXPECT_TRUE(set.insert(d));
  for (const Digest& d : digests) EXPECT_FALSE(set.insert(d));
  EXPECT_EQ(set.size(), digests.size());
  // The all-zero digest (the table's empty mark) is a digest like any other.
  EXPECT_TRUE(set.insert(Digest{}));
  EXPECT_FALSE(set.insert(Digest{}));
  EXPECT_EQ(set.size(), digests.size() + 1);
}

// Digests that agree in their first 24 bytes still spread: the hash mixes
// all four words.
TEST(DigestSet, CraftedDigestsSharingAPrefixStayDistinct) {
  DigestSet set;
  std::vector<Digest> crafted(5000);
  for (std::size_t i = 0; i < crafted.size(); ++i) {
    crafted[i].bytes.fill(0xab);
    crafted[i].bytes[30] = static_cast<std::uint8_t>(i >> 8);
    crafted[i].bytes[31] = static_cast<std::uint8_t>(i);
  }
  for (const Digest& d : crafted) EXPECT_TRUE(set.insert(d));
  for (const Digest& d : crafted) EXPECT_FALSE(set.insert(d));
  EXPECT_EQ(set.size(), crafted.size());
}

// ---- DigestSet's batch insert against std::set ---------------------------

// What the set should have answered: the digests seen so far, and the new
// ones in the order they came.
struct Reference {
  std::set<Digest> seen;
  std::vector<Digest> order;
};

// Inserts `input` into `set` in batches of `batch`, and checks every flag,
// every count and the digests held, in order, against `reference`.
void insert_and_check(DigestSet& set, Reference& reference, std::span<const Digest> input,
                      std::size_t batch) {
  for (std::size_t begin = 0; begin < input.size() || begin == 0; begin += batch) {
    const auto part = input.subspan(begin, std::min(batch, input.size() - begin));
    auto flags = std::make_unique<bool[]>(part.size() + 1);
    std::fill_n(flags.get(), part.size() + 1, true);
    flags[part.size()] = false;  // one past the end: never written
    const std::size_t added = set.insert(part, std::span(flags.get(), part.size()));
    std::size_t expected_added = 0;
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < part.size(); ++i) {
      const bool is_new = reference.seen.insert(part[i]).second;
      if (is_new) {
        reference.order.push_back(part[i]);
        ++expected_added;
      }
      if (flags[i] != is_new) ++wrong;
    }
    ASSERT_EQ(wrong, 0u) << "batch at " << begin << " of " << part.size();
    ASSERT_EQ(added, expected_added) << "batch at " << begin;
    ASSERT_FALSE(flags[part.size()]);
    if (input.empty()) break;
  }
  ASSERT_EQ(set.size(), reference.order.size());
  std::size_t misplaced = 0;
  for (std::size_t i = 0; i < set.size(); ++i) {
    if (set[i] != reference.order[i]) ++misplaced;
  }
  ASSERT_EQ(misplaced, 0u) << "the digests held are not the new ones in input order";
}

// Repeats within a batch and across batches, at batch sizes on either side
// of the set's hash chunk and prefetch distance, and the batch dedup uses.
TEST(DigestSet, BatchInsertMatchesAReferenceSet) {
  const auto input = with_repeats(100'000, 30'000, 7);
  for (const std::size_t batch :
       {std::size_t{1}, DigestSet::kPrefetchDistance - 1, DigestSet::kPrefetchDistance,
        DigestSet::kPrefetchDistance + 1, DigestSet::kHashChunk - 1, DigestSet::kHashChunk,
        DigestSet::kHashChunk + 1, std::size_t{1000}, std::size_t{65'536}, std::size_t{100'000}}) {
    SCOPED_TRACE(batch);
    DigestSet set;
    Reference reference;
    insert_and_check(set, reference, input, batch);
    // A second pass: every digest a repeat.
    insert_and_check(set, reference, input, batch);
    EXPECT_EQ(set.size(), 30'000u);
  }
}

// Every size around the hash chunk, the prefetch distance, the table's
// growth (64 slots, doubled past load 1/2) and the 65,536-digest blocks the
// digests are kept in.
TEST(DigestSet, BoundarySizes) {
  constexpr std::size_t kBlockDigests = 65'536;  // DigestSet's block
  for (const std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{2}, DigestSet::kPrefetchDistance - 1,
        DigestSet::kPrefetchDistance, DigestSet::kPrefetchDistance + 1, std::size_t{32},
        std::size_t{33}, std::size_t{64}, std::size_t{65}, DigestSet::kHashChunk - 1,
        DigestSet::kHashChunk, DigestSet::kHashChunk + 1, kBlockDigests - 1, kBlockDigests,
        kBlockDigests + 1}) {
    SCOPED_TRACE(n);
    const auto input = test::random_digests(n, 100 + n);
    DigestSet set;
    Reference reference;
    insert_and_check(set, reference, input, std::max<std::size_t>(n, 1));
    EXPECT_EQ(set.size(), n);
    insert_and_check(set, reference, input, std::max<std::size_t>(n, 1));
    EXPECT_EQ(set.size(), n);
    EXPECT_LE(set.size() * 2, set.capacity());  // load at most 1/2
  }
}

TEST(DigestSet, TableGrowsAtHalfLoad) {
  DigestSet set;
  EXPECT_EQ(set.capacity(), 0u);  // nothing allocated before the first insert
  const auto digests = test::random_digests(70, 8);
  for (std::size_t i = 0; i < digests.size(); ++i) {
    ASSERT_TRUE(set.insert(digests[i]));
    // 64 slots hold 32 digests, 128 hold 64.
    EXPECT_EQ(set.capacity(), i + 1 <= 32 ? 64u : i + 1 <= 64 ? 128u : 256u) << i;
  }
  for (std::size_t i = 0; i < digests.size(); ++i) EXPECT_EQ(set[i], digests[i]);
}

// reserve(n) sizes the table for n digests at once: inserting them, in any
// batches, never doubles it; the digest after them does.
TEST(DigestSet, ReserveSizesTheTableOnce) {
  const auto digests = test::random_digests(1025, 9);
  DigestSet set;
  set.reserve(1000);
  EXPECT_EQ(set.capacity(), 2048u);
  for (std::size_t begin = 0; begin < 1024; begin += 300) {
    set.insert(std::span(digests).subspan(begin, std::min<std::size_t>(300, 1024 - begin)));
    EXPECT_EQ(set.capacity(), 2048u) << begin;
  }
  EXPECT_EQ(set.size(), 1024u);
  set.insert(std::span(digests).subspan(1024));
  EXPECT_EQ(set.capacity(), 4096u);
  set.reserve(10);  // less than it holds: no change
  EXPECT_EQ(set.capacity(), 4096u);
  for (std::size_t i = 0; i < digests.size(); ++i) EXPECT_FALSE(set.insert(digests[i]));
}

TEST(DigestSet, SingleAndBatchInsertsAgree) {
  const auto input = with_repeats(20'000, 5'000, 10);
  DigestSet set;
  Reference reference;
  for (std::size_t begin = 0; begin < input.size(); begin += 1000) {
    const auto part = std::span(input).subspan(begin, 1000);
    if (begin / 1000 % 2 == 0) {
      insert_and_check(set, reference, part, 333);
    } else {
      for (const Digest& digest : part) {
        ASSERT_EQ(set.insert(digest), reference.seen.insert(digest).second);
        if (set.size() > reference.order.size()) reference.order.push_back(digest);
      }
    }
  }
  EXPECT_EQ(set.size(), 5'000u);
}

// One digest over and over, the all-zero digest (0 marks an empty slot,
// never a digest), and families of crafted digests a weak hash would pile
// into one run of slots: each is kept once, and no probe runs long.
TEST(DigestSet, AdversarialInputs) {
  {
    const std::vector<Digest> same(10'000, test::random_digests(1, 11)[0]);
    DigestSet set;
    Reference reference;
    insert_and_check(set, reference, same, 4096);
    EXPECT_EQ(set.size(), 1u);
    // Memory follows the digests held, plus room for one hash chunk.
    EXPECT_LE(set.capacity(), 4 * DigestSet::kHashChunk);
  }
  {
    auto input = test::random_digests(1000, 12);
    input.insert(input.begin(), Digest{});
    input.insert(input.begin() + 500, Digest{});
    input.push_back(Digest{});
    DigestSet set;
    Reference reference;
    insert_and_check(set, reference, input, 64);
    EXPECT_EQ(set.size(), 1001u);
    EXPECT_EQ(set[0], Digest{});
    EXPECT_FALSE(set.insert(Digest{}));
  }
  const auto put_word = [](Digest& digest, std::size_t word, std::uint64_t value) {
    std::memcpy(digest.bytes.data() + 8 * word, &value, sizeof value);
  };
  constexpr std::size_t kCount = 20'000;
  const std::vector<std::pair<std::string, std::function<Digest(std::uint64_t)>>> families = {
      {"only the last two bytes differ",
       [](std::uint64_t i) {
         Digest d;
         d.bytes.fill(0xab);
         d.bytes[30] = static_cast<std::uint8_t>(i >> 8);
         d.bytes[31] = static_cast<std::uint8_t>(i);
         return d;
       }},
      {"only the first two bytes differ",
       [](std::uint64_t i) {
         Digest d;
         d.bytes[0] = static_cast<std::uint8_t>(i >> 8);
         d.bytes[1] = static_cast<std::uint8_t>(i);
         return d;
       }},
      {"equal low 20 bits in every word",
       [&](std::uint64_t i) {
         Digest d;
         for (std::size_t w = 0; w < 4; ++w) put_word(d, w, (i << 20) | 0x5a5a5);
         return d;
       }},
      {"only the top bits of the last word differ",
       [&](std::uint64_t i) {
         Digest d;
         put_word(d, 3, i << 49);
         return d;
       }},
      {"every word the same counter",
       [&](std::uint64_t i) {
         Digest d;
         for (std::size_t w = 0; w < 4; ++w) put_word(d, w, i);
         return d;
       }},
      {"counter times 2^32 in one word, its negation in the next",
       [&](std::uint64_t i) {
         Digest d;
         put_word(d, 1, i << 32);
         put_word(d, 2, ~(i << 32));
         return d;
       }},
  };
  for (const auto& [name, make] : families) {
    SCOPED_TRACE(name);
    std::vector<Digest> input;
    for (std::uint64_t i = 0; i < kCount; ++i) input.push_back(make(i));
    ASSERT_EQ(std::set<Digest>(input.begin(), input.end()).size(), kCount);
    DigestSet set;
    Reference reference;
    insert_and_check(set, reference, input, 65'536);
    insert_and_check(set, reference, input, 777);
    EXPECT_EQ(set.size(), kCount);
    // 20,000 digests in 65,536 slots: spread by the seeded hash, the
    // longest run was 3-19 in every family (random digests: about as long);
    // piled up it would be thousands.
    EXPECT_LT(set.longest_run(), 100u) << set.capacity();
  }
}

// ---- write_hex_line --------------------------------------------------------

TEST(WriteHexLine, MatchesTheLibrarysHex) {
  std::vector<Digest> digests = test::random_digests(1000, 13);
  digests.push_back(Digest{});
  for (std::size_t k = 0; k < 8; ++k) {  // every byte value once
    Digest d;
    for (std::size_t i = 0; i < Digest::kSize; ++i) {
      d.bytes[i] = static_cast<std::uint8_t>(k * 32 + i);
    }
    digests.push_back(d);
  }
  Digest ones;
  ones.bytes.fill(0xff);
  digests.push_back(ones);
  std::string text(65 * digests.size() + 1, '#');
  char* out = text.data();
  for (const Digest& digest : digests) {
    char* const end = write_hex_line(digest, out);
    ASSERT_EQ(end, out + 65);
    ASSERT_EQ(std::string_view(out, 65), digest.hex() + "\n");
    out = end;
  }
  EXPECT_EQ(text.back(), '#');  // nothing written past the last line
}

// ---- dedup's staged standard output, through the binary -------------------

// More than the 1 MiB kept in memory goes through the staging file and
// reaches stdout by sendfile, or by read and write where stdout refuses it
// (an O_APPEND file): every way, the same bytes as --output FILE; a full
// device is an error.
TEST(DedupOutput, StagedStandardOutputIsExactlyTheOutputFile) {
  const test::TempDir temp("abf-dedup-output");
  const fs::path& dir = temp.path();
  std::set<Digest> new_digests;
  {
    std::ofstream members(dir / "members.txt");
    for (const Digest& d : test::member_digests(100)) members << d.hex() << '\n';
    std::ofstream candidates(dir / "candidates.txt");
    const auto fresh = test::random_digests(30'000, 14);  // 1.9 MB of new digests
    const auto members_again = test::member_digests(100);
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      const Digest& digest = i % 100 == 0 ? members_again[i / 100 % 100] : fresh[i];
      candidates << digest.hex() << '\n';
      if (i % 100 != 0) new_digests.insert(digest);
      if (i % 7 == 0) {  // mostly repeats
        candidates << fresh[i / 2].hex() << '\n';
        new_digests.insert(fresh[i / 2]);
      }
    }
  }
  const std::string dedup = "$ABF dedup -s c.abf --db c.db -i candidates.txt";
  const test::CliRun setup = test::run_shell(
      dir,
      "$ABF catalog init --db c.db && $ABF catalog add --db c.db -i members.txt >/dev/null && "
      "$ABF build --from-catalog c.db -n 100 -p 0.01 -o c.abf >/dev/null && " +
          dedup + " -o expected.txt >/dev/null");
  ASSERT_EQ(setup.status, 0) << setup.err;
  const std::string expected = test::read_file(dir / "expected.txt");
  ASSERT_GT(expected.size(), std::size_t{1} << 20);
  EXPECT_EQ(static_cast<std::size_t>(std::count(expected.begin(), expected.end(), '\n')),
            new_digests.size());

  const test::CliRun redirected = test::run_shell(dir, dedup + " > out.txt");
  ASSERT_EQ(redirected.status, 0) << redirected.err;
  EXPECT_TRUE(test::read_file(dir / "out.txt") == expected);

  const test::CliRun appended =
      test::run_shell(dir, "echo first > app.txt && " + dedup + " >> app.txt");
  ASSERT_EQ(appended.status, 0) << appended.err;
  EXPECT_TRUE(test::read_file(dir / "app.txt") == "first\n" + expected);

  const test::CliRun piped = test::run_shell(dir, dedup + " 2>/dev/null | cat > piped.txt");
  ASSERT_EQ(piped.status, 0) << piped.err;
  EXPECT_TRUE(test::read_file(dir / "piped.txt") == expected);

  if (fs::exists("/dev/full")) {
    const test::CliRun full = test::run_shell(dir, dedup + " > /dev/full");
    EXPECT_EQ(full.status, 1);
    EXPECT_NE(full.err.find("No space left on device"), std::string::npos) << full.err;
  }
}

}  // namespace
}  // namespace abf::cli
