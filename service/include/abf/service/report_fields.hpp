// The field names and value forms that the CLI's --json reports and the
// Python package's dicts share, so `abf catalog add --json` and
// abf.Catalog.add, or `abf inspect --json` and Filter.info, say the same
// thing the same way: one place defines them for both.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace abf::service::fields {

// `abf catalog add|remove --json` and abf.Catalog.add|remove: {db,
// operation, catalog_version, read, added|removed, already_present|not_present}.
inline constexpr const char* kDb = "db";
inline constexpr const char* kOperation = "operation";
inline constexpr const char* kCatalogVersion = "catalog_version";
inline constexpr const char* kRead = "read";  // digests read, duplicates included

struct ChangeNames {
  const char* operation;  // "add" or "remove"
  const char* changed;    // added (was absent) or removed (was present)
  const char* unchanged;  // add: already present; remove: not present
};
inline constexpr ChangeNames kAdd{"add", "added", "already_present"};
inline constexpr ChangeNames kRemove{"remove", "removed", "not_present"};

// A 64-bit checksum (payload_checksum, header_checksum, ...) as `abf inspect
// --json` and Filter.info show it: "0x" and 16 lowercase hex digits.
inline std::string checksum_hex(std::uint64_t value) {
  char text[19];
  std::snprintf(text, sizeof text, "0x%016llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace abf::service::fields
