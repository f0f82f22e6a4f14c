// abf._abf: the extension module behind the Python package abf
// (python/abf/__init__.py re-exports it). Errors cross into Python as the
// abf.Error subclass of their code (abf/_errors.py).
#include <string>
#include <string_view>
#include <utility>

#include "common.hpp"

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
    py::object exception = cls(message, code);
    PyErr_SetObject(cls.ptr(), exception.ptr());
  } catch (py::error_already_set& failure) {
    // abf._errors itself could not be imported (the extension loaded alone).
    failure.restore();
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
}
