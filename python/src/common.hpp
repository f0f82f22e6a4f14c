// What the binding's translation units share: the exception that carries an
// abf::Error into Python, the conversions of digests, keys and paths, and
// the Python-side wrappers of filters and filter sets.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "abf/abf.hpp"
#include "abf/index.hpp"
#include "abf/index_set.hpp"

namespace abf::python {

namespace py = pybind11;

// An abf::Error on its way to Python: the translator (module.cpp) raises it
// as the abf.Error subclass of its code (abf/_errors.py), with .code the
// snake_case code name and .message the library's message.
class LibraryError : public std::exception {
 public:
  explicit LibraryError(Error error) : error_(std::move(error)) {}
  const Error& error() const noexcept { return error_; }
  const char* what() const noexcept override { return error_.message.c_str(); }

 private:
  Error error_;
};

[[noreturn]] inline void raise(ErrorCode code, std::string message) {
  throw LibraryError(Error{code, std::move(message)});
}

template <class T>
T unwrap(Result<T>&& result) {
  if (!result) throw LibraryError(std::move(result).error());
  return std::move(*result);
}
inline void unwrap(Result<void>&& result) {
  if (!result) throw LibraryError(std::move(result).error());
}

// Digests from Python, as one contiguous span: a C-contiguous NumPy array
// (uint8 of shape (N, 32) or (N * 32,), or N items of a 32-byte dtype such
// as "S32" or "V32") and any C-contiguous buffer (bytes, bytearray,
// memoryview, mmap) of N * 32 bytes are used in place, without a copy; a
// non-contiguous array is copied once (numpy.ascontiguousarray); any other
// iterable is read item by item (each a 32-byte bytes-like object, or a str
// of 64 hex digits, optionally "sha256:"-prefixed) into a vector. Holds what
// keeps the memory alive; destroy it with the GIL held.
class DigestInput {
 public:
  DigestInput() = default;
  DigestInput(DigestInput&&) = default;
  DigestInput& operator=(DigestInput&&) = default;
  ~DigestInput();

  std::span<const Digest> span() const noexcept { return span_; }
  std::size_t size() const noexcept { return span_.size(); }
  // The address the library reads (for the zero-copy test).
  std::uintptr_t address() const noexcept { return reinterpret_cast<std::uintptr_t>(span_.data()); }

  friend DigestInput digests_from(py::handle object, const char* what);

 private:
  std::span<const Digest> span_;
  py::object owner_;  // an array kept alive (the caller's, or a contiguous copy)
  std::optional<Py_buffer> view_;
  std::vector<Digest> copy_;
};

// `what` names the argument in messages ("digests"). Errors: TypeError for
// an object that is no digests at all; abf.DigestError (invalid_digest) for
// a wrong length or shape, or a malformed hex item, naming the item.
DigestInput digests_from(py::handle object, const char* what = "digests");

// A NumPy uint8 array of shape (N, 32) holding a copy of `digests`.
py::array_t<std::uint8_t> digest_array(std::span<const Digest> digests);

// A key argument: None, an abf.Key, or 16 bytes (bytes, bytearray,
// memoryview). abf.FilterKeyError (invalid_key) for another length; a str
// is a TypeError that points at abf.read_key_file.
std::optional<Key> key_from(py::handle object);

// A catalog id argument: None (zero), 16 bytes or 32 hex digits.
CatalogId catalog_id_from(py::handle object);
// None for the zero id, else 32 hex digits.
py::object catalog_id_object(const CatalogId& id);

// A backend name ("auto", "scalar", "simd", "cuda"); `what` names the
// argument in the TypeError for a non-str.
Backend backend_from(const std::string& name);
Backend backend_from(py::handle object, const char* what = "backend");

// A layout argument, "classic" or "blocked", as the hashProtocolVersion it
// makes with a key or without: classic 1 or 2, blocked (one line a digest)
// 3 or 4. A TypeError for a non-str, a ValueError for another name.
std::uint32_t protocol_from_layout(py::handle layout, bool keyed);
// "classic" or "blocked": the layout of hashProtocolVersion `protocol`.
const char* layout_name(std::uint32_t protocol);

// What a wrong argument is, for a TypeError: its type, and for an array its
// shape and dtype ("a numpy.ndarray of shape (3, 32) and dtype float64"),
// never its contents (an argument may be gigabytes of digests).
std::string describe(py::handle object);

// A count argument: an int (not a bool), or a float holding a whole number
// (1e6, 2.0). TypeError for another type; `code` with a message naming
// `what` and the value for a negative, fractional, non-finite or too large
// one (above `max`, by default 2^63 - 1).
std::uint64_t count_from(py::handle object, ErrorCode code, const char* what,
                         std::uint64_t max = (std::uint64_t{1} << 63) - 1);

// A real argument (fpp): an int or a float, not a bool; TypeError otherwise.
double real_from(py::handle object, const char* what);
// A str argument; TypeError otherwise.
std::string string_from(py::handle object, const char* what);
// A bool argument (True, False or a NumPy bool); TypeError otherwise.
bool flag_from(py::handle object, const char* what);

// A path argument: str, bytes or os.PathLike (TypeError naming `what`
// otherwise); ValueError naming `what` for an embedded NUL, which would cut
// the path short (os.open refuses it too).
std::filesystem::path path_from(py::handle object, const char* what = "path");

// The mappings of a mode="map" load (mapped.cpp): a SIGBUS from a page
// lost to truncation is absorbed (zeros mapped in) and marks them damaged.
struct MapGuard;
// Registers the file mapping that holds `inside` (no-op for memory that is
// no file mapping) and adds it to `guard`, made when null. `what` names the
// file in the error check_mapping raises.
void guard_mapping(std::shared_ptr<MapGuard>& guard, const void* inside, const std::string& what);
// The same for many (the shards of a set), reading /proc/self/maps once.
void guard_mappings(std::shared_ptr<MapGuard>& guard, const std::vector<const void*>& inside,
                    const std::string& what);
// Adds the ranges of `from` to `into` (a set made of mapped shards).
void join_guards(std::shared_ptr<MapGuard>& into, const std::shared_ptr<MapGuard>& from);
// abf.IoError (io_error) when a mapping of `guard` lost pages to truncation;
// nothing for a null guard. Called after (and before) every read of one.
void check_mapping(const std::shared_ptr<MapGuard>& guard);

// A filter as Python holds it: the library's filter, and the key it was
// built or loaded with, kept for pickling (a snapshot never carries it);
// for mode="map", its mapping's guard.
struct PyFilter {
  Filter filter;
  std::optional<Key> key;
  std::shared_ptr<MapGuard> guard = nullptr;
};

// A filter set likewise.
struct PyFilterSet {
  FilterSet set;
  std::optional<Key> key;
  std::shared_ptr<MapGuard> guard = nullptr;
};

// An exact index as Python holds it (abf.Index): the library's index set
// (shared, immutable; a plain ABFX file is a one-shard set), the path it was
// loaded from, and whether its digests were once found to add up to its
// header's fingerprint (check_index_binding's costly last rule, needed once
// per loaded index; shared by copies); for mode="map", the guard of every
// mapped shard.
struct PyIndex {
  IndexSet index;
  std::string source;
  std::shared_ptr<std::atomic<bool>> digests_verified = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<MapGuard> guard = nullptr;
};

// Loads an index file or an index set manifest (IndexSet::load) and, for
// LoadMode::kMap, guards each shard's mapping (index.cpp).
PyIndex load_index(const std::filesystem::path& path, LoadMode mode);

// A load mode argument: "auto", "copy" or "map" (ValueError otherwise;
// TypeError for a non-str).
LoadMode load_mode_from(py::handle mode);

// Registers Filter, FilterSet, Key and the module functions on filters
// (filters.cpp); Index (index.cpp); Catalog and dedup (catalog.cpp).
void init_filters(py::module_& m);
void init_index(py::module_& m);
void init_catalog(py::module_& m);

}  // namespace abf::python
