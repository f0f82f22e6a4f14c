// abf.Index: an exact index of a catalog version (ABFX, abf/index.hpp),
// loaded and verified whole, answering batches of lookups exactly in memory.
#include <memory>
#include <string>

#include "abf/index.hpp"
#include "common.hpp"

namespace abf::python {

namespace {

py::array_t<bool> index_contains(const PyIndex& i, py::handle digests) {
  check_mapping(i.guard);
  DigestInput input = digests_from(digests);
  py::array_t<bool> answers(static_cast<py::ssize_t>(input.size()));
  bool* out = answers.mutable_data();
  Result<void> done;
  {
    py::gil_scoped_release release;
    done = i.index.contains(input.span(), std::span<bool>(out, input.size()));
  }
  check_mapping(i.guard);
  unwrap(std::move(done));
  return answers;
}

bool index_contains_one(const PyIndex& i, py::handle digest) {
  check_mapping(i.guard);
  DigestInput input = digests_from(digest, "digest");
  if (input.size() != 1) {
    raise(ErrorCode::kInvalidDigest, "digest: " + std::to_string(input.size()) +
                                         " digests given; `in` takes one (use contains)");
  }
  const bool answer = i.index.contains(input.span()[0]);
  check_mapping(i.guard);
  return answer;
}

}  // namespace

void init_index(py::module_& m) {
  py::class_<PyIndex>(m, "Index", R"doc(
An exact index (ABFX, written by `abf index` or Catalog.write_index): every
digest a catalog holds at one version, sorted, verified whole when loaded
(abf.SnapshotError subclasses name the rule a damaged file breaks). Where a
filter answers maybe, an index answers exactly, in memory. Pass one as
abf.dedup(..., index=) to answer the filter's maybes from it instead of the
catalog (same answers). Immutable; any number of threads may look up at once.
)doc")
      .def_static(
          "load",
          [](py::handle path, py::handle mode) {
            const auto p = path_from(path);
            const LoadMode load_mode = load_mode_from(mode);
            Result<Index> index = [&] {
              py::gil_scoped_release release;
              return Index::load(p, load_mode);
            }();
            PyIndex loaded{unwrap(std::move(index)), p.string()};
            if (load_mode == LoadMode::kMap && !loaded.index.digests().empty()) {
              guard_mapping(loaded.guard, loaded.index.digests().data(), loaded.source);
            }
            return loaded;
          },
          py::arg("path"), py::arg("mode") = "auto", R"doc(
Loads and verifies an index file: header, block checksums and the strict
order of the digests. mode: "auto" or "copy" (read into memory), or "map"
(mmap; the file must then only ever be replaced by rename).
)doc")
      .def("__len__", [](const PyIndex& i) { return i.index.size(); })
      .def_property_readonly(
          "catalog_id", [](const PyIndex& i) { return catalog_id_object(i.index.catalog_id()); },
          "32 hex digits, or None when tied to no catalog.")
      .def_property_readonly(
          "catalog_version", [](const PyIndex& i) { return i.index.catalog_version(); },
          "The catalog version whose digests the index holds.")
      .def_property_readonly(
          "content_fingerprint",
          [](const PyIndex& i) -> py::object {
            const auto fingerprint = i.index.content_fingerprint();
            if (!fingerprint) return py::none();
            return py::str(fingerprint->hex());
          },
          "32 hex digits: the content fingerprint its header records, or None.")
      .def_property_readonly(
          "path", [](const PyIndex& i) { return i.source; }, "The file it was loaded from.")
      .def("contains", &index_contains, py::arg("digests"), R"doc(
One exact answer per digest, in order: a NumPy bool array, True = held.
digests: as Filter.query takes them (a uint8 array of shape (N, 32) or
N * 32 bytes, used in place, or an iterable of 32-byte bytes or 64-digit
hex strings). The GIL is released while the batch runs.
)doc")
      .def("__contains__", &index_contains_one, py::arg("digest"))
      .def(
          "digests",
          [](const PyIndex& i) {
            check_mapping(i.guard);
            auto digests = digest_array(i.index.digests());
            check_mapping(i.guard);
            return digests;
          },
          "Every digest held, ascending, as a uint8 array (N, 32) (a copy).")
      .def("__repr__", [](const PyIndex& i) {
        return "<abf.Index " + i.source + ": " + std::to_string(i.index.size()) +
               " digests of catalog version " + std::to_string(i.index.catalog_version()) + ">";
      });
}

}  // namespace abf::python
