// The CUDA backend's math, proven on the CPU: the per-digest query and insert
// of abf/cuda/view.hpp (the very functions the kernels call, ABF_HD) under
// both hash protocols, the step-1 hashes the kernels compute from loaded
// words, and the division-free reduction they use, against `%`, the golden
// vectors and the scalar reference (OpenSSL's SipHash for protocol 2).
// Runs in every build, with or without CUDA or a device.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/cuda/view.hpp"
#include "abf/probe.hpp"
#include "cuda_engine.hpp"
#include "kernels.hpp"
#include "test_support.hpp"

namespace abf {
namespace {

constexpr std::uint64_t kAllOnes = ~std::uint64_t{0};

// m in 64..2^30, multiples of 64: the edges, odd multiples of 64 (the ones a
// shift cannot reduce), multiples near powers of two, the golden layouts.
std::vector<std::uint64_t> bit_count_sweep() {
  std::vector<std::uint64_t> ms = {64,
                                   128,
                                   192,
                                   320,
                                   448,
                                   64 * 1001,
                                   64 * 65535,
                                   333824,
                                   9592960,
                                   14377664,
                                   (std::uint64_t{1} << 30) - 64,
                                   std::uint64_t{1} << 30};
  for (std::uint64_t odd = 3; odd < 64; odd += 2) ms.push_back(64 * odd);
  for (int shift = 7; shift < 30; ++shift) {
    const std::uint64_t power = std::uint64_t{1} << shift;
    ms.push_back(power);
    ms.push_back(power + 64);
    ms.push_back(power - 64);
  }
  return ms;
}

// Hash words that stress a reduction by m: the extremes of 64 bits, values
// around m and around the largest multiple of m, and random ones.
std::vector<std::uint64_t> adversarial_words(std::uint64_t m, std::mt19937_64& rng,
                                             int random_count) {
  std::vector<std::uint64_t> words = {0,
                                      1,
                                      2,
                                      63,
                                      64,
                                      std::uint64_t{1} << 32,
                                      (std::uint64_t{1} << 32) - 1,
                                      std::uint64_t{1} << 63,
                                      (std::uint64_t{1} << 63) - 1,
                                      (std::uint64_t{1} << 63) + 1,
                                      kAllOnes,
                                      kAllOnes - 1,
                                      m - 1,
                                      m,
                                      m + 1,
                                      2 * m - 1,
                                      2 * m,
                                      m << 32,
                                      (m << 32) - 1,
                                      (m << 32) + 1};
  const std::uint64_t top = kAllOnes / m * m;  // the largest multiple of m
  for (std::uint64_t q : {top, top - m, top / 2 / m * m}) {
    words.push_back(q);
    words.push_back(q - 1);
    words.push_back(q + 1);
    words.push_back(q + m - 1);
  }
  for (int i = 0; i < random_count; ++i) words.push_back(rng());
  for (int i = 0; i < random_count / 4; ++i) words.push_back(rng() % m);
  return words;
}

TEST(CudaMathTest, ReducerEqualsModuloOverTheSweep) {
  std::mt19937_64 rng(20240531);
  for (const std::uint64_t m : bit_count_sweep()) {
    const probe::Reducer reducer(m);
    for (const std::uint64_t x : adversarial_words(m, rng, 4000)) {
      ASSERT_EQ(reducer.reduce(x), x % m) << "x = " << x << ", m = " << m;
      // step = (h2 | 1) mod m, as the kernels compute it.
      ASSERT_EQ(reducer.reduce(x | 1), probe::step_of(x, m)) << "h2 = " << x << ", m = " << m;
      ASSERT_EQ(reducer.reduce(x), probe::first_index(x, m)) << "h1 = " << x << ", m = " << m;
    }
  }
}

TEST(CudaMathTest, ViewCarriesTheReducerOfItsBitCount) {
  for (const std::uint64_t m : bit_count_sweep()) {
    const cuda::DeviceFilterView view = cuda::make_view(nullptr, m, 7);
    const probe::Reducer expected(m);
    EXPECT_EQ(view.reducer.m, m);
    EXPECT_EQ(view.reducer.c_hi, expected.c_hi) << "m = " << m;
    EXPECT_EQ(view.reducer.c_lo, expected.c_lo) << "m = " << m;
    EXPECT_EQ(view.bit_count, m);
    EXPECT_EQ(view.hash_count, 7u);
  }
}

probe::Scheme scheme_of(std::uint64_t m, std::uint32_t k, std::uint32_t protocol) {
  return probe::Scheme{m, k, protocol, probe::KeySchedule{}};
}

// Each protocol's own limits, at and just past every edge.
TEST(CudaMathTest, ValidSchemeIsEachProtocolsLayoutRule) {
  for (const std::uint32_t protocol : {probe::kProtocolUnkeyed, probe::kProtocolKeyed}) {
    SCOPED_TRACE(protocol);
    EXPECT_TRUE(cuda::valid_scheme(scheme_of(64, 1, protocol)));
    EXPECT_TRUE(cuda::valid_scheme(scheme_of(std::uint64_t{1} << 30, 32, protocol)));
    EXPECT_TRUE(cuda::valid_scheme(scheme_of(64 * 1001, 7, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(0, 7, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(1000, 7, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(63, 7, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of((std::uint64_t{1} << 30) + 64, 7, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(64, 0, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(64, 33, protocol)));
  }
  for (const std::uint32_t protocol : {blocked::kProtocolBlocked, blocked::kProtocolBlockedKeyed}) {
    SCOPED_TRACE(protocol);
    EXPECT_TRUE(cuda::valid_scheme(scheme_of(512, 8, protocol)));
    EXPECT_TRUE(cuda::valid_scheme(scheme_of(std::uint64_t{1} << 40, 8, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(448, 8, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(512 + 64, 8, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of((std::uint64_t{1} << 40) + 512, 8, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(512, 7, protocol)));
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(512, 9, protocol)));
  }
  for (const std::uint32_t protocol : {0u, 5u, 0xffffffffu}) {
    EXPECT_FALSE(cuda::valid_scheme(scheme_of(512, 8, protocol))) << protocol;
  }
}

// A view of an impossible layout stops with the values named, instead of
// the reducer's division by zero (m = 0 raised SIGFPE) or a view that reads
// past its words (m = 1000).
TEST(CudaMathTest, AViewOfAnInvalidSchemeStopsNamingTheValues) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::uint64_t words[16] = {};
  EXPECT_DEATH(cuda::make_view(words, 0, 7),
               "abf::cuda::make_view: bit_count 0, hash_count 7 is no layout of protocol 1");
  EXPECT_DEATH(cuda::make_view(words, 1000, 7), "bit_count 1000, hash_count 7 is no layout");
  EXPECT_DEATH(cuda::make_view(words, 1024, 0), "bit_count 1024, hash_count 0 is no layout");
  EXPECT_DEATH(cuda::make_build_view(words, 1024, 33),
               "abf::cuda::make_build_view: bit_count 1024, hash_count 33 is no layout");
  EXPECT_DEATH(cuda::make_view(words, scheme_of(1024, 7, blocked::kProtocolBlocked)),
               "hash_count 7 is no layout of protocol 3");
  EXPECT_DEATH(cuda::make_build_view(words, scheme_of(1024, 8, 5)),
               "bit_count 1024, hash_count 8 is no layout of protocol 5");
}

// cuda::make_view and probe::make_view (the host view) take the same
// arguments: an unqualified call with a probe::Scheme finds both and is
// ambiguous, a compile error, never the other view chosen silently.
namespace unqualified {
using namespace abf::cuda;
template <class S>
concept CallResolves = requires(const std::uint64_t* words, const S& scheme) {
  make_view(words, scheme);
};
static_assert(!CallResolves<probe::Scheme>);
static_assert(requires(const std::uint64_t* words, const probe::Scheme& scheme) {
  cuda::make_view(words, scheme);  // the qualified call, as the docs say
});
}  // namespace unqualified

TEST(CudaMathTest, ByteSwapOfALittleEndianLoadIsTheBigEndianWord) {
  std::mt19937_64 rng(7);
  for (int i = 0; i < 10000; ++i) {
    const std::uint64_t h1 =
        i < 4 ? std::vector<std::uint64_t>{0, 1, kAllOnes, 1ull << 63}[i] : rng();
    const Digest digest = test::digest_with_words(h1, rng());
    std::uint64_t little = 0;
    for (int b = 7; b >= 0; --b) little = (little << 8) | digest.bytes[b];
    ASSERT_EQ(cuda::byte_swap64(little), probe::load_be64(digest.bytes.data()));
    ASSERT_EQ(cuda::byte_swap64(little), h1);
  }
}

// Each golden probe sequence: a bitset holding exactly those bits answers
// Maybe, and loses it when any one of them is cleared; inserting the digest
// into an empty bitset sets those bits (and, setting at most k, no others).
TEST(CudaMathTest, ViewFollowsTheGoldenProbeSequences) {
  const auto rows = test::read_tsv("vectors/probes.tsv");
  ASSERT_FALSE(rows.empty());
  // One zeroed bitset for the largest m, cleared again after every row.
  std::vector<std::uint64_t> bits(probe::kMaxBitCount / 64, 0);
  auto has = [&](std::uint64_t i) { return (bits[i / 64] >> (i % 64)) & 1; };
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 4u);
    const Digest digest = test::digest_from_hex(row[0]);
    const std::uint64_t m = std::stoull(row[1]);
    const auto k = static_cast<std::uint32_t>(std::stoul(row[2]));
    const std::vector<std::uint64_t> indices = test::split_numbers(row[3]);
    ASSERT_EQ(indices.size(), k);
    ASSERT_LE(m, probe::kMaxBitCount);
    const std::string where = row[0] + " m = " + row[1] + " k = " + row[2];

    cuda::insert(cuda::make_build_view(bits.data(), m, k), digest.bytes.data());
    for (const std::uint64_t i : indices) ASSERT_TRUE(has(i)) << where << " bit " << i;

    const cuda::DeviceFilterView view = cuda::make_view(bits.data(), m, k);
    ASSERT_TRUE(cuda::might_contain(view, digest.bytes.data())) << where;
    for (const std::uint64_t i : indices) {
      bits[i / 64] &= ~(std::uint64_t{1} << (i % 64));
      EXPECT_FALSE(cuda::might_contain(view, digest.bytes.data())) << where << " without bit " << i;
      bits[i / 64] |= std::uint64_t{1} << (i % 64);
    }
    for (const std::uint64_t i : indices) bits[i / 64] = 0;
  }
}

// Digests whose h1, h2 are the adversarial words for m, plus random digests.
std::vector<Digest> adversarial_digests(std::uint64_t m, std::mt19937_64& rng) {
  const std::vector<std::uint64_t> words = adversarial_words(m, rng, 64);
  std::vector<Digest> digests;
  for (std::size_t a = 0; a < words.size(); a += 3) {
    for (std::size_t b = 0; b < words.size(); b += 5) {
      digests.push_back(test::digest_with_words(words[a], words[b]));
    }
  }
  const auto random = test::random_digests(512, m);
  digests.insert(digests.end(), random.begin(), random.end());
  return digests;
}

// The kernels' per-digest insert and query (run here on the host) against
// the scalar reference, for every k and a spread of m: same bits after
// inserting members, same answers for members and non-members.
TEST(CudaMathTest, ViewQueryAndInsertMatchTheScalarReference) {
  std::mt19937_64 rng(99);
  const std::vector<std::uint64_t> ms = {64,        128,    192,
                                         64 * 1001, 333824, (std::uint64_t{1} << 20) + 64};
  for (const std::uint64_t m : ms) {
    const std::vector<Digest> digests = adversarial_digests(m, rng);
    // Members: every third digest, so sparse and dense filters both occur.
    std::vector<Digest> members;
    for (std::size_t i = 0; i < digests.size(); i += 3) members.push_back(digests[i]);
    for (std::uint32_t k = probe::kMinHashCount; k <= probe::kMaxHashCount; ++k) {
      std::vector<std::uint64_t> reference(m / 64, 0);
      scalar::insert_batch(probe::unkeyed_scheme(m, k), reference.data(), members.data(),
                           members.size());
      std::vector<std::uint64_t> built(m / 64, 0);
      const cuda::DeviceBuildView build = cuda::make_build_view(built.data(), m, k);
      for (const Digest& d : members) cuda::insert(build, d.bytes.data());
      ASSERT_EQ(built, reference) << "m = " << m << " k = " << k;

      std::vector<Answer> expected(digests.size());
      const probe::FilterView scalar_view =
          probe::make_view(reference.data(), probe::unkeyed_scheme(m, k));
      scalar::query_batch(scalar_view, digests.data(), digests.size(), expected.data());
      const cuda::DeviceFilterView view = cuda::make_view(reference.data(), m, k);
      for (std::size_t i = 0; i < digests.size(); ++i) {
        const bool maybe = cuda::might_contain(view, digests[i].bytes.data());
        ASSERT_EQ(maybe, expected[i] == Answer::kMaybe)
            << "m = " << m << " k = " << k << " digest " << digests[i].hex();
      }
    }
  }
}

// --- Protocol 2 (keyed) ----------------------------------------------------------

struct NamedKey {
  std::string name;
  Key key;
};

// The keys of the keyed runs: the vector keys (the golden one, another, all
// zero), all 0xff, the golden key with one bit flipped at either end of
// each of its two little-endian words, and two pseudo-random keys.
std::vector<NamedKey> test_keys() {
  std::vector<NamedKey> keys;
  for (const auto& vector_key : test::vector_keys()) {
    keys.push_back({"vector key " + vector_key.hex, vector_key.key});
  }
  std::array<std::uint8_t, Key::kSize> bytes{};
  bytes.fill(0xff);
  keys.push_back({"all-0xff key", Key::from_bytes(bytes)});
  const test::VectorKey golden = test::golden_key();
  for (const int bit : {0, 63, 64, 127}) {
    std::memcpy(bytes.data(), golden.key.bytes().data(), Key::kSize);
    bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
    keys.push_back(
        {"golden key with bit " + std::to_string(bit) + " flipped", Key::from_bytes(bytes)});
  }
  for (const Digest& random : test::random_digests(2, 2718)) {
    std::memcpy(bytes.data(), random.bytes.data(), Key::kSize);
    keys.push_back({"random key", Key::from_bytes(bytes)});
  }
  return keys;
}

probe::Scheme keyed_scheme(std::uint64_t m, std::uint32_t k, const Key& key) {
  auto scheme = Scheme::keyed(Layout{m, k}, key);
  EXPECT_TRUE(scheme.has_value()) << scheme.error().describe();
  return scheme ? scheme->probe() : probe::Scheme{};
}

// Digests for the keyed hash, which reads all 32 bytes: all zero and all
// 0xff, each with every one of its 256 bits flipped in turn, then random.
std::vector<Digest> keyed_digests(std::size_t random_count, std::uint64_t seed) {
  std::vector<Digest> digests;
  for (const std::uint8_t fill : {std::uint8_t{0}, std::uint8_t{0xff}}) {
    Digest base;
    base.bytes.fill(fill);
    digests.push_back(base);
    for (int bit = 0; bit < 256; ++bit) {
      Digest flipped = base;
      flipped.bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      digests.push_back(flipped);
    }
  }
  const auto random = test::random_digests(random_count, seed);
  digests.insert(digests.end(), random.begin(), random.end());
  return digests;
}

// The four little-endian words of a digest: what the kernels' two 128-bit
// loads of an aligned record give.
std::array<std::uint64_t, 4> words_of(const Digest& digest) {
  std::array<std::uint64_t, 4> words{};
  for (int w = 0; w < 4; ++w) words[w] = probe::load_le64(digest.bytes.data() + 8 * w);
  return words;
}

TEST(CudaMathTest, ViewCarriesTheSchemeItWasMadeWith) {
  std::uint64_t words[4] = {};
  const Key key = test::golden_key().key;
  const probe::Scheme keyed = keyed_scheme(256, 9, key);
  ASSERT_EQ(keyed.protocol, probe::kProtocolKeyed);
  const cuda::DeviceFilterView view = cuda::make_view(words, keyed);
  EXPECT_EQ(view.words, words);
  EXPECT_EQ(view.bit_count, 256u);
  EXPECT_EQ(view.hash_count, 9u);
  EXPECT_EQ(view.protocol, probe::kProtocolKeyed);
  EXPECT_TRUE(view.key == keyed.key);
  EXPECT_EQ(view.reducer.m, 256u);
  const cuda::DeviceBuildView build = cuda::make_build_view(words, keyed);
  EXPECT_EQ(build.words, words);
  EXPECT_EQ(build.protocol, probe::kProtocolKeyed);
  EXPECT_TRUE(build.key == keyed.key);
  EXPECT_EQ(build.reducer.c_lo, view.reducer.c_lo);

  // The (m, k) forms are protocol 1, with no key.
  const cuda::DeviceFilterView unkeyed = cuda::make_view(words, 256, 9);
  EXPECT_EQ(unkeyed.protocol, probe::kProtocolUnkeyed);
  EXPECT_TRUE(unkeyed.key == probe::KeySchedule{});
  EXPECT_EQ(cuda::make_build_view(words, 256, 9).protocol, probe::kProtocolUnkeyed);
}

// What the kernels' aligned path computes from loaded words, for both
// protocols, against the reference's step 1 (OpenSSL for protocol 2); the
// byte-load path of the views (probe::hashes_of) likewise.
TEST(CudaMathTest, HashesOfLoadedWordsEqualTheReference) {
  const std::vector<Digest> digests = keyed_digests(4000, 5);
  std::vector<probe::HashPair> expected(digests.size());
  const probe::Scheme unkeyed = probe::unkeyed_scheme(64, 1);
  scalar::hash_batch(unkeyed, digests.data(), digests.size(), expected.data());
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const auto w = words_of(digests[i]);
    const probe::HashPair got = cuda::unkeyed_hashes_of_words(w[0], w[1]);
    ASSERT_EQ(got.h1, expected[i].h1) << digests[i].hex();
    ASSERT_EQ(got.h2, expected[i].h2) << digests[i].hex();
  }
  for (const NamedKey& key : test_keys()) {
    const probe::Scheme scheme = keyed_scheme(64, 1, key.key);
    scalar::hash_batch(scheme, digests.data(), digests.size(), expected.data());
    for (std::size_t i = 0; i < digests.size(); ++i) {
      const auto w = words_of(digests[i]);
      const probe::HashPair got = cuda::keyed_hashes_of_words(scheme.key, w[0], w[1], w[2], w[3]);
      ASSERT_EQ(got.h1, expected[i].h1) << key.name << " " << digests[i].hex();
      ASSERT_EQ(got.h2, expected[i].h2) << key.name << " " << digests[i].hex();
      const probe::HashPair bytes = probe::hashes_of(scheme, digests[i].bytes.data());
      ASSERT_EQ(bytes.h1, expected[i].h1) << key.name << " " << digests[i].hex();
      ASSERT_EQ(bytes.h2, expected[i].h2) << key.name << " " << digests[i].hex();
    }
  }
}

// Protocol 2 hashes every byte of the digest: flipping any one of the 256
// bits changes (h1, h2). (A kernel reading only the first 16 bytes, as
// protocol 1 does, would map the flips in bytes 16..31 to the same bits.)
TEST(CudaMathTest, KeyedHashesDependOnEveryDigestBit) {
  const probe::Scheme scheme = keyed_scheme(64, 1, test::golden_key().key);
  for (const Digest& base : test::random_digests(8, 99)) {
    const auto w = words_of(base);
    const probe::HashPair original =
        cuda::keyed_hashes_of_words(scheme.key, w[0], w[1], w[2], w[3]);
    for (int bit = 0; bit < 256; ++bit) {
      Digest flipped = base;
      flipped.bytes[bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      const auto f = words_of(flipped);
      const probe::HashPair changed =
          cuda::keyed_hashes_of_words(scheme.key, f[0], f[1], f[2], f[3]);
      EXPECT_FALSE(changed.h1 == original.h1 && changed.h2 == original.h2)
          << "bit " << bit << " of " << base.hex();
    }
  }
}

// The golden keyed probe sequences (vectors/v2/probes-v2.tsv): the view's
// insert sets exactly those bits, the view's query needs every one of them,
// and the aligned path's hashes walk them in order.
TEST(CudaMathTest, ViewFollowsTheGoldenKeyedProbeSequences) {
  const auto rows = test::read_tsv("vectors/v2/probes-v2.tsv");
  ASSERT_FALSE(rows.empty());
  std::vector<std::uint64_t> bits(probe::kMaxBitCount / 64, 0);
  auto has = [&](std::uint64_t i) { return (bits[i / 64] >> (i % 64)) & 1; };
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 5u);
    auto key = Key::parse_hex(row[0]);
    ASSERT_TRUE(key.has_value()) << row[0];
    const Digest digest = test::digest_from_hex(row[1]);
    const std::uint64_t m = std::stoull(row[2]);
    const auto k = static_cast<std::uint32_t>(std::stoul(row[3]));
    const std::vector<std::uint64_t> indices = test::split_numbers(row[4]);
    ASSERT_EQ(indices.size(), k);
    ASSERT_LE(m, probe::kMaxBitCount);
    const std::string where =
        "key " + row[0] + " digest " + row[1] + " m = " + row[2] + " k = " + row[3];
    const probe::Scheme scheme = keyed_scheme(m, k, *key);

    const auto w = words_of(digest);
    const probe::HashPair hashes = cuda::keyed_hashes_of_words(scheme.key, w[0], w[1], w[2], w[3]);
    const probe::Reducer reducer(m);
    std::uint64_t i = reducer.reduce(hashes.h1);
    const std::uint64_t step = reducer.reduce(hashes.h2 | 1);
    for (std::uint32_t j = 0; j < k; ++j) {
      ASSERT_EQ(i, indices[j]) << where << " probe " << j;
      i = probe::advance(i, step, m);
    }

    cuda::insert(cuda::make_build_view(bits.data(), scheme), digest.bytes.data());
    for (const std::uint64_t index : indices) ASSERT_TRUE(has(index)) << where << " bit " << index;
    const cuda::DeviceFilterView view = cuda::make_view(bits.data(), scheme);
    ASSERT_TRUE(cuda::might_contain(view, digest.bytes.data())) << where;
    ASSERT_TRUE(cuda::might_contain(view, hashes)) << where;
    for (const std::uint64_t index : indices) {
      bits[index / 64] &= ~(std::uint64_t{1} << (index % 64));
      EXPECT_FALSE(cuda::might_contain(view, digest.bytes.data()))
          << where << " without bit " << index;
      bits[index / 64] |= std::uint64_t{1} << (index % 64);
    }
    for (const std::uint64_t index : indices) bits[index / 64] = 0;
  }
}

// The keyed view's insert and query (run here on the host) against the
// scalar reference, for every k, m from 64 to 2^30, every test key: same
// bits after inserting members, same answers for members and non-members.
TEST(CudaMathTest, KeyedViewQueryAndInsertMatchTheScalarReference) {
  const std::vector<NamedKey> keys = test_keys();
  const std::vector<std::uint64_t> ms = {
      64, 128, 192, 64 * 1001, 333824, 14377664, std::uint64_t{1} << 30};
  for (const std::uint64_t m : ms) {
    const std::vector<Digest> digests = keyed_digests(600, m);
    // Members: every third digest, so sparse and dense filters both occur.
    std::vector<Digest> members;
    for (std::size_t i = 0; i < digests.size(); i += 3) members.push_back(digests[i]);
    std::vector<std::uint64_t> reference(m / 64, 0);
    std::vector<std::uint64_t> built(m / 64, 0);
    // Every key at the small sizes; at 2^30, where each comparison reads two
    // 128 MiB bitsets, the all-zero, all-0xff and golden keys.
    const bool large = m > (std::uint64_t{1} << 24);
    for (const NamedKey& key : keys) {
      if (large && key.name.find("vector key") == std::string::npos && key.name != "all-0xff key") {
        continue;
      }
      for (std::uint32_t k = probe::kMinHashCount; k <= probe::kMaxHashCount; ++k) {
        const std::string where =
            key.name + " m = " + std::to_string(m) + " k = " + std::to_string(k);
        const probe::Scheme scheme = keyed_scheme(m, k, key.key);
        scalar::insert_batch(scheme, reference.data(), members.data(), members.size());
        const cuda::DeviceBuildView build = cuda::make_build_view(built.data(), scheme);
        for (const Digest& d : members) cuda::insert(build, d.bytes.data());
        ASSERT_TRUE(built == reference) << where;

        std::vector<Answer> expected(digests.size());
        scalar::query_batch(probe::make_view(reference.data(), scheme), digests.data(),
                            digests.size(), expected.data());
        const cuda::DeviceFilterView view = cuda::make_view(reference.data(), scheme);
        for (std::size_t i = 0; i < digests.size(); ++i) {
          const bool maybe = cuda::might_contain(view, digests[i].bytes.data());
          ASSERT_EQ(maybe, expected[i] == Answer::kMaybe)
              << where << " digest " << digests[i].hex();
        }

        // Both bitsets back to zero through the reference's own positions
        // (cheaper than clearing 128 MiB twice per case): equal above, and
        // the reference sets no other bits.
        std::vector<probe::HashPair> hashes(members.size());
        scalar::hash_batch(scheme, members.data(), members.size(), hashes.data());
        for (const probe::HashPair& pair : hashes) {
          std::uint64_t i = probe::first_index(pair.h1, m);
          const std::uint64_t step = probe::step_of(pair.h2, m);
          for (std::uint32_t j = 0; j < k; ++j) {
            reference[probe::word_of(i)] = 0;
            built[probe::word_of(i)] = 0;
            i = probe::advance(i, step, m);
          }
        }
      }
    }
  }
}

// Without a device (this machine, CI) the engine says so: a specific code and
// a message naming the cause, never a silent answer.
TEST(CudaMathTest, EngineWithoutADeviceIsAClearError) {
  const detail::Engine& cuda = detail::kCudaEngine;
  if (cuda.available()) GTEST_SKIP() << "a CUDA device is present: " << cuda.detail();
  EXPECT_FALSE(cuda.detail().empty());
  std::uint64_t words[1] = {};
  const auto lane = cuda.open_lane(*Scheme::unkeyed({64, 3}), words);
  ASSERT_FALSE(lane.has_value());
  EXPECT_EQ(lane.error().code, ErrorCode::kBackendUnavailable) << lane.error().message;
  EXPECT_NE(lane.error().message.find("CUDA"), std::string::npos) << lane.error().message;

  // A builder asked for CUDA refuses the chunk and keeps nothing of it.
  auto builder = FilterBuilder::create(BloomSpec{100, 0.01});
  ASSERT_TRUE(builder.has_value());
  const auto digests = test::random_digests(4, 1);
  auto added = builder->add(digests, Backend::kCuda);
  ASSERT_FALSE(added.has_value());
  EXPECT_EQ(added.error().code, ErrorCode::kBackendUnavailable) << added.error().message;
  EXPECT_EQ(builder->inserted_item_count(), 0u);
  auto filter = std::move(*builder).finish();
  ASSERT_TRUE(filter.has_value()) << filter.error().describe();
  EXPECT_EQ(filter->popcount(), 0u) << "a refused chunk must leave the bits alone";
}

}  // namespace
}  // namespace abf
