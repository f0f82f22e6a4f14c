# `abf serve`'s tests (included by tests/CMakeLists.txt). The C++ unit test
# of the request parsing functions (serve_request_test.cc, found by the
# *_test.cc glob) links their library; the Python tests run real server
# processes with curl, python3-requests and a gRPC client generated from
# proto/remote_execution.proto. A Python module that is missing makes a test
# exit 77: skipped, with the reason in its output (scripts/setup installs
# them all, so CI runs every one).
target_link_libraries(serve_request_test PRIVATE abf_server_request)

if(NOT ABF_WITH_SERVER)
  return()
endif()
find_program(ABF_SYSTEM_PYTHON NAMES python3 PATHS /usr/bin NO_DEFAULT_PATH)
if(NOT ABF_SYSTEM_PYTHON)
  find_program(ABF_SYSTEM_PYTHON python3)
endif()
foreach(name http grpc reload ops hostile head binding index rewrite limits conventions)
  add_test(NAME serve_${name}
           COMMAND ${ABF_SYSTEM_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/serve/test_${name}.py)
  set_tests_properties(serve_${name} PROPERTIES
    ENVIRONMENT "ABF_CLI=$<TARGET_FILE:abf_cli>;PYTHONDONTWRITEBYTECODE=1;ABF_SANITIZE=${ABF_SANITIZE}"
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    LABELS "serve;python")
endforeach()

# The admission pipeline both fronts share (server/src/admission.hpp), on a
# real Core: a C++ unit test of the server's internals, so it is built only
# here, with the server's library.
add_executable(serve_admission_test serve/admission_test.cc)
target_include_directories(serve_admission_test PRIVATE ${PROJECT_SOURCE_DIR}/server/src)
target_link_libraries(serve_admission_test PRIVATE abf_server abf_test_support)
add_dependencies(serve_admission_test abf_cli)
add_dependencies(abf_tests serve_admission_test)
add_test(NAME serve_admission COMMAND serve_admission_test)
set_tests_properties(serve_admission PROPERTIES LABELS "unit;serve" TIMEOUT 600)
