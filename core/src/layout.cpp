// Layout selection, docs/protocol.md section 3, step by step. The arithmetic is
// the spec's own (pow, log1p, expm1 in double) so that every implementation
// lands on the same (m, k); layout.tsv pins 245 cases.
#include "abf/layout.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "abf/probe.hpp"

namespace abf {

namespace {

// A rate in messages: "0.001", "1e-09" (std::to_string gives "0.000000").
std::string rate_text(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", p);
  return text;
}

std::uint64_t align_up_64(std::uint64_t bits) { return (bits + 63) / 64 * 64; }

}  // namespace

}  // namespace abf

// --- The classic probe kind's layout rule and estimate (protocols 1 and 2) ---

namespace abf::probe {

double ClassicProbes::modeled_false_positive_rate(std::uint64_t bit_count,
                                                  std::uint32_t hash_count,
                                                  std::uint64_t items) noexcept {
  const double k = hash_count;
  return std::pow(-std::expm1(-k * static_cast<double>(items) / static_cast<double>(bit_count)),
                  k);
}

bool ClassicProbes::choose_layout(std::uint64_t n, double p, std::uint64_t& bit_count,
                                  std::uint32_t& hash_count) noexcept {
  constexpr double kMaxBits = static_cast<double>(kMaxBitCount);
  const double nd = static_cast<double>(n);
  std::optional<Layout> best;
  for (std::uint32_t k = kMinHashCount; k <= kMaxHashCount; ++k) {
    const double kd = k;
    const double required = kd * nd / (-std::log1p(-std::pow(p, 1.0 / kd)));
    if (!std::isfinite(required) || required > kMaxBits) continue;
    std::uint64_t m =
        align_up_64(std::max<std::uint64_t>(64, static_cast<std::uint64_t>(std::ceil(required))));
    if (m > kMaxBitCount) continue;
    double modeled = modeled_false_positive_rate(m, k, n);
    if (!std::isfinite(modeled) || modeled > p) {
      if (m > kMaxBitCount - 64) continue;
      m += 64;
      modeled = modeled_false_positive_rate(m, k, n);
    }
    if (!std::isfinite(modeled) || modeled > p) continue;
    if (!best || m < best->bit_count) best = Layout{m, k};  // k ascends: ties keep the smaller k
  }
  if (!best) return false;
  bit_count = best->bit_count;
  hash_count = best->hash_count;
  return true;
}

FillBounds ClassicProbes::plausible_fill(std::uint64_t bit_count, std::uint32_t hash_count,
                                         std::uint64_t inserted, FillCheck check) noexcept {
  const Layout layout{bit_count, hash_count};
  if (inserted == 0) return {};
  const double m = static_cast<double>(layout.bit_count);
  const double k = layout.hash_count;
  // q = (1 - k/m)^N, the chance that a given bit stays clear.
  const double q = std::exp(static_cast<double>(inserted) * std::log1p(-k / m));
  const double expected = m * -std::expm1(static_cast<double>(inserted) * std::log1p(-k / m));
  const double margin = 8.0 * std::sqrt(k * m * q * (1.0 - q)) + k;
  const std::uint64_t k_bits = layout.hash_count;
  // Hard limits: one insertion sets k distinct bits, N set at most k * N.
  // inserted <= 2^30 in any valid filter; saturate beyond so k * N cannot wrap.
  const std::uint64_t most = inserted >= layout.bit_count
                                 ? layout.bit_count
                                 : std::min<std::uint64_t>(layout.bit_count, inserted * k_bits);
  FillBounds bounds{k_bits, most, expected};
  const double upper = std::ceil(expected + margin);
  if (upper < static_cast<double>(most)) bounds.high = static_cast<std::uint64_t>(upper);
  if (check == FillCheck::kDistinctInsertions) {
    const double lower = std::floor(expected - margin);
    if (lower > static_cast<double>(bounds.low)) bounds.low = static_cast<std::uint64_t>(lower);
  }
  if (bounds.high < bounds.low) bounds.high = bounds.low;
  return bounds;
}

}  // namespace abf::probe

namespace abf {

double modeled_false_positive_rate(const Layout& layout, std::uint64_t items,
                                   std::uint32_t protocol) noexcept {
  return probe::with_protocol(
      protocol,
      [&](auto policy) {
        return decltype(policy)::Probes::modeled_false_positive_rate(layout.bit_count,
                                                                     layout.hash_count, items);
      },
      [] { return std::numeric_limits<double>::quiet_NaN(); });
}

FillBounds plausible_fill(const Layout& layout, std::uint64_t inserted, FillCheck check,
                          std::uint32_t protocol) noexcept {
  return probe::with_protocol(
      protocol,
      [&](auto policy) {
        return decltype(policy)::Probes::plausible_fill(layout.bit_count, layout.hash_count,
                                                        inserted, check);
      },
      [] { return FillBounds{}; });
}

std::string describe_fill_fault(const Layout& layout, std::uint64_t inserted,
                                std::uint64_t popcount, FillCheck check, std::uint32_t protocol) {
  const std::string has = std::to_string(inserted) + " insertions set " +
                          std::to_string(popcount) + " of " + std::to_string(layout.bit_count) +
                          " bits (k = " + std::to_string(layout.hash_count) + ")";
  if (inserted == 0) {
    return popcount == 0 ? std::string() : has + "; an empty filter has no bit set";
  }
  const FillBounds bounds = plausible_fill(layout, inserted, check, protocol);
  char expected[32];
  std::snprintf(expected, sizeof expected, "%.0f", bounds.expected);
  if (popcount < bounds.low) {
    return has + "; at least " + std::to_string(bounds.low) + " expected (model " + expected +
           (check == FillCheck::kDistinctInsertions ? ", distinct insertions)" : ")");
  }
  if (popcount > bounds.high) {
    return has + "; at most " + std::to_string(bounds.high) + " possible (model " + expected + ")";
  }
  return {};
}

Result<Layout> choose_layout(const BloomSpec& spec, std::uint32_t protocol) {
  return probe::with_protocol(
      protocol,
      [&](auto policy) -> Result<Layout> {
        using Probes = typename decltype(policy)::Probes;
        const std::uint64_t n = spec.expected_item_count;
        const double p = spec.target_fpp;
        if (n < 1 || n > Probes::kMaxExpectedItemCount) {
          return fail(ErrorCode::kInvalidExpectedItemCount,
                      "expected item count " + std::to_string(n) + " is outside 1.." +
                          Probes::kMaxExpectedItemCountText + " (" +
                          std::to_string(Probes::kMaxExpectedItemCount) + ")");
        }
        if (!std::isfinite(p) || p <= 0.0 || p >= 1.0) {
          return fail(ErrorCode::kInvalidFalsePositiveRate,
                      "target false-positive rate " + rate_text(p) +
                          " must be a finite number with 0 < p < 1");
        }
        const double nd = static_cast<double>(n);
        const double ln2 = std::log(2.0);
        const double ideal = -nd * std::log(p) / (ln2 * ln2);
        // Section 3's step 3 is the classic rule's; section 3c has none.
        if (std::is_same_v<Probes, probe::ClassicProbes> &&
            (!std::isfinite(ideal) || ideal > static_cast<double>(Probes::kMaxBitCount))) {
          return fail(ErrorCode::kFilterTooLarge,
                      "n = " + std::to_string(n) + " at p = " + rate_text(p) + " needs about " +
                          std::to_string(static_cast<std::uint64_t>(std::min(ideal, 1e19))) +
                          " bits, more than the " + Probes::kMaxBitCountText + " limit");
        }
        Layout layout;
        if (!Probes::choose_layout(n, p, layout.bit_count, layout.hash_count)) {
          return fail(ErrorCode::kFilterTooLarge,
                      std::string("no layout with at most ") + Probes::kMaxBitCountText +
                          " bits and " + std::to_string(Probes::kMaxHashCount) +
                          " probes reaches p = " + rate_text(p) + " for n = " + std::to_string(n));
        }
        return layout;
      },
      [&]() -> Result<Layout> {
        return fail(ErrorCode::kSnapshotUnsupportedHashProtocol,
                    "hash protocol version " + std::to_string(protocol) + " is not supported");
      });
}

}  // namespace abf
