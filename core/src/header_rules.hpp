// The rules a filter's header states, checked in one place for ABF1
// snapshots (docs/protocol.md section 7), ABFS set manifests (section 13)
// and the FilterInfo a Filter is made of: the hash protocol and its key
// fingerprint, the layout limits (section 3), n, the inserted count, p,
// a set's split of n, and the layout section 3 chooses for n and p.
// Each kind of header checks its rules in the order it always has (the
// first broken rule is the one reported) and words them as it always has.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "abf/layout.hpp"
#include "abf/scheme.hpp"

namespace abf::detail {

// What is wrong with a hash protocol a header names, if anything.
enum class ProtocolFault : std::uint8_t {
  kNone,
  kUnknown,              // this build implements no such protocol
  kStrayKeyFingerprint,  // an unkeyed protocol with a nonzero key fingerprint
};
// The protocol rule: the version is a row of the protocol table (abf/probe.hpp),
// and an unkeyed one carries a zero key fingerprint.
ProtocolFault check_protocol(std::uint32_t protocol,
                             const KeyFingerprint& key_fingerprint) noexcept;

// Which header is checked: the set of rules, their order and wording.
enum class HeaderKind : std::uint8_t {
  kSnapshot,     // section 7: protocol, key, k, m, n, inserted, p, layout
  kSetManifest,  // section 13: protocol, key, n, p, n_i, shard layout, inserted
  kFilterInfo,   // a Filter's own: k, m, n, inserted, p
};

// The header's rules, one per check.
enum class HeaderRule : std::uint8_t {
  kProtocol,
  kKeyFingerprint,
  kHashCount,
  kBitCount,
  kExpectedItemCount,
  kInsertedItemCount,
  kTargetFpp,
  kShardSplit,    // a set's n_i is shard_expected_item_count(n, S)
  kLayoutChoice,  // m and k are choose_layout's for n (a set: n_i) and p
};

// The fields the rules read. For a set, `layout` is each shard's and
// shard_count / shard_expected_item_count are S and n_i; for the other
// kinds they are unused.
struct HeaderFacts {
  std::uint32_t format_version = 0;  // a snapshot's: version 1 has protocol 1 only
  std::uint32_t hash_protocol_version = 0;
  KeyFingerprint key_fingerprint;
  Layout layout;
  std::uint64_t expected_item_count = 0;
  std::uint64_t inserted_item_count = 0;
  double target_fpp = 0.0;
  std::uint32_t shard_count = 0;
  std::uint64_t shard_expected_item_count = 0;
};

// The first rule a header breaks, and what is wrong in words.
struct HeaderFault {
  HeaderRule rule;
  std::string problem;
};

// Checks `facts` against the rules of `kind`, in that kind's order.
std::optional<HeaderFault> check_header(HeaderKind kind, const HeaderFacts& facts);

// A rate as set manifests word it: 17 significant digits.
std::string fpp_text(double p);

}  // namespace abf::detail
