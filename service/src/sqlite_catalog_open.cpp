// SqliteCatalog's open and recovery: create (a new catalog renamed into
// place), open (the checks of what the path names, the hot-journal roll-back
// of a read-only connection, WAL, the upgrade, the persistent statements),
// and the check that the path still names the file opened.
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>

#include "sqlite_catalog_state.hpp"

namespace abf::service {

using namespace sqlite_detail;

namespace {

// Returns the mode in force: "wal" unless the filesystem cannot (then the
// mode the file had).
constexpr const char* kWalSql = "PRAGMA journal_mode = WAL";

// The read-only connection met something only a writer can put right: a
// hot journal to roll back, or a WAL index to rebuild.
bool is_readonly_recovery(int rc) {
  return rc == SQLITE_READONLY_ROLLBACK || rc == SQLITE_READONLY_RECOVERY ||
         rc == SQLITE_READONLY_CANTINIT || rc == SQLITE_READONLY_CANTLOCK;
}

// Rolls back the hot journal of a killed writer (or rebuilds a WAL index)
// with a read-write connection that only reads: no version is created and
// no row changes, the database becomes what it was before the killed
// writer's transaction.
Result<void> roll_back_hot_journal(const std::filesystem::path& path, int busy_timeout_ms) {
  sqlite3* raw = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &raw, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr);
  Db db(raw);
  if (rc == SQLITE_OK) {
    sqlite3_extended_result_codes(raw, 1);
    sqlite3_busy_timeout(raw, busy_timeout_ms);
    rc = sqlite3_exec(raw, "SELECT COUNT(*) FROM sqlite_schema", nullptr, nullptr, nullptr);
  }
  if (rc != SQLITE_OK) {
    return std::unexpected(catalog_error(
        path,
        "a writer was killed mid-change and left a journal that only a read-write connection "
        "can roll back (" +
            path.string() + "-journal), and opening one failed",
        db.get(), rc));
  }
  return {};
}

}  // namespace

// Opens the connection (again, dropping an earlier one) and reads the
// header's application id; a failure is SQLite's result code.
std::expected<std::int64_t, SqliteFailure> SqliteCatalog::State::connect_and_read_application_id() {
  db.reset();
  sqlite3* raw = nullptr;
  const int flags =
      (options.read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE) | SQLITE_OPEN_NOMUTEX;
  const int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  db.reset(raw);
  if (rc != SQLITE_OK) return std::unexpected(SqliteFailure{rc, "opening"});
  struct stat opened {};
  file_identity.reset();
  if (::stat(path.c_str(), &opened) == 0) file_identity = std::pair{opened.st_dev, opened.st_ino};
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, options.busy_timeout_ms);
  sqlite3_stmt* stmt_raw = nullptr;
  int step = sqlite3_prepare_v2(raw, "PRAGMA application_id", -1, &stmt_raw, nullptr);
  Stmt stmt(stmt_raw);
  if (step == SQLITE_OK) step = sqlite3_step(stmt.get());
  if (step != SQLITE_ROW) return std::unexpected(SqliteFailure{step, "reading the header"});
  return sqlite3_column_int64(stmt.get(), 0);
}

// A writer's connection: WAL (kept in the database, so every later
// connection uses it too) and a sync of the WAL at every commit, so a
// committed version survives a crash or power loss. A catalog in rollback
// mode is converted here; that waits, within the busy timeout, for its
// readers. Where WAL is impossible (no shared memory on the filesystem)
// the catalog keeps the mode it has.
Result<void> SqliteCatalog::State::use_wal() {
  sqlite3_stmt* raw = nullptr;
  int rc = sqlite3_prepare_v2(db.get(), kWalSql, -1, &raw, nullptr);
  Stmt stmt(raw);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt.get());
  if (rc != SQLITE_ROW) return std::unexpected(error("switching to WAL mode", rc));
  return exec("PRAGMA synchronous = FULL", "setting synchronous commits");
}

// kCatalog when the path now names another file than the one opened: a
// backup restored by rename (`mv restored.db catalog.db`). The connection
// would go on reading the old, unlinked file; answers from it could call a
// digest of the new file absent.
Result<void> SqliteCatalog::State::check_same_file() const {
  if (!file_identity) return {};
  struct stat now {};
  if (::stat(path.c_str(), &now) != 0) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": the file was removed or renamed since it was "
                                         "opened; restart to read the catalog at this path");
  }
  if (std::pair{now.st_dev, now.st_ino} != *file_identity) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": the file was replaced since it was opened (a "
                                         "restore by rename?); restart to read the new file");
  }
  return {};
}

SqliteCatalog::SqliteCatalog(std::unique_ptr<State> state) : state_(std::move(state)) {}
SqliteCatalog::SqliteCatalog(SqliteCatalog&&) noexcept = default;
SqliteCatalog& SqliteCatalog::operator=(SqliteCatalog&&) noexcept = default;
SqliteCatalog::~SqliteCatalog() = default;

const std::filesystem::path& SqliteCatalog::path() const noexcept { return state_->path; }

std::int64_t SqliteCatalog::schema_version() const noexcept { return state_->schema; }

const std::optional<CatalogId>& SqliteCatalog::catalog_id() const noexcept {
  return state_->catalog_id;
}

std::optional<CatalogBinding> SqliteCatalog::catalog_binding() const {
  if (state_->catalog_id) return CatalogBinding{*state_->catalog_id, "catalog " + path().string()};
  return CatalogBinding{CatalogId{}, "catalog " + path().string() +
                                         " (schema 1, opened read-only: no catalog id yet; "
                                         "`abf catalog upgrade` gives it one)"};
}

Result<SqliteCatalog> SqliteCatalog::create(const std::filesystem::path& path) {
  const auto exists_error = [&] {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": already exists; it is never overwritten");
  };
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) return exists_error();  // a link included
  // The catalog is built in a private folder made beside it (mkdtemp: a new
  // name, mode 0700), so nothing planted can be followed or overwritten: not
  // the database, nor the journal and WAL files SQLite makes next to it.
  // Then it is renamed into place without replacing anything, and the folder
  // removed: a failed init leaves no half-made catalog.
  auto id = CatalogId::generate();
  if (!id) return std::unexpected(id.error());
  const std::filesystem::path folder =
      path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::string pattern =
      (folder / ("." + path.filename().string().substr(0, NAME_MAX - 13) + ".init.XXXXXX"))
          .string();
  if (::mkdtemp(pattern.data()) == nullptr) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": cannot create a private folder in '" + folder.string() +
                                         "': " + std::strerror(errno));
  }
  const std::filesystem::path private_folder = pattern;
  struct RemoveFolder {
    std::filesystem::path path;
    ~RemoveFolder() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remove_folder{private_folder};
  const std::filesystem::path temp = private_folder / "catalog.db";
  {
    sqlite3* raw = nullptr;
    const int rc =
        sqlite3_open_v2(temp.c_str(), &raw,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
    Db db(raw);
    if (rc != SQLITE_OK) {
      return std::unexpected(catalog_error(path, "creating the database", db.get(), rc));
    }
    sqlite3_extended_result_codes(db.get(), 1);
    const std::string sql = create_schema_sql(*id);
    int exec_rc = sqlite3_exec(db.get(), sql.c_str(), nullptr, nullptr, nullptr);
    if (exec_rc == SQLITE_OK) {
      // WAL, kept in the file's header: readers never wait for a writer, and
      // a killed writer leaves nothing a reader must roll back (kWalSql).
      exec_rc = sqlite3_exec(db.get(), kWalSql, nullptr, nullptr, nullptr);
    }
    if (exec_rc == SQLITE_OK) {
      // Everything into the database file itself (and synced), so the file
      // alone is the catalog when it is renamed.
      exec_rc =
          sqlite3_exec(db.get(), "PRAGMA wal_checkpoint(TRUNCATE)", nullptr, nullptr, nullptr);
    }
    if (exec_rc != SQLITE_OK) {
      return std::unexpected(catalog_error(path, "creating the schema", db.get(), exec_rc));
    }
  }
  std::error_code ec;
  if (std::filesystem::exists(private_folder / "catalog.db-wal", ec) &&
      std::filesystem::file_size(private_folder / "catalog.db-wal", ec) != 0) {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": cannot create: the new database kept a WAL");
  }
  // RENAME_NOREPLACE: an existing name (a file, or a link planted since the
  // check above) stays as it is. Where the filesystem lacks it, link(2),
  // which never replaces either.
  int moved = ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_NOREPLACE);
  if (moved != 0 && (errno == EINVAL || errno == ENOSYS)) {
    moved = ::link(temp.c_str(), path.c_str());
  }
  if (moved != 0) {
    if (errno == EEXIST) return exists_error();
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": cannot create: " + std::strerror(errno));
  }
  // The new name is durable once its folder is.
  if (const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
  return open(path);
}

Result<SqliteCatalog> SqliteCatalog::open(const std::filesystem::path& path,
                                          const CatalogOpenOptions& options) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": no such file (create one with `abf catalog init`)");
  }
  if (std::filesystem::is_directory(status)) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": is a directory");
  }
  // SQLite opens whatever the name is: a FIFO made every reader wait
  // forever for a writer, and a device (/dev/null) read as an empty
  // database. A link is followed (status), to what it names.
  if (!std::filesystem::is_regular_file(status)) {
    const auto kind = status.type();
    const char* what = kind == std::filesystem::file_type::fifo        ? "a FIFO"
                       : kind == std::filesystem::file_type::character ? "a character device"
                       : kind == std::filesystem::file_type::block     ? "a block device"
                       : kind == std::filesystem::file_type::socket    ? "a socket"
                                                                       : "not a regular file";
    return fail(ErrorCode::kCatalog,
                "catalog " + path.string() + ": is " + std::string(what) + ", not a database file");
  }
  auto state = std::make_unique<State>();
  state->path = path;
  state->options = options;
  // Is it an abf catalog? Reading the header also reports "not a database"
  // and "locked" here, at open. A read-only connection cannot roll back the
  // hot journal a writer killed mid-change left (a catalog still in rollback
  // mode: made before WAL and not opened for writing since); SQLite answers
  // SQLITE_READONLY_ROLLBACK, and the journal is rolled back once by a
  // read-write connection that only reads, then the read-only one retries.
  auto id = state->connect_and_read_application_id();
  if (!id && options.read_only && is_readonly_recovery(id.error().rc)) {
    if (auto recovered = roll_back_hot_journal(path, options.busy_timeout_ms); !recovered) {
      return std::unexpected(recovered.error());
    }
    id = state->connect_and_read_application_id();
  }
  if (!id) return std::unexpected(state->error(id.error().what, id.error().rc));
  if (*id != kApplicationId) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() +
                                         ": a SQLite database, but not an abf catalog "
                                         "(application_id " +
                                         std::to_string(*id) + ", expected " +
                                         std::to_string(kApplicationId) + ")");
  }
  sqlite3* db = state->db.get();
  auto schema = read_schema_version(db, path);
  if (!schema) return std::unexpected(schema.error());
  if (!known_schema(*schema)) {
    return fail(ErrorCode::kCatalog, "catalog " + path.string() + ": schema version " +
                                         std::to_string(*schema) +
                                         ", but this abf reads schema versions 1 to " +
                                         std::to_string(kCatalogSchemaVersion));
  }
  if (!options.read_only) {
    if (auto wal = state->use_wal(); !wal) return std::unexpected(wal.error());
    if (*schema != kCatalogSchemaVersion) {
      auto upgraded = state->upgrade();
      if (!upgraded) return std::unexpected(upgraded.error());
      schema = kCatalogSchemaVersion;
    }
  }
  if (*schema == kCatalogSchemaVersion && !options.read_only) {
    if (auto indexed = state->create_added_index(); !indexed) {
      return std::unexpected(indexed.error());
    }
  }
  if (*schema != kSchemaWithoutCatalogId) {
    auto id = read_catalog_id(db, path);
    if (!id) return std::unexpected(id.error());
    state->catalog_id = *id;
  }
  state->schema = *schema;
  const std::string cache =
      "PRAGMA cache_size = -" + std::to_string(std::max(1, options.cache_mib) * 1024);
  if (auto ok = state->exec(cache.c_str(), "setting the page cache"); !ok)
    return std::unexpected(ok.error());
  for (auto [slot, sql] : std::array<std::pair<Stmt State::*, const char*>, 8>{{
           {&State::exists, kExistsSql},
           {&State::live, kLiveSql},
           {&State::insert, kInsertSql},
           {&State::close, kCloseSql},
           {&State::latest, kLatestSql},
           {&State::version, kVersionSql},
           {&State::content, kContentSql},
           {&State::schema_now, kSchemaSql},
       }}) {
    // An older schema (read-only) lacks the content columns; its contents
    // are walked instead (content_at_version), and it is never written.
    if (state->schema != kCatalogSchemaVersion &&
        (slot == &State::version || slot == &State::content)) {
      continue;
    }
    auto stmt = state->prepare(sql);
    if (!stmt) return std::unexpected(stmt.error());
    (*state).*slot = std::move(*stmt);
  }
  return SqliteCatalog(std::move(state));
}
}  // namespace abf::service
