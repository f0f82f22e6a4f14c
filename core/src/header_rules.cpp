// The header rules of snapshots, set manifests and FilterInfo, in one place
// (header_rules.hpp).
#include "header_rules.hpp"

#include <array>
#include <cstdio>
#include <span>
#include <sstream>

#include "abf/filter_set.hpp"
#include "abf/probe.hpp"

namespace abf::detail {

namespace {

using Order = std::span<const HeaderRule>;

// Each kind's rules in the order it checks them: the first broken one is
// reported, so the order is part of what a corrupt header is told.
constexpr std::array kSnapshotOrder = {
    HeaderRule::kProtocol,  HeaderRule::kKeyFingerprint,    HeaderRule::kHashCount,
    HeaderRule::kBitCount,  HeaderRule::kExpectedItemCount, HeaderRule::kInsertedItemCount,
    HeaderRule::kTargetFpp, HeaderRule::kLayoutChoice,
};
constexpr std::array kSetManifestOrder = {
    HeaderRule::kProtocol,          HeaderRule::kKeyFingerprint, HeaderRule::kExpectedItemCount,
    HeaderRule::kTargetFpp,         HeaderRule::kShardSplit,     HeaderRule::kLayoutChoice,
    HeaderRule::kInsertedItemCount,
};
constexpr std::array kFilterInfoOrder = {
    HeaderRule::kHashCount,         HeaderRule::kBitCount,  HeaderRule::kExpectedItemCount,
    HeaderRule::kInsertedItemCount, HeaderRule::kTargetFpp,
};

Order order_of(HeaderKind kind) {
  switch (kind) {
    case HeaderKind::kSnapshot:
      return kSnapshotOrder;
    case HeaderKind::kSetManifest:
      return kSetManifestOrder;
    case HeaderKind::kFilterInfo:
      return kFilterInfoOrder;
  }
  return {};
}

// A snapshot's format version 1 predates keys: protocol 1 only.
bool format_allows(HeaderKind kind, std::uint32_t format_version, std::uint32_t protocol) {
  return kind != HeaderKind::kSnapshot || format_version != 1 ||
         protocol == probe::kProtocolUnkeyed;
}

std::string g17(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", p);
  return text;
}

// The problem `rule` finds in `f`, empty when it holds.
std::string problem_of(HeaderRule rule, HeaderKind kind, const HeaderFacts& f) {
  const bool set = kind == HeaderKind::kSetManifest;
  switch (rule) {
    case HeaderRule::kProtocol: {
      if (check_protocol(f.hash_protocol_version, f.key_fingerprint) != ProtocolFault::kUnknown &&
          format_allows(kind, f.format_version, f.hash_protocol_version)) {
        return {};
      }
      const std::string named = "hash protocol version " + std::to_string(f.hash_protocol_version);
      if (set) return named + " is not 1 or 2";
      return named + " is not supported in format version " + std::to_string(f.format_version) +
             (f.format_version == 1 ? " (which has protocol 1 only)"
                                    : " (this build implements protocols 1 and 2)");
    }
    case HeaderRule::kKeyFingerprint:
      if (check_protocol(f.hash_protocol_version, f.key_fingerprint) !=
          ProtocolFault::kStrayKeyFingerprint) {
        return {};
      }
      return std::string("an unkeyed (protocol 1) ") + (set ? "set" : "snapshot") +
             " carries a key fingerprint " + f.key_fingerprint.hex() + "; it must be zero";
    case HeaderRule::kHashCount:
      if (check_layout(f.layout) != LayoutFault::kHashCount) return {};
      return describe_layout_fault(f.layout);
    case HeaderRule::kBitCount:
      if (check_layout(f.layout) != LayoutFault::kBitCount) return {};
      return describe_layout_fault(f.layout);
    case HeaderRule::kExpectedItemCount: {
      const std::uint64_t most = set ? kMaxSetExpectedItemCount : probe::kMaxExpectedItemCount;
      if (f.expected_item_count >= 1 && f.expected_item_count <= most) return {};
      return "expected item count " + std::to_string(f.expected_item_count) + " is outside " +
             (set ? "1..2^46" : "1..2^30");
    }
    case HeaderRule::kInsertedItemCount:
      if (f.inserted_item_count <= f.expected_item_count) return {};
      return "inserted item count " + std::to_string(f.inserted_item_count) +
             " exceeds the expected item count " + std::to_string(f.expected_item_count);
    case HeaderRule::kTargetFpp:
      if (f.target_fpp > 0.0 && f.target_fpp < 1.0) return {};
      switch (kind) {
        case HeaderKind::kSnapshot:
          return "target false-positive rate " + std::to_string(f.target_fpp) + " is not in (0, 1)";
        case HeaderKind::kSetManifest:
          return "target false-positive rate " + fpp_text(f.target_fpp) + " is not in (0, 1)";
        case HeaderKind::kFilterInfo:
          break;
      }
      return "target false-positive rate is not in (0, 1)";
    case HeaderRule::kShardSplit: {
      const auto split = shard_expected_item_count(f.expected_item_count, f.shard_count);
      if (f.shard_expected_item_count == split) return {};
      return "shard expected item count " + std::to_string(f.shard_expected_item_count) +
             " is not the split of n = " + std::to_string(f.expected_item_count) + " over " +
             std::to_string(f.shard_count) + " shards (" + std::to_string(split) + ")";
    }
    case HeaderRule::kLayoutChoice: {
      // The layout must be the one section 3 chooses: a hashCount changed
      // (and checksums recomputed) would otherwise make members answer
      // Definitely Not.
      const std::uint64_t n = set ? f.shard_expected_item_count : f.expected_item_count;
      const auto chosen = choose_layout({n, f.target_fpp});
      if (chosen && *chosen == f.layout) return {};
      return std::string(set ? "shard " : "") + "bit count " + std::to_string(f.layout.bit_count) +
             " and hash count " + std::to_string(f.layout.hash_count) + " are not the layout of " +
             (set ? "n_i = " : "n = ") + std::to_string(n) +
             ", p = " + (set ? fpp_text(f.target_fpp) : g17(f.target_fpp)) +
             (chosen ? " (m = " + std::to_string(chosen->bit_count) +
                           ", k = " + std::to_string(chosen->hash_count) + ")"
                     : " (" + chosen.error().message + ")");
    }
  }
  return {};
}

}  // namespace

ProtocolFault check_protocol(std::uint32_t protocol,
                             const KeyFingerprint& key_fingerprint) noexcept {
  // The protocol table (abf/probe.hpp) says which versions exist and which
  // take a key.
  if (!probe::known_protocol(protocol)) return ProtocolFault::kUnknown;
  if (!probe::keyed_protocol(protocol) && !key_fingerprint.is_zero()) {
    return ProtocolFault::kStrayKeyFingerprint;
  }
  return ProtocolFault::kNone;
}

std::optional<HeaderFault> check_header(HeaderKind kind, const HeaderFacts& facts) {
  for (const HeaderRule rule : order_of(kind)) {
    if (auto problem = problem_of(rule, kind, facts); !problem.empty()) {
      return HeaderFault{rule, std::move(problem)};
    }
  }
  return std::nullopt;
}

std::string fpp_text(double p) {
  std::ostringstream out;
  out.precision(17);
  out << p;
  return out.str();
}

}  // namespace abf::detail
