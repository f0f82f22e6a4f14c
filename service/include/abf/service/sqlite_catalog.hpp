// The catalog: the exact set of artifacts, version by version, in one SQLite
// database (sqlite3 C API). Every add or remove is one new catalog version;
// nothing is ever deleted, so the catalog can answer for any past version
// and a snapshot can be rebuilt for any of them.
//
// Schema (schema version 3; PRAGMA application_id 0x41424643, "ABFC"):
//   abf_schema(version)                    one row: the schema version
//   abf_catalog(catalog_id BLOB(16))       one row: the catalog's id (docs/protocol.md
//                                          section 8), random, fixed at init
//   versions(version PRIMARY KEY, operation, created_unix, added, removed,
//            item_count, fingerprint BLOB(16))
//                                          one row per catalog version; 0 = init;
//                                          item_count and fingerprint: what the
//                                          version holds (CatalogContent)
//   artifacts(digest BLOB(32), added_version, removed_version NULL,
//             PRIMARY KEY (digest, added_version)) WITHOUT ROWID
//   INDEX artifacts_by_added_version ON artifacts(added_version)
//                                          the digests a version range added,
//                                          without a walk of the whole table
//                                          (for_each_digest_added)
// A digest may have several rows (added, removed, added again); their
// [added_version, removed_version) intervals never overlap. A version's
// item_count and fingerprint are written by the transaction that makes it:
// the previous version's, plus every digest it adds, minus every digest it
// removes (abf/fingerprint.hpp).
//
// Older schemas are still read, and the first connection that opens one for
// writing upgrades it to schema 3 in one transaction:
//   schema 1 (before catalog ids) lacks abf_catalog: it gets a new random id;
//   schema 2 (before contents) lacks item_count and fingerprint: they are
//   added, and computed for every version in one pass over `artifacts`.
// No row of `artifacts` changes, nor any other column of `versions`.
// Read-only, an older catalog is left as it is: content_at_version walks
// the version's digests, and a schema-1 catalog has no id, so no snapshot is
// accepted for it.
//
// The index artifacts_by_added_version came after schema 3 was first written, without
// a new number (an index changes no row, and an abf without it just does not
// use it): every connection that opens a catalog for writing creates it if
// it is missing (once, about a second per million rows). A catalog opened
// read-only without it still answers for_each_digest_added, by a walk of
// the whole table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "abf/digest.hpp"
#include "abf/error.hpp"
#include "abf/filter.hpp"
#include "abf/filter_set.hpp"
#include "abf/io.hpp"
#include "abf/layout.hpp"
#include "abf/scheme.hpp"
#include "abf/service/artifact_repository.hpp"
// The filters built from a catalog (build_filter_from_catalog, advance_filter).
#include "abf/service/catalog_build.hpp"

namespace abf::service {

// The schema this code writes. It also opens schemas 1 and 2 (see above).
inline constexpr std::int64_t kCatalogSchemaVersion = 3;

struct CatalogOpenOptions {
  // Open for reading only (SQLITE_OPEN_READONLY): add/remove then fail.
  bool read_only = false;
  // How long a call waits for another process's lock before answering
  // kCatalog "database is locked" (SQLite busy timeout), in milliseconds.
  int busy_timeout_ms = 5000;
  // SQLite page cache for this connection, in MiB (PRAGMA cache_size).
  int cache_mib = 64;
};

// What one add or remove did.
struct CatalogChange {
  std::uint64_t version = 0;    // the new catalog version
  std::uint64_t requested = 0;  // digests read from the input, duplicates included
  std::uint64_t changed = 0;    // added (was absent) or removed (was present)
  std::uint64_t unchanged = 0;  // add: already present; remove: not present
};

// Catalog-wide counts (`abf catalog stats`).
struct CatalogStats {
  std::int64_t schema_version = 0;      // of the database as opened (1, 2 only if read-only)
  std::optional<CatalogId> catalog_id;  // none for a schema-1 catalog opened read-only
  std::uint64_t latest_version = 0;
  std::uint64_t version_count = 0;   // rows of `versions`, init included
  std::uint64_t live_artifacts = 0;  // present at the latest version
  ContentFingerprint latest_fingerprint;  // of the set present at the latest version
  std::uint64_t artifact_rows = 0;   // every interval ever recorded
  std::uint64_t removed_rows = 0;    // intervals closed by a remove
  std::uint64_t file_bytes = 0;      // size of the database file
};

// A catalog database. Every method may be called from any thread; calls on
// one SqliteCatalog are serialized by an internal mutex (one connection).
// Errors are kCatalog with the database path and SQLite's own message, except
// where noted.
class SqliteCatalog final : public ArtifactRepository {
 public:
  // Creates a new, empty catalog (version 0) at `path`, with a new random
  // catalog id (CatalogId::generate; kIo if the system cannot supply one).
  // The file is built beside it and renamed into place, so a failed init
  // leaves nothing behind. kCatalog if `path` already exists (it is never
  // overwritten).
  static Result<SqliteCatalog> create(const std::filesystem::path& path);

  // Opens an existing catalog. Clear kCatalog errors for: a missing file
  // ("no such catalog"), a file that is not a SQLite database, a SQLite
  // database that is not an abf catalog, a catalog of another schema version,
  // and a database locked by another process for longer than the busy timeout.
  // A schema-1 or schema-2 catalog opened for writing is upgraded to schema
  // 3 here, in one transaction (see above); opened read-only it is left as
  // it is.
  static Result<SqliteCatalog> open(const std::filesystem::path& path,
                                    const CatalogOpenOptions& options = {});

  SqliteCatalog(SqliteCatalog&&) noexcept;
  SqliteCatalog& operator=(SqliteCatalog&&) noexcept;
  ~SqliteCatalog() override;

  // Adds digests as one new catalog version, in one transaction. Digests
  // already present stay as they are (counted as unchanged), so duplicates in
  // the input are harmless. The reader form streams input of any size; a
  // malformed digest anywhere (kInvalidDigest, with its line or offset) rolls
  // everything back: the catalog is then exactly as it was.
  Result<CatalogChange> add(std::span<const Digest> digests);
  Result<CatalogChange> add(DigestReader& input);
  // Removes digests as one new catalog version: their intervals are closed at
  // that version (nothing is deleted). Digests not present are counted as
  // unchanged. Same transaction rules as add.
  Result<CatalogChange> remove(std::span<const Digest> digests);
  Result<CatalogChange> remove(DigestReader& input);

  // ArtifactRepository. The batch form runs in one read transaction with one
  // prepared statement, looking the digests up in ascending order (B-tree
  // locality); kInvalidArgument if `exists` is shorter than `digests`.
  Result<bool> exists_at_version(const Digest& digest, std::uint64_t catalog_version) override;
  Result<void> exists_at_version(std::span<const Digest> digests, std::uint64_t catalog_version,
                                 std::span<bool> exists) override;
  Result<std::uint64_t> latest_version() override;
  // In one read transaction (schema 3 records the content; older schemas
  // none). kCatalog when the path now names another file than the one
  // opened (a catalog restored by rename): restart to read it.
  Result<HeadRecord> head_record() override;
  // From the versions table's per-version counts (a range of its primary
  // key; no digest is read).
  Result<VersionChanges> changes_between(std::uint64_t after, std::uint64_t upto) override;
  // A range of the index artifacts_by_added_version, in one read
  // transaction (kInvalidArgument for a range beyond the latest version).
  Result<void> for_each_digest_added(std::uint64_t after, std::uint64_t upto,
                                     const DigestSink& sink, std::size_t chunk_size = 0) override;

  // Streams every digest present at `catalog_version`, in ascending byte
  // order, to `sink` in chunks of at most `chunk_size`, inside one read
  // transaction (a consistent view even while another process adds). An error
  // from `sink` stops the walk and is returned as it is. kInvalidArgument if
  // the version does not exist yet (greater than latest_version()).
  Result<void> for_each_digest_at_version(
      std::uint64_t catalog_version,
      const std::function<Result<void>(std::span<const Digest>)>& sink,
      std::size_t chunk_size = 65536);

  // The number of digests present at `catalog_version` (kInvalidArgument if
  // the version does not exist yet), counted in the artifacts.
  Result<std::uint64_t> count_at_version(std::uint64_t catalog_version);

  // ArtifactRepository: the item count and fingerprint the version's row
  // keeps (one indexed read), or, for an older schema opened read-only,
  // computed by walking the version's digests. kInvalidArgument if the
  // version does not exist yet; kCatalog for a damaged row.
  Result<CatalogContent> content_at_version(std::uint64_t catalog_version) override;

  // ArtifactRepository: `count` random 32-byte keys, each answered by the
  // first digest present at the version at or after it (wrapping around),
  // one B-tree seek each, in one read transaction; duplicates dropped. When
  // the version holds no more than `count` digests, all of them (a walk).
  Result<std::vector<Digest>> sample_at_version(std::uint64_t catalog_version,
                                                std::size_t count) override;

  Result<CatalogStats> stats();

  const std::filesystem::path& path() const noexcept;

  // The schema version of the database as opened: kCatalogSchemaVersion for
  // a writer (it upgrades), possibly 1 or 2 for a reader.
  std::int64_t schema_version() const noexcept;

  // The catalog's id, which every snapshot built from it carries. None only
  // for a schema-1 catalog opened read-only (it gets one when first opened
  // for writing).
  const std::optional<CatalogId>& catalog_id() const noexcept;

  // ArtifactRepository: always bound. The id is catalog_id(), or zero when
  // there is none yet, which no snapshot matches (its message says to open
  // the catalog for writing once, `abf catalog upgrade`).
  std::optional<CatalogBinding> catalog_binding() const override;

 private:
  struct State;
  explicit SqliteCatalog(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace abf::service
