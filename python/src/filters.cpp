// abf.Filter, abf.FilterSet, abf.Key and the module functions that make,
// load and combine them. Every call that touches many digests or bits runs
// with the GIL released.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "abf/service/report_fields.hpp"
#include "common.hpp"

namespace abf::python {

namespace {

constexpr const char* kNoConstructor = "use abf.build, abf.load or abf.merge";

// A read-only NumPy view of a filter's payload; the view keeps the bits
// alive (it holds a copy of the Filter, which shares them).
py::array_t<std::uint8_t> payload_view(const Filter& filter) {
  auto* held = new Filter(filter);
  py::capsule owner(held, [](void* p) { delete static_cast<Filter*>(p); });
  const auto payload = held->payload();
  py::array_t<std::uint8_t> array({static_cast<py::ssize_t>(payload.size())}, {1}, payload.data(),
                                  owner);
  array.attr("setflags")(py::arg("write") = false);
  return array;
}

py::object key_bytes(const std::optional<Key>& key) {
  if (!key) return py::none();
  return py::bytes(reinterpret_cast<const char*>(key->bytes().data()), Key::kSize);
}

// 16 hex digits naming the key of a keyed filter, or None when unkeyed.
py::object key_fingerprint_object(bool keyed, const KeyFingerprint& fingerprint) {
  if (!keyed) return py::none();
  return py::str(fingerprint.hex());
}

// The answers array: a new one, or `out` when it is a writable, contiguous
// bool array of exactly n elements.
py::array_t<bool> answers_for(py::handle out, std::size_t n) {
  if (out.is_none()) return py::array_t<bool>(static_cast<py::ssize_t>(n));
  if (!py::isinstance<py::array>(out) ||
      py::reinterpret_borrow<py::array>(out).dtype().kind() != 'b') {
    throw py::type_error("out must be a NumPy bool array, not " + describe(out));
  }
  auto array = py::reinterpret_borrow<py::array_t<bool>>(out);
  if (array.ndim() != 1 || static_cast<std::size_t>(array.shape(0)) != n ||
      !(array.flags() & py::array::c_style) || !array.writeable()) {
    raise(ErrorCode::kInvalidArgument,
          "out must be a writable, contiguous bool array of shape (" + std::to_string(n) + ",)");
  }
  return array;
}

template <class F>
py::array_t<bool> query(const F& filter, py::handle digests, py::handle out, py::handle backend,
                        const std::shared_ptr<MapGuard>& guard) {
  check_mapping(guard);
  const Backend engine = backend_from(backend);
  DigestInput input = digests_from(digests);
  py::array_t<bool> answers = answers_for(out, input.size());
  std::span<Answer> span(reinterpret_cast<Answer*>(answers.mutable_data()), input.size());
  Result<void> done;
  {
    py::gil_scoped_release release;
    done = filter.query(input.span(), span, engine);
  }
  check_mapping(guard);
  unwrap(std::move(done));
  return answers;
}

template <class F>
bool might_contain(const F& filter, py::handle digest, const std::shared_ptr<MapGuard>& guard) {
  check_mapping(guard);
  // One digest: 32 bytes, or a hex str (with or without "sha256:", any case).
  DigestInput input = PyUnicode_Check(digest.ptr()) ? digests_from(py::make_tuple(digest), "digest")
                                                    : digests_from(digest, "digest");
  if (input.size() != 1) {
    raise(ErrorCode::kInvalidDigest, "digest: " + std::to_string(input.size()) +
                                         " digests given; might_contain takes one (use query)");
  }
  const bool answer = filter.might_contain(input.span()[0]);
  check_mapping(guard);
  return answer;
}

// 32 hex digits (ContentFingerprint::hex), or None when unknown.
py::object content_fingerprint_object(const std::optional<ContentFingerprint>& fingerprint) {
  if (!fingerprint) return py::none();
  return py::str(fingerprint->hex());
}

py::dict filter_info(const Filter& filter) {
  SnapshotHeader h;
  {
    py::gil_scoped_release release;  // the payload checksum reads every bit
    h = snapshot_header(filter);
  }
  // The snapshot's own fields (version, length, checksums) from its header;
  // the filter's from its summary.
  const FilterSummary s = summarize(filter, SummaryBits::kSkip);
  py::dict info;
  info["format_version"] = h.format_version;
  info["hash_protocol_version"] = s.hash_protocol_version;
  info["layout"] = layout_name(s.hash_protocol_version);
  info["hash_count"] = s.hash_count;
  info["catalog_version"] = s.catalog_version;
  info["bit_count"] = s.bit_count;
  info["expected_item_count"] = s.expected_item_count;
  info["inserted_item_count"] = s.inserted_item_count;
  info["target_fpp"] = s.target_fpp;
  info["payload_length"] = h.payload_length;
  // "0x" and 16 hex digits, as `abf inspect --json` (report_fields.hpp).
  info["payload_checksum"] = service::fields::checksum_hex(h.payload_checksum);
  info["header_checksum"] = service::fields::checksum_hex(h.header_checksum);
  info["catalog_id"] = catalog_id_object(s.catalog_id);
  info["key_fingerprint"] = key_fingerprint_object(s.keyed, s.key_fingerprint);
  info["content_fingerprint"] = content_fingerprint_object(s.content_fingerprint);
  return info;
}

py::dict set_info(const FilterSet& set) {
  const FilterSummary s = summarize(set, SummaryBits::kSkip);
  py::dict info;
  info["format_version"] = kSetManifestFormatVersion;
  info["hash_protocol_version"] = s.hash_protocol_version;
  info["layout"] = layout_name(s.hash_protocol_version);
  info["catalog_version"] = s.catalog_version;
  info["expected_item_count"] = s.expected_item_count;
  info["inserted_item_count"] = s.inserted_item_count;
  info["target_fpp"] = s.target_fpp;
  info["shard_count"] = s.shard_count;
  info["shard_expected_item_count"] = s.shard_expected_item_count;
  info["shard_bit_count"] = s.shard_bit_count;
  // As `abf inspect --json` names them: k of every shard, m of them all.
  info["hash_count"] = s.hash_count;
  info["bit_count"] = s.bit_count;
  info["catalog_id"] = catalog_id_object(s.catalog_id);
  info["key_fingerprint"] = key_fingerprint_object(s.keyed, s.key_fingerprint);
  info["content_fingerprint"] = content_fingerprint_object(s.content_fingerprint);
  return info;
}

std::string describe_target_fpp(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", p);
  return text;
}

// "<abf.Filter m=... k=... n=... p=... inserted=... catalog_version=...>",
// then catalog_id= and key= when there are; `head` is "<abf.Filter" or
// "<abf.FilterSet shards=S".
std::string summary_repr(std::string head, const FilterSummary& s) {
  std::string text = std::move(head) + " m=" + std::to_string(s.bit_count) +
                     " k=" + std::to_string(s.hash_count) +
                     " n=" + std::to_string(s.expected_item_count) +
                     " p=" + describe_target_fpp(s.target_fpp) +
                     " inserted=" + std::to_string(s.inserted_item_count) +
                     " catalog_version=" + std::to_string(s.catalog_version);
  if (!s.catalog_id.is_zero()) text += " catalog_id=" + s.catalog_id.hex();
  if (s.keyed) text += " key=" + s.key_fingerprint.hex();
  return text + ">";
}

std::string filter_repr(const Filter& f) {
  return summary_repr("<abf.Filter", summarize(f, SummaryBits::kSkip));
}

std::string set_repr(const FilterSet& s) {
  return summary_repr("<abf.FilterSet shards=" + std::to_string(s.shard_count()),
                      summarize(s, SummaryBits::kSkip));
}

bool same_filter(const Filter& a, const Filter& b) {
  if (a.scheme() != b.scheme() || a.catalog_id() != b.catalog_id() ||
      a.catalog_version() != b.catalog_version() ||
      a.expected_item_count() != b.expected_item_count() ||
      a.inserted_item_count() != b.inserted_item_count() ||
      a.content_fingerprint() != b.content_fingerprint() ||
      std::memcmp(&a.info().spec.target_fpp, &b.info().spec.target_fpp, sizeof(double)) != 0) {
    return false;
  }
  const auto x = a.words();
  const auto y = b.words();
  return x.size() == y.size() && std::equal(x.begin(), x.end(), y.begin());
}

// The pickled form of one filter: its snapshot bytes, as a PickleBuffer
// (protocol 5: Dask sends it as a frame of its own, without a copy) or bytes.
py::object snapshot_buffer(const Filter& filter, int protocol) {
  // In memory from allocate_words (huge pages advised, zeroed on every core):
  // a plain vector of 114 MiB took 130 ms to pickle here, most of it page
  // faults; this, 40 (docs/python.md).
  const std::size_t size = kSnapshotHeaderSize + filter.payload().size();
  auto words = std::make_unique<std::shared_ptr<std::uint64_t>>();
  {
    py::gil_scoped_release release;
    *words = allocate_words(size / sizeof(std::uint64_t));
    auto* out = reinterpret_cast<std::uint8_t*>(words->get());
    const std::vector<std::uint8_t> header = encode_snapshot_header(filter);
    std::memcpy(out, header.data(), header.size());
    std::memcpy(out + kSnapshotHeaderSize, filter.payload().data(), filter.payload().size());
  }
  auto* data = reinterpret_cast<std::uint8_t*>(words->get());
  py::capsule owner(words.release(),
                    [](void* p) { delete static_cast<std::shared_ptr<std::uint64_t>*>(p); });
  py::array_t<std::uint8_t> array({static_cast<py::ssize_t>(size)}, {1}, data, owner);
  if (protocol >= 5) return py::module_::import("pickle").attr("PickleBuffer")(array);
  return py::bytes(reinterpret_cast<const char*>(array.data()), array.size());
}

PyFilter filter_from_snapshot(py::handle data, py::handle key) {
  if (!PyObject_CheckBuffer(data.ptr())) {
    throw py::type_error("data must be bytes-like (the snapshot's bytes), not " + describe(data));
  }
  std::optional<Key> k = key_from(key);
  py::buffer_info info = py::reinterpret_borrow<py::buffer>(data).request();
  std::span<const std::uint8_t> bytes(static_cast<const std::uint8_t*>(info.ptr),
                                      static_cast<std::size_t>(info.size * info.itemsize));
  Result<Filter> filter = [&] {
    py::gil_scoped_release release;
    return parse_snapshot(bytes, k);
  }();
  return PyFilter{unwrap(std::move(filter)), std::move(k)};
}

PyFilterSet set_from_shards(py::handle shards, py::handle expected_items) {
  const std::uint64_t n =
      count_from(expected_items, ErrorCode::kInvalidExpectedItemCount, "expected_items");
  std::vector<Filter> filters;
  std::optional<Key> key;
  std::shared_ptr<MapGuard> guard;
  for (py::handle shard : shards) {
    const auto& f = shard.cast<const PyFilter&>();
    filters.push_back(f.filter);
    if (!key) key = f.key;
    join_guards(guard, f.guard);
  }
  return PyFilterSet{unwrap(FilterSet::from_shards(std::move(filters), n)), std::move(key),
                     std::move(guard)};
}

BuildOptions build_options(std::uint64_t catalog_version, py::handle catalog_id, py::handle key,
                           py::handle layout) {
  BuildOptions options;
  options.catalog_version = catalog_version;
  options.catalog_id = catalog_id_from(catalog_id);
  options.key = key_from(key);
  options.protocol = protocol_from_layout(layout, options.key.has_value());
  return options;
}

// shards: an int, or "auto" (the fewest shards of `protocol` that fit).
std::optional<std::uint32_t> shard_count_from(py::handle shards, const BloomSpec& spec,
                                              std::uint32_t protocol) {
  if (PyUnicode_Check(shards.ptr())) {
    if (shards.cast<std::string>() != "auto") {
      throw py::value_error("shards must be an int in 1..65536 or \"auto\"");
    }
    return unwrap(choose_shard_count(spec, protocol));
  }
  const std::uint64_t count = count_from(shards, ErrorCode::kInvalidArgument, "shards");
  if (count == 1) return std::nullopt;  // a plain Filter
  if (count > kMaxShardCount) {
    raise(ErrorCode::kInvalidArgument,
          "shards " + std::to_string(count) + " is outside 1.." + std::to_string(kMaxShardCount));
  }
  return static_cast<std::uint32_t>(count);
}

py::object build(py::handle digests, py::handle expected_items, py::handle fpp,
                 py::handle catalog_version, py::handle catalog_id, py::handle key,
                 py::handle shards, py::handle backend, py::handle layout) {
  const Backend engine = backend_from(backend);
  const BloomSpec spec{
      count_from(expected_items, ErrorCode::kInvalidExpectedItemCount, "expected_items"),
      real_from(fpp, "fpp")};
  BuildOptions options = build_options(
      count_from(catalog_version, ErrorCode::kInvalidArgument, "catalog_version"), catalog_id, key,
      layout);
  const std::optional<std::uint32_t> shard_count =
      shard_count_from(shards, spec, options.protocol);
  // The spec's errors first, then the digests', then capacity (section 6).
  if (!shard_count) {
    auto builder = unwrap(FilterBuilder::create(spec, options));
    DigestInput input = digests_from(digests);
    Result<Filter> filter = [&]() -> Result<Filter> {
      py::gil_scoped_release release;
      if (auto added = builder.add(input.span(), engine); !added) {
        return std::unexpected(added.error());
      }
      return std::move(builder).finish();
    }();
    return py::cast(PyFilter{unwrap(std::move(filter)), std::move(options.key)});
  }
  auto builder = unwrap(FilterSetBuilder::create(spec, *shard_count, options));
  DigestInput input = digests_from(digests);
  Result<FilterSet> set = [&]() -> Result<FilterSet> {
    py::gil_scoped_release release;
    if (auto added = builder.add(input.span(), engine); !added) {
      return std::unexpected(added.error());
    }
    return std::move(builder).finish();
  }();
  return py::cast(PyFilterSet{unwrap(std::move(set)), std::move(options.key)});
}

py::object load(py::handle path_object, py::handle key, py::handle mode) {
  const std::filesystem::path path = path_from(path_object);
  LoadOptions options;
  options.mode = load_mode_from(mode);
  options.key = key_from(key);
  std::optional<Key> held = options.key;
  Result<FilterFileKind> kind = [&] {
    py::gil_scoped_release release;
    return filter_file_kind(path);
  }();
  std::shared_ptr<MapGuard> guard;
  if (unwrap(std::move(kind)) == FilterFileKind::kManifest) {
    Result<FilterSet> set = [&] {
      py::gil_scoped_release release;
      return load_filter_set(path, options);
    }();
    PyFilterSet loaded{unwrap(std::move(set)), std::move(held)};
    if (options.mode == LoadMode::kMap) {
      std::vector<const void*> payloads;
      for (const Filter& shard : loaded.set.shards()) payloads.push_back(shard.payload().data());
      guard_mappings(loaded.guard, payloads, path.string());
    }
    return py::cast(std::move(loaded));
  }
  Result<Filter> filter = [&] {
    py::gil_scoped_release release;
    return load_snapshot(path, options);
  }();
  PyFilter loaded{unwrap(std::move(filter)), std::move(held)};
  if (options.mode == LoadMode::kMap) {
    guard_mapping(loaded.guard, loaded.filter.payload().data(), path.string());
  }
  return py::cast(std::move(loaded));
}

py::object merge(py::handle parts, py::handle catalog_version, py::handle key, py::handle mode) {
  MergeOptions options;
  if (!catalog_version.is_none()) {
    options.catalog_version =
        count_from(catalog_version, ErrorCode::kInvalidArgument, "catalog_version");
  }
  std::vector<py::object> objects;
  std::shared_ptr<MapGuard> guard;  // of the parts, checked once they are read
  bool any_set = false;
  std::size_t index = 0;
  for (py::handle part : parts) {
    ++index;
    py::object object = py::reinterpret_borrow<py::object>(part);
    if (!py::isinstance<PyFilter>(part) && !py::isinstance<PyFilterSet>(part)) {
      options.labels.push_back("parts[" + std::to_string(index - 1) + "] (" +
                               path_from(part, "parts item").string() + ")");
      object = load(part, key, mode);
    } else {
      options.labels.push_back("parts[" + std::to_string(index - 1) + "]");
    }
    any_set = any_set || py::isinstance<PyFilterSet>(object);
    join_guards(guard, py::isinstance<PyFilterSet>(object) ? object.cast<const PyFilterSet&>().guard
                                                           : object.cast<const PyFilter&>().guard);
    objects.push_back(std::move(object));
  }
  if (objects.empty()) raise(ErrorCode::kInvalidArgument, "merge: no parts given");
  std::optional<Key> held;
  if (!any_set) {
    std::vector<Filter> filters;
    for (const auto& object : objects) {
      const auto& f = object.cast<const PyFilter&>();
      filters.push_back(f.filter);
      if (!held) held = f.key;
    }
    Result<Filter> merged = [&] {
      py::gil_scoped_release release;
      return merge_filters(filters, options);
    }();
    check_mapping(guard);
    return py::cast(PyFilter{unwrap(std::move(merged)), std::move(held)});
  }
  std::vector<FilterSet> sets;
  for (const auto& object : objects) {
    if (py::isinstance<PyFilter>(object)) {
      const auto& f = object.cast<const PyFilter&>();
      sets.emplace_back(f.filter);
      if (!held) held = f.key;
    } else {
      const auto& s = object.cast<const PyFilterSet&>();
      sets.push_back(s.set);
      if (!held) held = s.key;
    }
  }
  Result<FilterSet> merged = [&] {
    py::gil_scoped_release release;
    return merge_filter_sets(sets, options);
  }();
  check_mapping(guard);
  return py::cast(PyFilterSet{unwrap(std::move(merged)), std::move(held)});
}

// Counting sort of digests by shard: S arrays of shape (n_s, 32), each in
// input order. For the Dask build, whose per-shard partials each see only
// their shard's digests.
py::list split_by_shard(py::handle digests, py::handle shard_count_arg) {
  const auto shard_count = static_cast<std::uint32_t>(
      count_from(shard_count_arg, ErrorCode::kInvalidArgument, "shard_count", kMaxShardCount));
  if (shard_count < 1) {
    raise(ErrorCode::kInvalidArgument, "shard_count " + std::to_string(shard_count) +
                                           " is outside 1.." + std::to_string(kMaxShardCount));
  }
  DigestInput input = digests_from(digests);
  const auto span = input.span();
  std::vector<std::uint32_t> shard(span.size());
  std::vector<std::size_t> counts(shard_count, 0);
  {
    py::gil_scoped_release release;
    for (std::size_t i = 0; i < span.size(); ++i) {
      shard[i] = shard_of(span[i], shard_count);
      ++counts[shard[i]];
    }
  }
  py::list out;
  std::vector<Digest*> cursor(shard_count);
  for (std::uint32_t s = 0; s < shard_count; ++s) {
    py::array_t<std::uint8_t> array(
        {static_cast<py::ssize_t>(counts[s]), static_cast<py::ssize_t>(Digest::kSize)});
    cursor[s] = reinterpret_cast<Digest*>(array.mutable_data());
    out.append(std::move(array));
  }
  {
    py::gil_scoped_release release;
    for (std::size_t i = 0; i < span.size(); ++i) *cursor[shard[i]]++ = span[i];
  }
  return out;
}

py::array_t<std::uint32_t> shard_index(const FilterSet& set, py::handle digests) {
  DigestInput input = digests_from(digests);
  py::array_t<std::uint32_t> out(static_cast<py::ssize_t>(input.size()));
  std::uint32_t* data = out.mutable_data();
  {
    py::gil_scoped_release release;
    const auto span = input.span();
    for (std::size_t i = 0; i < span.size(); ++i) data[i] = set.shard_index(span[i]);
  }
  return out;
}

// Seconds per call of the library's own batch query (answers allocated
// once, outside the timing), for python/bench/query_ratio.py: the C++ side
// of the Python-to-C++ ratio, in the same process on the same digests.
template <class F>
std::vector<double> bench_query(const F& filter, py::handle digests, int repeats,
                                py::handle backend) {
  const Backend engine = backend_from(backend);
  DigestInput input = digests_from(digests);
  std::vector<Answer> answers(input.size());
  std::vector<double> seconds;
  py::gil_scoped_release release;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (auto done = filter.query(input.span(), answers, engine); !done) {
      py::gil_scoped_acquire acquire;
      unwrap(std::move(done));
    }
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return seconds;
}

template <class Class, class Get>
void common_properties(Class& c, Get get) {
  c.def_property_readonly(
       "bit_count", [get](const typename Class::type& o) { return get(o).bit_count(); },
       "m: bits of the filter (of all shards, for a set).")
      .def_property_readonly(
          "hash_count", [get](const typename Class::type& o) { return get(o).hash_count(); },
          "k: probes per digest.")
      .def_property_readonly(
          "hash_protocol_version",
          [get](const typename Class::type& o) { return get(o).hash_protocol_version(); },
          "1 (classic), 2 (classic keyed, SipHash-2-4), 3 (blocked) or 4 (blocked keyed).")
      .def_property_readonly(
          "layout",
          [get](const typename Class::type& o) { return layout_name(get(o).hash_protocol_version()); },
          "\"classic\" (protocols 1 and 2) or \"blocked\" (3 and 4: one 64-byte line a digest).")
      .def_property_readonly(
          "expected_item_count",
          [get](const typename Class::type& o) { return get(o).expected_item_count(); },
          "n: the design capacity.")
      .def_property_readonly(
          "target_fpp", [get](const typename Class::type& o) { return get(o).target_fpp(); },
          "p: the target false-positive rate.")
      .def_property_readonly(
          "inserted_item_count",
          [get](const typename Class::type& o) { return get(o).inserted_item_count(); },
          "Digests inserted, duplicates included.")
      .def_property_readonly(
          "catalog_version",
          [get](const typename Class::type& o) { return get(o).catalog_version(); },
          "The catalog version the digests are of.")
      .def_property_readonly(
          "catalog_id",
          [get](const typename Class::type& o) { return catalog_id_object(get(o).catalog_id()); },
          "32 hex digits, or None when tied to no catalog.")
      .def_property_readonly(
          "key_fingerprint",
          [get](const typename Class::type& o) {
            const Scheme& scheme = get(o).scheme();
            return key_fingerprint_object(scheme.keyed(), scheme.key_fingerprint());
          },
          "16 hex digits naming the key of a keyed filter (never the key); None if unkeyed.")
      .def_property_readonly(
          "content_fingerprint",
          [get](const typename Class::type& o) {
            return content_fingerprint_object(get(o).content_fingerprint());
          },
          "32 hex digits: the content fingerprint of the digests inserted (the sum mod 2^128 of "
          "XXH3-128 over them; a set's is its shards' sum), or None when the filter does not "
          "know it (a file written before fingerprints, a merge with such a part).")
      .def_property_readonly(
          "keyed", [get](const typename Class::type& o) { return get(o).scheme().keyed(); },
          "Whether probes are keyed (protocol 2 or 4).")
      .def_property_readonly(
          "popcount", [get](const typename Class::type& o) { return get(o).popcount(); },
          "Set bits.")
      .def_property_readonly(
          "fill_ratio", [get](const typename Class::type& o) { return get(o).fill_ratio(); },
          "Set bits / m; near 0.5 at design capacity.")
      .def_property_readonly(
          "estimated_false_positive_rate",
          [get](const typename Class::type& o) { return get(o).estimate_false_positive_rate(); },
          "The modeled rate (-expm1(-k inserted / m))^k (a set: the mean over its shards).");
}

}  // namespace

LoadMode load_mode_from(py::handle object) {
  const std::string mode = string_from(object, "mode");
  if (mode == "auto") return LoadMode::kAuto;
  if (mode == "copy") return LoadMode::kCopy;
  if (mode == "map") return LoadMode::kMap;
  throw py::value_error("mode must be \"auto\", \"copy\" or \"map\"");
}

void init_filters(py::module_& m) {
  py::class_<Key>(m, "Key", R"doc(
A 16-byte secret key for keyed probes (hashProtocolVersion 2).

Never printed: repr and str show only its fingerprint. Make one with
abf.Key(bytes16), abf.Key.from_hex(text), abf.Key.generate() or
abf.read_key_file(path). A pickled Key (and a pickled keyed filter) carries
the key bytes: send pickles only where the key may go.
)doc")
      .def(py::init([](py::handle bytes) {
             auto key = key_from(bytes);
             if (!key) throw py::type_error("abf.Key needs 16 bytes");
             return *key;
           }),
           py::arg("key_bytes"), "A key from its 16 bytes.")
      .def_static(
          "from_hex",
          [](py::handle hex) { return unwrap(Key::parse_hex(string_from(hex, "hex"))); },
          py::arg("hex"), "A key from 32 hex digits (abf.FilterKeyError otherwise).")
      .def_static(
          "generate", [] { return unwrap(Key::generate()); },
          "A new random key from the operating system's CSPRNG.")
      .def_property_readonly(
          "fingerprint", [](const Key& k) { return key_fingerprint(k).hex(); },
          "keyFingerprint: 16 hex digits that name the key without revealing it.")
      .def("__repr__",
           [](const Key& k) { return "abf.Key(fingerprint=" + key_fingerprint(k).hex() + ")"; })
      .def("__eq__",
           [](const Key& a, py::handle b) {
             return py::isinstance<Key>(b) && a == b.cast<const Key&>();
           })
      .def("__hash__",
           [](const Key& k) {
             const auto f = key_fingerprint(k);
             std::uint64_t h = 0;
             std::memcpy(&h, f.bytes.data(), sizeof h);
             return static_cast<py::ssize_t>(h >> 1);
           })
      .def("__reduce__", [](const Key& k) {
        return py::make_tuple(py::type::of<Key>(), py::make_tuple(key_bytes(k)));
      });

  m.def(
      "read_key_file",
      [](py::handle path) {
        const auto p = path_from(path);
        py::gil_scoped_release release;
        return unwrap(read_key_file(p));
      },
      py::arg("path"), R"doc(
Reads a key file: 32 hex digits and an optional newline, or 16 raw bytes.
abf.FilterKeyError (invalid_key) for anything else, or when group or
others may read it (chmod 600); abf.IoError if it cannot be read.
)doc");
  m.def(
      "write_key_file",
      [](py::handle key_arg, py::handle path) {
        if (!py::isinstance<Key>(key_arg)) {
          throw py::type_error("key must be an abf.Key, not " + describe(key_arg));
        }
        const Key key = key_arg.cast<const Key&>();
        const auto p = path_from(path);
        py::gil_scoped_release release;
        unwrap(write_key_file(key, p));
      },
      py::arg("key"), py::arg("path"),
      "Writes a key file (32 hex digits, mode 0600, atomically); never replaces an existing file.");

  py::class_<PyFilter> filter(m, "Filter", R"doc(
An immutable Bloom filter over SHA-256 digests (one ABF1 snapshot).

query() answers True for "maybe" (ask the exact store) and False for
"definitely not"; True is never "exists". Copies share the bits; any number
of threads may query one filter at once. Make one with abf.build, abf.load,
abf.from_bytes or abf.merge. Pickles as its snapshot bytes (a keyed filter
with its key).
)doc");
  filter
      .def(py::init([](py::args, py::kwargs) -> PyFilter { throw py::type_error(kNoConstructor); }))
      .def(
          "query",
          [](const PyFilter& f, py::handle digests, py::handle out, py::handle backend) {
            return query(f.filter, digests, out, backend, f.guard);
          },
          py::arg("digests"), py::arg("out") = py::none(), py::arg("backend") = "auto", R"doc(
One answer per digest, in order: a NumPy bool array, True = maybe, False =
definitely not. digests: a uint8 array of shape (N, 32) or N * 32 bytes
(used in place), or an iterable of 32-byte bytes. out: an optional bool
array of shape (N,) to write into (returned). The GIL is released while the
batch engine runs on every core; the digests must not change meanwhile.
)doc")
      .def(
          "might_contain",
          [](const PyFilter& f, py::handle digest) {
            return might_contain(f.filter, digest, f.guard);
          },
          py::arg("digest"), "The answer for one 32-byte digest (the scalar reference).")
      .def(
          "save",
          [](const PyFilter& f, py::handle path) {
            const auto p = path_from(path);
            py::gil_scoped_release release;
            unwrap(save_snapshot(f.filter, p));
          },
          py::arg("path"), "Writes the ABF1 snapshot atomically (temporary file, fsync, rename).")
      .def(
          "to_bytes",
          [](const PyFilter& f) {
            check_mapping(f.guard);
            std::vector<std::uint8_t> bytes;
            {
              py::gil_scoped_release release;
              bytes = serialize_snapshot(f.filter);
            }
            check_mapping(f.guard);
            return py::bytes(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          },
          "The snapshot as bytes (header and payload); abf.from_bytes reads it back.")
      .def_property_readonly(
          "info",
          [](const PyFilter& f) {
            check_mapping(f.guard);
            py::dict info = filter_info(f.filter);
            check_mapping(f.guard);
            return info;
          },
          R"doc(
The header fields of this filter's snapshot, as a dict with snake_case keys:
format_version, hash_protocol_version, hash_count, catalog_version,
bit_count, expected_item_count, inserted_item_count, target_fpp,
payload_length, payload_checksum and header_checksum ("0x" and 16 hex
digits), catalog_id (hex or None), key_fingerprint (hex or None): the names
and forms of `abf inspect --json`, which writes all-zero hex where this has
None. Computing it reads the payload once.
)doc")
      .def_property_readonly(
          "payload", [](const PyFilter& f) { return payload_view(f.filter); },
          "The bitset: a read-only uint8 array of m / 8 bytes (no copy), bit i in byte i / 8 at "
          "bit i % 8.")
      .def_property_readonly(
          "shard_count", [](const PyFilter&) { return 1; }, "1: a filter is one shard.")
      .def("__repr__", [](const PyFilter& f) { return filter_repr(f.filter); })
      .def("__eq__",
           [](const PyFilter& a, py::handle b) {
             return py::isinstance<PyFilter>(b) &&
                    same_filter(a.filter, b.cast<const PyFilter&>().filter);
           })
      .def("__copy__", [](const PyFilter& f) { return f; })
      .def("__deepcopy__", [](const PyFilter& f, py::handle) { return f; })
      .def(
          "__reduce_ex__",
          [](const PyFilter& f, int protocol) {
            py::object restore = py::module_::import("abf._pickle").attr("filter_from_snapshot");
            return py::make_tuple(
                restore, py::make_tuple(snapshot_buffer(f.filter, protocol), key_bytes(f.key)));
          },
          py::arg("protocol"));
  filter.attr("__hash__") = py::none();
  common_properties(filter, [](const PyFilter& f) -> const Filter& { return f.filter; });

  py::class_<PyFilterSet> set(m, "FilterSet", R"doc(
A filter set (docs/protocol.md section 13): S shards, digest d in shard
(big-endian u64 of d[24:32]) mod S, each an ordinary filter of one layout.

Answers exactly as asking each digest's shard alone; query() partitions the
batch by shard inside the library. Saved as a manifest (".abfs") and one
ABF1 file per shard; abf.load reads either form. Pickles as its shards'
snapshot bytes.
)doc");
  set.def(py::init(
              [](py::args, py::kwargs) -> PyFilterSet { throw py::type_error(kNoConstructor); }))
      .def(
          "query",
          [](const PyFilterSet& s, py::handle digests, py::handle out, py::handle backend) {
            return query(s.set, digests, out, backend, s.guard);
          },
          py::arg("digests"), py::arg("out") = py::none(), py::arg("backend") = "auto",
          "As Filter.query: True = maybe, in input order; the GIL is released.")
      .def(
          "might_contain",
          [](const PyFilterSet& s, py::handle digest) {
            return might_contain(s.set, digest, s.guard);
          },
          py::arg("digest"), "The answer for one 32-byte digest (its shard's reference answer).")
      .def(
          "save",
          [](const PyFilterSet& s, py::handle path) {
            const auto p = path_from(path);
            py::gil_scoped_release release;
            unwrap(save_filter_set(s.set, p));
          },
          py::arg("path"), R"doc(
Writes the set: every shard as "<name>.<build id>.<i>.abf" beside the
manifest, then the manifest atomically at path, so a reader sees the old set
or the new one; then removes the shards of the set it replaced.
)doc")
      .def_property_readonly(
          "info", [](const PyFilterSet& s) { return set_info(s.set); }, R"doc(
The manifest's fields as a dict: format_version, hash_protocol_version,
catalog_version, expected_item_count, inserted_item_count, target_fpp,
shard_count, shard_expected_item_count, shard_bit_count, hash_count (k of
every shard), bit_count (m of all shards), catalog_id (hex or None),
key_fingerprint (hex or None), content_fingerprint: the names and forms of
`abf inspect --json` for a manifest.
)doc")
      .def_property_readonly(
          "shard_count", [](const PyFilterSet& s) { return s.set.shard_count(); }, "S.")
      .def_property_readonly(
          "shard_expected_item_count",
          [](const PyFilterSet& s) { return s.set.shard_expected_item_count(); },
          "n_i: the design capacity of every shard.")
      .def_property_readonly(
          "shard_bit_count", [](const PyFilterSet& s) { return s.set.shard_bit_count(); },
          "m of every shard.")
      .def_property_readonly(
          "shards",
          [](const PyFilterSet& s) {
            py::list shards;
            for (const Filter& f : s.set.shards()) shards.append(PyFilter{f, s.key, s.guard});
            return shards;
          },
          "The shards as Filters (sharing the bits), shard i at index i.")
      .def(
          "shard",
          [](const PyFilterSet& s, py::handle index_arg) {
            if (!PyIndex_Check(index_arg.ptr()) || PyBool_Check(index_arg.ptr()) ||
                py::isinstance<py::array>(index_arg)) {
              throw py::type_error("index must be an int, not " + describe(index_arg));
            }
            const auto index = py::reinterpret_steal<py::object>(PyNumber_Index(index_arg.ptr()));
            if (!index) throw py::error_already_set();
            const long long i = PyLong_AsLongLong(index.ptr());
            if (i == -1 && PyErr_Occurred()) PyErr_Clear();
            if (i < 0 || i >= static_cast<long long>(s.set.shard_count())) {
              throw py::index_error("shard index " + py::str(index).cast<std::string>() +
                                    " is outside 0.." + std::to_string(s.set.shard_count() - 1));
            }
            return PyFilter{s.set.shard(static_cast<std::uint32_t>(i)), s.key, s.guard};
          },
          py::arg("index"), "Shard index as a Filter.")
      .def(
          "shard_index",
          [](const PyFilterSet& s, py::handle digests) { return shard_index(s.set, digests); },
          py::arg("digests"), "The shard of each digest: a uint32 array.")
      .def_static(
          "from_shards",
          [](py::handle shards, py::handle expected_items) {
            return set_from_shards(shards, expected_items);
          },
          py::arg("shards"), py::arg("expected_items"), R"doc(
The set of these shards (shard i holds the digests of shard i), designed for
expected_items digests: every shard's n must be
abf.shard_expected_item_count(expected_items, len(shards)), and all must agree
on p, catalog id and version, layout and key (abf.IncompatibleError).
)doc")
      .def("__repr__", [](const PyFilterSet& s) { return set_repr(s.set); })
      .def("__eq__",
           [](const PyFilterSet& a, py::handle b) {
             if (!py::isinstance<PyFilterSet>(b)) return false;
             const FilterSet& x = a.set;
             const FilterSet& y = b.cast<const PyFilterSet&>().set;
             if (x.shard_count() != y.shard_count() ||
                 x.expected_item_count() != y.expected_item_count()) {
               return false;
             }
             for (std::uint32_t i = 0; i < x.shard_count(); ++i) {
               if (!same_filter(x.shard(i), y.shard(i))) return false;
             }
             return true;
           })
      .def("__copy__", [](const PyFilterSet& s) { return s; })
      .def("__deepcopy__", [](const PyFilterSet& s, py::handle) { return s; })
      .def(
          "__reduce_ex__",
          [](const PyFilterSet& s, int protocol) {
            py::list shards;
            for (const Filter& f : s.set.shards()) shards.append(snapshot_buffer(f, protocol));
            py::object restore = py::module_::import("abf._pickle").attr("set_from_snapshots");
            return py::make_tuple(
                restore, py::make_tuple(shards, s.set.expected_item_count(), key_bytes(s.key)));
          },
          py::arg("protocol"));
  set.attr("__hash__") = py::none();
  common_properties(set, [](const PyFilterSet& s) -> const FilterSet& { return s.set; });

  m.def("build", &build, py::arg("digests"), py::arg("expected_items"), py::arg("fpp"),
        py::arg("catalog_version") = 0, py::arg("catalog_id") = py::none(),
        py::arg("key") = py::none(), py::arg("shards") = 1, py::arg("backend") = "auto",
        py::arg("layout") = "classic", R"doc(
Builds a filter of digests designed for expected_items digests at target
false-positive rate fpp.

layout="classic" (the default: k probes anywhere in the bitset, hash
protocol 1, or 2 with a key) or "blocked" (all 8 probes in one 64-byte
line: one cache miss a query or insert, about 5% more bits at p = 0.01,
hash protocol 3, or 4 with a key; up to 2^36 digests and 2^40 bits in one
filter). Below about p = 1e-4 classic needs fewer bits.

shards=1 (the default) returns a Filter; any other count, or "auto" (the
fewest shards whose filters fit the protocol at fpp, 1 when one filter
does), returns a FilterSet, so the type follows the argument, never the
data. catalog_id: 16 bytes or 32 hex digits (the catalog the digests come
from; None: none). key: an abf.Key or 16 bytes for a keyed filter.
Errors, in order: the spec's (abf.LayoutError), then the digests'
(abf.DigestError), then abf.CapacityError when there are more digests than
expected_items. The GIL is released while it builds.
)doc");
  m.def("load", &load, py::arg("path"), py::arg("key") = py::none(), py::arg("mode") = "auto",
        R"doc(
Loads an ABF1 snapshot (a Filter) or a filter-set manifest (a FilterSet),
checking every rule of the format (abf.SnapshotError names the first that
fails). A keyed filter needs its key (abf.FilterKeyError: key_required,
key_mismatch). mode: "auto" or "copy" (read into memory), or "map" (mmap
the file: it must then never change in place).
)doc");
  m.def(
      "from_bytes", [](py::handle data, py::handle key) { return filter_from_snapshot(data, key); },
      py::arg("data"), py::arg("key") = py::none(),
      "A Filter from snapshot bytes (Filter.to_bytes), every rule checked.");
  m.def("merge", &merge, py::arg("parts"), py::arg("catalog_version") = py::none(),
        py::arg("key") = py::none(), py::arg("mode") = "auto", R"doc(
The OR of filters built from parts of one catalog: the filter of the union
(section 6: exact). parts: Filters, FilterSets (merged shard by shard) or
paths (loaded with key). All must agree on layout, key, catalog id and
version (unless catalog_version is given); abf.IncompatibleError names the
field, abf.CapacityError when the summed counts exceed n.
)doc");

  m.def(
      "choose_layout",
      [](py::handle expected_items, py::handle fpp, py::handle layout_arg) {
        const Layout layout = unwrap(choose_layout(
            {count_from(expected_items, ErrorCode::kInvalidExpectedItemCount, "expected_items"),
             real_from(fpp, "fpp")},
            protocol_from_layout(layout_arg, false)));
        return py::make_tuple(layout.bit_count, layout.hash_count);
      },
      py::arg("expected_items"), py::arg("fpp"), py::arg("layout") = "classic",
      "(bit_count, hash_count): the layout section 3 (layout=\"blocked\": 3c) chooses for n "
      "and p.");
  m.def(
      "choose_shard_count",
      [](py::handle expected_items, py::handle fpp, py::handle layout) {
        return unwrap(choose_shard_count(
            {count_from(expected_items, ErrorCode::kInvalidExpectedItemCount, "expected_items"),
             real_from(fpp, "fpp")},
            protocol_from_layout(layout, false)));
      },
      py::arg("expected_items"), py::arg("fpp"), py::arg("layout") = "classic",
      "shards=\"auto\": the fewest shards whose filters fit the layout's protocol at fpp.");
  m.def(
      "shard_expected_item_count",
      [](py::handle expected_items, py::handle shard_count_arg) {
        const std::uint64_t n =
            count_from(expected_items, ErrorCode::kInvalidExpectedItemCount, "expected_items");
        const std::uint64_t shard_count =
            count_from(shard_count_arg, ErrorCode::kInvalidArgument, "shard_count");
        if (n < 1 || shard_count < 1 || shard_count > kMaxShardCount) {
          raise(ErrorCode::kInvalidArgument, "needs expected_items >= 1 and shards in 1..65536");
        }
        return shard_expected_item_count(n, static_cast<std::uint32_t>(shard_count));
      },
      py::arg("expected_items"), py::arg("shard_count"),
      "n_i: the design capacity of every shard of a set of shard_count shards.");
  m.def(
      "backends",
      [] {
        py::list out;
        for (const BackendInfo& info : list_backends()) {
          py::dict d;
          d["name"] = std::string(info.backend.name());
          d["available"] = info.available;
          d["summary"] = info.summary;
          d["detail"] = info.detail;
          out.append(d);
        }
        return out;
      },
      "The probe engines of this build: name, available, summary, detail.");

  m.def(
      "release_cached_buffers",
      [] {
        py::gil_scoped_release release;
        release_cached_buffers();
      },
      R"doc(
Frees the scratch memory builds and set queries keep for the next call (the
partitioned build's buckets, up to 256 MiB; a GPU's device copies). For a
long-running process (a Dask worker) between jobs; the next build
allocates afresh. The bits are the same either way.
)doc");

  // Private: pickling, the Dask build, tests and the benchmark.
  m.def("_filter_from_snapshot", &filter_from_snapshot, py::arg("data"),
        py::arg("key") = py::none());
  m.def(
      "_set_from_snapshots",
      [](py::handle shards, py::handle expected_items, py::handle key) {
        py::list filters;
        for (py::handle shard : shards) {
          filters.append(filter_from_snapshot(py::reinterpret_borrow<py::buffer>(shard), key));
        }
        return set_from_shards(filters, expected_items);
      },
      py::arg("shards"), py::arg("expected_items"), py::arg("key") = py::none());
  m.def("_split_by_shard", &split_by_shard, py::arg("digests"), py::arg("shard_count"));
  m.def(
      "_digest_address", [](py::handle digests) { return digests_from(digests).address(); },
      py::arg("digests"));
  m.def(
      "_bench_query",
      [](py::handle f, py::handle digests, int repeats, py::handle backend) {
        const std::vector<double> seconds =
            py::isinstance<PyFilterSet>(f)
                ? bench_query(f.cast<const PyFilterSet&>().set, digests, repeats, backend)
                : bench_query(f.cast<const PyFilter&>().filter, digests, repeats, backend);
        py::list out;
        for (const double s : seconds) out.append(s);
        return out;
      },
      py::arg("filter"), py::arg("digests"), py::arg("repeats"), py::arg("backend") = "auto");
}

}  // namespace abf::python
