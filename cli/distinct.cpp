#include "distinct.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <tbb/parallel_sort.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <queue>
#include <random>
#include <utility>

namespace abf::cli {
namespace {

std::string errno_text() { return std::strerror(errno); }

bool is_zero(const Digest& digest) noexcept {
  for (const std::uint8_t byte : digest.bytes) {
    if (byte != 0) return false;
  }
  return true;
}

std::uint64_t load64(const std::uint8_t* bytes) noexcept {
  std::uint64_t value;
  std::memcpy(&value, bytes, sizeof value);
  return value;
}

// Sorts `digests` and keeps each once; returns the distinct count.
std::size_t sort_distinct(std::vector<Digest>& digests) {
  tbb::parallel_sort(digests.begin(), digests.end());
  const auto last = std::unique(digests.begin(), digests.end());
  digests.erase(last, digests.end());
  return digests.size();
}

}  // namespace

// ------------------------------------------------------------ DistinctDigests

DistinctDigests::DistinctDigests(std::string temp_dir, std::size_t run_digests)
    : temp_dir_(std::move(temp_dir)), run_digests_(std::max<std::size_t>(run_digests, 1)) {}

DistinctDigests::~DistinctDigests() {
  if (fd_ >= 0) ::close(fd_);  // unlinked: closing frees its space
}

Result<void> DistinctDigests::add(std::span<const Digest> digests) {
  input_count_ += digests.size();
  while (!digests.empty()) {
    if (buffer_.capacity() < run_digests_) buffer_.reserve(run_digests_);
    const std::size_t take = std::min(digests.size(), run_digests_ - buffer_.size());
    buffer_.insert(buffer_.end(), digests.begin(), digests.begin() + take);
    digests = digests.subspan(take);
    if (buffer_.size() == run_digests_) {
      // Repeats within the run go first: a run of mostly repeats may then
      // take more input before it is written out.
      sort_distinct(buffer_);
      if (buffer_.size() > run_digests_ / 2) {
        if (auto spilled = spill(); !spilled) return spilled;
      }
    }
  }
  return {};
}

Result<void> DistinctDigests::spill() {
  if (fd_ < 0) {
    fd_ = ::open(temp_dir_.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      std::string name = temp_dir_ + "/abf-distinct.XXXXXX";
      fd_ = ::mkstemp(name.data());
      if (fd_ < 0) {
        return fail(ErrorCode::kIo, "--distinct: cannot create a temporary file in '" + temp_dir_ +
                                        "' (TMPDIR): " + errno_text());
      }
      ::unlink(name.c_str());
    }
  }
  const auto* bytes = reinterpret_cast<const char*>(buffer_.data());
  std::size_t left = buffer_.size() * sizeof(Digest);
  off_t offset = static_cast<off_t>(file_digests_ * sizeof(Digest));
  while (left > 0) {
    const ssize_t wrote = ::pwrite(fd_, bytes, left, offset);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::kIo, "--distinct: cannot write a sorted run to '" + temp_dir_ +
                                      "' (TMPDIR): " + errno_text());
    }
    bytes += wrote;
    left -= static_cast<std::size_t>(wrote);
    offset += wrote;
  }
  runs_.push_back({file_digests_, buffer_.size()});
  file_digests_ += buffer_.size();
  buffer_.clear();
  return {};
}

Result<void> DistinctDigests::finish(
    const std::function<Result<void>(std::span<const Digest>)>& sink, std::size_t chunk) {
  sort_distinct(buffer_);
  std::vector<Digest> out;
  out.reserve(chunk);
  bool any = false;
  Digest last{};
  auto emit = [&](const Digest& digest) -> Result<void> {
    if (any && digest == last) return {};
    any = true;
    last = digest;
    ++distinct_count_;
    out.push_back(digest);
    if (out.size() == chunk) {
      if (auto sunk = sink(out); !sunk) return sunk;
      out.clear();
    }
    return {};
  };
  if (runs_.empty()) {
    // All in memory: already distinct.
    for (std::size_t begin = 0; begin < buffer_.size(); begin += chunk) {
      const std::size_t count = std::min(chunk, buffer_.size() - begin);
      distinct_count_ += count;
      if (auto sunk = sink(std::span(buffer_.data() + begin, count)); !sunk) return sunk;
    }
    return {};
  }

  // A k-way merge of the spilled runs and the one in memory. Each spilled
  // run is read through its own buffer, their total at most
  // kMergeBufferBytes.
  struct Cursor {
    std::uint64_t next = 0;  // next digest of the run to read from the file
    std::uint64_t end = 0;
    std::vector<Digest> buffer;
    std::size_t at = 0;
  };
  const std::size_t per_run =
      std::max<std::size_t>(128, kMergeBufferBytes / sizeof(Digest) / runs_.size());
  std::vector<Cursor> cursors(runs_.size());
  auto refill = [&](Cursor& cursor) -> Result<void> {
    const auto count =
        static_cast<std::size_t>(std::min<std::uint64_t>(per_run, cursor.end - cursor.next));
    cursor.buffer.resize(count);
    cursor.at = 0;
    auto* bytes = reinterpret_cast<char*>(cursor.buffer.data());
    std::size_t left = count * sizeof(Digest);
    auto offset = static_cast<off_t>(cursor.next * sizeof(Digest));
    while (left > 0) {
      const ssize_t got = ::pread(fd_, bytes, left, offset);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) {
        return fail(ErrorCode::kIo,
                    "--distinct: cannot read back a sorted run from '" + temp_dir_ +
                        "': " + (got < 0 ? errno_text() : std::string("file shrank")));
      }
      bytes += got;
      left -= static_cast<std::size_t>(got);
      offset += got;
    }
    cursor.next += count;
    return {};
  };
  using Head = std::pair<Digest, std::size_t>;  // digest, run (runs_.size(): memory)
  std::priority_queue<Head, std::vector<Head>, std::greater<>> heads;
  for (std::size_t r = 0; r < runs_.size(); ++r) {
    cursors[r].next = runs_[r].offset;
    cursors[r].end = runs_[r].offset + runs_[r].count;
    if (auto filled = refill(cursors[r]); !filled) return filled;
    if (!cursors[r].buffer.empty()) heads.push({cursors[r].buffer[0], r});
  }
  std::size_t memory_at = 0;
  if (!buffer_.empty()) heads.push({buffer_[0], runs_.size()});
  while (!heads.empty()) {
    const auto [digest, run] = heads.top();
    heads.pop();
    if (auto emitted = emit(digest); !emitted) return emitted;
    if (run == runs_.size()) {
      if (++memory_at < buffer_.size()) heads.push({buffer_[memory_at], run});
      continue;
    }
    Cursor& cursor = cursors[run];
    if (++cursor.at == cursor.buffer.size()) {
      if (cursor.next == cursor.end) continue;  // the run is done
      if (auto filled = refill(cursor); !filled) return filled;
    }
    heads.push({cursor.buffer[cursor.at], run});
  }
  if (!out.empty()) return sink(out);
  return {};
}

// ------------------------------------------------------------------ DigestSet

DigestSet::DigestSet() : slots_(1024), seed_(std::random_device{}() | 1) {}

std::size_t DigestSet::slot_of(const Digest& digest) const noexcept {
  // Digests from the input are not trusted to be uniform: all four words are
  // mixed with a per-process seed, so crafted inputs cannot pile into one
  // run of slots.
  std::uint64_t h = seed_;
  for (std::size_t i = 0; i < Digest::kSize; i += 8) {
    h = (h ^ load64(digest.bytes.data() + i)) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  }
  return static_cast<std::size_t>(h) & (slots_.size() - 1);
}

bool DigestSet::insert(const Digest& digest) {
  if (is_zero(digest)) {
    if (has_zero_) return false;
    has_zero_ = true;
    ++size_;
    return true;
  }
  if ((size_ + 1) * 4 > slots_.size() * 3) grow();
  const std::size_t mask = slots_.size() - 1;
  for (std::size_t i = slot_of(digest);; i = (i + 1) & mask) {
    if (slots_[i] == digest) return false;
    if (is_zero(slots_[i])) {
      slots_[i] = digest;
      ++size_;
      return true;
    }
  }
}

void DigestSet::grow() {
  std::vector<Digest> old(slots_.size() * 2);
  old.swap(slots_);
  const std::size_t mask = slots_.size() - 1;
  for (const Digest& digest : old) {
    if (is_zero(digest)) continue;
    std::size_t i = slot_of(digest);
    while (!is_zero(slots_[i])) i = (i + 1) & mask;
    slots_[i] = digest;
  }
}

}  // namespace abf::cli
