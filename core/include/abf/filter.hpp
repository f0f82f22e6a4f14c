// The Bloom filter itself: an immutable Filter answering queries, and a
// FilterBuilder that fills one (docs/protocol.md sections 5 and 6).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/fingerprint.hpp"
#include "abf/layout.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"

namespace abf {

// One answer per queried digest. kDefinitelyNot is a proof of absence;
// kMaybe means "ask the exact store", never "exists".
enum class Answer : std::uint8_t { kDefinitelyNot = 0, kMaybe = 1 };
static_assert(sizeof(Answer) == 1);

// Everything a filter is besides its bits: the header fields of a snapshot.
struct FilterInfo {
  BloomSpec spec;
  Scheme scheme;                          // layout, protocol, key
  std::uint64_t inserted_item_count = 0;  // digests added, duplicates included
  std::uint64_t catalog_version = 0;
  CatalogId catalog_id{};  // the catalog the digests came from; zero: none named
  // The content fingerprint (abf/fingerprint.hpp) of the digests inserted,
  // duplicates counted as inserted: set by every build, kept by save and
  // load (formatVersion 2 header bytes 104..124), summed by merges whose
  // every input has one. Absent for a version-1 file, a version-2 file
  // written before it existed, or a merge of an input without one.
  std::optional<ContentFingerprint> content_fingerprint;

  Layout layout() const noexcept { return scheme.layout(); }
};

namespace detail {
struct FilterAttachments;  // per-filter engine state, e.g. a device copy (core/engine/engine.hpp)
struct FilterAccess;
}  // namespace detail

// An immutable filter. Copies share the bits (reference counted), so a copy
// is cheap and any number of threads may query one filter at once.
class Filter {
 public:
  // Wraps a finished bitset. Checks that the info is self-consistent (a
  // well-formed layout: m and k within section 3's bounds; n and p in range;
  // inserted <= expected) and that `words` holds bit_count / 64 words;
  // kInvalidArgument otherwise. It does not check that (m, k) is the layout
  // section 3 chooses for the spec: loading a snapshot does that
  // (snapshot.cpp), and tests build filters of other layouts here.
  static Result<Filter> from_words(const FilterInfo& info,
                                   std::shared_ptr<const std::uint64_t> words,
                                   std::size_t word_count);

  // The reference answer for one digest (the scalar engine: plain `%`, and
  // OpenSSL's SipHash for protocol 2).
  bool might_contain(const Digest& digest) const noexcept;

  // One answer per digest, answers[i] for digests[i]. `answers` must be at
  // least as long as `digests` (kInvalidArgument otherwise). The backend
  // changes only the speed; kBackendUnavailable if it cannot run here.
  // Large batches are split over the cores of the current TBB arena.
  Result<void> query(std::span<const Digest> digests, std::span<Answer> answers,
                     Backend backend = Backend::kAuto) const;

  const FilterInfo& info() const noexcept { return info_; }
  const Scheme& scheme() const noexcept { return info_.scheme; }
  std::uint64_t bit_count() const noexcept { return info_.scheme.bit_count(); }
  std::uint32_t hash_count() const noexcept { return info_.scheme.hash_count(); }
  // 1 (unkeyed) or 2 (keyed).
  std::uint32_t hash_protocol_version() const noexcept { return info_.scheme.protocol(); }
  std::uint64_t expected_item_count() const noexcept { return info_.spec.expected_item_count; }
  double target_fpp() const noexcept { return info_.spec.target_fpp; }
  std::uint64_t inserted_item_count() const noexcept { return info_.inserted_item_count; }
  std::uint64_t catalog_version() const noexcept { return info_.catalog_version; }
  const CatalogId& catalog_id() const noexcept { return info_.catalog_id; }
  // The fingerprint of the digests inserted (FilterInfo::content_fingerprint);
  // nullopt when the filter does not know it.
  const std::optional<ContentFingerprint>& content_fingerprint() const noexcept {
    return info_.content_fingerprint;
  }

  // Set bits / m. Near 0.5 for a filter filled to its design capacity.
  double fill_ratio() const noexcept;
  // Number of set bits.
  std::uint64_t popcount() const noexcept;
  // (-expm1(-k * inserted / m))^k.
  double estimate_false_positive_rate() const noexcept;

  // The bitset: bit_count / 64 words, bit i in word i / 64 at bit i % 64.
  std::span<const std::uint64_t> words() const noexcept { return {words_.get(), word_count_}; }
  // The payload bytes of a snapshot (little-endian words, m / 8 bytes).
  std::span<const std::uint8_t> payload() const noexcept;
  // What a probing kernel needs (the scheme, with its key schedule, and the
  // words); valid while this Filter (or a copy) lives.
  probe::FilterView view() const noexcept {
    return probe::make_view(words_.get(), info_.scheme.probe());
  }

 private:
  friend class FilterBuilder;
  friend struct detail::FilterAccess;
  Filter(const FilterInfo& info, std::shared_ptr<const std::uint64_t> words,
         std::size_t word_count);

  FilterInfo info_;
  std::shared_ptr<const std::uint64_t> words_;
  std::size_t word_count_ = 0;
  // Shared by every copy, so an engine's per-filter state (the CUDA
  // backend's device copy) lives exactly as long as the filter.
  std::shared_ptr<detail::FilterAttachments> attachments_;
};

// Whether the filter's population count is one its insertedItemCount and k
// can give (abf::plausible_fill in abf/layout.hpp): every load checks
// kAnyInsertions; a caller that knows the insertions were distinct digests
// (a snapshot bound to a catalog version holding insertedItemCount digests)
// checks kDistinctInsertions, which also refuses a payload far emptier than
// the model (a header whose k, n and p were changed together, a build from a
// small part of the catalog). kSnapshotImplausibleFill, with the numbers,
// naming `where` (a path) when given.
Result<void> check_fill(const Filter& filter, FillCheck check = FillCheck::kAnyInsertions,
                        const std::string& where = {});

// Allocates `word_count` zeroed words, 64-byte aligned, huge-page advised
// when large. Used by builders, loaders and backends alike. The last block
// of 2-256 MiB freed is kept for the next allocation of its size
// (release_cached_buffers frees it).
std::shared_ptr<std::uint64_t> allocate_words(std::size_t word_count);

namespace detail {
class BuildLane;  // one engine's share of a build (core/engine/engine.hpp)
struct Engine;
}  // namespace detail

// What a build writes into the filter besides its bits.
struct BuildOptions {
  std::uint64_t catalog_version = 0;
  // The catalog the digests come from (builds from a catalog set it); zero
  // for none.
  CatalogId catalog_id{};
  // The hashProtocolVersion to build (abf/protocol/table.hpp's rows).
  // kProtocolByKey, the default, is the classic layout's choice as `abf
  // build` makes it: protocol 2 with a key, 1 without. A version this build
  // does not implement is kSnapshotUnsupportedHashProtocol.
  static constexpr std::uint32_t kProtocolByKey = 0;
  std::uint32_t protocol = kProtocolByKey;
  // The key of a keyed protocol (required for one, refused by an unkeyed one).
  std::optional<Key> key;

  // The version `protocol` names: itself, or the classic choice by key.
  std::uint32_t resolved_protocol() const noexcept {
    if (protocol != kProtocolByKey) return protocol;
    return key ? probe::kProtocolKeyed : probe::kProtocolUnkeyed;
  }
};

// Fills a filter in chunks, so input of any size streams through a bounded
// buffer. Not thread-safe; `add` itself may use every core.
//
// Each engine a chunk is added with keeps its own lane of the build (the
// engine table, core/engine/engine.hpp): the SIMD engine builds filters of
// 32 MiB and more partitioned (every thread sorts its digests' bit positions
// into buckets by 128 KiB range of the bitset, and full buckets are applied
// range by range, each range loaded once; simd/partition.hpp), taking
// twice the filter's memory, at most 256 MiB, beside it, the buffers of the
// last build kept for the next. Smaller filters, with several threads and
// large chunks, get up to 256 MiB of private per-thread bitsets kept across
// `add` calls, each thread filling its own at the engine's full speed, ORed
// into the filter once in `finish`. A chunk added with the CUDA engine goes
// into a bitset on the GPU, likewise ORed in once. OR is commutative, so the
// bytes never depend on which chunk went where.
class FilterBuilder {
 public:
  // Chooses the layout (section 3 errors), makes the scheme and allocates
  // the bitset.
  static Result<FilterBuilder> create(const BloomSpec& spec, const BuildOptions& options);
  static Result<FilterBuilder> create(const BloomSpec& spec, std::uint64_t catalog_version = 0);

  // Inserts a chunk. If it would take the count past expected_item_count,
  // nothing of it is inserted and the answer is kCapacityExceeded.
  Result<void> add(std::span<const Digest> digests, Backend backend = Backend::kAuto);

  std::uint64_t inserted_item_count() const noexcept { return info_.inserted_item_count; }
  const FilterInfo& info() const noexcept { return info_; }

  // Sets every bit still held in an engine's scratch (the partitioned
  // build's buckets, private per-thread bitsets, a GPU bitset) in the
  // filter's own bitset and gives that scratch back; the next add opens it
  // afresh (bucket buffers come back from the pool the last build left).
  // The bits are the same with or without it. For a caller that fills many
  // filters at once (FilterSetBuilder): it holds one filter's scratch at a
  // time instead of every filter's. Fails as finish() does.
  Result<void> flush();

  // The finished, immutable filter. The builder is empty afterwards. Fails
  // only when a GPU lane cannot be read back (the device was lost).
  Result<Filter> finish() &&;

  FilterBuilder(FilterBuilder&&) noexcept;
  FilterBuilder& operator=(FilterBuilder&&) noexcept;
  ~FilterBuilder();

 private:
  FilterBuilder(const FilterInfo& info, std::shared_ptr<std::uint64_t> words,
                std::size_t word_count);
  // The lane of `engine`, opened on first use.
  Result<detail::BuildLane*> lane_for(const detail::Engine& engine);

  FilterInfo info_;
  std::shared_ptr<std::uint64_t> words_;
  std::size_t word_count_ = 0;
  struct OpenLane {
    const detail::Engine* engine;
    std::unique_ptr<detail::BuildLane> lane;
  };
  std::vector<OpenLane> lanes_;
};

// Builds and CUDA builds keep scratch memory for the next one, which then
// starts warm: the partitioned build's buckets (up to 256 MiB of host
// memory), the bitset of the last filter freed (one of 2-256 MiB, for the
// next filter of its size) and a CUDA build's device bitset with its pinned
// staging. A
// long-running process frees them here, for example after swapping in a new
// snapshot; the next build allocates afresh. Builders in progress keep
// theirs. (A filter's device copy, made by its first CUDA query, belongs to
// the filter and is freed with its last copy.) Also the scratch pooled by
// FilterSet::query. Thread-safe.
void release_cached_buffers() noexcept;

// Builds a filter from digests in memory: checks the spec, then capacity,
// exactly in the order of section 6.
Result<Filter> build_filter(std::span<const Digest> digests, const BloomSpec& spec,
                            const BuildOptions& options, Backend backend = Backend::kAuto);
Result<Filter> build_filter(std::span<const Digest> digests, const BloomSpec& spec,
                            std::uint64_t catalog_version = 0, Backend backend = Backend::kAuto);

}  // namespace abf
