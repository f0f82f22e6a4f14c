// Digests, keys, catalog ids, backends and paths from Python objects.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "abf/blocked.hpp"
#include "common.hpp"

namespace abf::python {

namespace {

// Whether `text` starts with "sha256:" in any case ("SHA256:", "Sha256:"),
// as the CLI and `abf serve` read the prefix (core/src/digest.cpp).
bool has_sha256_prefix(std::string_view text) {
  constexpr std::string_view kPrefix = "sha256:";
  if (text.size() < kPrefix.size()) return false;
  for (std::size_t i = 0; i < kPrefix.size(); ++i) {
    char c = text[i];
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (c != kPrefix[i]) return false;
  }
  return true;
}

[[noreturn]] void invalid_digest(std::string message) {
  raise(ErrorCode::kInvalidDigest, std::move(message));
}

// One item of an iterable: 32 bytes, or 64 hex digits with an optional
// "sha256:" prefix (any case).
Digest digest_item(py::handle item, std::size_t index, const char* what) {
  if (PyUnicode_Check(item.ptr())) {
    Py_ssize_t length = 0;
    const char* text = PyUnicode_AsUTF8AndSize(item.ptr(), &length);
    if (text == nullptr) throw py::error_already_set();
    std::string_view hex(text, static_cast<std::size_t>(length));
    if (has_sha256_prefix(hex)) hex.remove_prefix(7);
    auto digest = parse_hex_digest(hex);
    if (!digest) {
      invalid_digest(std::string(what) + " item " + std::to_string(index) + ": " +
                     digest.error().message);
    }
    return *digest;
  }
  if (!PyObject_CheckBuffer(item.ptr())) {
    throw py::type_error(std::string(what) + " item " + std::to_string(index) + " is " +
                         describe(item) + ", not 32 bytes or a hex str");
  }
  Py_buffer view;
  if (PyObject_GetBuffer(item.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw py::error_already_set();
  Digest digest;
  const auto length = static_cast<std::size_t>(view.len);
  if (length == Digest::kSize) std::memcpy(digest.bytes.data(), view.buf, Digest::kSize);
  PyBuffer_Release(&view);
  if (length != Digest::kSize) {
    invalid_digest(std::string(what) + " item " + std::to_string(index) + " is " +
                   std::to_string(length) + " bytes, not 32");
  }
  return digest;
}

// Raw digests that are hex text: `f.query(line.encode())`, or a file read
// in 'rb' mode, hands 64 ASCII hex digits where 32 raw bytes are meant, and
// would be read as two unrelated digests (each answered `absent`, wrongly).
// A random digest is all hex digits with probability (22/256)^32, below
// 1e-34, so the first record decides.
void refuse_hex_text(std::span<const Digest> digests, const char* what) {
  if (digests.empty()) return;
  const auto& first = digests.front().bytes;
  const bool sha256_prefix =
      has_sha256_prefix({reinterpret_cast<const char*>(first.data()), first.size()});
  const bool all_hex = std::all_of(first.begin(), first.end(), [](std::uint8_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
  if (all_hex || sha256_prefix) {
    invalid_digest(std::string(what) +
                   ": these bytes are hex text, not raw 32-byte digests; decode them "
                   "(bytes.fromhex(text), or give the str) or read the file in text mode");
  }
}

}  // namespace

DigestInput::~DigestInput() {
  if (view_) PyBuffer_Release(&*view_);
}

DigestInput digests_from(py::handle object, const char* what) {
  DigestInput input;
  if (object.is_none()) throw py::type_error(std::string(what) + " is None");
  if (PyUnicode_Check(object.ptr())) {
    throw py::type_error(std::string(what) +
                         " is a str; give a sequence of digests (a str is one hex digest: "
                         "wrap it in a list)");
  }
  if (py::isinstance<py::array>(object)) {
    auto array = py::reinterpret_borrow<py::array>(object);
    const py::dtype dtype = array.dtype();
    const char kind = dtype.kind();
    const auto itemsize = static_cast<std::size_t>(dtype.itemsize());
    std::size_t count = 0;
    if (itemsize == 1 && kind == 'u') {
      if (array.ndim() == 2 && array.shape(1) == static_cast<py::ssize_t>(Digest::kSize)) {
        count = static_cast<std::size_t>(array.shape(0));
      } else if (array.ndim() == 1 && array.shape(0) % Digest::kSize == 0) {
        count = static_cast<std::size_t>(array.shape(0)) / Digest::kSize;
      } else {
        std::string shape;
        for (py::ssize_t i = 0; i < array.ndim(); ++i) {
          if (i > 0) shape += ", ";
          shape += std::to_string(array.shape(i));
        }
        invalid_digest(std::string(what) + ": a uint8 array of shape (" + shape +
                       "); digests are rows of 32 bytes: shape (N, 32), or (N * 32,)");
      }
    } else if (itemsize == Digest::kSize && (kind == 'S' || kind == 'V') && array.ndim() == 1) {
      count = static_cast<std::size_t>(array.shape(0));
    } else {
      throw py::type_error(std::string(what) + " is " + describe(object) +
                           "; expected uint8 of shape (N, 32) or (N * 32,) (or 1-D S32/V32)");
    }
    if (!(array.flags() & py::array::c_style)) {
      // One copy, for a view with strides (a slice a[::2], a transpose).
      array = py::module_::import("numpy").attr("ascontiguousarray")(array);
    }
    input.span_ = {reinterpret_cast<const Digest*>(array.data()), count};
    input.owner_ = std::move(array);
    refuse_hex_text(input.span_, what);
    return input;
  }
  if (PyObject_CheckBuffer(object.ptr())) {
    Py_buffer view;
    if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
      throw py::error_already_set();
    }
    input.view_ = view;
    const auto length = static_cast<std::size_t>(view.len);
    if (length % Digest::kSize != 0) {
      invalid_digest(std::string(what) + ": " + std::to_string(length) +
                     " bytes is not a whole number of 32-byte digests (a partial record at byte "
                     "offset " +
                     std::to_string(length - length % Digest::kSize) + ")");
    }
    input.span_ = {static_cast<const Digest*>(view.buf), length / Digest::kSize};
    refuse_hex_text(input.span_, what);
    return input;
  }
  PyObject* iterator = PyObject_GetIter(object.ptr());
  if (iterator == nullptr) {
    PyErr_Clear();
    throw py::type_error(std::string(what) + " is " + describe(object) +
                         "; expected a uint8 array of shape (N, 32), N * 32 bytes, or an "
                         "iterable of 32-byte bytes");
  }
  auto iter = py::reinterpret_steal<py::iterator>(iterator);
  const Py_ssize_t hint = PyObject_LengthHint(object.ptr(), 0);
  if (hint < 0) {
    PyErr_Clear();
  } else {
    input.copy_.reserve(static_cast<std::size_t>(hint));
  }
  std::size_t index = 0;
  for (py::handle item : iter) {
    input.copy_.push_back(digest_item(item, index++, what));
  }
  input.span_ = input.copy_;
  return input;
}

py::array_t<std::uint8_t> digest_array(std::span<const Digest> digests) {
  py::array_t<std::uint8_t> array(
      {static_cast<py::ssize_t>(digests.size()), static_cast<py::ssize_t>(Digest::kSize)});
  if (!digests.empty()) {
    std::memcpy(array.mutable_data(), digests.data(), digests.size() * Digest::kSize);
  }
  return array;
}

std::optional<Key> key_from(py::handle object) {
  if (object.is_none()) return std::nullopt;
  if (py::isinstance<Key>(object)) return object.cast<const Key&>();
  if (PyUnicode_Check(object.ptr())) {
    throw py::type_error(
        "key: a str is neither a key nor a key file; read a key file with "
        "abf.read_key_file(path), or give the 16 key bytes");
  }
  if (!PyObject_CheckBuffer(object.ptr())) {
    throw py::type_error("key is " + describe(object) + "; expected an abf.Key or 16 bytes");
  }
  Py_buffer view;
  if (PyObject_GetBuffer(object.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) {
    throw py::error_already_set();
  }
  const auto length = static_cast<std::size_t>(view.len);
  std::array<std::uint8_t, Key::kSize> bytes{};
  if (length == Key::kSize) std::memcpy(bytes.data(), view.buf, Key::kSize);
  PyBuffer_Release(&view);
  if (length != Key::kSize) {
    raise(ErrorCode::kInvalidKey, "a key is 16 bytes, not " + std::to_string(length));
  }
  Key key = Key::from_bytes(bytes);
  std::memset(bytes.data(), 0, bytes.size());
  return key;
}

CatalogId catalog_id_from(py::handle object) {
  if (object.is_none()) return CatalogId{};
  if (PyUnicode_Check(object.ptr())) {
    return unwrap(CatalogId::parse_hex(object.cast<std::string>()));
  }
  if (PyObject_CheckBuffer(object.ptr())) {
    py::buffer_info info = py::reinterpret_borrow<py::buffer>(object).request();
    const auto length = static_cast<std::size_t>(info.size * info.itemsize);
    if (length != 16) {
      raise(ErrorCode::kInvalidArgument,
            "a catalog id is 16 bytes (or 32 hex digits), not " + std::to_string(length));
    }
    CatalogId id;
    std::memcpy(id.bytes.data(), info.ptr, 16);
    return id;
  }
  throw py::type_error("catalog_id is " + describe(object) +
                       "; expected None, 16 bytes or 32 hex digits");
}

py::object catalog_id_object(const CatalogId& id) {
  if (id.is_zero()) return py::none();
  return py::str(id.hex());
}

std::string describe(py::handle object) {
  if (py::isinstance<py::array>(object)) {
    auto array = py::reinterpret_borrow<py::array>(object);
    std::string shape;
    for (py::ssize_t i = 0; i < array.ndim(); ++i) {
      if (i > 0) shape += ", ";
      shape += std::to_string(array.shape(i));
    }
    if (array.ndim() == 1) shape += ",";
    return "a numpy.ndarray of shape (" + shape + ") and dtype " +
           py::str(py::handle(array.dtype())).cast<std::string>();
  }
  if (object.is_none()) return "None";
  py::handle type = py::type::handle_of(object);
  std::string module = py::str(type.attr("__module__")).cast<std::string>();
  std::string name = py::str(type.attr("__qualname__")).cast<std::string>();
  if (module == "builtins") {
    return (std::string_view("aeiou").find(name.front()) != std::string_view::npos ? "an " : "a ") +
           name;
  }
  if (module == "abf._abf") module = "abf";
  return (std::string_view("aeiou").find(module.front()) != std::string_view::npos ? "an " : "a ") +
         module + "." + name;
}

namespace {

// The range of a count in the library's words ("expected item count ... is
// outside 1..2^30 (1073741824)"): "0..2^63-1 (9223372036854775807)".
std::string count_range(std::uint64_t max) {
  if (max == (std::uint64_t{1} << 63) - 1) return "0..2^63-1 (" + std::to_string(max) + ")";
  return "0.." + std::to_string(max);
}

}  // namespace

std::uint64_t count_from(py::handle object, ErrorCode code, const char* what, std::uint64_t max) {
  if (PyFloat_Check(object.ptr())) {
    const double value = PyFloat_AsDouble(object.ptr());
    // 2^63 is exact as a double; every double below it that is whole fits.
    if (!std::isfinite(value) || value != std::floor(value)) {
      raise(code, std::string(what) + " " + py::repr(object).cast<std::string>() +
                      " is not a whole number");
    }
    if (value < 0 || value >= 9223372036854775808.0 || static_cast<std::uint64_t>(value) > max) {
      raise(code, std::string(what) + " " + py::repr(object).cast<std::string>() + " is outside " +
                      count_range(max));
    }
    return static_cast<std::uint64_t>(value);
  }
  // An ndarray has __index__ too (for its one-element case): refused here,
  // whatever its size, rather than converted.
  if (!PyIndex_Check(object.ptr()) || PyBool_Check(object.ptr()) ||
      py::isinstance<py::array>(object)) {
    throw py::type_error(std::string(what) + " must be an int, not " + describe(object));
  }
  auto number = py::reinterpret_steal<py::object>(PyNumber_Index(object.ptr()));
  if (!number) throw py::error_already_set();
  int overflow = 0;
  const long long value = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
  if (overflow != 0 || value < 0 || static_cast<std::uint64_t>(value) > max) {
    raise(code, std::string(what) + " " + py::str(number).cast<std::string>() + " is outside " +
                    count_range(max));
  }
  return static_cast<std::uint64_t>(value);
}

double real_from(py::handle object, const char* what) {
  if (PyFloat_Check(object.ptr())) return PyFloat_AsDouble(object.ptr());
  if (PyIndex_Check(object.ptr()) && !PyBool_Check(object.ptr()) &&
      !py::isinstance<py::array>(object)) {
    const double value = PyFloat_AsDouble(object.ptr());
    if (value == -1.0 && PyErr_Occurred()) throw py::error_already_set();
    return value;
  }
  throw py::type_error(std::string(what) + " must be a float, not " + describe(object));
}

std::string string_from(py::handle object, const char* what) {
  if (!PyUnicode_Check(object.ptr())) {
    throw py::type_error(std::string(what) + " must be a str, not " + describe(object));
  }
  return object.cast<std::string>();
}

bool flag_from(py::handle object, const char* what) {
  if (PyBool_Check(object.ptr())) return object.ptr() == Py_True;
  if (py::isinstance(object, py::module_::import("numpy").attr("bool_"))) {
    return PyObject_IsTrue(object.ptr()) == 1;
  }
  throw py::type_error(std::string(what) + " must be a bool, not " + describe(object));
}

Backend backend_from(py::handle object, const char* what) {
  return backend_from(string_from(object, what));
}

Backend backend_from(const std::string& name) { return unwrap(parse_backend(name)); }

std::uint32_t protocol_from_layout(py::handle layout, bool keyed) {
  const std::string name = string_from(layout, "layout");
  if (name == "classic") return keyed ? probe::kProtocolKeyed : probe::kProtocolUnkeyed;
  if (name == "blocked") return keyed ? blocked::kProtocolBlockedKeyed : blocked::kProtocolBlocked;
  throw py::value_error("layout must be \"classic\" or \"blocked\", not \"" + name + "\"");
}

const char* layout_name(std::uint32_t protocol) {
  return blocked::is_blocked_protocol(protocol) ? "blocked" : "classic";
}

std::filesystem::path path_from(py::handle object, const char* what) {
  py::module_ os = py::module_::import("os");
  py::object path;
  try {
    path = os.attr("fspath")(object);
  } catch (py::error_already_set& failure) {
    if (!failure.matches(PyExc_TypeError)) throw;
    throw py::type_error(std::string(what) + " must be a str, bytes or os.PathLike, not " +
                         describe(object));
  }
  // A str as the file system spells it (surrogateescape), as os.open does.
  const std::string bytes = os.attr("fsencode")(path).cast<std::string>();
  if (const auto nul = bytes.find('\0'); nul != std::string::npos) {
    throw py::value_error(std::string(what) + ": embedded null byte at byte " +
                          std::to_string(nul) + " of the path");
  }
  return std::filesystem::path(bytes);
}

}  // namespace abf::python
