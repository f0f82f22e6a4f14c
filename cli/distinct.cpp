#include "distinct.hpp"

#include <sys/mman.h>

#include <tbb/parallel_sort.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cstring>
#include <new>
#include <queue>
#include <random>
#include <utility>

namespace abf::cli {
namespace {

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
    : spill_(std::move(temp_dir), "abf-distinct"),
      run_digests_(std::max<std::size_t>(run_digests, 1)) {}

DistinctDigests::~DistinctDigests() = default;

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
  const std::uint64_t offset = spill_.size() / sizeof(Digest);
  auto spilled = spill_.append(std::string_view(reinterpret_cast<const char*>(buffer_.data()),
                                                buffer_.size() * sizeof(Digest)));
  if (!spilled) {
    const bool created = spilled.error().step == SpillError::Step::kCreate;
    return fail(ErrorCode::kIo, std::string("--distinct: ") +
                                    (created ? "cannot create a temporary file in '"
                                             : "cannot write a sorted run to '") +
                                    spill_.dir() + "' (TMPDIR): " + spilled.error().reason());
  }
  runs_.push_back({offset, buffer_.size()});
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
    if (auto got = spill_.read(
            cursor.next * sizeof(Digest),
            std::span(reinterpret_cast<char*>(cursor.buffer.data()), count * sizeof(Digest)));
        !got) {
      return fail(ErrorCode::kIo,
                  "--distinct: cannot read back a sorted run from '" + spill_.dir() + "': " +
                      (got.error().code != 0 ? got.error().reason() : std::string("file shrank")));
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

namespace {

// A slot: the digest's index + 1 in the low 40 bits (0: an empty slot), and
// the top 24 bits of its hash above them (tables stay below 2^40 slots, so
// those bits are not the ones that chose the slot).
constexpr unsigned kIndexBits = 40;
constexpr std::uint64_t kIndexMask = (std::uint64_t{1} << kIndexBits) - 1;
constexpr std::size_t kMinSlots = 64;
constexpr std::size_t kHashChunk = DigestSet::kHashChunk;
constexpr std::size_t kPrefetchDistance = DigestSet::kPrefetchDistance;

bool same_bytes(const std::uint8_t* a, const std::uint8_t* b) noexcept {
  return ((load64(a) ^ load64(b)) | (load64(a + 8) ^ load64(b + 8)) |
          (load64(a + 16) ^ load64(b + 16)) | (load64(a + 24) ^ load64(b + 24))) == 0;
}

std::uint64_t random_seed() {
  std::random_device device;
  return (std::uint64_t{device()} << 32) ^ device();
}

}  // namespace

DigestSet::DigestSet() : seed_(random_seed()) {}

void DigestSet::Unmap::operator()(std::uint8_t* data) const noexcept {
  if (data != nullptr) ::munmap(data, bytes);
}

DigestSet::Mapping DigestSet::map_zeroed(std::size_t bytes) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  constexpr int kProtection = PROT_READ | PROT_WRITE;
  constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS;
  if (bytes < kHugePage) {
    void* data = ::mmap(nullptr, bytes, kProtection, kFlags, -1, 0);
    if (data == MAP_FAILED) throw std::bad_alloc();
    return Mapping(static_cast<std::uint8_t*>(data), Unmap{bytes});
  }
  // Whole huge pages on a huge page boundary: map one page more, then give
  // back what lies outside the aligned range.
  bytes = (bytes + kHugePage - 1) & ~(kHugePage - 1);
  void* mapped = ::mmap(nullptr, bytes + kHugePage, kProtection, kFlags, -1, 0);
  if (mapped == MAP_FAILED) throw std::bad_alloc();
  auto* start = static_cast<std::uint8_t*>(mapped);
  const std::size_t head =
      (kHugePage - reinterpret_cast<std::uintptr_t>(start) % kHugePage) % kHugePage;
  if (head > 0) ::munmap(start, head);
  ::munmap(start + head + bytes, kHugePage - head);
  ::madvise(start + head, bytes, MADV_HUGEPAGE);  // a hint: refused, 4 KiB pages serve
  return Mapping(start + head, Unmap{bytes});
}

std::uint64_t DigestSet::hash(const std::uint8_t* digest) const noexcept {
  // Digests from the input are not trusted to be uniform: all four words are
  // mixed with the per-process seed, so crafted inputs cannot pile into one
  // run of slots; the last multiply and shift spread every word into both
  // the low bits (the slot) and the top ones (kept in the slot).
  constexpr std::uint64_t kOdd = 0x9e3779b97f4a7c15ull;
  std::uint64_t h = (seed_ ^ load64(digest)) * kOdd;
  h = ((h ^ (h >> 29)) ^ load64(digest + 8)) * kOdd;
  h = ((h ^ (h >> 29)) ^ load64(digest + 16)) * kOdd;
  h = ((h ^ (h >> 29)) ^ load64(digest + 24)) * kOdd;
  h = (h ^ (h >> 29)) * 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 32);
}

Digest DigestSet::operator[](std::size_t index) const noexcept {
  Digest digest;
  std::memcpy(digest.bytes.data(), stored(index), Digest::kSize);
  return digest;
}

void DigestSet::add_block() { blocks_.push_back(map_zeroed(kBlockDigests * Digest::kSize)); }

inline bool DigestSet::probe_or_add(const Digest& digest, std::uint64_t h) {
  std::uint64_t* const table = slots();
  const std::size_t mask = slot_count_ - 1;
  const std::uint64_t tag = h & ~kIndexMask;
  for (std::size_t i = static_cast<std::size_t>(h) & mask;; i = (i + 1) & mask) {
    const std::uint64_t slot = table[i];
    if (slot == 0) {
      table[i] = tag | (size_ + 1);
      if ((size_ & (kBlockDigests - 1)) == 0) [[unlikely]]
        add_block();
      std::memcpy(blocks_.back().get() + (size_ & (kBlockDigests - 1)) * Digest::kSize,
                  digest.bytes.data(), Digest::kSize);
      ++size_;
      return true;
    }
    // The hash bits only rule digests out; equality is the whole digest's.
    if ((slot & ~kIndexMask) == tag &&
        same_bytes(stored((slot & kIndexMask) - 1), digest.bytes.data())) {
      return false;
    }
  }
}

void DigestSet::ensure(std::size_t more) {
  const std::size_t need = size_ + more;
  if (need * 2 <= slot_count_) return;
  std::size_t count = std::max(slot_count_, kMinSlots);
  while (need * 2 > count) count *= 2;
  rebuild(count);
}

void DigestSet::rebuild(std::size_t slot_count) {
  table_ = map_zeroed(slot_count * sizeof(std::uint64_t));  // all empty
  slot_count_ = slot_count;
  std::uint64_t* const table = slots();
  const std::size_t mask = slot_count - 1;
  std::uint64_t hashes[kHashChunk];
  for (std::size_t begin = 0; begin < size_; begin += kHashChunk) {
    const std::size_t n = std::min(kHashChunk, size_ - begin);
    for (std::size_t j = 0; j < n; ++j) {
      hashes[j] = hash(stored(begin + j));
      if (j < kPrefetchDistance) __builtin_prefetch(&table[hashes[j] & mask], 1);
    }
    for (std::size_t j = 0; j < n; ++j) {
      if (j + kPrefetchDistance < n) {
        __builtin_prefetch(&table[hashes[j + kPrefetchDistance] & mask], 1);
      }
      // The digests held are distinct: only an empty slot is looked for.
      std::size_t i = static_cast<std::size_t>(hashes[j]) & mask;
      while (table[i] != 0) i = (i + 1) & mask;
      table[i] = (hashes[j] & ~kIndexMask) | (begin + j + 1);
    }
  }
}

std::size_t DigestSet::longest_run() const noexcept {
  const std::uint64_t* const table = slots();
  std::size_t longest = 0;
  std::size_t run = 0;
  // Twice round, so a run that wraps past the end is counted whole.
  for (std::size_t i = 0; i < 2 * slot_count_; ++i) {
    run = table[i & (slot_count_ - 1)] != 0 ? run + 1 : 0;
    longest = std::max(longest, std::min(run, slot_count_));
  }
  return longest;
}

void DigestSet::reserve(std::size_t count) {
  if (count > size_) ensure(count - size_);
}

bool DigestSet::insert(const Digest& digest) {
  ensure(1);
  return probe_or_add(digest, hash(digest.bytes.data()));
}

std::size_t DigestSet::insert(std::span<const Digest> digests, std::span<bool> inserted) {
  std::size_t added = 0;
  std::uint64_t hashes[kHashChunk];
  for (std::size_t begin = 0; begin < digests.size(); begin += kHashChunk) {
    const std::size_t n = std::min(kHashChunk, digests.size() - begin);
    // Room for the whole chunk first, so no slot moves while it is probed
    // (at most kHashChunk digests' worth of table more than needed).
    ensure(n);
    const std::uint64_t* const table = slots();
    const std::size_t mask = slot_count_ - 1;
    for (std::size_t j = 0; j < n; ++j) {
      hashes[j] = hash(digests[begin + j].bytes.data());
      if (j < kPrefetchDistance) __builtin_prefetch(&table[hashes[j] & mask], 1);
    }
    for (std::size_t j = 0; j < n; ++j) {
      if (j + kPrefetchDistance < n) {
        __builtin_prefetch(&table[hashes[j + kPrefetchDistance] & mask], 1);
      }
      const bool is_new = probe_or_add(digests[begin + j], hashes[j]);
      if (!inserted.empty()) inserted[begin + j] = is_new;
      added += is_new ? 1 : 0;
    }
  }
  return added;
}

// ------------------------------------------------------------- write_hex_line

char* write_hex_line(const Digest& digest, char* out) noexcept {
#if defined(__SSE2__)
  // Each byte's two nibbles side by side, high first, then '0' + n, plus
  // 'a' - '0' - 10 = 39 where n > 9.
  const __m128i low_nibble = _mm_set1_epi8(0x0f);
  const __m128i nine = _mm_set1_epi8(9);
  const __m128i zero_char = _mm_set1_epi8('0');
  const __m128i letter_gap = _mm_set1_epi8(39);
  auto to_text = [&](__m128i nibbles) {
    const __m128i letters = _mm_and_si128(_mm_cmpgt_epi8(nibbles, nine), letter_gap);
    return _mm_add_epi8(_mm_add_epi8(nibbles, zero_char), letters);
  };
  for (std::size_t half = 0; half < 2; ++half) {
    const __m128i bytes =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(digest.bytes.data() + 16 * half));
    const __m128i high = _mm_and_si128(_mm_srli_epi16(bytes, 4), low_nibble);
    const __m128i low = _mm_and_si128(bytes, low_nibble);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * half),
                     to_text(_mm_unpacklo_epi8(high, low)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 32 * half + 16),
                     to_text(_mm_unpackhi_epi8(high, low)));
  }
#else
  write_hex(digest, out);
#endif
  out[64] = '\n';
  return out + 65;
}

}  // namespace abf::cli
