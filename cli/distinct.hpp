// Exact duplicate handling for the commands: `build --distinct` (external
// sort: bounded memory whatever the input size) and `dedup` (a set of the
// digests already written, first occurrence kept, input order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "abf/digest.hpp"
#include "abf/error.hpp"

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
  std::string temp_dir_;
  std::size_t run_digests_;
  std::vector<Digest> buffer_;
  std::vector<Run> runs_;
  int fd_ = -1;
  std::uint64_t file_digests_ = 0;
  std::uint64_t input_count_ = 0;
  std::uint64_t distinct_count_ = 0;
};

// A set of digests: an open-addressing table of whole digests (never a
// fingerprint, so no digest is ever taken for another), load at most 3/4.
// Memory: 32 bytes a slot, 43-85 bytes per digest held (twice the table's
// size while it grows).
class DigestSet {
 public:
  DigestSet();

  // True if `digest` was not in the set (it is now).
  bool insert(const Digest& digest);
  std::size_t size() const noexcept { return size_; }

 private:
  std::size_t slot_of(const Digest& digest) const noexcept;
  void grow();

  std::vector<Digest> slots_;  // the all-zero digest marks an empty slot
  std::size_t size_ = 0;
  bool has_zero_ = false;  // the all-zero digest itself, kept aside
  std::uint64_t seed_;
};

}  // namespace abf::cli
