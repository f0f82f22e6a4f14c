// Layout selection, PROTOCOL.md section 3, step by step. The arithmetic is
// the spec's own (pow, log1p, expm1 in double) so that every implementation
// lands on the same (m, k); layout.tsv pins 245 cases.
#include "abf/layout.hpp"

#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "abf/probe.hpp"

namespace abf {

namespace {

constexpr double kMaxBits = static_cast<double>(probe::kMaxBitCount);

std::uint64_t align_up_64(std::uint64_t bits) { return (bits + 63) / 64 * 64; }

}  // namespace

double modeled_false_positive_rate(const Layout& layout, std::uint64_t items) noexcept {
  const double k = layout.hash_count;
  return std::pow(
      -std::expm1(-k * static_cast<double>(items) / static_cast<double>(layout.bit_count)), k);
}

Result<Layout> choose_layout(const BloomSpec& spec) {
  const std::uint64_t n = spec.expected_item_count;
  const double p = spec.target_fpp;
  if (n < 1 || n > probe::kMaxExpectedItemCount) {
    return fail(ErrorCode::kInvalidExpectedItemCount,
                "expected item count " + std::to_string(n) + " is outside 1..2^30 (1073741824)");
  }
  if (!std::isfinite(p) || p <= 0.0 || p >= 1.0) {
    return fail(ErrorCode::kInvalidFalsePositiveRate,
                "target false-positive rate " + std::to_string(p) +
                    " must be a finite number with 0 < p < 1");
  }
  const double nd = static_cast<double>(n);
  const double ln2 = std::log(2.0);
  const double ideal = -nd * std::log(p) / (ln2 * ln2);
  if (!std::isfinite(ideal) || ideal > kMaxBits) {
    return fail(ErrorCode::kFilterTooLarge,
                "n = " + std::to_string(n) + " at p = " + std::to_string(p) + " needs about " +
                    std::to_string(ideal) + " bits, more than the 2^30 limit");
  }

  std::optional<Layout> best;
  for (std::uint32_t k = probe::kMinHashCount; k <= probe::kMaxHashCount; ++k) {
    const double kd = k;
    const double required = kd * nd / (-std::log1p(-std::pow(p, 1.0 / kd)));
    if (!std::isfinite(required) || required > kMaxBits) continue;
    std::uint64_t m =
        align_up_64(std::max<std::uint64_t>(64, static_cast<std::uint64_t>(std::ceil(required))));
    if (m > probe::kMaxBitCount) continue;
    double modeled = modeled_false_positive_rate({m, k}, n);
    if (!std::isfinite(modeled) || modeled > p) {
      if (m > probe::kMaxBitCount - 64) continue;
      m += 64;
      modeled = modeled_false_positive_rate({m, k}, n);
    }
    if (!std::isfinite(modeled) || modeled > p) continue;
    if (!best || m < best->bit_count) best = Layout{m, k};  // k ascends: ties keep the smaller k
  }
  if (!best) {
    return fail(ErrorCode::kFilterTooLarge,
                "no layout with at most 2^30 bits and 32 probes reaches p = " + std::to_string(p) +
                    " for n = " + std::to_string(n));
  }
  return *best;
}

}  // namespace abf
