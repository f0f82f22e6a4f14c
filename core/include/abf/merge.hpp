// Joining filters built in pieces: the OR of filters of one layout is the
// filter of the union of their digests (docs/protocol.md sections 5 and 6). Build
// the pieces of a catalog on many machines (any map-reduce engine can run
// them), save each as a snapshot, and merge the snapshots into one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "abf/error.hpp"
#include "abf/filter.hpp"

namespace abf {

struct MergeOptions {
  // The catalogVersion of the result. Without it every input must carry the
  // same catalogVersion, which the result then keeps. With it, inputs not
  // bound to a catalog (catalogId zero) may carry any versions (the caller
  // vouches that together they hold exactly the digests of this version);
  // inputs bound to a catalog must all already carry this version: a merge
  // never labels its result with a version its inputs do not have.
  std::optional<std::uint64_t> catalog_version;
  // Names of the inputs for error messages (e.g. file paths), one per input.
  // Empty: inputs are named "input 1", "input 2", ...
  std::vector<std::string> labels;
};

// The bitwise OR of `filters`, which must agree on everything that decides
// where a digest's bits go and how the result may be used (docs/protocol.md
// section 8):
//   catalogId, hashProtocolVersion, the key (by fingerprint, then exactly),
//   bitCount, hashCount, expectedItemCount, targetFpp (compared bit for
//   bit), and catalogVersion unless options.catalog_version is given.
// The result keeps their scheme (key included) and catalogId.
// The result's insertedItemCount is the sum of the inputs' (duplicates across
// inputs are counted twice: a conservative count, as within one build), and
// its content fingerprint the sum of theirs when every input has one (the
// fingerprint of the multiset union, exact); otherwise it has none, and is
// refused wherever a catalog's fingerprint is compared.
//
// Merging the filters of any partition of a digest set gives a filter whose
// payload is identical to that of the filter built from the whole set, and
// whose insertedItemCount is the same.
//
// Errors:
//   kInvalidArgument      no filters, or labels given but not one per filter;
//   kIncompatibleFilters  any of the fields above differs; the message names
//                         the field, both inputs and both values; or
//                         options.catalog_version differs from the version
//                         of an input bound to a catalog (named);
//   kCapacityExceeded     the summed insertedItemCount is larger than
//                         expectedItemCount (the result would not meet its
//                         target false-positive rate);
//   kSnapshotImplausibleFill  the OR has more bits set than the summed count
//                         can set (check_fill): inputs no build made, which
//                         every loader would refuse merged.
// Large bitsets are OR-ed on every core of the current TBB arena.
Result<Filter> merge_filters(std::span<const Filter> filters, const MergeOptions& options = {});

}  // namespace abf
