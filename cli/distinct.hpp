// Exact duplicate handling for the commands: `build --distinct` (external
// sort: bounded memory whatever the input size) and `dedup` (a set of the
// digests already written, first occurrence kept, input order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "spill.hpp"

namespace abf::cli {

// The distinct digests of a stream, in ascending order, with bounded memory:
// digests are collected in runs of `run_digests`, each sorted (on every
// core) and cut to its distinct digests; a run that fills is appended to one
// unlinked temporary file in `temp_dir`, and finish() merges the runs.
// Memory: one run (32 bytes a digest) plus, while merging, at most
// kMergeBufferBytes of read buffers; temporary disk: 32 bytes per distinct
// digest of each spilled run. An input that fits one run never touches disk.
class DistinctDigests {
 public:
  static constexpr std::size_t kDefaultRunDigests = std::size_t{4} << 20;  // 128 MiB
  static constexpr std::size_t kMergeBufferBytes = std::size_t{64} << 20;

  explicit DistinctDigests(std::string temp_dir, std::size_t run_digests = kDefaultRunDigests);
  DistinctDigests(const DistinctDigests&) = delete;
  DistinctDigests& operator=(const DistinctDigests&) = delete;
  ~DistinctDigests();

  // Adds digests from the input (kIo when a run cannot be spilled).
  Result<void> add(std::span<const Digest> digests);

  // Hands `sink` every distinct digest once, ascending, in chunks of at most
  // `chunk` digests; an error from `sink` stops it and is returned as is.
  // Call once, after the last add().
  Result<void> finish(const std::function<Result<void>(std::span<const Digest>)>& sink,
                      std::size_t chunk);

  std::uint64_t input_count() const noexcept { return input_count_; }
  // Valid after finish().
  std::uint64_t distinct_count() const noexcept { return distinct_count_; }
  // Runs written to the temporary file so far.
  std::size_t spilled_runs() const noexcept { return runs_.size(); }

 private:
  Result<void> spill();

  struct Run {
    std::uint64_t offset = 0;  // in digests
    std::uint64_t count = 0;
  };
  SpillFile spill_;  // the spilled runs, one after another
  std::size_t run_digests_;
  std::vector<Digest> buffer_;
  std::vector<Run> runs_;
  std::uint64_t input_count_ = 0;
  std::uint64_t distinct_count_ = 0;
};

// A set of digests, for keeping the first occurrence of each: the digests
// inserted, whole, in insertion order, and an open-addressing table (linear
// probing, load at most 1/2) of 8-byte slots, each the index of one digest
// and 24 bits of its hash. A slot whose hash bits match is confirmed by
// comparing the whole digest: the hash bits only skip the digests that
// cannot match, so no digest is ever taken for another. The hash mixes all
// four words of the digest with a per-process random seed, so crafted
// digests cannot pile into one run of slots.
// Memory: 32 bytes a digest held, plus 16-32 bytes of table each (48 while
// the table doubles), or more when reserve() asked for more.
// Speed: insert(span, span) hashes a group of digests, prefetches their
// slots, then probes: the table's cache misses overlap instead of coming one
// after another (docs/performance.md, "Bulk dedup, end to end").
class DigestSet {
 public:
  // Digests handled as one group by the batch insert: their slots are
  // prefetched together.
  static constexpr std::size_t kGroup = 16;
  // The batch insert hashes this many digests, then probes them while
  // prefetching the slot kPrefetchDistance ahead: with a table beyond the
  // caches each probe is a cache miss of ~100 ns, and about that many of
  // them are then in flight at once instead of one. (Public for the tests'
  // batch-boundary cases.)
  static constexpr std::size_t kHashChunk = 256;
  static constexpr std::size_t kPrefetchDistance = 16;

  DigestSet();
  DigestSet(const DigestSet&) = delete;
  DigestSet& operator=(const DigestSet&) = delete;
  DigestSet(DigestSet&&) noexcept = default;
  DigestSet& operator=(DigestSet&&) noexcept = default;
  ~DigestSet() = default;

  // True if `digest` was not in the set (it is now).
  bool insert(const Digest& digest);

  // Inserts `digests` in order, as insert() one at a time would, and
  // returns how many were new: those are now (*this)[size() - returned ..
  // size()), in input order. When `inserted` is given (at least
  // digests.size() entries), inserted[i] says whether digests[i] was new:
  // in neither the set nor digests[0..i).
  std::size_t insert(std::span<const Digest> digests, std::span<bool> inserted = {});

  // Sizes the table for `count` digests at once (no doubling on the way to
  // them): 16-32 bytes of table a digest, allocated now.
  void reserve(std::size_t count);

  std::size_t size() const noexcept { return size_; }
  // The digest inserted `index`-th (index < size()).
  Digest operator[](std::size_t index) const noexcept;
  // Slots in the table (a power of two, 0 before the first insert).
  std::size_t capacity() const noexcept { return slot_count_; }
  // The longest run of occupied slots: the most slots one probe can visit.
  // For tests (O(capacity)).
  std::size_t longest_run() const noexcept;

 private:
  // Anonymous mappings, zeroed by the kernel and, from 2 MiB up, aligned
  // and offered transparent huge pages (madvise): a 32 MiB table is then 16
  // TLB entries and 16 page faults instead of 8,192 of each.
  struct Unmap {
    std::size_t bytes;  // value-initialized (0) by unique_ptr's constructors
    void operator()(std::uint8_t* data) const noexcept;
  };
  using Mapping = std::unique_ptr<std::uint8_t[], Unmap>;
  static Mapping map_zeroed(std::size_t bytes);

  // Digests are stored in blocks of 2^16 (2 MiB): appending never moves one.
  static constexpr unsigned kBlockShift = 16;
  static constexpr std::size_t kBlockDigests = std::size_t{1} << kBlockShift;

  std::uint64_t* slots() const noexcept { return reinterpret_cast<std::uint64_t*>(table_.get()); }
  const std::uint8_t* stored(std::size_t index) const noexcept {
    return blocks_[index >> kBlockShift].get() + (index & (kBlockDigests - 1)) * Digest::kSize;
  }
  std::uint64_t hash(const std::uint8_t* digest) const noexcept;
  // Finds the digest (whose hash is `h`) or adds it; true when added.
  bool probe_or_add(const Digest& digest, std::uint64_t h);
  // A new block for the next kBlockDigests digests (size() is a multiple).
  void add_block();
  // Makes room for `more` digests beyond size() at load 1/2.
  void ensure(std::size_t more);
  void rebuild(std::size_t slot_count);

  Mapping table_;  // slot_count_ 8-byte slots; 0: an empty one
  std::size_t slot_count_ = 0;
  std::vector<Mapping> blocks_;
  std::size_t size_ = 0;
  std::uint64_t seed_;
};

// Writes `digest` as a line of 64 lowercase hex digits and '\n' to
// out[0..65); returns out + 65. The same text as abf::write_hex, in about a
// tenth of its time (SSE2 on x86-64; abf::write_hex elsewhere).
char* write_hex_line(const Digest& digest, char* out) noexcept;

}  // namespace abf::cli
