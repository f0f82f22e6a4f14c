// abf.Catalog (the SQLite catalog, service/) and abf.dedup (the bulk dedup
// job: the filter in front, the catalog asked only about its maybes).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "abf/service/exact_index.hpp"
#include "abf/service/report_fields.hpp"
#include "abf/service/service.hpp"
#include "abf/service/snapshot_publisher.hpp"
#include "abf/service/sqlite_catalog.hpp"
#include "abf/service/catalog_build.hpp"
#include "common.hpp"

namespace abf::python {

namespace {

using service::SqliteCatalog;

// A catalog as Python holds it; close() drops the connection. Each call
// holds its own reference while it runs without the GIL, so a close() from
// another thread meanwhile takes effect when that call ends.
//
// abf.Catalog(path) reads through a read-only connection, and opens one for
// writing only at its first add or remove: a writer's open upgrades an older
// schema and turns on WAL (SqliteCatalog::open), and a catalog only read
// (find_missing, contains, dedup, build_filter, ...) is left as it was, as
// the CLI's read-only commands leave it. read_only=True never opens a writer.
struct PyCatalog {
  std::shared_ptr<SqliteCatalog> catalog;
  std::filesystem::path path;
  bool read_only = false;  // as asked: add and remove fail
  bool writer = false;     // `catalog` is a read-write connection

  std::shared_ptr<SqliteCatalog> get() const {
    if (!catalog) raise(ErrorCode::kInvalidArgument, "catalog " + path.string() + " is closed");
    return catalog;
  }

  // The connection for add and remove: the read-write one, opened now if
  // this is the first write. With read_only, the read-only one (whose add
  // and remove answer kCatalog "opened read-only").
  std::shared_ptr<SqliteCatalog> for_writing() {
    auto held = get();
    if (read_only || writer) return held;
    Result<SqliteCatalog> opened = [&] {
      py::gil_scoped_release release;
      return SqliteCatalog::open(path);
    }();
    auto fresh = std::make_shared<SqliteCatalog>(unwrap(std::move(opened)));
    // Another thread may have closed it, or opened its writer, meanwhile.
    held = get();
    if (writer) return held;
    catalog = std::move(fresh);
    writer = true;
    return catalog;
  }
};

struct DigestHash {
  std::size_t operator()(const Digest& d) const noexcept {
    // SHA-256 outputs are uniform: any 8 bytes are a good hash.
    std::uint64_t h = 0;
    std::memcpy(&h, d.bytes.data() + 8, sizeof h);
    return static_cast<std::size_t>(h);
  }
};

// Appends to `out` each digest i with !present[i], at its first occurrence
// in `seen` order.
void append_missing(std::span<const Digest> digests, const bool* present,
                    std::unordered_set<Digest, DigestHash>& seen, std::vector<Digest>& out) {
  for (std::size_t i = 0; i < digests.size(); ++i) {
    if (!present[i] && seen.insert(digests[i]).second) out.push_back(digests[i]);
  }
}

std::uint64_t version_or_latest(SqliteCatalog& catalog, py::handle version) {
  if (version.is_none()) return unwrap(catalog.latest_version());
  return count_from(version, ErrorCode::kInvalidArgument, "version");
}

// The keys and values of `abf catalog add|remove --json` (report_fields.hpp).
py::dict change_dict(const service::CatalogChange& c, const std::filesystem::path& db,
                     const service::fields::ChangeNames& names) {
  namespace f = service::fields;
  py::dict d;
  d[f::kDb] = db.string();
  d[f::kOperation] = names.operation;
  d[f::kCatalogVersion] = c.version;
  d[f::kRead] = c.requested;
  d[names.changed] = c.changed;
  d[names.unchanged] = c.unchanged;
  return d;
}

// Opens the catalog at `path`; one that does not exist raises
// abf.CatalogNotFoundError (a CatalogStoreError and a FileNotFoundError,
// with errno and filename), without the CLI's advice.
SqliteCatalog open_catalog(const std::filesystem::path& path,
                           const service::CatalogOpenOptions& options) {
  Result<SqliteCatalog> c = [&] {
    py::gil_scoped_release release;
    return SqliteCatalog::open(path, options);
  }();
  std::error_code ec;
  if (!c && c.error().code == ErrorCode::kCatalog &&
      !std::filesystem::exists(std::filesystem::status(path, ec))) {
    py::object cls = py::module_::import("abf._errors").attr("CatalogNotFoundError");
    py::object filename = py::module_::import("os").attr("fsdecode")(py::bytes(path.native()));
    const std::string text =
        "catalog " + path.string() + ": no such file (abf.Catalog.create makes a new one)";
    py::object message = py::reinterpret_steal<py::object>(PyUnicode_DecodeUTF8(
        text.data(), static_cast<Py_ssize_t>(text.size()), "backslashreplace"));
    if (!message) throw py::error_already_set();
    py::object error = cls(message, "catalog_error", filename);
    PyErr_SetObject(cls.ptr(), error.ptr());
    throw py::error_already_set();
  }
  return unwrap(std::move(c));
}

py::dict counts_dict(const service::BatchCounts& c, std::uint64_t written,
                     std::uint64_t catalog_version, std::uint64_t snapshot_version,
                     const service::CatalogLag& lag, bool filter_used, double seconds) {
  // The names, order and meaning of `abf dedup --json` (cli/dedup_job.cpp).
  py::dict d;
  const std::uint64_t absent = c.total - c.present;
  d["catalog_version"] = catalog_version;
  d["snapshot_version"] = snapshot_version;
  d["filter"] = filter_used;
  d["total"] = c.total;
  d["new"] = written;
  d["repeats"] = absent - written;
  d["present"] = c.present;
  d["negative"] = c.negative;
  d["maybe"] = c.maybe;
  d["false_positives"] = c.false_positive;
  d["lag_versions"] = lag.versions_behind;
  d["lag_digests_added"] = lag.digests_added;
  d["head_lookups"] = c.head_lookups;
  d["head_present"] = c.head_present;
  d["exact_lookups"] = c.exact_lookups;
  d["exact_lookups_avoided"] = c.lookups_avoided();
  d["negative_bypass_ratio"] = c.negative_bypass_ratio();
  d["observed_false_positive_rate"] = c.observed_false_positive_rate();
  d["false_discovery_ratio"] = c.false_discovery_ratio();
  d["seconds"] = seconds;
  return d;
}

// Digests absent at `version`, in input order, each once.
py::array_t<std::uint8_t> find_missing(const PyCatalog& c, py::handle digests, py::handle version) {
  const auto held = c.get();
  SqliteCatalog& catalog = *held;
  DigestInput input = digests_from(digests);
  std::vector<Digest> missing;
  Result<void> done;
  const std::uint64_t at = version_or_latest(catalog, version);
  {
    py::gil_scoped_release release;
    done = [&]() -> Result<void> {
      std::unordered_set<Digest, DigestHash> seen;
      constexpr std::size_t kBatch = std::size_t{1} << 20;
      const auto span = input.span();
      std::unique_ptr<bool[]> present(new bool[std::min(span.size(), kBatch) + 1]);
      for (std::size_t start = 0; start < span.size(); start += kBatch) {
        const auto batch = span.subspan(start, std::min(kBatch, span.size() - start));
        if (auto looked = catalog.exists_at_version(batch, at, {present.get(), batch.size()});
            !looked) {
          return looked;
        }
        append_missing(batch, present.get(), seen, missing);
      }
      return {};
    }();
  }
  unwrap(std::move(done));
  return digest_array(missing);
}

py::array_t<bool> contains(const PyCatalog& c, py::handle digests, py::handle version) {
  const auto held = c.get();
  SqliteCatalog& catalog = *held;
  DigestInput input = digests_from(digests);
  const std::uint64_t at = version_or_latest(catalog, version);
  py::array_t<bool> out(static_cast<py::ssize_t>(input.size()));
  bool* data = out.mutable_data();
  Result<void> done;
  {
    py::gil_scoped_release release;
    done = catalog.exists_at_version(input.span(), at, {data, input.size()});
  }
  unwrap(std::move(done));
  return out;
}

py::array_t<std::uint8_t> all_digests(const PyCatalog& c, py::handle version) {
  const auto held = c.get();
  SqliteCatalog& catalog = *held;
  const std::uint64_t at = version_or_latest(catalog, version);
  std::vector<Digest> digests;
  Result<void> done;
  {
    py::gil_scoped_release release;
    done =
        catalog.for_each_digest_at_version(at, [&](std::span<const Digest> chunk) -> Result<void> {
          digests.insert(digests.end(), chunk.begin(), chunk.end());
          return {};
        });
  }
  unwrap(std::move(done));
  return digest_array(digests);
}

py::object catalog_build(const PyCatalog& c, py::handle expected_items, py::handle fpp,
                         py::handle version, py::handle key, py::handle shards,
                         py::handle backend, py::handle layout) {
  const auto held = c.get();
  SqliteCatalog& catalog = *held;
  const Backend engine = backend_from(backend);
  const std::uint64_t n =
      count_from(expected_items, ErrorCode::kInvalidExpectedItemCount, "expected_items");
  const BloomSpec spec{n, real_from(fpp, "fpp")};
  std::optional<Key> k = key_from(key);
  const std::uint32_t protocol = protocol_from_layout(layout, k.has_value());
  const std::uint64_t at = version_or_latest(catalog, version);
  std::uint32_t shard_count = 1;
  bool as_set = true;
  if (PyUnicode_Check(shards.ptr())) {
    if (shards.cast<std::string>() != "auto") {
      throw py::value_error("shards must be an int in 1..65536 or \"auto\"");
    }
    shard_count = unwrap(choose_shard_count(spec, protocol));
  } else {
    const std::uint64_t count = count_from(shards, ErrorCode::kInvalidArgument, "shards");
    if (count < 1 || count > kMaxShardCount) {
      raise(ErrorCode::kInvalidArgument,
            "shards " + std::to_string(count) + " is outside 1.." + std::to_string(kMaxShardCount));
    }
    shard_count = static_cast<std::uint32_t>(count);
    as_set = shard_count != 1;
  }
  if (!as_set) {
    Result<Filter> filter = [&] {
      py::gil_scoped_release release;
      return service::build_filter_from_catalog(catalog, at, spec, k, protocol, engine);
    }();
    return py::cast(PyFilter{unwrap(std::move(filter)), std::move(k)});
  }
  Result<FilterSet> set = [&] {
    py::gil_scoped_release release;
    return service::build_filter_set_from_catalog(catalog, at, spec, shard_count, k, protocol,
                                                  engine);
  }();
  return py::cast(PyFilterSet{unwrap(std::move(set)), std::move(k)});
}

// `abf index`: the catalog's digests at `version` written to an index file.
py::dict catalog_write_index(const PyCatalog& c, py::handle path, py::handle version,
                             py::handle block_digests) {
  const auto held = c.get();
  SqliteCatalog& catalog = *held;
  const auto p = path_from(path);
  const std::uint64_t at = version_or_latest(catalog, version);
  const std::uint64_t block =
      count_from(block_digests, ErrorCode::kInvalidArgument, "block_digests");
  if (block > kIndexMaxBlockDigests) {
    raise(ErrorCode::kInvalidArgument, "block_digests " + std::to_string(block) + " is over " +
                                           std::to_string(kIndexMaxBlockDigests));
  }
  Result<service::IndexBuildReport> report = [&] {
    py::gil_scoped_release release;
    return service::build_index_from_catalog(catalog, at, p, static_cast<std::uint32_t>(block));
  }();
  const auto built = unwrap(std::move(report));
  // The names and values of `abf index --json` (but its seconds).
  const IndexHeader header{.digest_count = built.digest_count,
                           .block_digests = static_cast<std::uint32_t>(block),
                           .block_count = block == 0 ? 0 : (built.digest_count + block - 1) / block};
  py::dict d;
  d["output"] = p.string();
  d["catalog_id"] = catalog_id_object(catalog.catalog_id().value_or(CatalogId{}));
  d["catalog_version"] = built.catalog_version;
  d["digest_count"] = built.digest_count;
  d["content_fingerprint"] = built.fingerprint.hex();
  d["block_digests"] = block;
  d["shards"] = 1;
  d["bytes"] = header.file_size();
  return d;
}

// The filter argument of dedup: a Filter, a FilterSet or a path.
FilterSet filter_set_from(py::handle filter, py::handle key, py::object& loaded,
                          std::shared_ptr<MapGuard>& guard) {
  if (!py::isinstance<PyFilter>(filter) && !py::isinstance<PyFilterSet>(filter)) {
    if (py::isinstance<py::array>(filter) || !PyObject_HasAttrString(filter.ptr(), "__fspath__")) {
      if (!PyUnicode_Check(filter.ptr()) && !PyBytes_Check(filter.ptr())) {
        throw py::type_error("filter must be an abf.Filter, an abf.FilterSet or a path, not " +
                             describe(filter));
      }
    }
    path_from(filter, "filter");  // a NUL in it refused under its own name
    loaded = py::module_::import("abf._abf").attr("load")(filter, key);
    filter = loaded;
  }
  if (py::isinstance<PyFilter>(filter)) {
    guard = filter.cast<const PyFilter&>().guard;
    return FilterSet(filter.cast<const PyFilter&>().filter);
  }
  guard = filter.cast<const PyFilterSet&>().guard;
  return filter.cast<const PyFilterSet&>().set;
}

// An index argument: None, an abf.Index, or the path of an index file or an
// index set manifest (loaded here, mapped).
std::optional<PyIndex> index_from(py::handle object) {
  if (object.is_none()) return std::nullopt;
  if (py::isinstance<PyIndex>(object)) return object.cast<PyIndex>();
  return load_index(path_from(object, "index"), LoadMode::kMap);
}

py::object dedup(py::handle digests, py::handle filter, py::handle catalog_arg, py::handle key,
                 py::handle use_filter_arg, py::handle return_counts_arg, py::handle backend,
                 py::handle batch_size_arg, py::handle index_arg) {
  const Backend engine = backend_from(backend);
  const bool use_filter = flag_from(use_filter_arg, "use_filter");
  const bool return_counts = flag_from(return_counts_arg, "return_counts");
  const std::uint64_t batch_size =
      count_from(batch_size_arg, ErrorCode::kInvalidArgument, "batch_size");
  if (batch_size == 0) raise(ErrorCode::kInvalidArgument, "batch_size must be at least 1");
  py::object loaded;
  std::shared_ptr<MapGuard> guard;
  FilterSet set = filter_set_from(filter, key, loaded, guard);
  std::string source = "<memory>";
  if (loaded) source = path_from(filter, "filter").string();
  // The catalog argument: an abf.Catalog, or a path opened read-only here.
  py::object opened;
  if (!py::isinstance<PyCatalog>(catalog_arg)) {
    service::CatalogOpenOptions options;
    options.read_only = true;
    const auto path = path_from(catalog_arg, "catalog");
    opened = py::cast(
        PyCatalog{std::make_shared<SqliteCatalog>(open_catalog(path, options)), path, true});
    catalog_arg = opened;
  }
  const auto held = catalog_arg.cast<const PyCatalog&>().get();
  SqliteCatalog& catalog = *held;
  const std::optional<PyIndex> index = index_from(index_arg);
  if (index) join_guards(guard, index->guard);
  check_mapping(guard);
  DigestInput input = digests_from(digests);

  std::vector<Digest> missing;
  service::BatchCounts counts;
  service::IndexedLookupCounts index_counts;
  double seconds = 0;
  std::uint64_t version = set.catalog_version();  // then the head the answers are exact at
  const std::uint64_t snapshot_version = set.catalog_version();
  service::CatalogLag lag;
  Result<void> done;
  {
    py::gil_scoped_release release;
    done = [&]() -> Result<void> {
      const auto start = std::chrono::steady_clock::now();
      // index=: the exact answers come from the index, checked against the
      // catalog as a snapshot is (kCatalogMismatch), with the catalog behind
      // it for what changed after the index's version (`abf dedup --index`).
      // The sum over its digests is checked once per loaded index.
      std::optional<service::IndexedRepository> indexed;
      if (index) {
        const bool verified = index->digests_verified->load(std::memory_order_acquire);
        if (auto bound = service::check_index_binding(index->index, index->source, catalog,
                                                      /*verify_digests=*/!verified);
            !bound) {
          return bound;
        }
        index->digests_verified->store(true, std::memory_order_release);
        indexed.emplace(catalog, index->index);
      }
      service::ArtifactRepository& store =
          indexed ? static_cast<service::ArtifactRepository&>(*indexed) : catalog;
      // Bound to the catalog: a snapshot of another catalog, or of none, is
      // refused (kCatalogMismatch) before any digest is looked at.
      service::SnapshotPublisher publisher(nullptr, store);
      // So is one that does not hold what the catalog holds at its version,
      // or of a version the catalog lacks (check_snapshot_binding).
      auto snapshot = publisher.publish(set, source);
      if (!snapshot) return std::unexpected(snapshot.error());
      service::ServiceOptions options;
      options.use_filter = use_filter;
      options.backend = engine;
      const service::ArtifactExistenceService service(publisher, store, nullptr, options);
      // One head for the whole call: every answer exact at the catalog's
      // newest version, read once (docs/protocol.md section 8).
      auto head = service.head(**snapshot);
      if (!head) return std::unexpected(head.error());
      version = head->catalog_version;
      lag = head->lag;
      std::unordered_set<Digest, DigestHash> seen;
      const auto span = input.span();
      const std::size_t batch = std::min(batch_size, std::max<std::size_t>(span.size(), 1));
      std::unique_ptr<bool[]> present(new bool[batch]);
      for (std::size_t at = 0; at < span.size(); at += batch) {
        const auto part = span.subspan(at, std::min(batch, span.size() - at));
        auto c = service.exists_batch(part, {present.get(), part.size()}, **snapshot, *head);
        if (!c) return std::unexpected(c.error());
        counts += *c;
        append_missing(part, present.get(), seen, missing);
      }
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (indexed) index_counts = indexed->counts();
      return {};
    }();
  }
  check_mapping(guard);
  unwrap(std::move(done));
  py::array_t<std::uint8_t> out = digest_array(missing);
  if (!return_counts) return out;
  py::dict summary =
      counts_dict(counts, missing.size(), version, snapshot_version, lag, use_filter, seconds);
  if (index) {
    // As `abf dedup --index --json`: exact_lookups = index_lookups + store_lookups.
    summary["index_version"] = index->index.catalog_version();
    summary["index_lookups"] = index_counts.index_lookups;
    summary["store_lookups"] = index_counts.store_lookups;
  }
  return py::make_tuple(out, summary);
}

}  // namespace

void init_catalog(py::module_& m) {
  py::class_<PyCatalog>(m, "Catalog", R"doc(
The exact store: a SQLite catalog of digests, version by version (each add
or remove is one new version; nothing is ever deleted). Calls release the
GIL and are serialized on one connection; abf.CatalogStoreError carries
SQLite's message. Use as a context manager, or close().
)doc")
      .def(py::init([](py::handle path, py::handle read_only_arg) {
             const auto p = path_from(path);
             const bool read_only = flag_from(read_only_arg, "read_only");
             // Read-only until the first write (PyCatalog::for_writing).
             service::CatalogOpenOptions options;
             options.read_only = true;
             return PyCatalog{std::make_shared<SqliteCatalog>(open_catalog(p, options)), p,
                              read_only};
           }),
           py::arg("path"), py::arg("read_only") = py::bool_(false), R"doc(
Opens an existing catalog (abf.Catalog.create makes a new one), for reading:
the first add or remove opens it for writing (which upgrades a catalog of an
older schema, as `abf catalog upgrade`), so a catalog only read is left
byte for byte as it was. read_only=True: add and remove fail.
)doc")
      .def_static(
          "create",
          [](py::handle path) {
            const auto p = path_from(path);
            Result<SqliteCatalog> c = [&] {
              py::gil_scoped_release release;
              return SqliteCatalog::create(p);
            }();
            return PyCatalog{std::make_shared<SqliteCatalog>(unwrap(std::move(c))), p, false, true};
          },
          py::arg("path"),
          "Creates a new, empty catalog (version 0, a new random id); never over an existing "
          "file.")
      .def(
          "add",
          [](PyCatalog& c, py::handle digests) {
            DigestInput input = digests_from(digests);
            const auto held = c.for_writing();
            SqliteCatalog& catalog = *held;
            Result<service::CatalogChange> change = [&] {
              py::gil_scoped_release release;
              return catalog.add(input.span());
            }();
            return change_dict(unwrap(std::move(change)), c.path, service::fields::kAdd);
          },
          py::arg("digests"), R"doc(
Adds digests as one new catalog version, in one transaction. Returns what
`abf catalog add --json` prints: {"db", "operation": "add",
"catalog_version" (the new version), "read" (digests given, duplicates
included), "added", "already_present"}.
)doc")
      .def(
          "remove",
          [](PyCatalog& c, py::handle digests) {
            DigestInput input = digests_from(digests);
            const auto held = c.for_writing();
            SqliteCatalog& catalog = *held;
            Result<service::CatalogChange> change = [&] {
              py::gil_scoped_release release;
              return catalog.remove(input.span());
            }();
            return change_dict(unwrap(std::move(change)), c.path, service::fields::kRemove);
          },
          py::arg("digests"),
          R"doc(
Removes digests as one new catalog version (their rows are closed, not
deleted). Returns what `abf catalog remove --json` prints: {"db",
"operation": "remove", "catalog_version", "read", "removed", "not_present"}.
)doc")
      .def_property_readonly(
          "version",
          [](const PyCatalog& c) {
            const auto held = c.get();
            SqliteCatalog& catalog = *held;
            py::gil_scoped_release release;
            return unwrap(catalog.latest_version());
          },
          "The latest catalog version.")
      .def_property_readonly(
          "id",
          [](const PyCatalog& c) -> py::object {
            const auto& id = c.get()->catalog_id();
            if (!id) return py::none();
            return py::str(id->hex());
          },
          "The catalog id (32 hex digits) its snapshots carry; None only for a schema-1 "
          "catalog not written to since (its first add, or `abf catalog upgrade`, gives it one).")
      .def_property_readonly(
          "path", [](const PyCatalog& c) { return c.path.string(); }, "The database file.")
      .def_property_readonly(
          "read_only", [](const PyCatalog& c) { return c.read_only; },
          "Whether it was opened with read_only=True (add and remove then fail).")
      .def("find_missing", &find_missing, py::arg("digests"), py::arg("version") = py::none(),
           R"doc(
The digests not in the catalog at version (default: the latest), exactly
(every digest looked up; no filter): a uint8 array (M, 32), in input order,
each once.
)doc")
      .def("contains", &contains, py::arg("digests"), py::arg("version") = py::none(),
           "Exact membership at version (default: the latest): a bool array.")
      .def(
          "count",
          [](const PyCatalog& c, py::handle version) {
            const auto held = c.get();
            SqliteCatalog& catalog = *held;
            const std::uint64_t at = version_or_latest(catalog, version);
            py::gil_scoped_release release;
            return unwrap(catalog.count_at_version(at));
          },
          py::arg("version") = py::none(), "Digests present at version (default: the latest).")
      .def(
          "content",
          [](const PyCatalog& c, py::handle version) {
            const auto held = c.get();
            SqliteCatalog& catalog = *held;
            const std::uint64_t at = version_or_latest(catalog, version);
            Result<service::CatalogContent> content = [&] {
              py::gil_scoped_release release;
              return catalog.content_at_version(at);
            }();
            const auto kept = unwrap(std::move(content));
            py::dict d;
            d["version"] = at;
            d["item_count"] = kept.item_count;
            d["fingerprint"] = kept.fingerprint.hex();
            return d;
          },
          py::arg("version") = py::none(), R"doc(
What version (default: the latest) holds: {"version", "item_count",
"fingerprint"}, the fingerprint as 32 hex digits (the content fingerprint a
snapshot built from that version carries).
)doc")
      .def("digests", &all_digests, py::arg("version") = py::none(),
           "Every digest present at version (default: the latest), ascending: (N, 32) uint8.")
      .def("write_index", &catalog_write_index, py::arg("path"), py::arg("version") = py::none(),
           py::arg("block_digests") = kIndexDefaultBlockDigests, R"doc(
Writes the exact index (abf.Index, as `abf index`) of the catalog at version
(default: the latest) to path, atomically, streaming the digests in order
(bounded memory). Returns what `abf index --json` prints but its seconds:
{"output", "catalog_id", "catalog_version", "digest_count",
"content_fingerprint", "block_digests", "shards": 1, "bytes"}.
)doc")
      .def("build_filter", &catalog_build, py::arg("expected_items"), py::arg("fpp"),
           py::arg("version") = py::none(), py::arg("key") = py::none(), py::arg("shards") = 1,
           py::arg("backend") = "auto", py::arg("layout") = "classic", R"doc(
The filter of the catalog at version (default: the latest), carrying that
version and the catalog's id: a Filter for shards=1, a FilterSet otherwise
(or for "auto"), as abf.build; layout "classic" or "blocked" as abf.build.
)doc")
      .def(
          "stats",
          [](const PyCatalog& c) {
            const auto held = c.get();
            SqliteCatalog& catalog = *held;
            Result<service::CatalogStats> s = [&] {
              py::gil_scoped_release release;
              return catalog.stats();
            }();
            const auto stats = unwrap(std::move(s));
            py::dict d;  // the names and values of `abf catalog stats --json`
            d["db"] = c.path.string();
            d["schema_version"] = stats.schema_version;
            d["catalog_id"] = stats.catalog_id ? py::object(py::str(stats.catalog_id->hex()))
                                               : py::object(py::none());
            d["latest_version"] = stats.latest_version;
            d["version_count"] = stats.version_count;
            d["live_artifacts"] = stats.live_artifacts;
            d["fingerprint"] = stats.latest_fingerprint.hex();
            d["artifact_rows"] = stats.artifact_rows;
            d["removed_rows"] = stats.removed_rows;
            d["file_bytes"] = stats.file_bytes;
            return d;
          },
          "Catalog-wide counts, as `abf catalog stats --json`.")
      .def(
          "close", [](PyCatalog& c) { c.catalog.reset(); }, "Closes the connection.")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__", [](PyCatalog& c, py::args) { c.catalog.reset(); })
      .def("__repr__", [](const PyCatalog& c) {
        return "<abf.Catalog " + c.path.string() + (c.catalog ? "" : " (closed)") + ">";
      });

  m.def("dedup", &dedup, py::arg("digests"), py::arg("filter"), py::arg("catalog"),
        py::arg("key") = py::none(), py::arg("use_filter") = true, py::arg("return_counts") = false,
        py::arg("backend") = "auto", py::arg("batch_size") = 1 << 20, py::arg("index") = py::none(),
        R"doc(
Bulk dedup: the digests not in the catalog at its newest version (read once
per call; counts' catalog_version), in input order, each once, as a uint8
array (M, 32). The filter proves most of them absent; only its maybes, and
its absents for digests the catalog added after the filter's version, are
looked up in the catalog, so the answer always equals the catalog's.

filter: a Filter, a FilterSet or a path (loaded with key). catalog: an
abf.Catalog or a path (opened read-only). The filter must be of this
catalog (its catalog_id), else abf.CatalogMismatchError. use_filter=False
looks every digest up (the baseline). return_counts=True returns (missing,
counts), counts as `abf dedup --json`: total = new + repeats + present,
negative, maybe, false_positives, exact_lookups, ... The GIL is released.

index: an abf.Index or the path of one (mapped) of this catalog, at any
version it holds: the exact lookups are answered from it in memory instead
of SQLite (digests changed after its version are still asked of the
catalog), with the same answers. It is checked against the catalog first, as
the filter is (abf.CatalogMismatchError); the sum over its digests only the
first time a loaded Index is used. The counts then add index_version,
index_lookups (answered in memory) and store_lookups (passed on to the
catalog): exact_lookups = index_lookups + store_lookups.
)doc");
}

}  // namespace abf::python
