// The protocol table: every hashProtocolVersion this library implements, one
// policy type each, and the one dispatch on a version (with_protocol).
//
// A policy (protocol1.hpp is the model) provides:
//   kVersion              its hashProtocolVersion
//   kKeyed                whether its filters take a key (Scheme::key)
//   kName                 how messages name it
//   hashes(scheme, d)     step 1: 32-byte digest -> HashPair (ABF_HD)
//   format_allows(v)      section 7: which snapshot formatVersions hold it
//   Probes                its step 2 and layout, a probe kind shared by
//                         protocols of one layout (classic.hpp: limits and
//                         granularity, for_each_position / test / insert
//                         and the FastReduce it takes,
//                         and host-side modeled_false_positive_rate and
//                         choose_layout)
//
// Adding a protocol (docs/architecture.md lists the files):
//   1. its policy header here (abf/protocol/protocolN.hpp), and, for a new
//      layout, its probe kind (like classic.hpp) with the layout rule and
//      estimate in core/src/layout.cpp;
//   2. its row in `Protocols` below;
//   3. each engine's step 1 and, for a new probe kind, its step 2: scalar
//      (core/src/engine_scalar.cpp), SIMD (simd/probe_simd.cc and
//      probe_simd-inl.h), CUDA (cuda/src/kernels.cu, abf/cuda/view.hpp).
//      Every engine dispatches through with_protocol, so one that lacks an
//      overload for the new policy (or its probe kind) does not compile;
//   4. its section of docs/protocol.md, golden vectors and tests.
// The header rules, Scheme, layouts and the formats ask the table.
#pragma once

#include <cstdint>

#include "abf/protocol/common.hpp"
#include "abf/protocol/protocol1.hpp"
#include "abf/protocol/protocol2.hpp"
#include "abf/protocol/protocol3.hpp"
#include "abf/protocol/protocol4.hpp"

namespace abf::probe {

template <class... P>
struct ProtocolList {};

// The rows. Order does not matter; versions must be distinct.
using Protocols = ProtocolList<Protocol1, Protocol2, Protocol3, Protocol4>;

namespace table_detail {

template <class Body, class Unknown, class First, class... Rest>
ABF_HD constexpr decltype(auto) dispatch(std::uint32_t version, Body& body, Unknown& unknown,
                                         ProtocolList<First, Rest...>) {
  if (version == First::kVersion) return body(First{});
  if constexpr (sizeof...(Rest) == 0) {
    return unknown();
  } else {
    return dispatch(version, body, unknown, ProtocolList<Rest...>{});
  }
}

template <class... P>
constexpr bool distinct_versions(ProtocolList<P...>) {
  const std::uint32_t versions[] = {P::kVersion...};
  for (unsigned i = 0; i < sizeof...(P); ++i) {
    for (unsigned j = i + 1; j < sizeof...(P); ++j) {
      if (versions[i] == versions[j]) return false;
    }
  }
  return true;
}

}  // namespace table_detail

static_assert(table_detail::distinct_versions(Protocols{}), "two rows share a version");

// body(P{}) for the row P of the table whose kVersion is `version`, else
// unknown(). body is instantiated for every row, so code that cannot handle
// a row does not compile; body and unknown return the same type.
template <class Body, class Unknown>
ABF_HD constexpr decltype(auto) with_protocol(std::uint32_t version, Body&& body,
                                              Unknown&& unknown) {
  return table_detail::dispatch(version, body, unknown, Protocols{});
}

// The same for code that holds a validated Scheme (abf::Scheme made it): a
// version outside the table never reaches it, and if one does it traps
// (never runs under another row's rules). body returns void.
template <class Body>
ABF_HD constexpr void with_protocol(std::uint32_t version, Body&& body) {
  with_protocol(version, body, [] { unknown_protocol_trap(); });
}

// Whether `version` is a row of the table.
ABF_HD constexpr bool known_protocol(std::uint32_t version) {
  return with_protocol(
      version, [](auto) { return true; }, [] { return false; });
}

// Whether filters of protocol `version` take a key (false for an unknown one).
ABF_HD constexpr bool keyed_protocol(std::uint32_t version) {
  return with_protocol(
      version, [](auto protocol) { return decltype(protocol)::kKeyed; }, [] { return false; });
}

// Step 1 by the table, for code that holds a Scheme rather than a policy.
// An unknown version traps (see with_protocol).
ABF_HD constexpr HashPair hashes_of(const Scheme& scheme, const std::uint8_t* digest) {
  return with_protocol(
      scheme.protocol,
      [&](auto protocol) { return decltype(protocol)::hashes(scheme, digest); },
      [] {
        unknown_protocol_trap();
        return HashPair{};
      });
}

}  // namespace abf::probe
