// Compiled with -std=c++20 by the header_needs_cxx23 test: the first
// diagnostic must be abf's "abf needs C++23".
#include <abf/abf.hpp>

int main() { return 0; }
