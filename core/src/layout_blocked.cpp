// The one-line layout (docs/protocol.md section 3c), operation for
// operation as the section writes it. This file is compiled with
// -ffp-contract=off (core/CMakeLists.txt): a fused multiply-add in F + t *
// f(i) or t * lam changes the modeled rate's last bit in about a third of
// vectors/v3/layout-v3.tsv's rows, and the model's bits are part of the
// protocol (they decide B at the thresholds).
#include "abf/layout_blocked.hpp"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "abf/blocked.hpp"
#include "abf/protocol/blocked.hpp"
#include "abf/protocol/classic.hpp"


namespace abf {

namespace {

std::string rate_text(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", p);
  return text;
}

// r(i) = (63/64)^i by the forward chain r(0) = 1, r(i+1) = r(i) * 0.984375,
// every value kept (the lower tail reads them too; dividing back down would
// give other bits). Through the subnormals the chain comes down to the
// smallest one, 2^-1074, after about 47,000 steps, and stays there
// (2^-1074 * 0.984375 rounds back to 2^-1074): the table stops at that
// fixed point and every later r(i) is its last value.
const std::vector<double>& ratio_chain() {
  static const std::vector<double> chain = [] {
    std::vector<double> values{1.0};
    for (;;) {
      const double next = values.back() * 0.984375;
      if (next == values.back()) break;
      values.push_back(next);
    }
    return values;
  }();
  return chain;
}

// f(i) = a^8 for a = 1 - r(i), by three squarings.
double line_rate(const std::vector<double>& chain, std::uint64_t i) {
  const double r = i < chain.size() ? chain[i] : chain.back();
  const double a = 1.0 - r;
  const double a2 = a * a;
  const double a4 = a2 * a2;
  return a4 * a4;
}

// 2^-64: the first Poisson weight below it ends its tail and is not summed.
constexpr double kTailStop = 0x1p-64;

}  // namespace

double modeled3(std::uint64_t items, std::uint64_t block_count) noexcept {
  if (items == 0) return 0.0;
  const std::vector<double>& chain = ratio_chain();
  const double lam = static_cast<double>(items) / static_cast<double>(block_count);
  const auto mode = static_cast<std::uint64_t>(std::floor(lam));
  double s = 1.0;
  double f = line_rate(chain, mode);
  // The upper tail, i = mode + 1, mode + 2, ...
  double t = 1.0;
  std::uint64_t i = mode;
  for (;;) {
    t = (t * lam) / static_cast<double>(i + 1);
    i = i + 1;
    if (t < kTailStop) break;
    s = s + t;
    f = f + t * line_rate(chain, i);
  }
  // The lower tail, i = mode - 1, ..., 0.
  t = 1.0;
  i = mode;
  while (i > 0) {
    t = (t * static_cast<double>(i)) / lam;
    i = i - 1;
    if (t < kTailStop) break;
    s = s + t;
    f = f + t * line_rate(chain, i);
  }
  return f / s;
}

double modeled_blocked_false_positive_rate(const Layout& layout, std::uint64_t items) noexcept {
  return modeled3(items, layout.bit_count / blocked::kBlockBits);
}

Result<Layout> choose_blocked_layout(const BloomSpec& spec) {
  const std::uint64_t n = spec.expected_item_count;
  const double p = spec.target_fpp;
  if (n < 1 || n > blocked::kMaxExpectedItemCount) {
    return fail(ErrorCode::kInvalidExpectedItemCount,
                "expected item count " + std::to_string(n) +
                    " is outside 1..2^36 (68719476736) for the blocked layout");
  }
  if (!std::isfinite(p) || p <= 0.0 || p >= 1.0) {
    return fail(
        ErrorCode::kInvalidFalsePositiveRate,
        "target false-positive rate " + rate_text(p) + " must be a finite number with 0 < p < 1");
  }
  if (modeled3(n, blocked::kMaxBlockCount) > p) {
    return fail(ErrorCode::kFilterTooLarge,
                "n = " + std::to_string(n) + " at p = " + rate_text(p) +
                    " needs more than the blocked layout's 2^31 blocks (2^40 bits); the classic "
                    "layout needs fewer bits below p = 1e-4, or split the catalog into a filter set");
  }
  std::uint64_t lo = 1;
  std::uint64_t hi = blocked::kMaxBlockCount;
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    if (modeled3(n, mid) <= p) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return Layout{blocked::kBlockBits * lo, blocked::kHashCount};
}

}  // namespace abf

// --- The one-line probe kind's layout rule and estimate (protocols 3 and 4) ---

namespace abf::probe {

double BlockedProbes::modeled_false_positive_rate(std::uint64_t bit_count, std::uint32_t,
                                                  std::uint64_t items) noexcept {
  return modeled3(items, bit_count / blocked::kBlockBits);
}

bool BlockedProbes::choose_layout(std::uint64_t n, double p, std::uint64_t& bit_count,
                                  std::uint32_t& hash_count) noexcept {
  const auto layout = choose_blocked_layout({n, p});
  if (!layout) return false;
  bit_count = layout->bit_count;
  hash_count = layout->hash_count;
  return true;
}

FillBounds BlockedProbes::plausible_fill(std::uint64_t bit_count, std::uint32_t hash_count,
                                         std::uint64_t inserted, FillCheck check) noexcept {
  // Every insertion sets 8 distinct bits (one a word), and each bit of the
  // filter with probability 8 / m: the classic derivation holds as it is.
  return ClassicProbes::plausible_fill(bit_count, hash_count, inserted, check);
}

}  // namespace abf::probe
