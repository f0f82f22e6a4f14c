// abf._abf: the extension module behind the Python package abf
// (python/abf/__init__.py re-exports it). Errors cross into Python as the
// abf.Error subclass of their code (abf/_errors.py).
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <utility>

#include "common.hpp"
#include "abf/simd/target.hpp"

namespace abf::python {
namespace {

// Raises the library error as abf.Error(message, code) of its family.
// The library's messages name the command's flags where a Python caller
// has an argument instead.
std::string for_python(std::string message) {
  static constexpr std::pair<std::string_view, std::string_view> kFlags[] = {
      {"give its key (--key-file)", "pass key=abf.read_key_file(path) (or key=abf.Key(...))"},
      {"(--shards auto)", "(shards=\"auto\")"},
      {"(abf build --from-catalog)", "(abf.Catalog.build_filter)"},
      {"(create one with `abf catalog init`)", "(abf.Catalog.create makes a new one)"},
  };
  for (const auto& [flag, argument] : kFlags) {
    if (const auto at = message.find(flag); at != std::string::npos) {
      message.replace(at, flag.size(), argument);
    }
  }
  return message;
}

// A merge that fails names the field that differs as the snapshot header
// spells it ("hashCount differs"): in Python, by the name of the Filter's
// property and info key a user reads it by ("hash_count differs").
std::string python_field_names(std::string message) {
  static constexpr std::pair<std::string_view, std::string_view> kFields[] = {
      {"hashProtocolVersion", "hash_protocol_version"},
      {"expectedItemCount", "expected_item_count"},
      {"catalogVersion", "catalog_version"},
      {"keyFingerprint", "key_fingerprint"},
      {"catalogId", "catalog_id"},
      {"hashCount", "hash_count"},
      {"bitCount", "bit_count"},
      {"targetFpp", "target_fpp"},
  };
  for (const auto& [field, name] : kFields) {
    for (auto at = message.find(field); at != std::string::npos;
         at = message.find(field, at + name.size())) {
      message.replace(at, field.size(), name);
    }
  }
  return message;
}

void set_python_error(const Error& error) {
  const std::string code(to_string(error.code));
  std::string message = for_python(error.message);
  if (error.code == ErrorCode::kIncompatibleFilters) message = python_field_names(message);
  try {
    py::object errors = py::module_::import("abf._errors");
    py::object cls = errors.attr("error_class")(code);
    // Messages name files, and a file name need not be UTF-8 (a shard name
    // in a hand-made manifest): its stray bytes read as \xNN, not as a
    // UnicodeDecodeError in place of the library's error.
    py::object text = py::reinterpret_steal<py::object>(
        PyUnicode_DecodeUTF8(message.data(), static_cast<Py_ssize_t>(message.size()), "backslashreplace"));
    if (!text) throw py::error_already_set();
    py::object exception = cls(text, code);
    PyErr_SetObject(cls.ptr(), exception.ptr());
  } catch (py::error_already_set& failure) {
    // abf._errors itself could not be imported (the extension loaded alone).
    failure.restore();
  }
}

// A call no overload takes (an unknown keyword, too many arguments) makes
// pybind11 print the repr of every argument ("Invoked with: array([[...]])"):
// the contents of a digest array, maybe gigabytes. Every public function
// and method (all take py::handle arguments, so the first overload matches
// whatever types it is given) gets a last overload that raises a TypeError
// in Python's words (abf._signatures.wrong_arguments: "build() got an
// unexpected keyword argument 'shard'"), saying what was given by type,
// shape and dtype instead. Its docstring stays the function's own.
py::object wrong_arguments(const std::string& qualname, const std::string& signature, py::args args,
                           py::kwargs kwargs) {
  std::string given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!given.empty()) given += ", ";
    given += describe(args[i]);
  }
  for (const auto& [name, value] : kwargs) {
    if (!given.empty()) given += ", ";
    given += py::str(name).cast<std::string>() + "=" + describe(value);
  }
  py::object error = py::module_::import("abf._signatures")
                         .attr("wrong_arguments")(qualname, signature, args, kwargs, given);
  PyErr_SetObject(PyExc_TypeError, error.ptr());
  throw py::error_already_set();
}

// The builtin function behind a module attribute or a class's method.
PyCFunctionObject* builtin_of(py::handle object) {
  py::handle f = object;
  if (PyInstanceMethod_Check(f.ptr())) f = PyInstanceMethod_GET_FUNCTION(f.ptr());
  if (py::isinstance(f, py::module_::import("builtins").attr("staticmethod"))) {
    f = f.attr("__func__");
  }
  if (!PyCFunction_Check(f.ptr())) return nullptr;
  return reinterpret_cast<PyCFunctionObject*>(f.ptr());
}

// A function's docstring, and its signature in Python's words: pybind11
// writes "build(digests: handle, ...) -> object" as the first line; the
// parameters and defaults without the C++ types ("build(digests,
// expected_items, fpp, catalog_version=0, ...)", abf._signatures).
struct Documented {
  std::string signature;  // empty: none Python can read
  std::string doc;        // the docstring after the signature line
};

Documented documented(const PyCFunctionObject* f) {
  const std::string text = f->m_ml->ml_doc == nullptr ? "" : f->m_ml->ml_doc;
  const std::size_t eol = text.find('\n');
  const std::string line = text.substr(0, eol);
  std::string rest = eol == std::string::npos ? "" : text.substr(eol);
  rest.erase(0, std::min(rest.find_first_not_of('\n'), rest.size()));
  py::object signature = py::module_::import("abf._signatures").attr("text_signature")(line);
  if (signature.is_none()) return {"", text};
  return {signature.cast<std::string>(), rest};
}

// Sets the docstring to CPython's text-signature form, "<signature>\n--\n\n
// <doc>": __text_signature__ (inspect.signature, help()) and __doc__ (the
// rest) read it as they do a builtin's.
void keep_doc(py::handle object, const Documented& documented) {
  if (PyCFunctionObject* f = builtin_of(object)) {
    const std::string doc = documented.signature.empty()
                                ? documented.doc
                                : documented.signature + "\n--\n\n" + documented.doc;
    std::free(const_cast<char*>(f->m_ml->ml_doc));
    f->m_ml->ml_doc = strdup(doc.c_str());
  }
}

void add_fallbacks(py::module_& m) {
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(m.attr("__dict__"))) {
    const std::string name = py::str(key).cast<std::string>();
    PyCFunctionObject* f = builtin_of(value);
    if (f == nullptr) continue;
    const Documented doc = documented(f);
    if (name.starts_with("_")) {  // private: its signature only
      keep_doc(value, doc);
      continue;
    }
    const std::string signature = doc.signature.empty() ? name + "(...)" : doc.signature;
    m.def(name.c_str(), [name, signature](py::args args, py::kwargs kwargs) {
      return wrong_arguments(name, signature, std::move(args), std::move(kwargs));
    });
    keep_doc(m.attr(name.c_str()), doc);
  }
  for (const char* class_name : {"Filter", "FilterSet", "Index", "Catalog", "Key"}) {
    auto cls = py::reinterpret_borrow<py::class_<py::object>>(m.attr(class_name));
    const py::dict members = cls.attr("__dict__").attr("copy")();
    for (const auto& [key, value] : members) {
      const std::string name = py::str(key).cast<std::string>();
      PyCFunctionObject* f = builtin_of(value);
      if (f == nullptr) continue;
      const Documented doc = documented(f);
      // The constructor (abf.Catalog(path, read_only=False)) and the other
      // special methods: their signatures only.
      if (name.starts_with("_")) {
        keep_doc(cls.attr("__dict__")[key], doc);
        continue;
      }
      const std::string qualname = std::string(class_name) + "." + name;
      const std::string signature = doc.signature.empty() ? name + "(...)" : doc.signature;
      const bool is_static = !PyInstanceMethod_Check(value.ptr());
      if (is_static) {
        cls.def_static(name.c_str(), [qualname, signature](py::args args, py::kwargs kwargs) {
          return wrong_arguments(qualname, signature, std::move(args), std::move(kwargs));
        });
      } else {
        cls.def(name.c_str(),
                [qualname, signature](py::handle self, py::args args, py::kwargs kwargs) {
                  // The signature names self: it is bound with the rest (Filter.query(array):
                  // the array in self's place is named too).
                  args = py::reinterpret_steal<py::args>(
                      PySequence_Tuple((py::make_tuple(self) + args).ptr()));
                  return wrong_arguments(qualname, signature, std::move(args), std::move(kwargs));
                });
      }
      keep_doc(cls.attr("__dict__")[key], doc);
    }
  }
}

}  // namespace
}  // namespace abf::python

PYBIND11_MODULE(_abf, m) {
  namespace py = pybind11;
  using namespace abf::python;
  m.doc() = "The abf library's bindings (import abf, not abf._abf).";
  m.attr("__version__") = abf::kVersion;
  m.attr("cuda_compiled") = abf::kCudaCompiled;
  m.attr("MAX_SHARD_COUNT") = abf::kMaxShardCount;
  py::register_exception_translator([](std::exception_ptr pointer) {
    try {
      if (pointer) std::rethrow_exception(pointer);
    } catch (const LibraryError& error) {
      set_python_error(error.error());
    }
  });
  m.def(
      "_error_codes",
      [] {
        py::list codes;
        // Codes are numbered from 0; to_string names each, "unknown_error" past the last.
        for (int i = 0; i < 256; ++i) {
          const auto name = abf::to_string(static_cast<abf::ErrorCode>(i));
          if (name == "unknown_error") break;
          codes.append(std::string(name));
        }
        return codes;
      },
      "Every error code name the library has (for tests of abf._errors).");
  m.def(
      "_raise",
      [](int code, const std::string& message) {
        raise(static_cast<abf::ErrorCode>(code), message);
      },
      py::arg("code"), py::arg("message"), "Raises the library error (tests).");
  m.def(
      "simd_target", [] { return abf::simd_target_name(); },
      "The Highway target the SIMD engine runs on this CPU.");
  init_filters(m);
  init_index(m);
  init_catalog(m);
  add_fallbacks(m);
}
