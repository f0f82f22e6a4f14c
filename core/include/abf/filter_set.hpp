// Filter sets (docs/protocol.md section 13): a catalog split into S shards by
// the last 8 bytes of each digest, one ordinary filter per shard, so a
// catalog may hold more digests than one filter can (m <= 2^30 bits, about
// 1.1e8 digests at p = 0.01).
//
//   abf::BloomSpec spec{.expected_item_count = 300'000'000, .target_fpp = 0.01};
//   auto shards = abf::choose_shard_count(spec);                 // 3
//   auto builder = abf::FilterSetBuilder::create(spec, *shards);
//   builder->add(chunk);                                         // any number of chunks
//   auto set = std::move(*builder).finish();                     // Result<FilterSet>
//   abf::save_filter_set(*set, "catalog.abfs");                  // manifest + 3 shard files
//   auto loaded = abf::load_filter_set("catalog.abfs");          // every shard verified
//   loaded->query(candidates, answers);                          // one batch, every shard
//
// A FilterSet of one shard is a plain filter (FilterSet converts from a
// Filter), and load_filter_set reads a plain ABF1 snapshot as one, so code
// can take a set everywhere.
//
// The split, exactly: shard(d) = (big-endian u64 of d[24..32)) mod S. Every
// shard gets the same design capacity n_i = shard_expected_item_count(n, S)
// (n for S = 1; otherwise ceil(n / S) plus headroom for the binomial spread
// of a shard's share) and the set's target p, so every shard has the same
// layout (m, k); all carry the set's catalogId, catalogVersion,
// hashProtocolVersion and key.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/backend.hpp"
#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/layout.hpp"
#include "abf/merge.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"
#include "abf/snapshot.hpp"

namespace abf {

// 1..kMaxShardCount shards.
inline constexpr std::uint32_t kMaxShardCount = probe::kMaxShardCount;
// The largest n a set can be asked for: 65,536 shards of 2^30 digests.
inline constexpr std::uint64_t kMaxSetExpectedItemCount =
    std::uint64_t{kMaxShardCount} * probe::kMaxExpectedItemCount;

// The shard of `digest` in a set of `shard_count` shards (1..kMaxShardCount;
// 0 is treated as 1).
std::uint32_t shard_of(const Digest& digest, std::uint32_t shard_count) noexcept;

// n_i, the design capacity of every shard of a set of `shard_count` shards
// designed for `expected_item_count` digests (n):
//   S = 1:  n
//   S > 1:  min(n, q + 8 * r + 64), q = ceil(n / S), r = ceil(sqrt(q))
// (integers only: r is the smallest r with r * r >= q). A shard's share of n
// uniformly spread digests (SHA-256 outputs) is binomial with mean <= q and
// standard deviation <= r; the headroom is 8 of them plus 64, so by a
// Chernoff bound a set holding n such digests overflows a given shard with
// probability below e^-32, below 1e-9 over all 65,536 shards. The price is
// memory: 0.08% at q = 1e8, 0.8% at q = 1e6. n_i may exceed 2^30 (then no
// shard of that size can be built: FilterSetBuilder::create says so).
// Preconditions: expected_item_count >= 1, 1 <= shard_count <= kMaxShardCount.
std::uint64_t shard_expected_item_count(std::uint64_t expected_item_count,
                                        std::uint32_t shard_count) noexcept;

// `--shards auto`: the fewest shards S whose filters, each designed for
// shard_expected_item_count(n, S) digests at p, fit hashProtocolVersion
// `protocol` (classic 1 and 2: n_i <= 2^30 and m <= 2^30, so 3 for n = 3e8
// at p = 0.01; one-line 3 and 4: n_i <= 2^36 and m <= 2^40): 1 whenever one
// filter holds n at p. Errors: kInvalidExpectedItemCount (n = 0 or above
// kMaxSetExpectedItemCount), kInvalidFalsePositiveRate, kFilterTooLarge (not
// even 65,536 shards hold n at p).
Result<std::uint32_t> choose_shard_count(const BloomSpec& spec, std::uint32_t protocol = 1);

// An immutable filter set. Copies share the shards (reference counted), so a
// copy is cheap, and any number of threads may query one set at once.
class FilterSet {
 public:
  // The one-shard set of a filter: n is the filter's expectedItemCount.
  // Implicit, so a Filter goes wherever a FilterSet is taken.
  FilterSet(Filter filter);  // NOLINT(google-explicit-constructor)

  // The set of `shards` (shard i holds the digests with shard_of(d, S) ==
  // i, S = shards.size()) designed for `expected_item_count` digests. Checks
  // that 1 <= S <= kMaxShardCount, that every shard's expectedItemCount is
  // shard_expected_item_count(n, S), and that every shard has the first
  // one's targetFpp (bit for bit), catalogId, catalogVersion and scheme
  // (layout, protocol, key), and that their insertedItemCounts sum to at most
  // n. kInvalidArgument (S, n) or kIncompatibleFilters naming the shard, the
  // field and both values; kCapacityExceeded for the sum.
  static Result<FilterSet> from_shards(std::vector<Filter> shards,
                                       std::uint64_t expected_item_count);

  std::uint32_t shard_count() const noexcept;
  std::span<const Filter> shards() const noexcept;
  // Shard `index` (< shard_count()).
  const Filter& shard(std::uint32_t index) const noexcept;
  // shard_of(digest, shard_count()).
  std::uint32_t shard_index(const Digest& digest) const noexcept;

  // The reference answer for one digest: its shard's might_contain.
  bool might_contain(const Digest& digest) const noexcept;

  // One answer per digest, answers[i] for digests[i], identical to asking
  // each digest's shard alone. The batch is partitioned inside the call, in
  // blocks of 16 Ki digests (S x 1 Ki for more than 16 shards, at most 1 Mi)
  // spread over the arena's threads: a block's digests are counting-sorted
  // by shard, each shard answers its part in one call of the engine
  // `backend` chooses for the whole batch, and the answers go back in input
  // order. Scratch: 35 bytes a digest of a block, a block per thread, pooled
  // for the next call (release_cached_buffers frees it). `answers` must be
  // at least as long as `digests` (kInvalidArgument); kBackendUnavailable
  // as for Filter::query.
  Result<void> query(std::span<const Digest> digests, std::span<Answer> answers,
                     Backend backend = Backend::kAuto) const;

  // The set as a whole.
  std::uint64_t expected_item_count() const noexcept;        // n of the set
  std::uint64_t shard_expected_item_count() const noexcept;  // n_i of every shard
  double target_fpp() const noexcept;
  std::uint64_t inserted_item_count() const noexcept;  // summed over the shards
  // The sum of the shards' content fingerprints (the fingerprint of all the
  // set's digests: the shards partition them), when every shard has one;
  // nullopt otherwise.
  const std::optional<ContentFingerprint>& content_fingerprint() const noexcept;
  std::uint64_t catalog_version() const noexcept;
  const CatalogId& catalog_id() const noexcept;
  // The shards' common scheme (every shard has the same layout and key).
  const Scheme& scheme() const noexcept;
  std::uint32_t hash_protocol_version() const noexcept;
  std::uint32_t hash_count() const noexcept;
  // m of every shard; bit_count() is their sum.
  std::uint64_t shard_bit_count() const noexcept;
  std::uint64_t bit_count() const noexcept;
  // Set bits over all shards; fill_ratio() = popcount() / bit_count().
  std::uint64_t popcount() const noexcept;
  double fill_ratio() const noexcept;
  // The modeled false-positive rate of the set: the mean of the shards'
  // (-expm1(-k * inserted_i / m))^k, since an absent digest lands in each
  // shard with probability 1/S.
  double estimate_false_positive_rate() const noexcept;

 private:
  struct State;
  explicit FilterSet(std::shared_ptr<const State> state);
  std::shared_ptr<const State> state_;
};

// Fills the shards of a set in chunks. `add` partitions each chunk by shard
// into per-shard staging buffers (8 Mi digests, 256 MiB, over all shards,
// but at least 256 and never more than n_i digests a shard: 512 MiB at
// 65,536 shards), and a shard's buffer, when full, goes into
// its FilterBuilder in one add; that builder's scratch is flushed right after
// (FilterBuilder::flush), so the memory a build holds is the shards' bitsets,
// the staging and one shard's build scratch (at most 256 MiB), whatever S.
// A one-shard set is a plain FilterBuilder: no staging. Not thread-safe;
// `add` itself may use every core. The bits never depend on how the input
// was chunked (OR is commutative).
class FilterSetBuilder {
 public:
  // Errors, in order: kInvalidArgument (shard_count outside
  // 1..kMaxShardCount); the spec's (section 3: kInvalidExpectedItemCount for
  // n = 0 or above kMaxSetExpectedItemCount, kInvalidFalsePositiveRate); then
  // kFilterTooLarge when n_i is above the protocol's limit (2^30; 2^36 for
  // the one-line protocols 3 and 4) or its layout does not fit (the message
  // suggests more shards); a key that makes no scheme. Every shard takes
  // options.resolved_protocol(), with its limits and layout rule.
  static Result<FilterSetBuilder> create(const BloomSpec& spec, std::uint32_t shard_count,
                                         const BuildOptions& options = {});

  // Inserts a chunk. kCapacityExceeded, with nothing of the chunk inserted,
  // when it would take the set past n or any shard past n_i (the message
  // names the shard). Staged digests go into their shards with `backend`.
  Result<void> add(std::span<const Digest> digests, Backend backend = Backend::kAuto);

  // Digests accepted so far (staged ones included), duplicates included.
  std::uint64_t inserted_item_count() const noexcept;
  std::uint32_t shard_count() const noexcept;
  const BloomSpec& spec() const noexcept;
  std::uint64_t shard_expected_item_count() const noexcept;

  // Inserts what is staged (with the backend of the last add) and finishes
  // every shard. The builder is empty afterwards.
  Result<FilterSet> finish() &&;

  FilterSetBuilder(FilterSetBuilder&&) noexcept;
  FilterSetBuilder& operator=(FilterSetBuilder&&) noexcept;
  ~FilterSetBuilder();

 private:
  struct State;
  explicit FilterSetBuilder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// check_fill (abf/filter.hpp) of every shard, naming the first that fails
// ("shard 2 of 3: ..."): a set's insertions are distinct exactly when each
// shard's are.
Result<void> check_fill(const FilterSet& set, FillCheck check = FillCheck::kAnyInsertions,
                        const std::string& where = {});

// A set from digests in memory: FilterSetBuilder::create, add, finish.
Result<FilterSet> build_filter_set(std::span<const Digest> digests, const BloomSpec& spec,
                                   std::uint32_t shard_count, const BuildOptions& options = {},
                                   Backend backend = Backend::kAuto);

// Shard by shard, merge_filters of the inputs' shard i (same rules, errors
// naming the input and the shard: "part-1.abfs shard 2"). The inputs must
// have the same shard count and n (kIncompatibleFilters otherwise); the
// summed insertedItemCount may not exceed n (kCapacityExceeded).
Result<FilterSet> merge_filter_sets(std::span<const FilterSet> sets,
                                    const MergeOptions& options = {});

// --- The manifest ("ABFS", docs/protocol.md section 13) ----------------------------

inline constexpr std::size_t kSetManifestHeaderSize = 128;
inline constexpr std::size_t kSetManifestEntrySize = 32;
// Written: 2 (the set's content fingerprint); read: 1 and 2.
inline constexpr std::uint32_t kSetManifestFormatVersion = 2;

// One shard as the manifest names it.
struct SetManifestEntry {
  std::string file;  // a plain file name, in the manifest's folder
  std::uint64_t inserted_item_count = 0;
  std::uint64_t payload_checksum = 0;  // the shard's header field
  std::uint64_t header_checksum = 0;   // the shard's header field
};

// Every field of a manifest, as stored.
struct SetManifest {
  std::uint32_t format_version = kSetManifestFormatVersion;
  std::uint32_t hash_protocol_version = 0;
  std::uint64_t catalog_version = 0;
  std::uint64_t expected_item_count = 0;  // n of the set
  std::uint64_t inserted_item_count = 0;  // the entries' sum
  double target_fpp = 0.0;
  std::uint64_t shard_expected_item_count = 0;  // n_i
  std::uint64_t shard_bit_count = 0;            // m of every shard
  std::uint32_t shard_hash_count = 0;           // k of every shard
  CatalogId catalog_id{};
  KeyFingerprint key_fingerprint{};
  // Version 2: contentFlags (header bytes 68..72; bit 0 = fingerprint
  // present) and the set's content fingerprint (the body's first 16 bytes;
  // zero unless flagged), the sum of its shards'.
  std::uint32_t content_flags = 0;
  ContentFingerprint content_fingerprint_bytes{};
  std::uint64_t build_id = 0;         // random per save; the shard file names carry it
  std::uint64_t header_checksum = 0;  // as stored (filled in by encode)
  std::uint64_t body_checksum = 0;    // as stored (filled in by encode)
  std::vector<SetManifestEntry> shards;

  std::uint32_t shard_count() const noexcept { return static_cast<std::uint32_t>(shards.size()); }
  std::optional<ContentFingerprint> content_fingerprint() const noexcept {
    if ((content_flags & kContentFlagFingerprint) == 0) return std::nullopt;
    return content_fingerprint_bytes;
  }
};

// The manifest bytes of `manifest`, in format version 2 whatever its
// format_version says (checksums computed; the ones stored in it are
// ignored).
std::vector<std::uint8_t> encode_set_manifest(const SetManifest& manifest);

// Validates every manifest rule, in the order docs/protocol.md lists them,
// answering the first failure: kSetManifestTruncated,
// kSetManifestUnsupportedFormat, kSetManifestChecksum, kSetManifestInvalid.
// `where` starts each message (a path).
Result<SetManifest> parse_set_manifest(std::span<const std::uint8_t> bytes,
                                       const std::string& where = "manifest");

// Reads and validates the manifest at `path` alone (no shard is opened).
// kIo if it cannot be read; a file that is not a manifest is
// kSetManifestInvalid "not an ABFS manifest". At most 18 MiB (65,536 entries
// with 255-byte names) is read.
Result<SetManifest> read_set_manifest(const std::filesystem::path& path);

// Where the shard `entry` of the manifest at `manifest_path` is: the
// manifest's folder (symbolic links followed) and the entry's file name.
std::filesystem::path set_shard_path(const std::filesystem::path& manifest_path,
                                     const SetManifestEntry& entry);

// What a file holds, by its first four bytes.
enum class FilterFileKind {
  kSnapshot,  // "ABF1" (or anything that is not a manifest: the snapshot loader decides)
  kManifest,  // "ABFS"
};
// kIo if it cannot be opened or read.
Result<FilterFileKind> filter_file_kind(const std::filesystem::path& path);

// Saves a set: every shard as an ABF1 snapshot beside the manifest, then the
// manifest, atomically, at `path` (a symbolic link is followed). Shard i is
// written as "<manifest file name>.<build id, 16 hex>.<i, 5 digits>.abf",
// e.g. c.abfs.5f0c6e2a9b7d4e11.00002.abf, each created new (never over an
// existing file), fsynced and renamed into place; the manifest goes last, by
// rename, so a reader sees the old set or the new one. Then the shard files
// of the set the manifest replaced (the names its old manifest listed that
// follow this naming) are removed; a reader still loading them re-reads the
// manifest (load_filter_set). A one-shard set is written as a manifest and
// one shard too: save_snapshot(set.shard(0), ...) writes a plain snapshot.
// On error nothing is left behind (the shards written so far are removed)
// and `path` is untouched. kInvalidArgument for "-" (a set is several
// files) or a manifest name too long for its shards' names (over 228 bytes);
// kIo for what cannot be written, or a path that exists and is not a
// regular file.
Result<void> save_filter_set(const FilterSet& set, const std::filesystem::path& path);

// Loads a set: a manifest, or a plain ABF1 snapshot (a one-shard set,
// load_snapshot). The manifest's rules first (parse_set_manifest), then the
// key against its keyFingerprint (kKeyRequired, kKeyMismatch), then every
// shard, in order, with load_snapshot (all of section 7, `options.mode`),
// and against the manifest: catalogId, catalogVersion, hashProtocolVersion,
// keyFingerprint, targetFpp, expectedItemCount (n_i), insertedItemCount,
// bitCount, hashCount, payloadChecksum and headerChecksum (recomputed from
// the bits loaded); then, for a version-2 manifest, that its content
// fingerprint is the sum of the shards' (kSetShardMismatch
// "contentFingerprint" otherwise). The first failure fails the whole load, naming the shard
// ("c.abfs: shard 2 of 3 (c.abfs.5f0c....00002.abf): ..."):
// kSetShardMissing for a missing file, kSetShardMismatch naming the field,
// or the snapshot rule's own code. When a shard fails and the manifest has
// changed meanwhile (a writer replaced the set and removed the old shards),
// the load starts over with the new manifest, at most 8 times
// (kSetShardMissing "... replaced while loading" after that).
Result<FilterSet> load_filter_set(const std::filesystem::path& path,
                                  const LoadOptions& options = {});

}  // namespace abf
