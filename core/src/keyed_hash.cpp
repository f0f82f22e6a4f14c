#include "keyed_hash.hpp"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace abf::detail {

namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "abf: OpenSSL's SIPHASH MAC failed (%s); keyed probes need OpenSSL 3\n",
               what);
  std::abort();
}

// One MAC context per thread, keyed with the key it last saw. EVP_MAC_init
// with the same key again would re-parse it: 59 against 42 ns a digest.
class ThreadMac {
 public:
  ThreadMac() {
    mac_ = EVP_MAC_fetch(nullptr, "SIPHASH", nullptr);
    if (mac_ == nullptr) die("EVP_MAC_fetch");
    ctx_ = EVP_MAC_CTX_new(mac_);
    if (ctx_ == nullptr) die("EVP_MAC_CTX_new");
  }
  ~ThreadMac() {
    OPENSSL_cleanse(key_.data(), key_.size());
    EVP_MAC_CTX_free(ctx_);
    EVP_MAC_free(mac_);
  }
  ThreadMac(const ThreadMac&) = delete;
  ThreadMac& operator=(const ThreadMac&) = delete;

  probe::Sip128 hash(const std::uint8_t* key16, const std::uint8_t* message, std::size_t length) {
    if (!keyed_ || std::memcmp(key_.data(), key16, key_.size()) != 0) {
      std::size_t size = 16;
      const OSSL_PARAM params[] = {OSSL_PARAM_construct_size_t(OSSL_MAC_PARAM_SIZE, &size),
                                   OSSL_PARAM_construct_end()};
      if (EVP_MAC_init(ctx_, key16, key_.size(), params) != 1) die("EVP_MAC_init");
      std::memcpy(key_.data(), key16, key_.size());
      keyed_ = true;
    } else if (EVP_MAC_init(ctx_, nullptr, 0, nullptr) != 1) {
      die("EVP_MAC_init");
    }
    if (EVP_MAC_update(ctx_, message, length) != 1) die("EVP_MAC_update");
    std::uint8_t tag[16];
    std::size_t written = 0;
    if (EVP_MAC_final(ctx_, tag, &written, sizeof tag) != 1 || written != sizeof tag) {
      die("EVP_MAC_final");
    }
    return probe::Sip128{probe::load_le64(tag), probe::load_le64(tag + 8)};
  }

 private:
  EVP_MAC* mac_ = nullptr;
  EVP_MAC_CTX* ctx_ = nullptr;
  std::array<std::uint8_t, 16> key_{};
  bool keyed_ = false;
};

void store_le64(std::uint8_t* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace

void key_bytes_of(const probe::KeySchedule& schedule, std::uint8_t* key16) noexcept {
  // make_key_schedule: v0 = k0 ^ c0, v1 = k1 ^ c1 ^ 0xee.
  const probe::KeySchedule zero = probe::make_key_schedule(0, 0);
  store_le64(key16, schedule.v0 ^ zero.v0);
  store_le64(key16 + 8, schedule.v1 ^ zero.v1);
}

probe::Sip128 openssl_siphash(const std::uint8_t* key16, const std::uint8_t* message,
                              std::size_t length) noexcept {
  thread_local ThreadMac mac;
  return mac.hash(key16, message, length);
}

probe::HashPair openssl_keyed_hashes(const probe::KeySchedule& schedule,
                                     const std::uint8_t* digest) noexcept {
  std::uint8_t key[16];
  key_bytes_of(schedule, key);
  const probe::Sip128 tag = openssl_siphash(key, digest, 32);
  OPENSSL_cleanse(key, sizeof key);
  return probe::HashPair{tag.lo, tag.hi};
}

}  // namespace abf::detail
