// What decides where a digest's bits go, validated once: the layout (m, k),
// the hashProtocolVersion and, for protocol 2, the key (docs/protocol.md sections
// 3, 4 and 4b). A Filter, a snapshot, a merge and every engine's view carry
// one Scheme; kernels get its plain form, probe::Scheme.
//
// Also the identities a snapshot carries (section 7, formatVersion 2): the
// key's fingerprint and the catalog's id.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "abf/error.hpp"
#include "abf/layout.hpp"
#include "abf/probe.hpp"

namespace abf {

// --- Layout limits -----------------------------------------------------------

// Which of a protocol's layout limits (its policy's Probes; section 3 for
// protocols 1 and 2) a layout breaks, if any. The one place the limits are
// checked; Scheme, snapshots and the CUDA backend all ask it. An unknown
// protocol has no limits to meet: kProtocol.
enum class LayoutFault : std::uint8_t {
  kNone,
  kHashCount,  // k outside the protocol's (1..32)
  kBitCount,   // m not a multiple of its granularity in its range (64 in 64..2^30)
  kProtocol,   // no such protocol
};
LayoutFault check_layout(const Layout& layout, std::uint32_t protocol = 1) noexcept;
// "hash count 33 is outside 1..32", "bit count 100 is not a multiple of 64 in
// 64..2^30"; empty for a valid layout.
std::string describe_layout_fault(const Layout& layout, std::uint32_t protocol = 1);

// --- Keys ----------------------------------------------------------------------

// A 16-byte secret key for keyed probes (protocol 2). The type has no way to
// print itself, and its bytes are wiped when it is destroyed; the key never
// appears in any output, error message, snapshot or log.
class Key {
 public:
  static constexpr std::size_t kSize = 16;

  static Key from_bytes(std::span<const std::uint8_t, kSize> bytes) noexcept;
  // Exactly 32 hex digits (either case). kInvalidKey otherwise; the message
  // never repeats the text.
  static Result<Key> parse_hex(std::string_view hex);
  // 16 bytes from the operating system's CSPRNG (getrandom(2)). kIo if it
  // cannot deliver.
  static Result<Key> generate();

  Key(const Key&) = default;
  Key& operator=(const Key&) = default;
  ~Key();

  std::span<const std::uint8_t, kSize> bytes() const noexcept { return bytes_; }

  // Constant-time comparison.
  friend bool operator==(const Key& a, const Key& b) noexcept;

 private:
  Key() = default;
  std::array<std::uint8_t, kSize> bytes_{};
};

// Reads a key file: 32 hex digits and an optional newline, or 16 raw bytes.
// kInvalidKey if it holds anything else, or if group or others may read it
// (the message says to chmod 600); kIo if it cannot be read.
Result<Key> read_key_file(const std::filesystem::path& path);

// Writes `key` as 32 hex digits and a newline, mode 0600, atomically (a
// temporary file beside `path`, renamed into place). An existing file is
// never replaced: kIo "exists" (a lost key makes its snapshots unusable).
Result<void> write_key_file(const Key& key, const std::filesystem::path& path);

// keyFingerprint (section 4b): the first 8 output bytes of SipHash-2-4-128
// under the key of the 16 ASCII bytes "abf key identity". Names a key
// without revealing it; all zero for an unkeyed filter.
struct KeyFingerprint {
  std::array<std::uint8_t, 8> bytes{};

  bool is_zero() const noexcept;
  std::string hex() const;  // 16 lowercase hex digits, bytes in order

  friend constexpr bool operator==(const KeyFingerprint&, const KeyFingerprint&) = default;
};

// The fingerprint of `key` (computed with OpenSSL's SIPHASH MAC).
KeyFingerprint key_fingerprint(const Key& key);

// --- Catalog identity ------------------------------------------------------------

// catalogId (section 8): 16 random bytes naming one catalog. All zero means
// "not tied to a catalog" (and every formatVersion-1 snapshot).
struct CatalogId {
  std::array<std::uint8_t, 16> bytes{};

  bool is_zero() const noexcept;
  std::string hex() const;  // 32 lowercase hex digits
  // Exactly 32 hex digits; kInvalidArgument otherwise.
  static Result<CatalogId> parse_hex(std::string_view hex);
  // A new random id (getrandom(2)), never all zero. kIo if the CSPRNG fails.
  static Result<CatalogId> generate();

  friend constexpr auto operator<=>(const CatalogId&, const CatalogId&) = default;
};

// --- Scheme ----------------------------------------------------------------------

// A valid layout, a protocol, and for protocol 2 the key's schedule and
// fingerprint. Cheap to copy. Two schemes are equal when they place every
// digest's bits alike: same layout, protocol and key.
class Scheme {
 public:
  // An empty scheme (m = 0): the state of a default-constructed FilterInfo.
  // Every Filter and builder holds one made by a factory below.
  Scheme() = default;

  // hashProtocolVersion `protocol`, with `key` when (and only when) the
  // protocol is keyed: kKeyRequired for a keyed protocol without one,
  // kKeyMismatch for a key given to an unkeyed one,
  // kSnapshotUnsupportedHashProtocol for a version this build does not
  // implement, kInvalidArgument for a layout outside the protocol's limits.
  static Result<Scheme> of(std::uint32_t protocol, const Layout& layout,
                           const std::optional<Key>& key);
  // Protocol 1.
  static Result<Scheme> unkeyed(const Layout& layout);
  // Protocol 2 under `key`.
  static Result<Scheme> keyed(const Layout& layout, const Key& key);
  // Keyed (protocol 2) when `key` is given, protocol 1 otherwise: the
  // classic layout's choice, as `abf build --key-file` makes it.
  static Result<Scheme> make(const Layout& layout, const std::optional<Key>& key);
  // The scheme of a stored filter (a snapshot's header fields), opened with
  // `key`. A protocol-2 filter needs its key: kKeyRequired without one,
  // kKeyMismatch when the key's fingerprint is not `stored`. A key given for
  // a protocol-1 filter is kKeyMismatch too: a caller holding a key expects
  // keyed probes, and an unkeyed filter would silently drop them. `where`
  // starts each message (a path, "input 2").
  static Result<Scheme> open(const Layout& layout, std::uint32_t protocol,
                             const KeyFingerprint& stored, const std::optional<Key>& key,
                             std::string_view where);

  Layout layout() const noexcept { return {probe_.bit_count, probe_.hash_count}; }
  std::uint64_t bit_count() const noexcept { return probe_.bit_count; }
  std::uint32_t hash_count() const noexcept { return probe_.hash_count; }
  // hashProtocolVersion: probe::kProtocolUnkeyed (1) or probe::kProtocolKeyed (2).
  std::uint32_t protocol() const noexcept { return probe_.protocol; }
  bool keyed() const noexcept { return probe::keyed_protocol(probe_.protocol); }
  // All zero for protocol 1.
  const KeyFingerprint& key_fingerprint() const noexcept { return fingerprint_; }

  // What a kernel needs, by value (holds the key schedule: never print it).
  const probe::Scheme& probe() const noexcept { return probe_; }

  // "m = 9600, k = 7, protocol 1" or "..., protocol 2, key 8285fa6eed344203".
  std::string describe() const;

  friend bool operator==(const Scheme& a, const Scheme& b) noexcept;

 private:
  probe::Scheme probe_{};
  KeyFingerprint fingerprint_{};
};

}  // namespace abf
