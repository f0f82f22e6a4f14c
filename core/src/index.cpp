// ABFX exact index: writing, strict loading and batched lookups
// (docs/protocol.md, "Exact index (ABFX)").
#include "abf/index.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "abf/io.hpp"
#include "binary_format.hpp"

namespace abf {

namespace {

using detail::ByteReader;
using detail::ByteWriter;
using detail::Fd;
using detail::hex64;
using detail::load_le;
using detail::open_regular_file;
using detail::store_le;
using detail::xxh3;

constexpr char kMagic[4] = {'A', 'B', 'F', 'X'};
constexpr std::size_t kContentFlagsOffset = 12;
constexpr std::size_t kCatalogIdOffset = 16;
constexpr std::size_t kCatalogVersionOffset = 32;
constexpr std::size_t kFingerprintOffset = 40;
constexpr std::size_t kDigestCountOffset = 56;
constexpr std::size_t kBlockDigestsOffset = 64;
constexpr std::size_t kBlockCountOffset = 72;
constexpr std::size_t kHeaderChecksumOffset = 80;
// Reserved, all zero: bytes 68..72 and 88..128.
constexpr std::size_t kReserved1Begin = 68;
constexpr std::size_t kReserved1End = 72;
constexpr std::size_t kReserved2Begin = 88;

std::uint64_t header_checksum(const std::uint8_t* bytes) {
  return detail::header_checksum_zeroed<kIndexHeaderSize>(bytes, kHeaderChecksumOffset);
}

std::uint64_t block_count_of(std::uint64_t digest_count, std::uint32_t block_digests) {
  return (digest_count + block_digests - 1) / block_digests;
}

bool valid_block_digests(std::uint32_t block_digests) {
  return block_digests >= 1 && block_digests <= kIndexMaxBlockDigests &&
         std::has_single_bit(block_digests);
}

// The first 8 bytes of a digest as a big-endian integer: ordering by it,
// then by the other 24 bytes, is bytewise order.
inline std::uint64_t key_of(const Digest& digest) noexcept {
  std::uint64_t word;
  std::memcpy(&word, digest.bytes.data(), 8);
  return std::byteswap(word);
}

inline bool less(const Digest& a, const Digest& b) noexcept {
  const std::uint64_t ka = key_of(a);
  const std::uint64_t kb = key_of(b);
  if (ka != kb) return ka < kb;
  return std::memcmp(a.bytes.data() + 8, b.bytes.data() + 8, Digest::kSize - 8) < 0;
}

std::array<std::uint8_t, kIndexHeaderSize> encode_header(const IndexIdentity& identity,
                                                         std::uint64_t digest_count) {
  std::array<std::uint8_t, kIndexHeaderSize> header{};
  const ByteWriter p(header);
  p.put_bytes(0, kMagic, 4);
  p.put<std::uint32_t>(4, kIndexFormatVersion);
  p.put<std::uint32_t>(8, static_cast<std::uint32_t>(kIndexHeaderSize));
  p.put_bytes(kCatalogIdOffset, identity.catalog_id.bytes);
  p.put<std::uint64_t>(kCatalogVersionOffset, identity.catalog_version);
  if (identity.content_fingerprint) {
    p.put<std::uint32_t>(kContentFlagsOffset, kContentFlagFingerprint);
    p.put_bytes(kFingerprintOffset, identity.content_fingerprint->bytes());
  }
  p.put<std::uint64_t>(kDigestCountOffset, digest_count);
  p.put<std::uint32_t>(kBlockDigestsOffset, identity.block_digests);
  p.put<std::uint64_t>(kBlockCountOffset, block_count_of(digest_count, identity.block_digests));
  p.put<std::uint64_t>(kHeaderChecksumOffset, header_checksum(p.data()));
  return header;
}

Result<void> check_identity(const IndexIdentity& identity, std::uint64_t digest_count) {
  if (!valid_block_digests(identity.block_digests)) {
    return fail(ErrorCode::kInvalidArgument, "index: block size " +
                                                 std::to_string(identity.block_digests) +
                                                 " digests is not a power of two in 1..2^20");
  }
  if (digest_count > kIndexMaxDigestCount) {
    return fail(ErrorCode::kInvalidArgument,
                "index: " + std::to_string(digest_count) + " digests exceed the format's 2^40");
  }
  return {};
}

// A 64-byte aligned buffer of `size` bytes (digests on cache-line
// boundaries, as in a mapping). Buffers of 2 MiB or more are 2 MiB aligned
// and advised for transparent huge pages: lookups land at random across
// them, and with 4 KiB pages nearly every one would also miss the TLB
// (kernels in THP "madvise" mode, Debian's default, give huge pages only
// where asked). Null when the memory is not there (the caller's error).
std::shared_ptr<std::uint8_t> allocate_bytes(std::size_t size) {
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t align = size >= kHuge ? kHuge : 64;
  const std::size_t rounded = (std::max<std::size_t>(size, 1) + align - 1) / align * align;
  auto* p = static_cast<std::uint8_t*>(std::aligned_alloc(align, rounded));
  if (p == nullptr) return nullptr;
  if (align == kHuge) ::madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<std::uint8_t>(p, [](std::uint8_t* q) { std::free(q); });
}

Error not_ascending(std::uint64_t position, const Digest& previous, const Digest& digest,
                    const std::string& where, ErrorCode code) {
  return Error{code, where + ": digest " + std::to_string(position) + " (" + digest.hex() + ") " +
                         (digest == previous ? "repeats digest " : "is less than digest ") +
                         std::to_string(position - 1) +
                         "; an index holds distinct digests in strictly ascending byte order"};
}

}  // namespace

// ---------------------------------------------------------------------------
// Writing.

struct IndexWriter::State {
  AtomicFile file;
  std::uint64_t expected = 0;
  std::uint64_t written = 0;
  std::uint32_t block_digests = 0;
  Digest last{};
  std::vector<std::uint64_t> block_checksums;
  detail::Xxh3Stream block_state;
  std::uint64_t in_block = 0;
  std::uint64_t header_checksum = 0;
  std::uint64_t table_checksum = 0;

  explicit State(AtomicFile f) : file(std::move(f)) {}
};

IndexWriter::IndexWriter(std::unique_ptr<State> state) : state_(std::move(state)) {}
IndexWriter::IndexWriter(IndexWriter&&) noexcept = default;
IndexWriter& IndexWriter::operator=(IndexWriter&&) noexcept = default;
IndexWriter::~IndexWriter() = default;

Result<IndexWriter> IndexWriter::create(const std::filesystem::path& path,
                                        const IndexIdentity& identity, std::uint64_t digest_count,
                                        const AtomicFileOptions& options) {
  if (auto ok = check_identity(identity, digest_count); !ok) return std::unexpected(ok.error());
  auto file = AtomicFile::create(path, options);
  if (!file) return std::unexpected(file.error());
  auto state = std::make_unique<State>(std::move(*file));
  state->expected = digest_count;
  state->block_digests = identity.block_digests;
  state->block_checksums.reserve(
      static_cast<std::size_t>(block_count_of(digest_count, identity.block_digests)));
  if (!state->block_state.ok()) {
    return fail(ErrorCode::kIo, "index: out of memory for a checksum state");
  }
  const auto header = encode_header(identity, digest_count);
  state->header_checksum = load_le<std::uint64_t>(header.data() + kHeaderChecksumOffset);
  if (auto wrote = state->file.write(header); !wrote) return std::unexpected(wrote.error());
  return IndexWriter(std::move(state));
}

Result<void> IndexWriter::add(std::span<const Digest> digests) {
  State& s = *state_;
  if (digests.size() > s.expected - s.written) {
    return fail(ErrorCode::kInvalidArgument,
                "index: more digests than the " + std::to_string(s.expected) + " announced");
  }
  for (std::size_t i = 0; i < digests.size(); ++i) {
    const std::uint64_t position = s.written + i;
    const Digest& previous = i == 0 ? s.last : digests[i - 1];
    if (position > 0 && !less(previous, digests[i])) {
      return std::unexpected(
          not_ascending(position, previous, digests[i], "index", ErrorCode::kInvalidArgument));
    }
  }
  // Block checksums over the digests' bytes, cut at block boundaries.
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(digests.data());
  std::size_t done = 0;
  while (done < digests.size()) {
    const std::size_t take = static_cast<std::size_t>(
        std::min<std::uint64_t>(digests.size() - done, s.block_digests - s.in_block));
    s.block_state.update(bytes + done * Digest::kSize, take * Digest::kSize);
    s.in_block += take;
    done += take;
    if (s.in_block == s.block_digests) {
      s.block_checksums.push_back(s.block_state.digest());
      s.block_state.reset();
      s.in_block = 0;
    }
  }
  if (auto wrote = s.file.write({bytes, digests.size() * Digest::kSize}); !wrote) return wrote;
  s.written += digests.size();
  if (!digests.empty()) s.last = digests.back();
  return {};
}

Result<void> IndexWriter::commit() {
  State& s = *state_;
  if (s.written != s.expected) {
    return fail(ErrorCode::kInvalidArgument, "index: " + std::to_string(s.written) +
                                                 " digests arrived, " + std::to_string(s.expected) +
                                                 " were announced");
  }
  if (s.in_block != 0) s.block_checksums.push_back(s.block_state.digest());
  std::vector<std::uint8_t> table(s.block_checksums.size() * 8 + 8);
  for (std::size_t i = 0; i < s.block_checksums.size(); ++i) {
    store_le<std::uint64_t>(table.data() + 8 * i, s.block_checksums[i]);
  }
  const std::size_t table_size = s.block_checksums.size() * 8;
  const std::uint64_t table_checksum = xxh3(table.data(), table_size);
  store_le<std::uint64_t>(table.data() + table_size, table_checksum);
  if (auto wrote = s.file.write(table); !wrote) return wrote;
  if (auto committed = s.file.commit(); !committed) return committed;
  s.table_checksum = table_checksum;
  return {};
}

std::uint64_t IndexWriter::header_checksum() const noexcept { return state_->header_checksum; }
std::uint64_t IndexWriter::table_checksum() const noexcept { return state_->table_checksum; }

Result<std::vector<std::uint8_t>> serialize_index(const IndexIdentity& identity,
                                                  std::span<const Digest> digests) {
  if (auto ok = check_identity(identity, digests.size()); !ok) return std::unexpected(ok.error());
  for (std::size_t i = 1; i < digests.size(); ++i) {
    if (!less(digests[i - 1], digests[i])) {
      return std::unexpected(
          not_ascending(i, digests[i - 1], digests[i], "index", ErrorCode::kInvalidArgument));
    }
  }
  const auto header = encode_header(identity, digests.size());
  std::vector<std::uint8_t> bytes(header.begin(), header.end());
  const auto* body = reinterpret_cast<const std::uint8_t*>(digests.data());
  bytes.insert(bytes.end(), body, body + digests.size() * Digest::kSize);
  const std::uint64_t blocks = block_count_of(digests.size(), identity.block_digests);
  const std::size_t table_at = bytes.size();
  bytes.resize(table_at + blocks * 8 + 8);
  for (std::uint64_t b = 0; b < blocks; ++b) {
    const std::uint64_t first = b * identity.block_digests;
    const std::uint64_t count =
        std::min<std::uint64_t>(identity.block_digests, digests.size() - first);
    store_le<std::uint64_t>(bytes.data() + table_at + 8 * b,
                            xxh3(body + first * Digest::kSize, count * Digest::kSize));
  }
  store_le<std::uint64_t>(bytes.data() + table_at + blocks * 8,
                          xxh3(bytes.data() + table_at, blocks * 8));
  return bytes;
}

Result<void> save_index(const std::filesystem::path& path, const IndexIdentity& identity,
                        std::span<const Digest> digests) {
  auto writer = IndexWriter::create(path, identity, digests.size());
  if (!writer) return std::unexpected(writer.error());
  if (auto added = writer->add(digests); !added) return added;
  return writer->commit();
}

// ---------------------------------------------------------------------------
// Validation.

namespace {

Result<IndexHeader> validate_header(const std::uint8_t* bytes, std::uint64_t file_size,
                                    const std::string& where) {
  auto error = [&](ErrorCode code, const std::string& what) {
    return fail(code, where + ": " + what);
  };
  if (file_size < kIndexHeaderSize) {
    return error(ErrorCode::kIndexTruncated, "file is " + std::to_string(file_size) +
                                                 " bytes, shorter than the 128-byte ABFX header");
  }
  if (std::memcmp(bytes, kMagic, 4) != 0) {
    return error(ErrorCode::kIndexBadMagic, "not an ABFX index (bad magic)");
  }
  const ByteReader p(bytes, kIndexHeaderSize);
  IndexHeader h;
  h.format_version = p.at<std::uint32_t>(4);
  h.header_size = p.at<std::uint32_t>(8);
  h.content_flags = p.at<std::uint32_t>(kContentFlagsOffset);
  p.copy_at(kCatalogIdOffset, h.catalog_id.bytes);
  h.catalog_version = p.at<std::uint64_t>(kCatalogVersionOffset);
  h.content_fingerprint_bytes = ContentFingerprint::from_bytes(p.bytes_at<16>(kFingerprintOffset));
  h.digest_count = p.at<std::uint64_t>(kDigestCountOffset);
  h.block_digests = p.at<std::uint32_t>(kBlockDigestsOffset);
  h.block_count = p.at<std::uint64_t>(kBlockCountOffset);
  h.header_checksum = p.at<std::uint64_t>(kHeaderChecksumOffset);
  if (h.format_version != kIndexFormatVersion) {
    return error(ErrorCode::kIndexUnsupportedFormat,
                 "format version " + std::to_string(h.format_version) +
                     " is not supported (this build reads version 1)");
  }
  // The checksum before the fields: a corrupt header is not interpreted.
  if (const auto actual = header_checksum(bytes); actual != h.header_checksum) {
    return error(ErrorCode::kIndexHeaderChecksum, "header checksum mismatch (stored " +
                                                      hex64(h.header_checksum) + ", computed " +
                                                      hex64(actual) + ")");
  }
  if (h.header_size != kIndexHeaderSize) {
    return error(ErrorCode::kIndexInvalidHeader,
                 "header size " + std::to_string(h.header_size) + " is not 128");
  }
  if ((h.content_flags & ~kContentFlagFingerprint) != 0) {
    return error(ErrorCode::kIndexInvalidHeader,
                 "content flags " + hex64(h.content_flags) +
                     " have a bit set besides bit 0 (fingerprint present)");
  }
  if ((h.content_flags & kContentFlagFingerprint) == 0 &&
      h.content_fingerprint_bytes != ContentFingerprint{}) {
    return error(ErrorCode::kIndexInvalidHeader,
                 "content fingerprint " + h.content_fingerprint_bytes.hex() +
                     " is stored but content flags bit 0 (fingerprint present) is clear");
  }
  if (h.digest_count > kIndexMaxDigestCount) {
    return error(ErrorCode::kIndexInvalidHeader,
                 "digest count " + std::to_string(h.digest_count) + " exceeds 2^40");
  }
  if (!valid_block_digests(h.block_digests)) {
    return error(ErrorCode::kIndexInvalidHeader, "block size " + std::to_string(h.block_digests) +
                                                     " digests is not a power of two in 1..2^20");
  }
  if (const auto blocks = block_count_of(h.digest_count, h.block_digests);
      h.block_count != blocks) {
    return error(ErrorCode::kIndexInvalidHeader,
                 "block count " + std::to_string(h.block_count) + " is not ceil(" +
                     std::to_string(h.digest_count) + " digests / " +
                     std::to_string(h.block_digests) + ") = " + std::to_string(blocks));
  }
  for (std::size_t i = 0; i < kIndexHeaderSize; ++i) {
    const bool reserved = (i >= kReserved1Begin && i < kReserved1End) || i >= kReserved2Begin;
    if (reserved && !p.zero_at(i, 1)) {
      return error(ErrorCode::kIndexInvalidHeader,
                   "reserved header byte " + std::to_string(i) + " is not zero");
    }
  }
  const std::uint64_t expected = h.file_size();
  if (file_size < expected) {
    return error(ErrorCode::kIndexTruncated, "file is " + std::to_string(file_size) +
                                                 " bytes, the header promises " +
                                                 std::to_string(expected) + " (" +
                                                 std::to_string(h.digest_count) + " digests)");
  }
  if (file_size > expected) {
    return error(ErrorCode::kIndexTrailingBytes,
                 "file is " + std::to_string(file_size) + " bytes, " +
                     std::to_string(file_size - expected) + " more than the header promises");
  }
  return h;
}

// Everything after the header: the table's checksum, each block's, then
// the order. `file` is the whole file, its header already validated.
Result<void> validate_body(const IndexHeader& h, const std::uint8_t* file,
                           const std::string& where) {
  const std::uint8_t* body = file + kIndexHeaderSize;
  const std::uint8_t* table = body + h.digest_count * Digest::kSize;
  const std::size_t table_size = static_cast<std::size_t>(h.block_count * 8);
  const std::uint64_t stored_table = load_le<std::uint64_t>(table + table_size);
  if (const auto actual = xxh3(table, table_size); actual != stored_table) {
    return fail(ErrorCode::kIndexBlockTableChecksum,
                where + ": block table checksum mismatch (stored " + hex64(stored_table) +
                    ", computed " + hex64(actual) + ")");
  }
  for (std::uint64_t b = 0; b < h.block_count; ++b) {
    const std::uint64_t first = b * h.block_digests;
    const std::uint64_t count = std::min<std::uint64_t>(h.block_digests, h.digest_count - first);
    const std::uint64_t stored = load_le<std::uint64_t>(table + 8 * b);
    if (const auto actual = xxh3(body + first * Digest::kSize, count * Digest::kSize);
        actual != stored) {
      return fail(ErrorCode::kIndexBlockChecksum,
                  where + ": block " + std::to_string(b) + " (digests " + std::to_string(first) +
                      ".." + std::to_string(first + count - 1) + ", bytes " +
                      std::to_string(kIndexHeaderSize + first * Digest::kSize) + "..) checksum " +
                      "mismatch (stored " + hex64(stored) + ", computed " + hex64(actual) + ")");
    }
  }
  const auto* digests = reinterpret_cast<const Digest*>(body);
  for (std::uint64_t i = 1; i < h.digest_count; ++i) {
    if (!less(digests[i - 1], digests[i])) {
      return std::unexpected(
          not_ascending(i, digests[i - 1], digests[i], where, ErrorCode::kIndexNotAscending));
    }
  }
  return {};
}

}  // namespace

Result<IndexHeader> parse_index_header(std::span<const std::uint8_t> bytes,
                                       std::uint64_t file_size) {
  if (bytes.size() < std::min<std::uint64_t>(file_size, kIndexHeaderSize)) {
    return fail(ErrorCode::kInvalidArgument, "index: fewer header bytes than the file has");
  }
  return validate_header(bytes.data(), file_size, "index");
}

// ---------------------------------------------------------------------------
// The loaded index and its search.

// The radix table: bucket b = the top `bits` bits of a digest's key;
// start[b] is the first digest of bucket b or a later one, start[b + 1] the
// end. With bits = floor(log2 n), buckets hold 1-2 digests on average for
// uniform digests (SHA-256), so a lookup reads one table entry and one or
// two cache lines of digests. Adversarial (non-uniform) digests make long
// buckets, searched by bisection: O(log n), never wrong.
struct Index::State {
  IndexHeader header;
  std::shared_ptr<const std::uint8_t> storage;  // the whole file (owned copy or mapping)
  const Digest* digests = nullptr;
  unsigned bits = 0;                       // table index = key >> (64 - bits); 0 bits: one bucket
  std::shared_ptr<std::uint8_t> table;     // the radix table's storage
  const std::uint32_t* start32 = nullptr;  // digest_count < 2^32
  const std::uint64_t* start64 = nullptr;  // otherwise

  std::uint64_t bucket_of(const Digest& digest) const noexcept {
    return bits == 0 ? 0 : key_of(digest) >> (64 - bits);
  }
  template <class Offset>
  const Offset* build() {
    const std::uint64_t buckets = std::uint64_t{1} << bits;
    table = allocate_bytes(static_cast<std::size_t>((buckets + 1) * sizeof(Offset)));
    if (table == nullptr) return nullptr;
    auto* start = reinterpret_cast<Offset*>(table.get());
    std::uint64_t b = 0;
    for (std::uint64_t i = 0; i < header.digest_count; ++i) {
      const std::uint64_t mine = bucket_of(digests[i]);
      while (b <= mine) start[b++] = static_cast<Offset>(i);
    }
    while (b <= buckets) start[b++] = static_cast<Offset>(header.digest_count);
    return start;
  }
  // False when the table's memory is not there.
  bool build_table() {
    const std::uint64_t n = header.digest_count;
    bits = n < 2 ? 0 : static_cast<unsigned>(std::bit_width(n) - 1);
    bits = std::min(bits, 32u);
    if (n < (std::uint64_t{1} << 32)) {
      start32 = build<std::uint32_t>();
      return start32 != nullptr;
    }
    start64 = build<std::uint64_t>();
    return start64 != nullptr;
  }

  // Whether digests[lo, hi) holds `digest`.
  bool search(const Digest& digest, std::uint64_t lo, std::uint64_t hi) const noexcept {
    while (hi - lo > 8) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (less(digests[mid], digest)) {
        lo = mid + 1;
      } else if (less(digest, digests[mid])) {
        hi = mid;
      } else {
        return true;
      }
    }
    const std::uint64_t key = key_of(digest);
    for (; lo < hi; ++lo) {
      const std::uint64_t k = key_of(digests[lo]);
      if (k < key) continue;
      if (k > key) return false;
      const int order =
          std::memcmp(digests[lo].bytes.data() + 8, digest.bytes.data() + 8, Digest::kSize - 8);
      if (order == 0) return true;
      if (order > 0) return false;
    }
    return false;
  }

  template <class Offset, class Out>
  void contains_batch(const Offset* table, std::span<const Digest> queries,
                      Out* out) const noexcept {
    // A three-stage software pipeline, kDistance queries apart: stage 1
    // prefetches query i's table entry, stage 2 (query i - D) reads it and
    // prefetches the bucket's first cache lines, stage 3 (query i - 2D)
    // searches. ~2D misses are in flight at once instead of one.
    constexpr std::size_t kDistance = 16;
    constexpr std::size_t kRing = 64;  // > 2 * kDistance, a power of two
    std::uint64_t bucket[kRing];
    std::uint64_t lo[kRing];
    std::uint64_t hi[kRing];
    const std::size_t n = queries.size();
    for (std::size_t i = 0; i < n + 2 * kDistance; ++i) {
      if (i < n) {
        const std::uint64_t b = bucket_of(queries[i]);
        bucket[i % kRing] = b;
        __builtin_prefetch(table + b);
      }
      if (i >= kDistance && i - kDistance < n) {
        const std::size_t j = (i - kDistance) % kRing;
        lo[j] = table[bucket[j]];
        hi[j] = table[bucket[j] + 1];
        const Digest* first = digests + lo[j];
        __builtin_prefetch(first);
        __builtin_prefetch(reinterpret_cast<const char*>(first) + 63);
      }
      if (i >= 2 * kDistance) {
        const std::size_t q = i - 2 * kDistance;
        const std::size_t j = q % kRing;
        out[q] = search(queries[q], lo[j], hi[j]);
      }
    }
  }

  template <class Out>
  void contains_all(std::span<const Digest> queries, Out* out) const noexcept {
    if (header.digest_count == 0) {
      std::fill(out, out + queries.size(), Out{});
      return;
    }
    if (start32 != nullptr) {
      contains_batch(start32, queries, out);
    } else {
      contains_batch(start64, queries, out);
    }
  }

  bool contains_one(const Digest& digest) const noexcept {
    if (header.digest_count == 0) return false;
    const std::uint64_t b = bucket_of(digest);
    if (start32 != nullptr) return search(digest, start32[b], start32[b + 1]);
    return search(digest, start64[b], start64[b + 1]);
  }
};

namespace {

std::shared_ptr<Index::State> empty_state() {
  auto state = std::make_shared<Index::State>();
  state->header.format_version = kIndexFormatVersion;
  state->header.header_size = kIndexHeaderSize;
  state->header.block_digests = kIndexDefaultBlockDigests;
  return state;
}

Result<std::shared_ptr<Index::State>> finish(std::shared_ptr<const std::uint8_t> storage,
                                             std::uint64_t size, const std::string& where) {
  auto header = validate_header(storage.get(), size, where);
  if (!header) return std::unexpected(header.error());
  if (auto ok = validate_body(*header, storage.get(), where); !ok) {
    return std::unexpected(ok.error());
  }
  auto state = std::make_shared<Index::State>();
  state->header = *header;
  state->digests = reinterpret_cast<const Digest*>(storage.get() + kIndexHeaderSize);
  state->storage = std::move(storage);
  if (!state->build_table()) {
    return fail(ErrorCode::kIo, where + ": out of memory for the lookup table of " +
                                    std::to_string(header->digest_count) + " digests");
  }
  return state;
}

Result<void> read_exact(int fd, std::uint8_t* out, std::size_t size, std::uint64_t offset,
                        const std::string& where) {
  return detail::read_exact(fd, out, size, offset, where, ErrorCode::kIndexTruncated);
}

}  // namespace

Index::Index() : state_(empty_state()) {}
Index::Index(std::shared_ptr<const State> state) : state_(std::move(state)) {}

const IndexHeader& Index::header() const noexcept { return state_->header; }

std::span<const Digest> Index::digests() const noexcept {
  return {state_->digests, static_cast<std::size_t>(state_->header.digest_count)};
}

std::uint64_t Index::table_checksum() const noexcept {
  const IndexHeader& h = state_->header;
  if (state_->storage == nullptr) return xxh3(nullptr, 0);  // the empty index: no block
  return load_le<std::uint64_t>(state_->storage.get() + kIndexHeaderSize +
                                h.digest_count * Digest::kSize + h.block_count * 8);
}

bool Index::contains(const Digest& digest) const noexcept { return state_->contains_one(digest); }

Result<void> Index::contains(std::span<const Digest> digests, std::span<std::uint8_t> out) const {
  if (out.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "index: answer span holds " +
                                                 std::to_string(out.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  state_->contains_all(digests, out.data());
  return {};
}

Result<void> Index::contains(std::span<const Digest> digests, std::span<bool> out) const {
  if (out.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "index: answer span holds " +
                                                 std::to_string(out.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  state_->contains_all(digests, out.data());
  return {};
}

Result<Index> Index::parse(std::span<const std::uint8_t> bytes) {
  // Header first: a hostile header costs nothing before it is refused.
  auto header = validate_header(bytes.data(), bytes.size(), "index");
  if (!header) return std::unexpected(header.error());
  auto copy = allocate_bytes(bytes.size());
  if (copy == nullptr) {
    return fail(ErrorCode::kIo,
                "index: out of memory for a copy of " + std::to_string(bytes.size()) + " bytes");
  }
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto state = finish(std::move(copy), bytes.size(), "index");
  if (!state) return std::unexpected(state.error());
  return Index(std::move(*state));
}

Result<Index> Index::load(const std::filesystem::path& path, LoadMode mode) {
  const std::string where = path.string();
  auto file = open_regular_file(path, where, "a regular index file");
  if (!file) return std::unexpected(file.error());
  const Fd& fd = file->fd;
  const std::uint64_t size = file->size();
  std::uint8_t header_bytes[kIndexHeaderSize] = {};
  if (auto ok = read_exact(
          fd.get(), header_bytes,
          static_cast<std::size_t>(std::min<std::uint64_t>(size, kIndexHeaderSize)), 0, where);
      !ok) {
    return std::unexpected(ok.error());
  }
  // Every header rule, the length included, before any memory is taken.
  if (auto header = validate_header(header_bytes, size, where); !header) {
    return std::unexpected(header.error());
  }
  std::shared_ptr<const std::uint8_t> storage;
  if (mode == LoadMode::kMap) {
    void* mapping = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (mapping == MAP_FAILED) {
      return fail(ErrorCode::kIo, where + ": cannot map: " + std::strerror(errno));
    }
    ::madvise(mapping, size, MADV_WILLNEED);
    storage = std::shared_ptr<const std::uint8_t>(
        static_cast<const std::uint8_t*>(mapping),
        [size](const std::uint8_t* p) { ::munmap(const_cast<std::uint8_t*>(p), size); });
  } else {
    auto copy = allocate_bytes(static_cast<std::size_t>(size));
    if (copy == nullptr) {
      return fail(ErrorCode::kIo, where + ": out of memory for a copy of " +
                                      std::to_string(size) + " bytes (LoadMode::kMap maps it)");
    }
    if (auto ok = read_exact(fd.get(), copy.get(), static_cast<std::size_t>(size), 0, where); !ok) {
      return std::unexpected(ok.error());
    }
    storage = std::move(copy);
  }
  // Re-validated from the bytes kept: they are what the lookups read.
  auto state = finish(std::move(storage), size, where);
  if (!state) return std::unexpected(state.error());
  return Index(std::move(*state));
}

}  // namespace abf
