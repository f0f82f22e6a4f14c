// The filters of a catalog (docs/protocol.md section 8): built from the
// digests a SqliteCatalog holds at a version, as one filter or a filter set,
// or advanced from a filter of an older version. These use only the
// catalog's public reads (catalog_build.cpp); sqlite_catalog.hpp includes
// this header, so its callers keep finding them there.
#pragma once

#include <cstdint>
#include <optional>

#include "abf/backend.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/scheme.hpp"

namespace abf::service {

class SqliteCatalog;

// Builds the filter of the catalog at `catalog_version`, streaming the
// digests from the database into a FilterBuilder. The filter's header
// carries that version and the catalog's id; with `key` the filter is keyed
// (hashProtocolVersion 2), without it unkeyed. The spec errors of section 3
// come first, then kCatalog if the catalog has no id (a schema-1 catalog
// opened read-only: its snapshot would belong to no catalog), then
// kCapacityExceeded if the catalog holds more digests than
// spec.expected_item_count, then catalog errors. This is what
// `abf build --from-catalog` runs.
Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, const std::optional<Key>& key,
                                         Backend backend = Backend::kAuto);
// The same under hashProtocolVersion `protocol` (BuildOptions::protocol:
// 3 or 4 for the blocked layout, with `key` for 4; kProtocolByKey the
// classic choice by key). `abf build --from-catalog --layout blocked`.
Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, const std::optional<Key>& key,
                                         std::uint32_t protocol, Backend backend = Backend::kAuto);
// The same, unkeyed.
Result<Filter> build_filter_from_catalog(SqliteCatalog& catalog, std::uint64_t catalog_version,
                                         const BloomSpec& spec, Backend backend = Backend::kAuto);

// The filter of the catalog at `catalog_version`, made from `base`, a filter
// of this catalog at an older version v (docs/protocol.md section 8, `abf serve
// --follow`): when nothing was removed in (v, catalog_version], a copy of
// base's bits with every digest added since set, under base's spec, layout
// and protocol (a blocked base stays blocked), labelled `catalog_version`. When base is what
// build_filter_from_catalog made at v (same spec and key), the result is
// bit for bit what it makes at `catalog_version` (no digest is both in base
// and added since, so insertedItemCount adds up too). `key`: base's key,
// for a keyed base (kKeyRequired without it). kInvalidArgument when base
// is not of this catalog (its catalogId), is newer than `catalog_version`,
// or digests were removed since (then only a full build is exact);
// kCapacityExceeded when base's inserted count plus the added digests
// exceed its expected item count; store errors as they are.
Result<Filter> advance_filter(const Filter& base, SqliteCatalog& catalog,
                              std::uint64_t catalog_version, const std::optional<Key>& key,
                              Backend backend = Backend::kAuto);

// The same as a filter set of `shard_count` shards (FilterSetBuilder, the
// set's errors first: shard count, spec, kFilterTooLarge for shards too
// large), for catalogs larger than one filter holds. `abf build
// --from-catalog --shards` runs it.
Result<FilterSet> build_filter_set_from_catalog(SqliteCatalog& catalog,
                                                std::uint64_t catalog_version,
                                                const BloomSpec& spec, std::uint32_t shard_count,
                                                const std::optional<Key>& key,
                                                Backend backend = Backend::kAuto);
// The same under hashProtocolVersion `protocol` (BuildOptions::protocol: 3
// or 4 for the blocked layout, with `key` for 4; kProtocolByKey the classic
// choice by key), every shard of it. `abf build --from-catalog --layout
// blocked --shards`, and `abf serve --follow` rebuilding a set in its own
// protocol.
Result<FilterSet> build_filter_set_from_catalog(SqliteCatalog& catalog,
                                                std::uint64_t catalog_version,
                                                const BloomSpec& spec, std::uint32_t shard_count,
                                                const std::optional<Key>& key,
                                                std::uint32_t protocol,
                                                Backend backend = Backend::kAuto);

}  // namespace abf::service
