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
  auto done = choice->engine->query(*this, digests, answers);
  const detail::Engine& fallback = detail::fallback_engine();
  if (done || !choice->automatic || choice->engine == &fallback) return done;
  // The automatic choice failed at run time (a GPU out of memory or lost):
  // the fallback gives the same answers.
  return fallback.query(*this, digests, answers.first(digests.size()));
}

}  // namespace abf
