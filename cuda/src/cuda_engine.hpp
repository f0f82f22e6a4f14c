// Internal to the CUDA engine and its tests: its row of the engine table
// (engine_cuda.cpp, or unavailable.cpp in a build without CUDA). The library
// finds the row through the table; tests that drive the engine directly
// take it from here.
#pragma once

#include "engine.hpp"

namespace abf::detail {

extern const Engine kCudaEngine;

}  // namespace abf::detail
