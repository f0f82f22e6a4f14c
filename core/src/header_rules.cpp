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

// Section 7: which snapshot formatVersions may hold the protocol (its
// policy's format_allows; format version 1 predates keys). Sets and
// FilterInfo have no such rule.
bool format_allows(HeaderKind kind, std::uint32_t format_version, std::uint32_t protocol) {
  if (kind != HeaderKind::kSnapshot) return true;
  return probe::with_protocol(
      protocol, [&](auto policy) { return decltype(policy)::format_allows(format_version); },
      [] { return false; });
}

// "1 and 2": the versions this build implements, from the table.
template <class... P>
std::string versions_text(probe::ProtocolList<P...>, const char* last) {
  const std::uint32_t versions[] = {P::kVersion...};
  std::string text;
  for (std::size_t i = 0; i < sizeof...(P); ++i) {
    if (i > 0) text += i + 1 == sizeof...(P) ? last : ", ";
    text += std::to_string(versions[i]);
  }
  return text;
}

// The versions a snapshot of this format version may hold, in words.
template <class... P>
std::string versions_of_format(std::uint32_t format_version, probe::ProtocolList<P...>) {
  std::string text;
  std::size_t count = 0;
  ((P::format_allows(format_version)
        ? (text += (count++ == 0 ? "" : ", ") + std::to_string(P::kVersion), 0)
        : 0),
   ...);
  return text;
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
      if (set) return named + " is not " + versions_text(probe::Protocols{}, " or ");
      return named + " is not supported in format version " + std::to_string(f.format_version) +
             (f.format_version == 1
                  ? " (which has protocol " + versions_of_format(1, probe::Protocols{}) + " only)"
                  : " (this build implements protocols " +
                        versions_text(probe::Protocols{}, " and ") + ")");
    }
    case HeaderRule::kKeyFingerprint:
      if (check_protocol(f.hash_protocol_version, f.key_fingerprint) !=
          ProtocolFault::kStrayKeyFingerprint) {
        return {};
      }
      return "an unkeyed (protocol " + std::to_string(f.hash_protocol_version) + ") " +
             std::string(set ? "set" : "snapshot") +
             " carries a key fingerprint " + f.key_fingerprint.hex() + "; it must be zero";
    case HeaderRule::kHashCount:
      if (check_layout(f.layout, f.hash_protocol_version) != LayoutFault::kHashCount) return {};
      return describe_layout_fault(f.layout, f.hash_protocol_version);
    case HeaderRule::kBitCount:
      if (check_layout(f.layout, f.hash_protocol_version) != LayoutFault::kBitCount) return {};
      return describe_layout_fault(f.layout, f.hash_protocol_version);
    case HeaderRule::kExpectedItemCount: {
      // A filter's limit is its protocol's; a set's is section 13's.
      std::uint64_t most = kMaxSetExpectedItemCount;
      std::string most_text = "2^46";
      if (!set) {
        probe::with_protocol(
            f.hash_protocol_version,
            [&](auto policy) {
              using Probes = typename decltype(policy)::Probes;
              most = Probes::kMaxExpectedItemCount;
              most_text = Probes::kMaxExpectedItemCountText;
            },
            [] {});
      }
      if (f.expected_item_count >= 1 && f.expected_item_count <= most) return {};
      return "expected item count " + std::to_string(f.expected_item_count) + " is outside 1.." +
             most_text;
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
      const auto chosen = choose_layout({n, f.target_fpp}, f.hash_protocol_version);
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
  // The protocol table (abf/protocol/table.hpp) says which versions exist and
  // which take a key.
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
