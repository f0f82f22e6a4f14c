// Internal to the SIMD engine (simd/: its row engine_simd.cpp, the
// partitioned build) and its tests and benchmarks: the engine's
// single-threaded entry points, the per-filter constants of the exact
// `x mod m` reduction, and entry points that expose the computed probe
// starts, hashes and reductions so tests can compare them with the protocol
// header directly. Includes no Highway header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "abf/digest.hpp"
#include "abf/filter.hpp"
#include "abf/fingerprint.hpp"
#include "abf/probe.hpp"

namespace abf::simd {

// The Highway engine, on the best target this CPU supports, or the one a
// test forced with hwy::SetSupportedTargetsForTest. Each answers bit for bit
// as the scalar reference (core/src/kernels.hpp).
void query_batch(const probe::FilterView& view, const Digest* digests, std::size_t count,
                 Answer* answers) noexcept;
void insert_batch(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                  std::size_t count) noexcept;

// The buckets of one slot of a partitioned build (partition.hpp): bucket b
// gathers the probe positions of bits [b << range_bits, (b + 1) <<
// range_bits), each as its offset within that range.
struct PositionBuckets {
  unsigned range_bits = 20;
  std::uint32_t capacity = 0;           // entries a bucket holds
  std::size_t stride = 0;               // entries from one bucket's start to the next
  std::uint32_t* entries = nullptr;     // bucket b: entries[b * stride + i], i < fill[b]
  std::uint32_t* fill = nullptr;        // per bucket
  std::uint64_t* overflowed = nullptr;  // required: += positions set directly (bucket full)
};
// Appends the k probe positions of every digest to `buckets`. A position
// whose bucket is full is set in `words` right away, with an atomic OR, so
// concurrent scatters into different slots may share `words`.
void scatter_positions(const probe::Scheme& scheme, std::uint64_t* words, const Digest* digests,
                       std::size_t count, const PositionBuckets& buckets) noexcept;
// Name of the Highway target query_batch dispatches to now.
std::string target_name();
// Names of every target compiled in and supported by this CPU, best first
// (whatever use_target chose).
std::vector<std::string> compiled_targets();
// How the AVX-512 query rounds pack the digests still `maybe` (VectorRound
// in probe_simd-inl.h): vpcompressq straight to memory (the faster on Zen 5)
// or into a register and then stored (Zen 4 runs the memory form in
// microcode, 3-4x slower). Other targets ignore it.
enum class CompressForm : unsigned char { kAuto, kMemory, kRegister };
// The form queries use now: the forced one, else by CPU (kRegister on Zen 4).
// Never kAuto.
CompressForm compress_form() noexcept;
// For tests and measurements: both forms answer alike. kAuto: by CPU again.
void force_compress_form(CompressForm form) noexcept;

// Runs the engine on the named target from now on ("best": the CPU's best
// again) by disabling the better ones (hwy::DisableTargets). False, changing
// nothing, when `name` is not one of compiled_targets(). Not while a batch
// runs on another thread: dispatch reads the choice without a lock.
bool use_target(std::string_view name);

// Exact x mod m for any 64-bit x and m = 64 * m', m' = m / 64 in [1, 2^24]
// (every bit count the protocol allows), in lanes that have no 64-bit
// multiply (x86 before AVX-512DQ, Highway 1.0.3 everywhere):
//
//   x mod m = 64 * (y mod m') + (x & 63),           y = x >> 6 < 2^58
//   y = a * 2^34 + b  =>  y == s := a * r34 + b      (mod m'),
//       a < 2^24, r34 = 2^34 mod m' < 2^24, so a * r34 is one 32x32->64
//       MulEven and s < 2^48 + 2^34 < 2^49
//   q = round(s * (1 / m')) in binary64: s and 1/m' carry relative errors
//       of at most 2^-53 each, so s / m' is off by at most 2^49 * 2^-52 =
//       1/8 and q is floor(s / m') or one more;
//   r = s - q * m' is exact (integers < 2^50) and lies in (-m', m'); one
//       conditional add of m' makes it s mod m'.
//
// Rounding to an integer and back uses the 2^52 trick (add 2^52, read the
// low mantissa bits), exact for integers below 2^52. The whole reduction is
// ~17 vector operations for 2 to 8 lanes, against 4 to 6 scalar 64-bit
// multiplies per lane for probe::Reducer. Tests compare it with `%`.
struct ModConstants {
  std::uint64_t m = 64;      // bit count, multiple of 64, <= 2^30
  std::uint64_t r34 = 0;     // 2^34 mod (m / 64)
  double m_prime = 1.0;      // m / 64, exact
  double inv_m_prime = 1.0;  // RN(1 / (m / 64))

  static ModConstants of(std::uint64_t bit_count) noexcept {
    ModConstants c;
    c.m = bit_count;
    const std::uint64_t m_prime = bit_count / 64;
    c.r34 = (std::uint64_t{1} << 34) % m_prime;
    c.m_prime = static_cast<double>(m_prime);
    c.inv_m_prime = 1.0 / c.m_prime;
    return c;
  }
};

// first[i] = h1 mod m and step[i] = (h2 | 1) mod m of digests[i] under the
// scheme's protocol, computed by the vector hash and reduction on the
// dispatched target (tail lanes by the protocol header). For tests.
void probe_starts(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                  std::uint64_t* first, std::uint64_t* step) noexcept;

// out[i] = (h1, h2) of digests[i] under the scheme's protocol, by the vector
// hasher of the dispatched target (step 1 alone; tails by the protocol
// header). For tests and the hash benchmark.
void hash_batch(const probe::Scheme& scheme, const Digest* digests, std::size_t count,
                probe::HashPair* out) noexcept;

// The content fingerprint (abf/fingerprint.hpp) of digests[0, count), one
// digest a lane on the dispatched target: equal to ContentFingerprint::of,
// which calls it through the engine table (Engine::fingerprint).
ContentFingerprint content_fingerprint(const Digest* digests, std::size_t count) noexcept;

// out[i] = x[i] mod bit_count by the vector reduction above on the dispatched
// target (tail lanes by `%`). For tests and the reduction benchmark.
void reduce_batch(std::uint64_t bit_count, const std::uint64_t* x, std::size_t count,
                  std::uint64_t* out) noexcept;

}  // namespace abf::simd
