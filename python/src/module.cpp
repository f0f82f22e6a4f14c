// abf._abf: the extension module behind the Python package abf
// (python/abf/__init__.py re-exports it). Errors cross into Python as the
// abf.Error subclass of their code (abf/_errors.py).
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
  };
  for (const auto& [flag, argument] : kFlags) {
    if (const auto at = message.find(flag); at != std::string::npos) {
      message.replace(at, flag.size(), argument);
    }
  }
  return message;
}

void set_python_error(const Error& error) {
  const std::string code(to_string(error.code));
  const std::string message = for_python(error.message);
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
// whatever types it is given) gets a last overload that takes anything and
// says what was given by type, shape and dtype instead. Its docstring stays
// the function's own.
py::object wrong_arguments(const std::string& signature, py::args args, py::kwargs kwargs) {
  std::string given;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (!given.empty()) given += ", ";
    given += describe(args[i]);
  }
  for (const auto& [name, value] : kwargs) {
    if (!given.empty()) given += ", ";
    given += py::str(name).cast<std::string>() + "=" + describe(value);
  }
  throw py::type_error(signature + " does not take the arguments given: (" + given + ")");
}

std::string first_line(const char* doc) {
  const std::string text = doc == nullptr ? "" : doc;
  return text.substr(0, text.find('\n'));
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

void keep_doc(py::handle object, const std::string& doc) {
  if (PyCFunctionObject* f = builtin_of(object)) {
    std::free(const_cast<char*>(f->m_ml->ml_doc));
    f->m_ml->ml_doc = strdup(doc.c_str());
  }
}

void add_fallbacks(py::module_& m) {
  for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(m.attr("__dict__"))) {
    const std::string name = py::str(key).cast<std::string>();
    PyCFunctionObject* f = builtin_of(value);
    if (name.starts_with("_") || f == nullptr) continue;
    const std::string doc = f->m_ml->ml_doc == nullptr ? "" : f->m_ml->ml_doc;
    const std::string signature = first_line(f->m_ml->ml_doc);
    m.def(name.c_str(), [signature](py::args args, py::kwargs kwargs) {
      return wrong_arguments(signature, std::move(args), std::move(kwargs));
    });
    keep_doc(m.attr(name.c_str()), doc);
  }
  for (const char* class_name : {"Filter", "FilterSet", "Index", "Catalog", "Key"}) {
    auto cls = py::reinterpret_borrow<py::class_<py::object>>(m.attr(class_name));
    const py::dict members = cls.attr("__dict__").attr("copy")();
    for (const auto& [key, value] : members) {
      const std::string name = py::str(key).cast<std::string>();
      PyCFunctionObject* f = builtin_of(value);
      if (name.starts_with("_") || f == nullptr) continue;
      const std::string doc = f->m_ml->ml_doc == nullptr ? "" : f->m_ml->ml_doc;
      const std::string signature = first_line(f->m_ml->ml_doc);
      const bool is_static = !PyInstanceMethod_Check(value.ptr());
      if (is_static) {
        cls.def_static(name.c_str(), [signature](py::args args, py::kwargs kwargs) {
          return wrong_arguments(signature, std::move(args), std::move(kwargs));
        });
      } else {
        cls.def(name.c_str(), [signature, cls](py::handle self, py::args args, py::kwargs kwargs) {
          // Filter.query(array): the array in self's place is named too.
          if (!py::isinstance(self, cls)) {
            args = py::reinterpret_steal<py::args>(
                PySequence_Tuple((py::make_tuple(self) + args).ptr()));
          }
          return wrong_arguments(signature, std::move(args), std::move(kwargs));
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
