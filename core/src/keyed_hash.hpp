// Internal: protocol 2's digest -> (h1, h2) step on the host, computed by
// OpenSSL's SIPHASH MAC (EVP_MAC, size 16). The scalar reference engine's
// implementation, and the one the key fingerprint uses; every other
// implementation (the portable one in abf/siphash.hpp, the SIMD lanes, the
// CUDA kernels) is tested against it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "abf/probe.hpp"

namespace abf::detail {

// The 16 key bytes a schedule was made from (make_key_schedule inverted:
// the schedule is the key XORed with SipHash's constants).
void key_bytes_of(const probe::KeySchedule& schedule, std::uint8_t* key16) noexcept;

// SipHash-2-4-128 of `length` bytes under `key16`, by OpenSSL. Keeps one
// keyed MAC context per thread (re-keyed when the key changes). OpenSSL 3
// always provides SIPHASH; if it cannot, the process aborts with a message
// (the library cannot answer keyed queries without it).
probe::Sip128 openssl_siphash(const std::uint8_t* key16, const std::uint8_t* message,
                              std::size_t length) noexcept;

// (h1, h2) of one digest under `schedule`, by OpenSSL.
probe::HashPair openssl_keyed_hashes(const probe::KeySchedule& schedule,
                                     const std::uint8_t* digest) noexcept;

}  // namespace abf::detail
