// The catalog-reach check a stored file's binding makes first (an exact
// index, check_index_binding; a snapshot, check_snapshot_content): is the
// catalog version the file was built from one the catalog has? Internal to
// service/src; defined in artifact_repository.cpp.
#pragma once

#include <cstdint>
#include <string_view>

#include "abf/error.hpp"
#include "abf/service/artifact_repository.hpp"

namespace abf::service {

// What `catalog` holds at `version`, the version the file `named` ("index
// X", "snapshot Y") is of. A version the catalog does not reach
// (content_at_version's kInvalidArgument) is kCatalogMismatch: "<named> is
// of catalog version V, but <catalog_name> only reaches version L (a damaged
// catalog, or one restored from an older backup?)<consequence>; refused".
// The store's other errors as they are.
Result<CatalogContent> content_in_reach(ArtifactRepository& catalog, std::uint64_t version,
                                        std::string_view named, std::string_view catalog_name,
                                        std::string_view consequence);

}  // namespace abf::service
