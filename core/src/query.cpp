// Filter::query: resolves the backend and hands the batch to its engine.
#include <string>

#include "abf/filter.hpp"
#include "engines.hpp"
#include "parallel.hpp"

namespace abf {

Result<void> Filter::query(std::span<const Digest> digests, std::span<Answer> answers,
                           Backend backend) const {
  if (answers.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "answer buffer holds " +
                                                 std::to_string(answers.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  auto resolved = resolve_backend(backend, digests.size(), bit_count() / 8);
  if (!resolved) return std::unexpected(resolved.error());
  switch (*resolved) {
    case Backend::kScalar:
      detail::parallel_query(scalar::query_batch, view(), digests.data(), digests.size(),
                             answers.data());
      return {};
    case Backend::kCuda: {
      auto done = cuda_engine::query_batch(*this, digests.data(), digests.size(), answers.data());
      if (done || backend != Backend::kAuto) return done;
      // Auto chose the GPU and it failed (out of memory, device lost): the
      // CPU gives the same answers.
      break;
    }
    case Backend::kAuto:
    case Backend::kSimd:
      break;
  }
  detail::parallel_query(simd::query_batch, view(), digests.data(), digests.size(), answers.data());
  return {};
}

}  // namespace abf
