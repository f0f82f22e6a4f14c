// Filter::query: asks the engine table which engine runs the batch.
#include <string>

#include "abf/filter.hpp"
#include "engine.hpp"

namespace abf {

Result<void> Filter::query(std::span<const Digest> digests, std::span<Answer> answers,
                           Backend backend) const {
  if (answers.size() < digests.size()) {
    return fail(ErrorCode::kInvalidArgument, "answer buffer holds " +
                                                 std::to_string(answers.size()) + " entries for " +
                                                 std::to_string(digests.size()) + " digests");
  }
  auto choice = detail::choose_engine(backend, {digests.size(), bit_count() / 8});
  if (!choice) return std::unexpected(choice.error());
  const std::span<Answer> out = answers.first(digests.size());
  return detail::run_with_fallback(
      *choice, [&](const detail::Engine& engine) { return engine.query(*this, digests, out); });
}

}  // namespace abf
