// What the binary formats share (ABF1 snapshots, ABFS and ABXS manifests,
// ABFX indexes: snapshot.cpp, filter_set_io.cpp, index.cpp, index_set.cpp):
// little-endian loads and stores, a bounds-checked reader and writer over a
// format's bytes, and the XXH3 checksums every one of them carries. The
// owned descriptor, exact read and hex spellings are in file_read.hpp.
#pragma once

#include <xxhash.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <type_traits>

#include "file_read.hpp"

namespace abf::detail {

static_assert(std::endian::native == std::endian::little,
              "the formats' integers are little-endian; big-endian hosts need byte swaps here");

// The value of type T stored at `p` (little-endian, any alignment).
template <class T>
requires std::is_trivially_copyable_v<T> T load_le(const std::uint8_t* p)
noexcept {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Stores `value` at `p` (little-endian, any alignment).
template <class T>
requires std::is_trivially_copyable_v<T>
void store_le(std::uint8_t* p, T value) noexcept { std::memcpy(p, &value, sizeof(T)); }

// XXH3-64 with seed 0 over `size` bytes: every checksum of every format.
inline std::uint64_t xxh3(const void* bytes, std::size_t size) noexcept {
  return XXH3_64bits(bytes, size);
}
inline std::uint64_t xxh3(std::span<const std::uint8_t> bytes) noexcept {
  return XXH3_64bits(bytes.data(), bytes.size());
}

// XXH3-64 over bytes that arrive in pieces (a file read in parts, a block
// written chunk by chunk). ok() is false when its state could not be had.
class Xxh3Stream {
 public:
  Xxh3Stream() noexcept : state_(XXH3_createState()) {
    if (state_ != nullptr && XXH3_64bits_reset(state_) != XXH_OK) {
      XXH3_freeState(state_);
      state_ = nullptr;
    }
  }
  ~Xxh3Stream() {
    if (state_ != nullptr) XXH3_freeState(state_);
  }
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;

  bool ok() const noexcept { return state_ != nullptr; }
  void update(const void* bytes, std::size_t size) noexcept {
    XXH3_64bits_update(state_, bytes, size);
  }
  std::uint64_t digest() const noexcept { return XXH3_64bits_digest(state_); }
  // Starts over, as if nothing had been added.
  void reset() noexcept { XXH3_64bits_reset(state_); }

 private:
  XXH3_state_t* state_;
};

// The checksum of a Size-byte header whose own 8-byte checksum field, at
// `checksum_offset`, counts as zero (ABF1 version 2, ABFS, ABXS, ABFX).
template <std::size_t Size>
std::uint64_t header_checksum_zeroed(const std::uint8_t* header,
                                     std::size_t checksum_offset) noexcept {
  std::uint8_t copy[Size];
  std::memcpy(copy, header, Size);
  std::memset(copy + checksum_offset, 0, 8);
  return xxh3(copy, Size);
}

// A field outside the bytes is a bug of the format's code, not of a file
// (every format checks a file's length before it reads a field).
[[noreturn]] inline void field_out_of_bounds(std::size_t offset, std::size_t size,
                                             std::size_t length) noexcept {
  std::fprintf(stderr, "abf: internal error: a %zu-byte field at offset %zu of %zu bytes\n", size,
               offset, length);
  std::abort();
}

// Fields at fixed offsets of a format's bytes, each access checked against
// their length.
class ByteReader {
 public:
  explicit ByteReader(std::span<const std::uint8_t> bytes) noexcept : bytes_(bytes) {}
  ByteReader(const std::uint8_t* bytes, std::size_t size) noexcept : bytes_(bytes, size) {}

  std::size_t size() const noexcept { return bytes_.size(); }
  const std::uint8_t* data() const noexcept { return bytes_.data(); }

  // The T at `offset`.
  template <class T>
  T at(std::size_t offset) const noexcept {
    return load_le<T>(field(offset, sizeof(T)));
  }
  // The N bytes at `offset`.
  template <std::size_t N>
  std::span<const std::uint8_t, N> bytes_at(std::size_t offset) const noexcept {
    return std::span<const std::uint8_t, N>(field(offset, N), N);
  }
  // Copies `out.size()` bytes from `offset` into `out`.
  void copy_at(std::size_t offset, std::span<std::uint8_t> out) const noexcept {
    std::memcpy(out.data(), field(offset, out.size()), out.size());
  }
  // Whether the `size` bytes from `offset` are all zero.
  bool zero_at(std::size_t offset, std::size_t size) const noexcept {
    const std::uint8_t* p = field(offset, size);
    for (std::size_t i = 0; i < size; ++i) {
      if (p[i] != 0) return false;
    }
    return true;
  }
  // The `size` bytes from `offset`, as a reader of their own.
  ByteReader sub(std::size_t offset, std::size_t size) const noexcept {
    return ByteReader(field(offset, size), size);
  }

 private:
  const std::uint8_t* field(std::size_t offset, std::size_t size) const noexcept {
    if (offset > bytes_.size() || size > bytes_.size() - offset) {
      field_out_of_bounds(offset, size, bytes_.size());
    }
    return bytes_.data() + offset;
  }

  std::span<const std::uint8_t> bytes_;
};

// Fields written at fixed offsets of a format's bytes, each checked
// against their length.
class ByteWriter {
 public:
  explicit ByteWriter(std::span<std::uint8_t> bytes) noexcept : bytes_(bytes) {}
  ByteWriter(std::uint8_t* bytes, std::size_t size) noexcept : bytes_(bytes, size) {}

  std::uint8_t* data() const noexcept { return bytes_.data(); }

  // Stores `value` at `offset`.
  template <class T>
  void put(std::size_t offset, T value) const noexcept {
    store_le<T>(field(offset, sizeof(T)), value);
  }
  // Copies `bytes` to `offset`.
  void put_bytes(std::size_t offset, std::span<const std::uint8_t> bytes) const noexcept {
    std::memcpy(field(offset, bytes.size()), bytes.data(), bytes.size());
  }
  void put_bytes(std::size_t offset, const void* bytes, std::size_t size) const noexcept {
    std::memcpy(field(offset, size), bytes, size);
  }
  // The `size` bytes from `offset`, as a writer of their own.
  ByteWriter sub(std::size_t offset, std::size_t size) const noexcept {
    return ByteWriter(field(offset, size), size);
  }

 private:
  std::uint8_t* field(std::size_t offset, std::size_t size) const noexcept {
    if (offset > bytes_.size() || size > bytes_.size() - offset) {
      field_out_of_bounds(offset, size, bytes_.size());
    }
    return bytes_.data() + offset;
  }

  std::span<std::uint8_t> bytes_;
};

}  // namespace abf::detail
