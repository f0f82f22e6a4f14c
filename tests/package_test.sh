#!/usr/bin/env bash
# The installed package, tested as a user meets it (ctest label `package`;
# tests/CMakeLists.txt registers one test per step, sharing WORK):
#
#   package_test.sh STEP WORK BUILD SOURCE CMAKE CXX GENERATOR
#
#   install     `cmake --install BUILD --prefix WORK/prefix`, and the layout
#   cmake       tests/consumer, outside the tree: find_package(abf CONFIG)
#               with abf::abf and abf::service; builds and runs both programs
#   pkgconfig   the same programs built with `pkg-config --cflags --libs`
#   cudart      no part of the package nor the consumer needs libcudart.so,
#               and the consumer runs with no CUDA folder on the loader's
#               path (auto runs SIMD without a GPU)
#   man         `man abf-build` (and a page per command) from the install
#   completion  the installed bash completion, sourced and asked
#   subproject  add_subdirectory(abf) configures without tests or benchmarks
set -euo pipefail
step=$1 work=$2 build=$3 source=$4 cmake=$5 cxx=$6 generator=$7
prefix=$work/prefix

fail() {
  echo "package_test $step: $*" >&2
  exit 1
}

# The one file under the prefix named $1 (the libdir is lib or lib/<triplet>).
installed() {
  local found
  found=$(find "$prefix" -name "$1" -print -quit)
  [[ -n $found ]] || fail "nothing named $1 installed under $prefix"
  echo "$found"
}

case $step in
  install)
    rm -rf "$work"
    mkdir -p "$work"
    "$cmake" --install "$build" --prefix "$prefix" >"$work/install.log"
    for file in include/abf/abf.hpp include/abf/version.hpp include/abf/service/service.hpp \
        include/abf/simd/target.hpp include/abf/cuda/controls.hpp \
        bin/abf share/bash-completion/completions/abf share/doc/abf/LICENSE; do
      [[ -f $prefix/$file ]] || fail "$file not installed"
    done
    for name in libabf.so libabf_service.so abfConfig.cmake abfConfigVersion.cmake \
        abfTargets.cmake abf.pc abf-service.pc; do
      installed "$name" >/dev/null
    done
    # Only the public API: no internal header (core/src, simd, cuda/src).
    if find "$prefix/include" -name '*.h' -o -name 'engine.hpp' -o -name 'launch.hpp' | grep -q .; then
      fail "an internal header was installed"
    fi
    grep -q "Apache License" "$prefix/share/doc/abf/LICENSE" || fail "LICENSE is not the Apache license"
    ;;

  cmake)
    rm -rf "$work/cmake"
    "$cmake" -S "$source/tests/consumer" -B "$work/cmake" -G "$generator" \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$work/cmake-configure.log" ||
      { cat "$work/cmake-configure.log"; fail "the consumer did not configure"; }
    found=$(sed -n 's/^abf_DIR:PATH=//p' "$work/cmake/CMakeCache.txt")
    [[ $found == "$prefix"/* ]] || fail "found abf at $found, not in $prefix"
    "$cmake" --build "$work/cmake" -j 2 >"$work/cmake-build.log" ||
      { cat "$work/cmake-build.log"; fail "the consumer did not build"; }
    "$work/cmake/engine" "$work"
    "$work/cmake/service" "$work"
    ;;

  pkgconfig)
    rm -rf "$work/pc"
    mkdir -p "$work/pc"
    export PKG_CONFIG_PATH
    PKG_CONFIG_PATH=$(dirname "$(installed abf.pc)")
    # The libraries' dependencies stay inside them: nothing else to link.
    libs=$(pkg-config --libs-only-l abf | xargs)
    [[ $libs == "-labf" ]] || fail "pkg-config --libs-only-l abf: $libs"
    libs=$(pkg-config --libs-only-l abf-service | xargs)
    [[ $libs == "-labf_service -labf" ]] || fail "pkg-config --libs-only-l abf-service: $libs"
    libdir=$(pkg-config --variable=libdir abf)
    # shellcheck disable=SC2046  # pkg-config's output is words
    "$cxx" -std=c++23 -O1 -o "$work/pc/engine" "$source/tests/consumer/engine.cpp" \
      $(pkg-config --cflags --libs abf) -Wl,-rpath,"$libdir"
    # shellcheck disable=SC2046
    "$cxx" -std=c++23 -O1 -o "$work/pc/service" "$source/tests/consumer/service.cpp" \
      $(pkg-config --cflags --libs abf-service) -Wl,-rpath,"$libdir"
    "$work/pc/engine" "$work/pc"
    "$work/pc/service" "$work/pc"
    ;;

  cudart)
    libabf=$(installed libabf.so)
    for binary in "$libabf" "$(installed libabf_service.so)" "$prefix/bin/abf" "$work/cmake/engine"; do
      if readelf -d "$binary" | grep NEEDED | grep -q libcudart; then
        fail "$binary needs libcudart.so"
      fi
    done
    # The static runtime inside libabf.so exports nothing: a program's own
    # CUDA runtime cannot bind to it by mistake.
    if nm -D --defined-only "$libabf" | grep -qE ' cuda[A-Z]|__cuda'; then
      fail "libabf.so exports CUDA runtime symbols"
    fi
    # Without the loader's cache, whose /etc/ld.so.conf.d entries are what
    # put CUDA's lib folder on the path here, and without LD_LIBRARY_PATH,
    # only the system folders and the binaries' own run paths remain. The
    # loader's trace shows that libcudart was never even looked for.
    loader=$(readelf -l "$work/cmake/engine" | sed -n 's/.*program interpreter: \(.*\)]/\1/p')
    run_bare() {
      env -u LD_LIBRARY_PATH LD_DEBUG=libs LD_DEBUG_OUTPUT="$work/ld-trace" \
        "$loader" --inhibit-cache "$@"
    }
    rm -f "$work"/ld-trace.*
    output=$(run_bare "$work/cmake/engine" "$work")
    echo "$output"
    [[ $output == *"auto ran "* ]] || fail "the consumer did not run"
    run_bare "$prefix/bin/abf" --version
    run_bare "$prefix/bin/abf" inspect "$work/engine.abf" >/dev/null
    if grep -l libcudart "$work"/ld-trace.*; then
      fail "libcudart was loaded or looked for"
    fi
    ;;

  man)
    man_dir=$prefix/share/man
    [[ -f $man_dir/man1/abf.1 && -f $man_dir/man1/abf-build.1 ]] || fail "no man pages installed"
    # A page for every command the binary has.
    while read -r kind path names; do
      [[ $kind == sub ]] || continue
      for name in $names; do
        page=${path//\//-}-$name.1
        [[ -f $man_dir/man1/$page ]] || fail "no man page $page"
      done
    done < <("$prefix/bin/abf" completion)
    if command -v man >/dev/null; then
      page=$(MANPATH=$man_dir MANPAGER=cat MANWIDTH=100 man abf-build 2>&1)
    else
      echo "man is not installed (Debian: man-db): checking the page's source only"
      page=$(cat "$man_dir/man1/abf-build.1")
    fi
    # Made at build time from the --help texts: nothing of the build
    # machine's may land in them (the --threads default says "every core").
    if grep -nE '[0-9]+ cores' "$man_dir"/man1/*.1; then
      fail "a man page carries the build machine's core count"
    fi
    for want in "abf-build" "--expected-items" "--fpp" "--output" "every core" "SEE ALSO"; do
      [[ $page == *"$want"* ]] || { echo "$page"; fail "man abf-build lacks $want"; }
    done
    ;;

  completion)
    mkdir -p "$work/completion"
    touch "$work/completion/catalog.abf"
    # Each line: the words typed (the last one being completed) => the
    # completions expected, as a sorted list.
    backends=$("$prefix/bin/abf" --version | sed -n 's/^backends: //p' | tr -d ,)
    [[ -n $backends ]] || fail "abf --version lists no backends"
    expected_backends=$(printf '%s\n' auto $backends | sort | tr '\n' ' ')
    cd "$work/completion"
    PATH=$prefix/bin:$PATH bash --norc --noprofile -c '
      source "$1"
      complete_words() {
        COMP_WORDS=("$@")
        COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
        COMPREPLY=()
        _abf
        printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "
      }
      check() {
        local want=$1
        shift
        local got
        got=$(complete_words "$@")
        if [[ $got != "$want" ]]; then
          echo "completing [$*]: got [$got], want [$want]" >&2
          exit 1
        fi
      }
      check "build " abf bui
      check "--expected-items " abf build --expected-i
      check "$2" abf query --backend ""
      check "$2" abf build --input X --backend ""
      check "scalar simd " abf query --backend = s
      check "add " abf catalog a
      check "bin hex " abf build --input-format ""
      check "catalog.abf " abf inspect cat
      check "catalog.abf " abf query --snapshot cat
    ' check "$prefix/share/bash-completion/completions/abf" "$expected_backends" ||
      fail "the completion answered wrong"
    ;;

  subproject)
    rm -rf "$work/subproject"
    mkdir -p "$work/subproject/src"
    cat >"$work/subproject/src/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.25)
project(abf_parent LANGUAGES CXX)
add_subdirectory("$source" abf)
add_executable(engine "$source/tests/consumer/engine.cpp")
target_link_libraries(engine PRIVATE abf::abf)
EOF
    "$cmake" -S "$work/subproject/src" -B "$work/subproject/build" -G "$generator" \
      -DABF_CUDA=OFF -DCMAKE_CXX_COMPILER="$cxx" >"$work/subproject/configure.log" ||
      { cat "$work/subproject/configure.log"; fail "abf as a subproject did not configure"; }
    cache=$work/subproject/build/CMakeCache.txt
    grep -q '^ABF_BUILD_TESTS:BOOL=OFF$' "$cache" || fail "tests are on in a subproject"
    grep -q '^ABF_BUILD_BENCH:BOOL=OFF$' "$cache" || fail "benchmarks are on in a subproject"
    [[ ! -e $work/subproject/build/abf/tests ]] || fail "a subproject configured abf's tests"
    ;;

  *)
    fail "unknown step"
    ;;
esac
echo "package_test $step: ok"
