// The SIMD engine's own controls: which Highway target it runs on, and the
// choice of another one to measure or compare. Declared by the engine's
// folder (simd/), defined in simd/engine_simd.cpp; core names no engine.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "abf/error.hpp"

namespace abf {

// The Highway target the SIMD engine runs on this CPU ("AVX3_ZEN4", "AVX2", ...).
std::string simd_target_name();
// Every Highway target compiled into this binary that this CPU supports,
// best first, whichever one use_simd_target chose.
std::vector<std::string> simd_compiled_targets();
// Runs the SIMD engine on the named target (one of simd_compiled_targets(),
// e.g. "AVX2" on an AVX-512 CPU, to measure or compare it) from now on, or on
// the CPU's best again for "best". kInvalidArgument, changing nothing, for a
// name not in the list. Every target answers bit for bit alike. Call it
// while no query or build runs (the CLI reads ABF_SIMD_TARGET at start).
Result<void> use_simd_target(std::string_view name);

}  // namespace abf
