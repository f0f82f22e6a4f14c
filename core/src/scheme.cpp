// Scheme, keys, key fingerprints and catalog ids (docs/protocol.md sections 3,
// 4b, 7 and 8).
#include "abf/scheme.hpp"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "abf/io.hpp"
#include "keyed_hash.hpp"

namespace abf {

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

template <std::size_t N>
std::string hex_of(const std::array<std::uint8_t, N>& bytes) {
  std::string text(2 * N, '0');
  for (std::size_t i = 0; i < N; ++i) {
    text[2 * i] = kHexDigits[bytes[i] >> 4];
    text[2 * i + 1] = kHexDigits[bytes[i] & 15];
  }
  return text;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Exactly 2 * N hex digits into `out`; false otherwise.
template <std::size_t N>
bool parse_hex_bytes(std::string_view text, std::array<std::uint8_t, N>& out) {
  if (text.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = hex_value(text[2 * i]);
    const int lo = hex_value(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

Result<void> random_bytes(std::uint8_t* out, std::size_t size) {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t got = ::getrandom(out + done, size - done, 0);
    if (got < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::kIo,
                  std::string("cannot read the system's random source (getrandom): ") +
                      std::strerror(errno));
    }
    done += static_cast<std::size_t>(got);
  }
  return {};
}

constexpr std::string_view kFingerprintMessage = "abf key identity";

}  // namespace

// --- Layout limits -----------------------------------------------------------

LayoutFault check_layout(const Layout& layout, std::uint32_t protocol) noexcept {
  return probe::with_protocol(
      protocol,
      [&](auto policy) {
        using Probes = typename decltype(policy)::Probes;
        if (layout.hash_count < Probes::kMinHashCount ||
            layout.hash_count > Probes::kMaxHashCount) {
          return LayoutFault::kHashCount;
        }
        if (layout.bit_count < Probes::kMinBitCount || layout.bit_count > Probes::kMaxBitCount ||
            layout.bit_count % Probes::kBitGranularity != 0) {
          return LayoutFault::kBitCount;
        }
        return LayoutFault::kNone;
      },
      [] { return LayoutFault::kProtocol; });
}

std::string describe_layout_fault(const Layout& layout, std::uint32_t protocol) {
  return probe::with_protocol(
      protocol,
      [&](auto policy) -> std::string {
        using Probes = typename decltype(policy)::Probes;
        switch (check_layout(layout, protocol)) {
          case LayoutFault::kNone:
          case LayoutFault::kProtocol:
            return {};
          case LayoutFault::kHashCount:
            return "hash count " + std::to_string(layout.hash_count) + " is outside " +
                   Probes::kHashCountRule;
          case LayoutFault::kBitCount:
            return "bit count " + std::to_string(layout.bit_count) + " is not " +
                   Probes::kBitCountRule;
        }
        return {};
      },
      [&]() -> std::string {
        return "hash protocol version " + std::to_string(protocol) + " is not supported";
      });
}

// --- Keys --------------------------------------------------------------------

Key Key::from_bytes(std::span<const std::uint8_t, kSize> bytes) noexcept {
  Key key;
  std::memcpy(key.bytes_.data(), bytes.data(), kSize);
  return key;
}

Result<Key> Key::parse_hex(std::string_view hex) {
  Key key;
  if (!parse_hex_bytes(hex, key.bytes_)) {
    return fail(ErrorCode::kInvalidKey, "a key is exactly 32 hex digits (16 bytes); got " +
                                            std::to_string(hex.size()) + " characters" +
                                            (hex.size() == 32 ? ", not all hex" : ""));
  }
  return key;
}

Result<Key> Key::generate() {
  Key key;
  if (auto ok = random_bytes(key.bytes_.data(), kSize); !ok) return std::unexpected(ok.error());
  return key;
}

Key::~Key() { OPENSSL_cleanse(bytes_.data(), bytes_.size()); }

bool operator==(const Key& a, const Key& b) noexcept {
  return CRYPTO_memcmp(a.bytes_.data(), b.bytes_.data(), Key::kSize) == 0;
}

Result<Key> read_key_file(const std::filesystem::path& path) {
  const std::string where = path.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    return fail(ErrorCode::kIo, where + ": cannot open the key file: " + std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return fail(ErrorCode::kIo, where + ": cannot stat the key file: " + std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return fail(ErrorCode::kInvalidKey, where + ": a key file must be a regular file");
  }
  // Like ssh with its private keys: neither read nor write for the group or
  // others (a key others may write is a key others may choose).
  if ((info.st_mode & (S_IRGRP | S_IROTH | S_IWGRP | S_IWOTH)) != 0) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%03o", static_cast<unsigned>(info.st_mode & 0777));
    const bool others = (info.st_mode & (S_IROTH | S_IWOTH)) != 0;
    const bool read = (info.st_mode & (others ? S_IROTH : S_IRGRP)) != 0;
    return fail(ErrorCode::kInvalidKey, where + ": the key file is " +
                                            (read ? "readable" : "writable") + " by " +
                                            (others ? "others" : "its group") + " (mode " + mode +
                                            "); run: chmod 600 " + where);
  }
  // Larger than any valid key file: read one byte more than the longest.
  std::array<char, 40> buffer{};
  std::size_t size = 0;
  while (size < buffer.size()) {
    const ssize_t got = ::read(fd, buffer.data() + size, buffer.size() - size);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      OPENSSL_cleanse(buffer.data(), buffer.size());
      return fail(ErrorCode::kIo, where + ": cannot read the key file: " + std::strerror(error));
    }
    if (got == 0) break;
    size += static_cast<std::size_t>(got);
  }
  ::close(fd);
  const std::string_view text(buffer.data(), size);
  Result<Key> key =
      fail(ErrorCode::kInvalidKey, where +
                                       ": a key file holds 32 hex digits and a newline, or 16 raw "
                                       "bytes; this one has " +
                                       std::to_string(size) +
                                       (size == buffer.size() ? " or more" : "") + " bytes");
  if (size == Key::kSize) {
    key = Key::from_bytes(std::span<const std::uint8_t, Key::kSize>(
        reinterpret_cast<const std::uint8_t*>(buffer.data()), Key::kSize));
  } else if (size == 32 || (size == 33 && text[32] == '\n')) {
    auto parsed = Key::parse_hex(text.substr(0, 32));
    if (parsed) {
      key = std::move(parsed);
    } else {
      key = fail(ErrorCode::kInvalidKey, where + ": the key file's 32 characters are not all hex");
    }
  }
  OPENSSL_cleanse(buffer.data(), buffer.size());
  return key;
}

Result<void> write_key_file(const Key& key, const std::filesystem::path& path) {
  if (std::error_code ec;
      std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found) {
    return fail(ErrorCode::kIo, path.string() +
                                    ": exists; a key file is never replaced (snapshots built "
                                    "with the old key would need it)");
  }
  auto file = AtomicFile::create(path, AtomicFile::Options{.permissions = 0600, .replace = false});
  if (!file) return std::unexpected(file.error());
  std::array<std::uint8_t, Key::kSize> bytes{};
  std::memcpy(bytes.data(), key.bytes().data(), Key::kSize);
  std::string text = hex_of(bytes) + "\n";
  OPENSSL_cleanse(bytes.data(), bytes.size());
  auto wrote = file->write(text);
  OPENSSL_cleanse(text.data(), text.size());
  if (!wrote) return wrote;
  return file->commit();
}

bool KeyFingerprint::is_zero() const noexcept {
  for (const auto b : bytes)
    if (b != 0) return false;
  return true;
}

std::string KeyFingerprint::hex() const { return hex_of(bytes); }

KeyFingerprint key_fingerprint(const Key& key) {
  const probe::Sip128 tag = detail::openssl_siphash(
      key.bytes().data(), reinterpret_cast<const std::uint8_t*>(kFingerprintMessage.data()),
      kFingerprintMessage.size());
  KeyFingerprint fingerprint;
  for (int i = 0; i < 8; ++i) fingerprint.bytes[i] = static_cast<std::uint8_t>(tag.lo >> (8 * i));
  return fingerprint;
}

// --- Catalog identity ----------------------------------------------------------

bool CatalogId::is_zero() const noexcept {
  for (const auto b : bytes)
    if (b != 0) return false;
  return true;
}

std::string CatalogId::hex() const { return hex_of(bytes); }

Result<CatalogId> CatalogId::parse_hex(std::string_view hex) {
  CatalogId id;
  if (!parse_hex_bytes(hex, id.bytes)) {
    return fail(ErrorCode::kInvalidArgument,
                "a catalog id is exactly 32 hex digits; got '" + std::string(hex) + "'");
  }
  return id;
}

Result<CatalogId> CatalogId::generate() {
  CatalogId id;
  do {
    if (auto ok = random_bytes(id.bytes.data(), id.bytes.size()); !ok) {
      return std::unexpected(ok.error());
    }
  } while (id.is_zero());
  return id;
}

// --- Scheme --------------------------------------------------------------------

Result<Scheme> Scheme::of(std::uint32_t protocol, const Layout& layout,
                          const std::optional<Key>& key) {
  return probe::with_protocol(
      protocol,
      [&](auto policy) -> Result<Scheme> {
        using P = decltype(policy);
        if (!P::kKeyed && key) {
          return fail(ErrorCode::kKeyMismatch, "a key was given, but hash protocol " +
                                                   std::string(P::kName) + " takes none");
        }
        if (P::kKeyed && !key) {
          return fail(ErrorCode::kKeyRequired,
                      "hash protocol " + std::string(P::kName) + " needs a key (--key-file)");
        }
        if (auto fault = describe_layout_fault(layout, P::kVersion); !fault.empty()) {
          return fail(ErrorCode::kInvalidArgument, fault);
        }
        Scheme scheme;
        scheme.probe_ = probe::Scheme{layout.bit_count, layout.hash_count, P::kVersion,
                                      probe::KeySchedule{}};
        if constexpr (P::kKeyed) {
          scheme.probe_.key = probe::make_key_schedule(key->bytes().data());
          scheme.fingerprint_ = abf::key_fingerprint(*key);
        }
        return scheme;
      },
      [&]() -> Result<Scheme> {
        return fail(ErrorCode::kSnapshotUnsupportedHashProtocol,
                    "hash protocol version " + std::to_string(protocol) + " is not supported");
      });
}

Result<Scheme> Scheme::unkeyed(const Layout& layout) {
  return of(probe::kProtocolUnkeyed, layout, std::nullopt);
}

Result<Scheme> Scheme::keyed(const Layout& layout, const Key& key) {
  return of(probe::kProtocolKeyed, layout, key);
}

Result<Scheme> Scheme::make(const Layout& layout, const std::optional<Key>& key) {
  return of(key ? probe::kProtocolKeyed : probe::kProtocolUnkeyed, layout, key);
}

Result<Scheme> Scheme::open(const Layout& layout, std::uint32_t protocol,
                            const KeyFingerprint& stored, const std::optional<Key>& key,
                            std::string_view where) {
  const std::string at(where);
  if (!probe::known_protocol(protocol)) {
    return fail(ErrorCode::kSnapshotUnsupportedHashProtocol,
                at + ": hash protocol version " + std::to_string(protocol) + " is not supported");
  }
  if (!probe::keyed_protocol(protocol)) {
    if (key) {
      return fail(ErrorCode::kKeyMismatch,
                  at + ": a key was given, but this filter is unkeyed (hashProtocolVersion " +
                      std::to_string(protocol) + "); give no key, or rebuild it with the key");
    }
    return of(protocol, layout, std::nullopt);
  }
  if (!key) {
    return fail(ErrorCode::kKeyRequired, at +
                                             ": this filter is keyed (hashProtocolVersion " +
                                             std::to_string(protocol) + ", key " +
                                             stored.hex() + "); give its key (--key-file)");
  }
  const KeyFingerprint given = abf::key_fingerprint(*key);
  if (given != stored) {
    return fail(ErrorCode::kKeyMismatch, at + ": the key given (fingerprint " + given.hex() +
                                             ") is not this filter's (fingerprint " + stored.hex() +
                                             ")");
  }
  return of(protocol, layout, key);
}

std::string Scheme::describe() const {
  std::string text = "m = " + std::to_string(bit_count()) +
                     ", k = " + std::to_string(hash_count()) + ", protocol " +
                     std::to_string(protocol());
  if (keyed()) text += ", key " + fingerprint_.hex();
  return text;
}

bool operator==(const Scheme& a, const Scheme& b) noexcept {
  return a.probe_.bit_count == b.probe_.bit_count && a.probe_.hash_count == b.probe_.hash_count &&
         a.probe_.protocol == b.probe_.protocol && a.probe_.key == b.probe_.key;
}

}  // namespace abf
