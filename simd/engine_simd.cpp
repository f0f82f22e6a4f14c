// The SIMD engine's row of the engine table (core/engine/engine.hpp): the
// Highway kernels (probe_simd.cc) over the arena's threads, and its build
// lane, which picks how the threads share one bitset by its size. Registered
// by simd/CMakeLists.txt. And the engine's public face in abf/backend.hpp
// (simd_target_name, simd_compiled_targets).
#include <algorithm>
#include <string>
#include <vector>

#include "abf/backend.hpp"
#include "engine.hpp"
#include "parallel.hpp"
#include "partition.hpp"
#include "abf/blocked.hpp"
#include "abf/simd/target.hpp"
#include "blocked_simd.h"
#include "probe_simd.h"

namespace abf {

namespace detail {

namespace {

// Private lanes for a parallel build: at most the build's budget
// (kBuildScratchBudget) beside the filter, and only for chunks this large. A
// shared bitset costs 2.5-7x per probe whatever the merge (atomic OR, word
// ranges; docs/parallel.md), so a thread filling its own bitset and one OR at
// the end is the only way a 2-thread build beats one thread.
constexpr std::size_t kLaneMinBatch = std::size_t{32} << 10;

class SimdLane final : public BuildLane {
 public:
  SimdLane(const Scheme& scheme, std::uint64_t* words)
      : scheme_(scheme.probe()), words_(words), word_count_(scheme.bit_count() / 64) {}

  Result<void> insert(std::span<const Digest> digests) override {
    return insert_into(digests, nullptr);
  }

  // The one-line protocols sum the fingerprint in their insert kernels'
  // pass (blocked_insert_fingerprinted), each lane's part on its thread.
  Result<void> insert_fingerprinted(std::span<const Digest> digests,
                                    ContentFingerprint& sum) override {
    if (!blocked::is_blocked_protocol(scheme_.protocol)) {
      return BuildLane::insert_fingerprinted(digests, sum);
    }
    return insert_into(digests, &sum);
  }

  Result<void> finish() override {
    if (partitioned_) {
      partitioned_->flush(words_);
      partitioned_.reset();
    }
    if (!lanes_.empty()) {
      std::uint64_t* words = words_;
      parallel_for_chunks(0, word_count_, 1 << 16, [&](std::size_t begin, std::size_t end) {
        for (const auto& lane : lanes_) {
          const std::uint64_t* other = lane.get();
          for (std::size_t w = begin; w < end; ++w) words[w] |= other[w];
        }
      });
      lanes_.clear();
    }
    return {};
  }

 private:
  // Inserts the chunk; with `sum` (blocked protocols only), also its
  // content fingerprint.
  Result<void> insert_into(std::span<const Digest> digests, ContentFingerprint* sum) {
    const std::size_t threads = available_threads();
    // Beyond the LLC the positions are sorted by range before they are set
    // (partition.hpp), with one thread as with many: one thread so
    // builds the 4 GiB input 19% faster (2.36 against 2.9 s), and several
    // share no random DRAM lines.
    // The one-line protocols touch one line a digest: no partition (its
    // buckets hold 32-bit positions of the classic kind).
    const bool blocked = blocked::is_blocked_protocol(scheme_.protocol);
    if (!blocked && (partitioned_ || word_count_ * sizeof(std::uint64_t) >= kPartitionMinBytes)) {
      if (partitioned_ && partitioned_->slot_count() < threads) {
        // Called from a larger arena than before: set what is buffered, then
        // scatter over one slot per thread (a smaller arena runs the extra
        // slots in turn, so it keeps them).
        partitioned_->flush(words_);
        partitioned_.reset();
      }
      if (!partitioned_) partitioned_ = std::make_unique<PartitionedBuild>(scheme_, threads);
      partitioned_->add(words_, digests.data(), digests.size());
      return {};
    }
    if (threads > 1 && digests.size() >= kLaneMinBatch) {
      // One lane per thread, as many as the budget holds; the filter's own
      // bitset is the first.
      const std::size_t bytes = word_count_ * sizeof(std::uint64_t);
      const std::size_t wanted = std::min(threads, 1 + kBuildScratchBudget / bytes);
      while (lanes_.size() + 1 < wanted) lanes_.push_back(allocate_words(word_count_));
    }
    if (lanes_.empty()) {
      if (sum != nullptr && threads == 1) {
        *sum = simd::blocked_insert_fingerprinted(simd::line_scheme_of(scheme_), words_,
                                                  digests.data(), digests.size());
        return {};
      }
      parallel_insert(simd::insert_batch, scheme_, words_, digests.data(), digests.size());
      if (sum != nullptr) *sum = content_fingerprint_of(digests);
      return {};
    }
    // Contiguous parts, one per lane; each lane is written by one task only.
    const std::size_t parts = lanes_.size() + 1;
    const std::size_t per_part = (digests.size() + parts - 1) / parts;
    std::vector<ContentFingerprint> sums(sum != nullptr ? parts : 0);
    parallel_for_chunks(0, parts, 1, [&](std::size_t first, std::size_t last) {
      for (std::size_t part = first; part < last; ++part) {
        const std::size_t begin = std::min(digests.size(), part * per_part);
        const std::size_t end = std::min(digests.size(), begin + per_part);
        std::uint64_t* lane = part == 0 ? words_ : lanes_[part - 1].get();
        if (sum != nullptr) {
          sums[part] = simd::blocked_insert_fingerprinted(simd::line_scheme_of(scheme_), lane,
                                                          digests.data() + begin, end - begin);
        } else {
          simd::insert_batch(scheme_, lane, digests.data() + begin, end - begin);
        }
      }
    });
    if (sum != nullptr) {
      *sum = ContentFingerprint{};
      for (const ContentFingerprint& part : sums) *sum += part;
    }
    return {};
  }

  probe::Scheme scheme_;
  std::uint64_t* words_;
  std::size_t word_count_;
  std::vector<std::shared_ptr<std::uint64_t>> lanes_;  // private bitsets beside words_
  std::unique_ptr<PartitionedBuild> partitioned_;      // filters beyond the LLC
};

}  // namespace

extern const Engine kSimdEngine{
    .name = "simd",
    .summary = "Highway batch engine, the best vector target of this CPU, on every core",
    .kind = EngineKind::kHost,
    .rank = 1,
    // Runs on every x86 and Arm CPU (EMU128 at worst), so it is what an
    // automatic choice takes and falls back to.
    .fallback = true,
    .available = []() noexcept { return true; },
    .detail = [] { return simd::target_name(); },
    .auto_prefers = [](const Workload&) noexcept { return true; },
    .query = [](const Filter& filter, std::span<const Digest> digests,
                std::span<Answer> answers) -> Result<void> {
      parallel_query(simd::query_batch, filter.view(), digests.data(), digests.size(),
                     answers.data());
      return {};
    },
    .open_lane = [](const Scheme& scheme, std::uint64_t* words)
        -> Result<std::unique_ptr<BuildLane>> { return std::make_unique<SimdLane>(scheme, words); },
    .release_caches = []() noexcept { release_pooled_entries(); },
    .fingerprint = [](std::span<const Digest> digests) noexcept {
      return simd::content_fingerprint(digests.data(), digests.size());
    },
};

}  // namespace detail

std::string simd_target_name() { return simd::target_name(); }
std::vector<std::string> simd_compiled_targets() { return simd::compiled_targets(); }

Result<void> use_simd_target(std::string_view name) {
  if (simd::use_target(name)) return {};
  std::string known = "best";
  for (const auto& target : simd::compiled_targets()) known += ", " + target;
  return fail(ErrorCode::kInvalidArgument, "SIMD target '" + std::string(name) +
                                               "' is not one this CPU and build run (they are: " +
                                               known + ")");
}

}  // namespace abf
