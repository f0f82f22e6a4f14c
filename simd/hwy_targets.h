// Which Highway targets the SIMD engine compiles. Include this before any
// Highway header in every translation unit that dispatches to the engine or
// enumerates its targets (simd/*.cc, tests/simd_*_test.cc), so all of them
// agree on HWY_TARGETS.
//
// HWY_COMPILE_ALL_ATTAINABLE keeps the baseline targets (EMU128, SSSE3,
// SSE4) beside AVX2/AVX3, so tests can force and check each of them;
// HWY_WANT_AVX3_DL adds Highway 1.0.3's Ice Lake / Zen 4 target (VBMI2,
// VPOPCNTDQ, ...), which 1.0.3 otherwise leaves out.
#pragma once

#ifndef HWY_COMPILE_ALL_ATTAINABLE
#define HWY_COMPILE_ALL_ATTAINABLE
#endif
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
