// FindMissingBlobs on the wire (grpc_wire.hpp).
#include "abf/server/grpc_wire.hpp"

#include <bit>
#include <cstring>
#include <string>
#include <utility>

namespace abf::server {

namespace {

// Protocol buffers' wire types.
constexpr std::uint32_t kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5;

std::unexpected<RequestError> malformed(std::string what, std::size_t at) {
  return refuse(400, "invalid_request",
                "the request is not a FindMissingBlobsRequest: " + std::move(what) + " at byte " +
                    std::to_string(at));
}

// A cursor over one message's bytes: `begin` is where the whole request
// starts, for offsets in messages.
struct Reader {
  const std::uint8_t* begin;
  const std::uint8_t* at;
  const std::uint8_t* end;

  std::size_t offset() const { return static_cast<std::size_t>(at - begin); }

  RequestResult<std::uint64_t> varint() {
    if (at != end && *at < 0x80) return *at++;  // one byte: every tag here, most lengths
    std::uint64_t value = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (at == end) return malformed("a truncated varint", offset());
      const std::uint8_t byte = *at++;
      value |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return malformed("a varint longer than 10 bytes", offset());
  }

  // A length-delimited field's bytes.
  RequestResult<std::span<const std::uint8_t>> bytes() {
    auto length = varint();
    if (!length) return std::unexpected(length.error());
    if (*length > static_cast<std::uint64_t>(end - at)) {
      return malformed("a field longer than the message", offset());
    }
    const std::span<const std::uint8_t> field(at, static_cast<std::size_t>(*length));
    at += *length;
    return field;
  }

  // Skips a field of another number (or wire type).
  RequestResult<void> skip(std::uint32_t wire_type) {
    std::size_t width = 0;
    switch (wire_type) {
      case kVarint:
        if (auto value = varint(); !value) return std::unexpected(value.error());
        return {};
      case kLength:
        if (auto field = bytes(); !field) return std::unexpected(field.error());
        return {};
      case kFixed64:
        width = 8;
        break;
      case kFixed32:
        width = 4;
        break;
      default:
        return malformed("wire type " + std::to_string(wire_type), offset());
    }
    if (static_cast<std::size_t>(end - at) < width) return malformed("a truncated field", offset());
    at += width;
    return {};
  }
};

// A field number protobuf never writes (0), or a field of ours with
// another wire type than its declared one: refused, not skipped (a digest
// sent as a varint would be dropped from the answer silently).
RequestResult<void> check_field(std::uint64_t number, std::uint32_t wire_type,
                                std::span<const std::pair<const char*, std::uint32_t>> known,
                                std::size_t at) {
  if (number == 0) return malformed("field number 0", at);
  if (number <= known.size() && known[number - 1].second != wire_type) {
    return malformed("field " + std::to_string(number) + " (" + known[number - 1].first +
                         ") with wire type " + std::to_string(wire_type) + ", not " +
                         std::to_string(known[number - 1].second),
                     at);
  }
  return {};
}

constexpr std::pair<const char*, std::uint32_t> kDigestFields[] = {{"hash", kLength},
                                                                   {"size_bytes", kVarint}};
constexpr std::pair<const char*, std::uint32_t> kRequestFields[] = {
    {"instance_name", kLength}, {"blob_digests", kLength}, {"digest_function", kVarint}};

// One Digest message: the last hash and size_bytes given.
struct DigestFields {
  std::string_view hash;
  std::int64_t size_bytes = 0;
};

RequestResult<DigestFields> read_digest(Reader reader) {
  DigestFields fields;
  // What every client sends: hash (tag 0x0a, length 64), then size_bytes
  // (tag 0x10) and nothing after it; anything else takes the general path.
  const std::size_t size = static_cast<std::size_t>(reader.end - reader.at);
  if (size >= 68 && reader.at[0] == 0x0a && reader.at[1] == 64 && reader.at[66] == 0x10) {
    Reader tail{reader.begin, reader.at + 67, reader.end};
    auto value = tail.varint();
    if (value && tail.at == tail.end) {
      fields.hash = {reinterpret_cast<const char*>(reader.at + 2), 64};
      fields.size_bytes = static_cast<std::int64_t>(*value);
      return fields;
    }
  }
  while (reader.at != reader.end) {
    const std::size_t at = reader.offset();
    auto tag = reader.varint();
    if (!tag) return std::unexpected(tag.error());
    const auto number = *tag >> 3;
    const auto wire_type = static_cast<std::uint32_t>(*tag & 7);
    if (auto ok = check_field(number, wire_type, kDigestFields, at); !ok) {
      return std::unexpected(ok.error());
    }
    if (number == 1 && wire_type == kLength) {
      auto hash = reader.bytes();
      if (!hash) return std::unexpected(hash.error());
      fields.hash = {reinterpret_cast<const char*>(hash->data()), hash->size()};
    } else if (number == 2 && wire_type == kVarint) {
      auto size = reader.varint();
      if (!size) return std::unexpected(size.error());
      fields.size_bytes = static_cast<std::int64_t>(*size);  // int64: two's complement
    } else if (auto skipped = reader.skip(wire_type); !skipped) {
      return std::unexpected(skipped.error());
    }
  }
  return fields;
}

// 64 hex digits (either case) to a digest, 8 digits a 64-bit word (SWAR:
// "SIMD within a register"); false when one is not a hex digit, and the
// caller then asks parse_grpc_digest for the error. parse_hex_digest's
// table loop was the largest item in the gRPC front's profile (14% of its
// samples, about 80 ns a digest); with this, the whole parse was 5%.
// Needs a little-endian host (digit j is byte j of its word).
bool decode_hex(std::string_view hex, Digest& digest) noexcept {
  static_assert(std::endian::native == std::endian::little);
  if (hex.size() != 2 * Digest::kSize) return false;
  constexpr std::uint64_t kOnes = 0x0101010101010101u;
  constexpr std::uint64_t kHigh = kOnes * 0x80, kLow7 = kOnes * 0x7f;
  // The high bit of each byte c of `x` with m < c < n ("hasbetween", Bit
  // Twiddling Hacks; exact per byte for 0 <= m <= 127, n <= 128).
  const auto between = [](std::uint64_t x, std::uint64_t m, std::uint64_t n) {
    const std::uint64_t low = x & kLow7;
    return ((kOnes * (127 + n) - low) & ~x & (low + kOnes * (127 - m))) & kHigh;
  };
  std::uint64_t invalid = 0;
  for (std::size_t word = 0; word < 8; ++word) {
    std::uint64_t x;
    std::memcpy(&x, hex.data() + 8 * word, 8);
    const std::uint64_t digit = between(x, 0x2f, 0x3a);              // '0'..'9'
    const std::uint64_t letter = between(x | kOnes * 0x20, 0x60, 0x67);  // a..f, A..F
    invalid |= (digit | letter) ^ kHigh;
    // A digit's value is its low nibble; a letter's is its low nibble + 9
    // (bit 6 is set in letters only).
    const std::uint64_t value = (x & kOnes * 0x0f) + ((x >> 6) & kOnes) * 9;
    // Pairs to bytes: each 16-bit lane's low byte is high << 4 | low; then
    // the four lanes' low bytes side by side.
    std::uint64_t bytes = ((value & 0x00ff00ff00ff00ffu) << 4) | ((value >> 8) & 0x00ff00ff00ff00ffu);
    bytes = (bytes | (bytes >> 8)) & 0x0000ffff0000ffffu;
    bytes = (bytes | (bytes >> 16)) & 0x00000000ffffffffu;
    const auto four = static_cast<std::uint32_t>(bytes);
    std::memcpy(digest.bytes.data() + 4 * word, &four, 4);
  }
  return invalid == 0;
}

std::size_t varint_size(std::uint64_t value) {
  std::size_t size = 1;
  for (; value >= 0x80; value >>= 7) ++size;
  return size;
}

}  // namespace

RequestResult<FindMissingBlobsWire> parse_find_missing_blobs(std::span<const std::uint8_t> bytes,
                                                             std::size_t max_digests) {
  FindMissingBlobsWire wire;
  Reader reader{bytes.data(), bytes.data(), bytes.data() + bytes.size()};
  // A FindMissingBlobsRequest of n digests is about 72 * n bytes.
  const std::size_t expected = std::min(bytes.size() / 70 + 1, max_digests);
  wire.digests.reserve(expected);
  wire.records.reserve(expected);
  while (reader.at != reader.end) {
    const std::size_t at = reader.offset();
    auto tag = reader.varint();
    if (!tag) return std::unexpected(tag.error());
    const auto number = *tag >> 3;
    const auto wire_type = static_cast<std::uint32_t>(*tag & 7);
    if (auto ok = check_field(number, wire_type, kRequestFields, at); !ok) {
      return std::unexpected(ok.error());
    }
    if (number == 1 && wire_type == kLength) {
      auto name = reader.bytes();
      if (!name) return std::unexpected(name.error());
      wire.instance_name = {reinterpret_cast<const char*>(name->data()), name->size()};
    } else if (number == 2 && wire_type == kLength) {
      auto message = reader.bytes();
      if (!message) return std::unexpected(message.error());
      const std::size_t index = wire.count++;
      if (wire.count > max_digests) {
        // Past the limit: counted only (413 comes after authentication).
        wire.digests.clear();
        wire.records.clear();
        continue;
      }
      const std::size_t offset = static_cast<std::size_t>(message->data() - bytes.data());
      auto fields = read_digest(Reader{bytes.data(), message->data(), message->data() + message->size()});
      if (!fields) return std::unexpected(fields.error());
      if (!wire.digest_error) {
        Digest digest;
        if (fields->size_bytes >= 0 && decode_hex(fields->hash, digest)) {
          wire.digests.push_back(digest);
        } else {
          auto checked = parse_grpc_digest(fields->hash, fields->size_bytes, index);
          if (checked) {
            wire.digests.push_back(*checked);  // not reached: decode_hex takes every digest
          } else {
            wire.digest_error = checked.error();
          }
        }
      }
      wire.records.push_back({static_cast<std::uint32_t>(offset),
                              static_cast<std::uint32_t>(message->size())});
    } else if (number == 3 && wire_type == kVarint) {
      auto function = reader.varint();
      if (!function) return std::unexpected(function.error());
      wire.digest_function = *function;
    } else if (auto skipped = reader.skip(wire_type); !skipped) {
      return std::unexpected(skipped.error());
    }
  }
  return wire;
}

std::size_t find_missing_blobs_response_size(const FindMissingBlobsWire& wire,
                                             std::span<const std::uint32_t> missing) {
  std::size_t size = 0;
  for (std::uint32_t i : missing) {
    const std::uint32_t length = wire.records[i].size;
    size += 1 + varint_size(length) + length;
  }
  return size;
}

void encode_find_missing_blobs_response(std::span<const std::uint8_t> request,
                                        const FindMissingBlobsWire& wire,
                                        std::span<const std::uint32_t> missing,
                                        std::span<std::uint8_t> out) {
  std::uint8_t* at = out.data();
  for (std::uint32_t i : missing) {
    const FindMissingBlobsWire::Record record = wire.records[i];
    *at++ = (2 << 3) | kLength;  // missing_blob_digests = 2
    for (std::uint64_t length = record.size; ; length >>= 7) {
      if (length < 0x80) {
        *at++ = static_cast<std::uint8_t>(length);
        break;
      }
      *at++ = static_cast<std::uint8_t>(length | 0x80);
    }
    std::memcpy(at, request.data() + record.offset, record.size);
    at += record.size;
  }
}

}  // namespace abf::server
