// libdivide's AVX2 u64 division for bench/mod_bench.cc: libdivide 3.0 takes
// one vector ISA per translation unit, so this form lives in its own file.
#include <cstddef>
#include <cstdint>

#pragma GCC push_options
#pragma GCC target("avx2")
#define LIBDIVIDE_AVX2
#include <immintrin.h>
#include <libdivide.h>

// out[i] = x[i] mod m; the quotient by libdivide, q * m with AVX2's missing
// 64-bit multiply done as three 32x32 products.
__attribute__((target("avx2"))) void libdivide_avx2_mod(std::uint64_t m, const std::uint64_t* x,
                                                        std::size_t count, std::uint64_t* out) {
  const auto divider = libdivide::libdivide_u64_branchfree_gen(m);
  const __m256i vm = _mm256_set1_epi64x(static_cast<long long>(m));
  const __m256i m_hi = _mm256_srli_epi64(vm, 32);
  for (std::size_t i = 0; i + 4 <= count; i += 4) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i q = libdivide::libdivide_u64_branchfree_do_vector(v, &divider);
    const __m256i lo = _mm256_mul_epu32(q, vm);
    const __m256i cross =
        _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(q, 32), vm), _mm256_mul_epu32(q, m_hi));
    const __m256i product = _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_sub_epi64(v, product));
  }
}
#pragma GCC pop_options
