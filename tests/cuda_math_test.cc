// The CUDA backend's math, proven on the CPU: the per-digest query and insert
// of abf/cuda/view.hpp (the very functions the kernels call, ABF_HD) and the
// division-free reduction they use, against `%` and the scalar reference.
// Runs in every build, with or without CUDA or a device.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "abf/cuda/view.hpp"
#include "abf/probe.hpp"
#include "engine.hpp"
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
