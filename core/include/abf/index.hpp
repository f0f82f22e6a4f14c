// ABFX exact index files (docs/protocol.md, "Exact index (ABFX)"): every
// digest a catalog holds at one version, sorted, behind a checksummed
// header that names the catalog, the version and the content fingerprint,
// as an ABF1 snapshot's does. Where a snapshot's filter answers `maybe`, an
// index answers exactly, in memory: a batch of lookups touches one radix
// table entry and one or two cache lines of digests each.
//
// The file, little-endian:
//   [0, 128)                  header (IndexHeader; XXH3-64 header checksum)
//   [128, 128 + 32 n)         the n digests, strictly ascending bytewise:
//                             digest i at 128 + 32 i (any language can
//                             binary-search it from this line alone)
//   then 8 * blockCount       block table: XXH3-64 (seed 0) of each block of
//                             blockDigests digests (the last may be shorter)
//   then 8                    XXH3-64 of the block table
// The checksums trail the digests so that a writer streams a catalog of any
// size once, in order, without seeking or holding it (IndexWriter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/fingerprint.hpp"
#include "abf/io.hpp"
#include "abf/scheme.hpp"
#include "abf/snapshot.hpp"

namespace abf {

inline constexpr std::size_t kIndexHeaderSize = 128;
inline constexpr std::uint32_t kIndexFormatVersion = 1;
// Digests per checksummed block unless a writer asks for another power of
// two: 128 KiB, long enough that the table costs 1/16384 of the file.
inline constexpr std::uint32_t kIndexDefaultBlockDigests = 4096;
inline constexpr std::uint32_t kIndexMaxBlockDigests = std::uint32_t{1} << 20;
// The most digests a header may claim (2^40: a 32 TiB body). Keeps every
// size computation far from overflow.
inline constexpr std::uint64_t kIndexMaxDigestCount = std::uint64_t{1} << 40;

// Every header field, as stored.
struct IndexHeader {
  std::uint32_t format_version = 0;
  std::uint32_t header_size = 0;
  std::uint32_t content_flags = 0;  // bit 0: kContentFlagFingerprint, as in ABF1
  CatalogId catalog_id{};
  std::uint64_t catalog_version = 0;
  // Bytes 40..56 as stored: the content fingerprint when content_flags has
  // kContentFlagFingerprint, zero otherwise.
  ContentFingerprint content_fingerprint_bytes{};
  std::uint64_t digest_count = 0;
  std::uint32_t block_digests = 0;  // digests per block, a power of two
  std::uint64_t block_count = 0;    // ceil(digest_count / block_digests)
  // XXH3-64, seed 0, of the 128 header bytes with bytes 80..88 taken as zero.
  std::uint64_t header_checksum = 0;

  std::optional<ContentFingerprint> content_fingerprint() const noexcept {
    if ((content_flags & kContentFlagFingerprint) == 0) return std::nullopt;
    return content_fingerprint_bytes;
  }
  // The length of a file with this header: 128 + 32 n + 8 blockCount + 8.
  std::uint64_t file_size() const noexcept {
    return kIndexHeaderSize + digest_count * Digest::kSize + block_count * 8 + 8;
  }
};

// What an index says about itself, besides its digests.
struct IndexIdentity {
  CatalogId catalog_id{};
  std::uint64_t catalog_version = 0;
  std::optional<ContentFingerprint> content_fingerprint;
  std::uint32_t block_digests = kIndexDefaultBlockDigests;  // a power of two, 1..2^20
};

// Writes an index by streaming its digests in ascending order, in any
// number of add() calls, to an AtomicFile (`path` appears only at commit;
// "-" is standard output). Memory: 8 bytes per block. The count is given up
// front because the header precedes the digests.
class IndexWriter {
 public:
  // kInvalidArgument for a block size that is not a power of two in 1..2^20
  // or a count over kIndexMaxDigestCount; AtomicFile's errors.
  // `file` says how the output comes into place (an index set's shards are
  // created new, never over an existing file).
  static Result<IndexWriter> create(const std::filesystem::path& path,
                                    const IndexIdentity& identity, std::uint64_t digest_count,
                                    const AtomicFileOptions& file = {});

  IndexWriter(IndexWriter&&) noexcept;
  IndexWriter& operator=(IndexWriter&&) noexcept;
  ~IndexWriter();

  // Appends digests. kInvalidArgument (naming the position) when one is not
  // strictly greater than the one before it, or when more than the count
  // given to create() arrive; nothing is then committed.
  Result<void> add(std::span<const Digest> digests);
  // Writes the block table and commits. kInvalidArgument when fewer digests
  // than the count arrived; AtomicFile's errors.
  Result<void> commit();

  // The file's headerChecksum; its tableChecksum once commit() has
  // written the table (0 before): what an index set's manifest records.
  std::uint64_t header_checksum() const noexcept;
  std::uint64_t table_checksum() const noexcept;

 private:
  struct State;
  explicit IndexWriter(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The whole file for `digests` (strictly ascending; kInvalidArgument
// otherwise), as bytes.
Result<std::vector<std::uint8_t>> serialize_index(const IndexIdentity& identity,
                                                  std::span<const Digest> digests);
// The same, written atomically to `path`.
Result<void> save_index(const std::filesystem::path& path, const IndexIdentity& identity,
                        std::span<const Digest> digests);

// Checks the 128 header bytes and the file's length against every header
// rule (kIndexTruncated .. kIndexTrailingBytes, in the order of the
// ErrorCode list); nothing past the header is read.
Result<IndexHeader> parse_index_header(std::span<const std::uint8_t> bytes,
                                       std::uint64_t file_size);

// A loaded, verified index. Immutable and cheap to copy (shared storage);
// any number of threads may look up at once.
class Index {
 public:
  // An empty index of no catalog (zero id, version 0).
  Index();

  // Loads and verifies a whole file: the header, the block table's
  // checksum, every block's checksum and the strict order of the digests,
  // each failure its own code naming the block or digest. Only a regular
  // file is read (kIo otherwise, as load_snapshot). LoadMode::kMap maps the
  // file instead of copying it, with load_snapshot's caveat: the file must
  // only ever be replaced by rename while mapped. Builds the radix table
  // (4 bytes per 1-2 digests) after verifying.
  static Result<Index> load(const std::filesystem::path& path, LoadMode mode = LoadMode::kAuto);
  // The same from bytes in memory (copied).
  static Result<Index> parse(std::span<const std::uint8_t> bytes);

  const IndexHeader& header() const noexcept;
  const CatalogId& catalog_id() const noexcept { return header().catalog_id; }
  std::uint64_t catalog_version() const noexcept { return header().catalog_version; }
  std::optional<ContentFingerprint> content_fingerprint() const noexcept {
    return header().content_fingerprint();
  }
  // Digests held.
  std::uint64_t size() const noexcept { return header().digest_count; }
  // The digests, ascending.
  std::span<const Digest> digests() const noexcept;
  // The tableChecksum as stored (verified by the load): XXH3-64 of the block
  // table, which covers every digest.
  std::uint64_t table_checksum() const noexcept;

  bool contains(const Digest& digest) const noexcept;
  // out[i] = whether digests[i] is held (1 or 0 / true or false), for
  // out.size() >= digests.size() (kInvalidArgument otherwise). Lookups are
  // pipelined with software prefetch, so a batch of a few hundred or more
  // runs at memory-level parallelism rather than one miss at a time.
  Result<void> contains(std::span<const Digest> digests, std::span<std::uint8_t> out) const;
  Result<void> contains(std::span<const Digest> digests, std::span<bool> out) const;

  struct State;

 private:
  explicit Index(std::shared_ptr<const State> state);
  std::shared_ptr<const State> state_;
};

}  // namespace abf
