// abf.Index: an exact index of a catalog version (ABFX, abf/index.hpp, or an
// index set of ABFX shards, abf/index_set.hpp), loaded and verified whole,
// answering batches of lookups exactly in memory.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "abf/index.hpp"
#include "abf/index_set.hpp"
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

// Every digest of every shard, ascending, as a uint8 array (N, 32): the
// shards hold disjoint digests, each sorted, so their concatenation sorted
// is the set's order.
py::array_t<std::uint8_t> index_digests(const PyIndex& i) {
  check_mapping(i.guard);
  const auto shards = i.index.shards();
  if (shards.size() == 1) {
    auto digests = digest_array(shards[0].digests());
    check_mapping(i.guard);
    return digests;
  }
  const auto total = static_cast<py::ssize_t>(i.index.size());
  py::array_t<std::uint8_t> out({total, static_cast<py::ssize_t>(Digest::kSize)});
  auto* at = reinterpret_cast<Digest*>(out.mutable_data());
  {
    py::gil_scoped_release release;
    Digest* end = at;
    for (const Index& shard : shards) {
      const auto digests = shard.digests();
      if (!digests.empty()) std::memcpy(end, digests.data(), digests.size_bytes());
      end += digests.size();
    }
    std::sort(at, end);
  }
  check_mapping(i.guard);
  return out;
}

}  // namespace

PyIndex load_index(const std::filesystem::path& path, LoadMode mode) {
  Result<IndexSet> set = [&] {
    py::gil_scoped_release release;
    return IndexSet::load(path, mode);
  }();
  PyIndex loaded{unwrap(std::move(set)), path.string()};
  if (mode == LoadMode::kMap) {
    std::vector<const void*> mapped;
    for (const Index& shard : loaded.index.shards()) {
      if (!shard.digests().empty()) mapped.push_back(shard.digests().data());
    }
    if (!mapped.empty()) guard_mappings(loaded.guard, mapped, loaded.source);
  }
  return loaded;
}

void init_index(py::module_& m) {
  py::class_<PyIndex>(m, "Index", R"doc(
An exact index (ABFX, written by `abf index` or Catalog.write_index, or an
index set: an ABXS manifest and its ABFX shards, written by
`abf index --shards S`): every digest a catalog holds at one version,
verified whole when loaded (abf.SnapshotError names the rule a damaged file,
manifest or shard breaks). A plain index file is a one-shard set; every
method answers alike for both. Where a
filter answers maybe, an index answers exactly, in memory. Pass one as
abf.dedup(..., index=) to answer the filter's maybes from it instead of the
catalog (same answers). Immutable; any number of threads may look up at once.
)doc")
      .def_static(
          "load",
          [](py::handle path, py::handle mode) {
            return load_index(path_from(path), load_mode_from(mode));
          },
          py::arg("path"), py::arg("mode") = "auto", R"doc(
Loads and verifies an index file (header, block checksums and the strict
order of the digests) or an index set manifest (its checksums, then every
shard as an index file and against the manifest). mode: "auto" or "copy"
(read into memory), or "map" (mmap of every shard; the files must then only
ever be replaced by rename, as `abf index` does).
)doc")
      .def("__len__", [](const PyIndex& i) { return i.index.size(); })
      .def_property_readonly(
          "shard_count", [](const PyIndex& i) { return i.index.shard_count(); },
          "Shards of an index set; 1 for a plain index file.")
      .def_property_readonly(
          "catalog_id", [](const PyIndex& i) { return catalog_id_object(i.index.catalog_id()); },
          "32 hex digits, or None when tied to no catalog.")
      .def_property_readonly(
          "catalog_version", [](const PyIndex& i) { return i.index.catalog_version(); },
          "The catalog version whose digests the index holds.")
      .def_property_readonly(
          "content_fingerprint",
          [](const PyIndex& i) -> py::object {
            const auto& fingerprint = i.index.content_fingerprint();
            if (!fingerprint) return py::none();
            return py::str(fingerprint->hex());
          },
          "32 hex digits: the content fingerprint its header records, or None.")
      .def_property_readonly(
          "path", [](const PyIndex& i) { return i.source; },
          "The file (index or set manifest) it was loaded from.")
      .def("contains", &index_contains, py::arg("digests"), R"doc(
One exact answer per digest, in order: a NumPy bool array, True = held.
digests: as Filter.query takes them (a uint8 array of shape (N, 32) or
N * 32 bytes, used in place, or an iterable of 32-byte bytes or 64-digit
hex strings). The GIL is released while the batch runs.
)doc")
      .def("__contains__", &index_contains_one, py::arg("digest"))
      .def("digests", &index_digests,
           "Every digest held, ascending, as a uint8 array (N, 32) (a copy; of a set,\n"
           "its shards' digests merged in order).")
      .def("__repr__", [](const PyIndex& i) {
        const std::uint32_t shards = i.index.shard_count();
        return "<abf.Index " + i.source + ": " + std::to_string(i.index.size()) + " digests" +
               (shards == 1 ? std::string() : " in " + std::to_string(shards) + " shards") +
               " of catalog version " + std::to_string(i.index.catalog_version()) + ">";
      });
}

}  // namespace abf::python
