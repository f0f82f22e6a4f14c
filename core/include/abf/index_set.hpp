// Index sets (docs/protocol.md section 14, "Index sets"): the exact index of
// a catalog split into S shards by section 13's rule, shard(d) = (big-endian
// u64 of d[24..32)) mod S, one ordinary ABFX file per shard behind a
// checksummed manifest (format "ABXS"), as a filter set (ABFS) splits its
// filters. A catalog's index split as its filter set is lets each shard be
// built, copied and loaded on its own.
//
//   abf::IndexIdentity identity{.catalog_id = id, .catalog_version = 42,
//                               .content_fingerprint = fingerprint};
//   abf::write_index_set("c.abxs", identity, 3, source);   // manifest + 3 .abfx
//   auto set = abf::IndexSet::load("c.abxs");              // every shard verified
//   set->contains(candidates, answers);                    // one batch, every shard
//
// An IndexSet of one shard is a plain index (IndexSet converts from an
// Index), and IndexSet::load reads a plain ABFX file as one, so code can take
// a set everywhere it took an index.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/fingerprint.hpp"
#include "abf/index.hpp"
#include "abf/probe.hpp"
#include "abf/scheme.hpp"
#include "abf/snapshot.hpp"

namespace abf {

inline constexpr std::size_t kIndexSetHeaderSize = 128;
inline constexpr std::size_t kIndexSetEntrySize = 32;
inline constexpr std::uint32_t kIndexSetFormatVersion = 1;
// 1..kIndexSetMaxShardCount shards (section 13's bound).
inline constexpr std::uint32_t kIndexSetMaxShardCount = probe::kMaxShardCount;

// One shard as the manifest names it.
struct IndexSetEntry {
  std::string file;  // a plain file name, in the manifest's folder
  std::uint64_t digest_count = 0;
  std::uint64_t header_checksum = 0;  // the shard's ABFX headerChecksum
  std::uint64_t table_checksum = 0;   // the shard's ABFX tableChecksum
};

// Every field of a manifest, as stored.
struct IndexSetManifest {
  std::uint32_t format_version = kIndexSetFormatVersion;
  std::uint32_t content_flags = 0;  // bit 0: kContentFlagFingerprint
  CatalogId catalog_id{};
  std::uint64_t catalog_version = 0;
  // Bytes 40..56: the set's content fingerprint (the sum of its shards')
  // when content_flags has kContentFlagFingerprint, zero otherwise.
  ContentFingerprint content_fingerprint_bytes{};
  std::uint64_t digest_count = 0;     // the entries' sum
  std::uint64_t build_id = 0;         // random per write; the shard file names carry it
  std::uint64_t header_checksum = 0;  // as stored (filled in by encode)
  std::uint64_t body_checksum = 0;    // as stored (filled in by encode)
  std::vector<IndexSetEntry> shards;

  std::uint32_t shard_count() const noexcept { return static_cast<std::uint32_t>(shards.size()); }
  std::optional<ContentFingerprint> content_fingerprint() const noexcept {
    if ((content_flags & kContentFlagFingerprint) == 0) return std::nullopt;
    return content_fingerprint_bytes;
  }
};

// The manifest bytes of `manifest` (checksums and bodyLength computed; the
// ones stored in it are ignored).
std::vector<std::uint8_t> encode_index_set_manifest(const IndexSetManifest& manifest);

// Validates every manifest rule, in the order docs/protocol.md lists them,
// answering the first failure: kIndexSetManifestTruncated,
// kIndexSetManifestInvalid (bad magic), kIndexSetManifestUnsupportedFormat,
// kIndexSetManifestChecksum, kIndexSetManifestInvalid naming the field or
// entry. `where` starts each message (a path).
Result<IndexSetManifest> parse_index_set_manifest(std::span<const std::uint8_t> bytes,
                                                  const std::string& where = "manifest");

// What a file holds, by its first four bytes.
enum class IndexFileKind {
  kIndex,     // "ABFX" (or anything that is not a manifest: Index::load decides)
  kManifest,  // "ABXS"
};
// kIo if it cannot be opened or read.
Result<IndexFileKind> index_file_kind(const std::filesystem::path& path);

// The digests of a set, delivered in ascending order to `sink` in chunks of
// any size; called once per pass of write_index_set, and must deliver the
// same digests every time (a catalog read at one version does).
using IndexDigestSink = std::function<Result<void>(std::span<const Digest>)>;
using IndexDigestSource = std::function<Result<void>(const IndexDigestSink&)>;

struct IndexSetWriteOptions {
  std::uint32_t block_digests = kIndexDefaultBlockDigests;  // of every shard
  // Shard writers open at once, each a file, AtomicFile's 1 MiB buffer and
  // 8 bytes a block (64: 64 MiB): a set of more shards is written in
  // ceil(S / max_open_shards) passes after the counting one.
  std::uint32_t max_open_shards = 64;
  // Test-only: a fixed buildId (nonzero) instead of a random one, so that a
  // write can be compared with the golden files byte for byte.
  std::optional<std::uint64_t> build_id;
};

struct IndexSetWriteReport {
  std::uint32_t shard_count = 0;
  std::uint64_t digest_count = 0;
  ContentFingerprint fingerprint;  // of all the digests written
  std::uint32_t passes = 0;        // calls of the source
};

// Writes the index set of the digests `source` delivers: S shard files
// "<manifest file name>.<buildId, 16 hex>.<i, 5 digits>.abfx" beside the
// manifest (a manifest reached through a symbolic link: beside its target),
// each an ABFX file with `identity`'s catalogId and catalogVersion, its own
// count and, when `identity` has a content fingerprint, its own; then the
// manifest, by rename over `path`; then the shard files of the set it
// replaced (the names its old manifest listed that follow this naming).
// The first pass over `source` counts each shard's digests and sums their
// fingerprints (an ABFX header precedes its digests); then the shards are
// written max_open_shards at a time, one more pass each group. Each shard is
// created new (never over an existing file), fsynced and renamed into place;
// on any error the shards written so far are removed and `path` is as it
// was. Errors: kInvalidArgument for S outside 1..65,536, "-", a manifest
// name over 227 bytes, digests not strictly ascending, a source that
// delivers other digests on a later pass, or digests whose fingerprint is
// not `identity`'s; IndexWriter's and the source's own errors; kIo.
Result<IndexSetWriteReport> write_index_set(const std::filesystem::path& path,
                                            const IndexIdentity& identity,
                                            std::uint32_t shard_count,
                                            const IndexDigestSource& source,
                                            const IndexSetWriteOptions& options = {});
// The same for digests in memory (strictly ascending).
Result<IndexSetWriteReport> save_index_set(const std::filesystem::path& path,
                                           const IndexIdentity& identity,
                                           std::uint32_t shard_count,
                                           std::span<const Digest> digests,
                                           const IndexSetWriteOptions& options = {});

// A loaded, verified index set. Immutable and cheap to copy (shared
// shards); any number of threads may look up at once.
class IndexSet {
 public:
  // An empty one-shard set of no catalog.
  IndexSet();
  // The one-shard set of an index. Implicit, so an Index goes wherever an
  // IndexSet is taken.
  IndexSet(Index index);  // NOLINT(google-explicit-constructor)

  // The set of `shards` (shard i must hold only digests d with
  // shard_of(d, S) == i, S = shards.size()), all of one catalogId and
  // catalogVersion. kInvalidArgument naming the shard (and the digest) for
  // S outside 1..65,536, another catalog or version, or a misrouted digest
  // (O(n): every digest is routed once).
  static Result<IndexSet> from_shards(std::vector<Index> shards);

  // Loads a set: a manifest, or a plain ABFX index (a one-shard set,
  // Index::load). The manifest's rules first (parse_index_set_manifest),
  // then every shard, in order, with Index::load (every ABFX rule, `mode`)
  // and against the manifest: catalogId, catalogVersion, digestCount,
  // headerChecksum and tableChecksum; that every digest of shard i routes to
  // shard i (one that does not would be answered absent: a wrong answer);
  // then that the manifest's content fingerprint is the sum of the shards'
  // (present exactly when every shard has one). The first failure fails the
  // whole load, naming the shard ("c.abxs: shard 2 of 3
  // (c.abxs.5f0c6e2a9b7d4e11.00002.abfx): ..."): kIndexSetShardMissing,
  // kIndexSetShardMismatch naming the field and both values, or the ABFX
  // rule's own code. When a shard fails and the manifest has changed
  // meanwhile (a writer replaced the set and removed its old shards), the
  // load starts over with the new manifest, at most 8 times. LoadMode::kMap
  // maps every shard: a set of more shards than the kernel allows mappings
  // (vm.max_map_count, 65,530 by default) loads with kCopy only.
  static Result<IndexSet> load(const std::filesystem::path& path,
                               LoadMode mode = LoadMode::kAuto);

  std::uint32_t shard_count() const noexcept;
  std::span<const Index> shards() const noexcept;
  const Index& shard(std::uint32_t index) const noexcept;

  const CatalogId& catalog_id() const noexcept;
  std::uint64_t catalog_version() const noexcept;
  // The set's content fingerprint (the sum of the shards'), when every
  // shard has one.
  const std::optional<ContentFingerprint>& content_fingerprint() const noexcept;
  // Digests held, over all shards.
  std::uint64_t size() const noexcept;
  // ContentFingerprint::of every digest held (~5 ns a digest: it reads them
  // all), to check a header's claim against the digests themselves.
  ContentFingerprint digests_fingerprint() const;

  bool contains(const Digest& digest) const noexcept;
  // out[i] = whether digests[i] is held, identical to asking each digest's
  // shard alone. A batch is counting-sorted by shard in blocks of 16 Ki
  // digests (S x 1 Ki for more than 16 shards, at most 1 Mi), each shard's
  // part answered by its Index's batched lookup, the answers scattered back
  // in input order (scratch: 41 bytes a digest of a block). One shard needs
  // no sort. out.size() >= digests.size() (kInvalidArgument otherwise).
  Result<void> contains(std::span<const Digest> digests, std::span<std::uint8_t> out) const;
  Result<void> contains(std::span<const Digest> digests, std::span<bool> out) const;

  struct State;

 private:
  explicit IndexSet(std::shared_ptr<const State> state);
  std::shared_ptr<const State> state_;
};

}  // namespace abf
