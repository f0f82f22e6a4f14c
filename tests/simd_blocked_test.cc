// The Highway kernels of the one-line protocols 3 and 4 (simd/blocked_simd.h)
// answer and set bits exactly as the scalar reference (blocked_kernels.hpp),
// on every target compiled into this binary that this CPU runs, forced with
// hwy::SetSupportedTargetsForTest: the golden vectors of vectors/v3, random
// and adversarial digests and keys, block counts from 1 to 2^31, every
// batch length around the lane and group sizes, filters below and above the
// prefetch threshold, and digests at odd byte addresses.
#include "hwy_targets.h"  // first: the same HWY_TARGETS as simd/blocked_simd.cc

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <xxhash.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <new>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/digest.hpp"
#include "abf/fingerprint.hpp"
#include "abf/layout_blocked.hpp"
#include "abf/scheme.hpp"
#include "blocked_kernels.hpp"
#include "blocked_simd.h"
#include "hwy/targets.h"
#include "test_support.hpp"

namespace abf {
namespace {

// Keys for protocol 4: adversarial ones, then pseudo-random.
probe::KeySchedule test_key(std::uint64_t salt) {
  std::uint8_t key[16] = {};
  switch (salt % 4) {
    case 0:
      break;
    case 1:
      std::memset(key, 0xff, sizeof key);
      break;
    case 2:
      key[15] = 0x80;
      break;
    default: {
      const auto random = test::random_digests(1, salt)[0];
      std::memcpy(key, random.bytes.data(), 16);
    }
  }
  return probe::make_key_schedule(key);
}

// Digests whose words stress the block index (h at 0, all ones, the
// halves' edges) and the position bytes (all 0x3f, 0x40, 0xff).
std::vector<Digest> adversarial_digests() {
  const std::uint64_t all = ~std::uint64_t{0};
  const std::uint64_t hs[] = {0, 1, 0xffffffff, 0x100000000, all, all - 1, all / 2, all / 2 + 1,
                              0x00000000ffffffff, 0xffffffff00000000};
  const std::uint64_t qs[] = {0, all, 0x3f3f3f3f3f3f3f3f, 0x4040404040404040,
                              0x0001020304050607, 0xc0c1c2c3c4c5c6c7};
  std::vector<Digest> digests;
  for (const auto h : hs) {
    for (const auto q : qs) digests.push_back(test::digest_with_words(h, q));
  }
  return digests;
}

// Param: (Highway target, hashProtocolVersion 3 or 4).
class SimdBlockedTest
    : public ::testing::TestWithParam<std::tuple<std::int64_t, std::uint32_t>> {
 protected:
  void SetUp() override { hwy::SetSupportedTargetsForTest(std::get<0>(GetParam())); }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }

  std::uint32_t protocol() const { return std::get<1>(GetParam()); }
  blocked::LineScheme scheme(std::uint64_t blocks, std::uint64_t salt = 0) const {
    blocked::LineScheme s;
    s.block_count = blocks;
    s.protocol = protocol();
    if (protocol() == blocked::kProtocolBlockedKeyed) s.key = test_key(blocks + salt);
    return s;
  }
};

INSTANTIATE_TEST_SUITE_P(
    Targets, SimdBlockedTest,
    ::testing::Combine(::testing::ValuesIn(hwy::SupportedAndGeneratedTargets()),
                       ::testing::Values(blocked::kProtocolBlocked, blocked::kProtocolBlockedKeyed)),
    [](const ::testing::TestParamInfo<std::tuple<std::int64_t, std::uint32_t>>& info) {
      return std::string(hwy::TargetName(std::get<0>(info.param))) + "_protocol" +
             std::to_string(std::get<1>(info.param));
    });

std::vector<Answer> scalar_answers(const blocked::LineScheme& s, const std::vector<std::uint64_t>& words,
                                   const Digest* digests, std::size_t count) {
  std::vector<Answer> answers(count);
  scalar::blocked_query_batch(s, words.data(), digests, count, answers.data());
  return answers;
}

// simd::blocked_query_batch into a buffer with sentinels on both sides.
std::vector<Answer> simd_answers(const blocked::LineScheme& s, const std::vector<std::uint64_t>& words,
                                 const Digest* digests, std::size_t count) {
  const auto sentinel = static_cast<Answer>(0xA5);
  std::vector<Answer> buffer(count + 2, sentinel);
  simd::blocked_query_batch(s, words.data(), digests, count, buffer.data() + 1);
  EXPECT_EQ(buffer.front(), sentinel) << "wrote before the answers";
  EXPECT_EQ(buffer.back(), sentinel) << "wrote past the answers";
  return {buffer.begin() + 1, buffer.end() - 1};
}

// A filter of `blocks` blocks holding `members`, and random words OR-ed in
// so that absent digests get a mix of answers.
std::vector<std::uint64_t> mixed_filter(const blocked::LineScheme& s,
                                        const std::vector<Digest>& members, std::uint64_t seed) {
  std::vector<std::uint64_t> words(s.block_count * 8, 0);
  std::uint64_t state = seed;
  for (auto& w : words) {
    for (int r = 0; r < 3; ++r) {  // about 7/8 of the bits: some absent digests pass
      std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      w |= z ^ (z >> 31);
    }
  }
  scalar::blocked_insert_batch(s, words.data(), members.data(), members.size());
  return words;
}

TEST_P(SimdBlockedTest, HashesAndBlocksEqualTheReference) {
  auto digests = test::random_digests(3001, 5);
  const auto edges = adversarial_digests();
  digests.insert(digests.end(), edges.begin(), edges.end());
  const std::vector<std::uint64_t> block_counts = {1, 2, 3, 1973, 19'727, 197'252'105,
                                                    (1ull << 31) - 1, 1ull << 31};
  for (const std::uint64_t blocks : block_counts) {
    const auto s = scheme(blocks);
    std::vector<std::uint64_t> block(digests.size()), q(digests.size());
    simd::blocked_hash_batch(s, digests.data(), digests.size(), block.data(), q.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      const blocked::LineHash expected = scalar::blocked_line_hash(s, digests[i]);
      ASSERT_EQ(q[i], expected.q) << "digest " << i << ", B = " << blocks;
      ASSERT_EQ(block[i], blocked::block_of(expected.h, blocks)) << "digest " << i << ", B = " << blocks;
    }
  }
}

TEST_P(SimdBlockedTest, QueryAndInsertEqualTheReferenceAtEverySize) {
  // 1 block, small ones, just below and above the 1 MiB prefetch threshold,
  // an LLC-sized one and one past 32 MiB (the longer prefetch distance).
  const std::vector<std::uint64_t> block_counts = {1, 2, 7, 1000, 16'383, 16'384, 16'385, 300'007, 600'001};
  for (const std::uint64_t blocks : block_counts) {
    SCOPED_TRACE("B = " + std::to_string(blocks));
    const auto s = scheme(blocks, 1);
    const auto members = test::random_digests(std::min<std::uint64_t>(blocks * 4, 20'000), blocks);
    auto probes = test::random_digests(5000, blocks + 1);
    probes.insert(probes.end(), members.begin(), members.begin() + members.size() / 2);
    const auto edges = adversarial_digests();
    probes.insert(probes.end(), edges.begin(), edges.end());
    const auto words = mixed_filter(s, members, blocks);
    const auto expected = scalar_answers(s, words, probes.data(), probes.size());
    std::size_t maybe = 0;
    for (const auto a : expected) maybe += a == Answer::kMaybe;
    ASSERT_GT(maybe, 0u);
    ASSERT_LT(maybe, expected.size());
    ASSERT_EQ(simd_answers(s, words, probes.data(), probes.size()), expected);
    // Insert into an empty filter, and into one already holding bits.
    for (const bool prefilled : {false, true}) {
      std::vector<std::uint64_t> a = prefilled ? mixed_filter(s, {}, 3) : std::vector<std::uint64_t>(blocks * 8, 0);
      std::vector<std::uint64_t> b = a;
      scalar::blocked_insert_batch(s, a.data(), probes.data(), probes.size());
      simd::blocked_insert_batch(s, b.data(), probes.data(), probes.size());
      ASSERT_EQ(b, a) << (prefilled ? "prefilled" : "empty");
    }
  }
}

TEST_P(SimdBlockedTest, EveryBatchLengthAndStart) {
  const auto s = scheme(20'000, 2);
  const auto members = test::random_digests(40'000, 11);
  const auto words = mixed_filter(s, members, 12);
  auto probes = test::random_digests(200, 13);
  probes.insert(probes.end(), members.begin(), members.begin() + 200);
  const auto expected = scalar_answers(s, words, probes.data(), probes.size());
  for (std::size_t start = 0; start < 9; ++start) {
    for (std::size_t count = 0; start + count <= 140; ++count) {
      const auto got = simd_answers(s, words, probes.data() + start, count);
      ASSERT_TRUE(std::equal(got.begin(), got.end(), expected.begin() + static_cast<long>(start)))
          << "start " << start << ", count " << count;
      std::vector<std::uint64_t> a(s.block_count * 8, 0), b(a);
      scalar::blocked_insert_batch(s, a.data(), probes.data() + start, count);
      simd::blocked_insert_batch(s, b.data(), probes.data() + start, count);
      ASSERT_EQ(b, a) << "start " << start << ", count " << count;
    }
  }
}

// The content fingerprint by its definition: the library's XXH3-128 of each
// digest, summed mod 2^128.
ContentFingerprint reference_fingerprint(const Digest* digests, std::size_t count) {
  ContentFingerprint sum;
  for (std::size_t i = 0; i < count; ++i) {
    const XXH128_hash_t hash = XXH3_128bits(digests[i].bytes.data(), Digest::kSize);
    sum += {.low = hash.low64, .high = hash.high64};
  }
  return sum;
}

// The insert that sums the fingerprint in its pass sets the reference's
// bits and returns the reference's fingerprint: every batch length around
// the lane and group sizes and the prefetch distance (64, or 32 past 32 MiB)
// at every start 0..8, in a filter below the prefetch threshold (no
// prefetch), above it, and past 32 MiB (lengths beyond the distance only).
TEST_P(SimdBlockedTest, InsertFingerprintedEqualsTheReferenceAtEveryLengthAndStart) {
  auto probes = test::random_digests(200, 21);
  const auto edges = adversarial_digests();
  probes.insert(probes.begin() + 50, edges.begin(), edges.end());
  for (const std::uint64_t blocks :
       {std::uint64_t{7}, std::uint64_t{16'383}, std::uint64_t{20'000}}) {
    SCOPED_TRACE("B = " + std::to_string(blocks));
    const auto s = scheme(blocks, 4);
    for (std::size_t start = 0; start < 9; ++start) {
      for (std::size_t count = 0; start + count <= 150; ++count) {
        std::vector<std::uint64_t> a(s.block_count * 8, 0), b(a);
        scalar::blocked_insert_batch(s, a.data(), probes.data() + start, count);
        const ContentFingerprint sum =
            simd::blocked_insert_fingerprinted(s, b.data(), probes.data() + start, count);
        ASSERT_EQ(b, a) << "start " << start << ", count " << count;
        ASSERT_EQ(sum, reference_fingerprint(probes.data() + start, count))
            << "start " << start << ", count " << count;
      }
    }
  }
  // Past 32 MiB, a long batch: lengths around the distance 32 and a large one.
  const auto s = scheme(600'001, 5);
  const auto many = test::random_digests(50'003, 22);
  for (const std::size_t count : {std::size_t{0}, std::size_t{31}, std::size_t{32}, std::size_t{33},
                                  std::size_t{40}, std::size_t{41}, many.size()}) {
    std::vector<std::uint64_t> a(s.block_count * 8, 0), b(a);
    scalar::blocked_insert_batch(s, a.data(), many.data() + 1, count - (count == many.size()));
    const ContentFingerprint sum = simd::blocked_insert_fingerprinted(
        s, b.data(), many.data() + 1, count - (count == many.size()));
    ASSERT_EQ(b, a) << "count " << count;
    ASSERT_EQ(sum, reference_fingerprint(many.data() + 1, count - (count == many.size())))
        << "count " << count;
  }
}

TEST_P(SimdBlockedTest, DigestsAtAnOddByteAddress) {
  const auto s = scheme(19'727, 3);
  const auto source = test::random_digests(3000, 9);
  const auto words = mixed_filter(s, std::vector<Digest>(source.begin(), source.begin() + 1000), 4);
  for (const std::size_t byte_offset : {1u, 3u, 8u, 13u}) {
    std::vector<std::uint8_t> buffer(source.size() * Digest::kSize + 64);
    std::memcpy(buffer.data() + byte_offset, source.data(), source.size() * Digest::kSize);
    const auto* shifted = std::launder(reinterpret_cast<const Digest*>(buffer.data() + byte_offset));
    std::vector<Answer> got(source.size());
    simd::blocked_query_batch(s, words.data(), shifted, source.size(), got.data());
    ASSERT_EQ(got, scalar_answers(s, words, source.data(), source.size())) << byte_offset;
    std::vector<std::uint64_t> a(s.block_count * 8, 0), b(a);
    scalar::blocked_insert_batch(s, a.data(), source.data(), source.size());
    simd::blocked_insert_batch(s, b.data(), shifted, source.size());
    ASSERT_EQ(b, a) << byte_offset;
  }
}

// builds-v3.tsv through the vector kernels: the payload's SHA-256 and every
// false positive among 100,000 non-members (this test's protocol's rows).
TEST_P(SimdBlockedTest, MatchesEveryGoldenBuild) {
  std::vector<Digest> non_members;
  for (std::uint64_t i = 0; i < 100'000; ++i) non_members.push_back(test::non_member_digest(i));
  std::size_t rows = 0;
  for (const auto& row : test::read_tsv("vectors/v3/builds-v3.tsv")) {
    if (std::stoul(row[0]) != protocol()) continue;
    ++rows;
    SCOPED_TRACE("members " + row[2]);
    blocked::LineScheme s;
    s.block_count = std::stoull(row[5]) / 512;
    s.protocol = protocol();
    if (protocol() == blocked::kProtocolBlockedKeyed) {
      s.key = probe::make_key_schedule(Key::parse_hex(row[1])->bytes().data());
    }
    const auto members = test::member_digests(std::stoull(row[2]));
    std::vector<std::uint64_t> words(s.block_count * 8, 0);
    simd::blocked_insert_batch(s, words.data(), members.data(), members.size());
    EXPECT_EQ(sha256(std::span(reinterpret_cast<const std::uint8_t*>(words.data()), words.size() * 8)).hex(),
              row[8]);
    std::vector<Answer> answers(non_members.size());
    simd::blocked_query_batch(s, words.data(), non_members.data(), non_members.size(), answers.data());
    std::vector<std::uint64_t> maybe;
    for (std::size_t i = 0; i < answers.size(); ++i) {
      if (answers[i] == Answer::kMaybe) maybe.push_back(i);
    }
    EXPECT_EQ(maybe, test::split_numbers(row.size() > 9 ? row[9] : ""));
  }
  EXPECT_GE(rows, 2u);
}

}  // namespace
}  // namespace abf

namespace abf {
namespace {

// A filter past 2^35 bits (2^26 + 1 blocks: 4 GiB and 64 bytes, anonymous
// memory the kernel zeroes lazily, small pages so a few thousand digests
// touch a few thousand pages): no word or byte index narrower than 64 bits
// on the path. Every member answers Maybe, every answer of SIMD equals the
// reference's, and each member's bits are where the 64-bit index says.
TEST(SimdBlockedLarge, AFilterOfMoreThanTwoToThe35BitsAnswersEveryDigest) {
  const std::uint64_t blocks = (std::uint64_t{1} << 26) + 1;
  const std::size_t bytes = blocks * 64;
  void* memory = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED) GTEST_SKIP() << "cannot map 4 GiB of address space here";
  ::madvise(memory, bytes, MADV_NOHUGEPAGE);
  auto* words = static_cast<std::uint64_t*>(memory);
  for (const std::uint32_t protocol : {blocked::kProtocolBlocked, blocked::kProtocolBlockedKeyed}) {
    SCOPED_TRACE("protocol " + std::to_string(protocol));
    blocked::LineScheme s;
    s.block_count = blocks;
    s.protocol = protocol;
    s.key = test_key(7);
    auto members = test::random_digests(3000, protocol);
    // The last block and the first, and blocks past 2^32 bytes.
    const std::uint64_t all = ~std::uint64_t{0};
    for (const std::uint64_t h : {all, all - 1, std::uint64_t{0}, all / 2 + 1, all / 4 * 3}) {
      members.push_back(test::digest_with_words(h, 0x0123456789abcdef));
    }
    std::vector<std::uint64_t> block(members.size()), q(members.size());
    simd::blocked_hash_batch(s, members.data(), members.size(), block.data(), q.data());
    // Where 32-bit indices would wrap: bit 2^32 (7/8 of this filter lies
    // past it) and byte 2^31 (half).
    std::size_t past_bit_2_32 = 0, past_byte_2_31 = 0;
    for (const auto b : block) {
      past_bit_2_32 += b * 512 >= (std::uint64_t{1} << 32);
      past_byte_2_31 += b * 64 >= (std::uint64_t{1} << 31);
    }
    EXPECT_GT(past_bit_2_32, members.size() * 3 / 4);
    EXPECT_GT(past_byte_2_31, members.size() / 3);
    if (protocol == blocked::kProtocolBlocked) EXPECT_EQ(block[3000], blocks - 1);
    simd::blocked_insert_batch(s, words, members.data(), members.size());
    for (std::size_t i = 0; i < members.size(); ++i) {
      const blocked::LineHash hash = scalar::blocked_line_hash(s, members[i]);
      ASSERT_EQ(blocked::block_of(hash.h, blocks), block[i]);
      for (unsigned j = 0; j < 8; ++j) {
        const std::uint64_t bit = blocked::bit_index(block[i], hash.q, j);
        ASSERT_NE(words[bit / 64] & (std::uint64_t{1} << (bit % 64)), 0u) << "member " << i;
      }
    }
    auto probes = members;
    const auto absent = test::random_digests(20'000, 99 + protocol);
    probes.insert(probes.end(), absent.begin(), absent.end());
    std::vector<Answer> expected(probes.size()), got(probes.size());
    scalar::blocked_query_batch(s, words, probes.data(), probes.size(), expected.data());
    simd::blocked_query_batch(s, words, probes.data(), probes.size(), got.data());
    ASSERT_EQ(got, expected);
    for (std::size_t i = 0; i < members.size(); ++i) ASSERT_EQ(got[i], Answer::kMaybe) << i;
    std::size_t maybe = 0;
    for (std::size_t i = members.size(); i < got.size(); ++i) maybe += got[i] == Answer::kMaybe;
    EXPECT_EQ(maybe, 0u) << "a nearly empty filter of 2^26 blocks answered Maybe for absent digests";
    // Clear the members' blocks for the next protocol.
    for (const auto b : block) std::memset(words + b * 8, 0, 64);
  }
  ::munmap(memory, bytes);
}

}  // namespace
}  // namespace abf
