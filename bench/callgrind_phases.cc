// Instruction counts of one build and two query batches under callgrind, each
// phase dumped on its own (CALLGRIND_DUMP_STATS_AT), so a change to the
// kernels can be compared before and after with numbers that do not depend
// on the machine's load (docs/performance.md, "Instruction counts"). One
// thread; digests from bench/workload.hpp.
//
//   valgrind --tool=callgrind --instr-atstart=yes --callgrind-out-file=cg.%p
//       build/bench/callgrind_phases <n> <protocol 1|2|3|4> [simd target, e.g. SSE4]
//
// Each dump's "totals:" line is the phase's count: build, absent, present
// (scripts/callgrind-phases runs it and prints them). Valgrind runs no
// AVX-512, so its best target is AVX2.
#include <tbb/global_control.h>
#include <valgrind/callgrind.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "abf/abf.hpp"
#include "abf/simd/target.hpp"
#include "workload.hpp"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: callgrind_phases N PROTOCOL [SIMD_TARGET]\n");
    return 2;
  }
  const std::uint64_t n = std::strtoull(argv[1], nullptr, 10);
  const int protocol = std::atoi(argv[2]);
  if (protocol < 1 || protocol > 4) {
    std::fprintf(stderr, "protocol %d: one of 1, 2, 3, 4\n", protocol);
    return 2;
  }
  if (argc > 3 && !abf::use_simd_target(argv[3])) {
    std::fprintf(stderr, "no SIMD target %s here\n", argv[3]);
    return 2;
  }
  const tbb::global_control one_thread(tbb::global_control::max_allowed_parallelism, 1);
  std::vector<abf::Digest> members(n), absent(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    members[i] = abf::workload::digest_at(abf::workload::kMemberSeed, i);
    absent[i] = abf::workload::digest_at(abf::workload::kAbsentSeed, i);
  }
  abf::BuildOptions options;
  options.protocol = static_cast<std::uint32_t>(protocol);
  if (protocol == 2 || protocol == 4) {
    std::uint8_t bytes[16];
    for (int i = 0; i < 16; ++i) bytes[i] = static_cast<std::uint8_t>(i);
    options.key = abf::Key::from_bytes(std::span<const std::uint8_t, 16>(bytes, 16));
  }
  auto builder =
      abf::FilterBuilder::create({n, abf::workload::kTargetFpp}, options);
  if (!builder) return 1;
  std::vector<abf::Answer> answers(n);
  CALLGRIND_ZERO_STATS;
  if (!builder->add(members, abf::Backend::kSimd)) return 1;
  CALLGRIND_DUMP_STATS_AT("build");
  auto filter = std::move(*builder).finish();
  if (!filter) return 1;
  CALLGRIND_ZERO_STATS;
  if (!filter->query(absent, answers, abf::Backend::kSimd)) return 1;
  CALLGRIND_DUMP_STATS_AT("absent");
  std::size_t maybe = 0;
  for (const auto a : answers) maybe += a == abf::Answer::kMaybe;
  CALLGRIND_ZERO_STATS;
  if (!filter->query(members, answers, abf::Backend::kSimd)) return 1;
  CALLGRIND_DUMP_STATS_AT("present");
  for (const auto a : answers) {
    if (a != abf::Answer::kMaybe) return 1;  // a member answered absent
  }
  std::printf("n %llu protocol %d target %s false positives %zu\n",
              static_cast<unsigned long long>(n), protocol, abf::simd_target_name().c_str(), maybe);
  return 0;
}
