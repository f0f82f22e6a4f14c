// Internal to the SIMD engine: prefetch for writing, shared by its insert
// and scatter (probe_simd-inl.h) and the partitioned build's apply
// (partition.cpp). Includes no Highway.
#pragma once

namespace abf::detail {

// PREFETCHW where x86 has it (AMD since K8, Intel since Broadwell; others
// treat it as a NOP): brings the line in owned, ready for a store.
inline void prefetch_for_write(const void* p) {
#if defined(__x86_64__)
  __asm__ volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p, 1);
#endif
}

}  // namespace abf::detail
