// The libFuzzer entry point of one target: ABF_FUZZ_CHECK names its check
// (checks.hpp). A broken property aborts, which libFuzzer reports as a crash
// and saves the input.
#include <cstdio>
#include <cstdlib>

#include "checks.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string problem = abf::fuzz::ABF_FUZZ_CHECK({data, size});
  if (!problem.empty()) {
    std::fprintf(stderr, "property broken: %s\n", problem.c_str());
    std::abort();
  }
  return 0;
}
