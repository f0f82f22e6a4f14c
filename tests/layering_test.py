#!/usr/bin/env python3
"""scripts/check-layers on this repository (every include points down) and
on small trees that break each kind of rule (so the check can fail)."""
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(os.environ.get("ABF_SOURCE_DIR", pathlib.Path(__file__).resolve().parents[1]))
CHECK = ROOT / "scripts" / "check-layers"


def run(root):
    return subprocess.run([sys.executable, str(CHECK), str(root)], capture_output=True, text=True)


def tree(files):
    folder = pathlib.Path(tempfile.mkdtemp(prefix="abf-layers-"))
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def main():
    done = run(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    seam = {"core/engine/engine.hpp": "#pragma once\n", "core/src/kernels.hpp": "",
            "simd/probe.cc": '#include "engine.hpp"\n'}
    cases = {
        "an engine reaching core's seam is allowed": (seam, 0, ""),
        "an engine reaching past the seam into core/src": (
            {**seam, "cuda/src/engine.cpp": '#include "kernels.hpp"\n'},
            1, "cuda/src/engine.cpp:1: cuda/ includes kernels.hpp from core/"),
        "core including an engine's header": (
            {**seam, "simd/probe_simd.h": "", "core/src/query.cpp": '#include "probe_simd.h"\n'},
            1, "core/src/query.cpp:1: core/ includes probe_simd.h from simd/"),
        "core's public header naming an engine": (
            {**seam, "core/include/abf/backend.hpp": "extern const Engine kCudaEngine;\n"},
            1, "core/include/abf/backend.hpp:1: core names an engine"),
        "core's public header declaring an engine's control": (
            {**seam, "core/include/abf/backend.hpp": "\n\nstd::string simd_target_name();\n"},
            1, "core/include/abf/backend.hpp:3: core names an engine"),
        "core using the CUDA auto rule": (
            {**seam, "core/src/table.cpp": "bool gpu = n >= kAutoCudaMinBatch;\n"},
            1, "core/src/table.cpp:1: core names an engine"),
        "core naming an engine": (
            {**seam, "core/src/table.cpp": "auto* row = &kSimdEngine;  // simd:: in a comment is fine\n"},
            1, "core/src/table.cpp:1: core names an engine"),
        "cli including core's private header": (
            {**seam, "cli/cmd.cpp": '\n#include "kernels.hpp"\n'},
            1, "cli/cmd.cpp:2: cli/ includes kernels.hpp from core/"),
        "cli including the engine seam": (
            {**seam, "cli/cmd.cpp": '#include "engine.hpp"\n'},
            1, "cli/cmd.cpp:1: cli/ includes engine.hpp from core/engine/"),
        "a relative path into another room": (
            {**seam, "server/src/x.cpp": '#include "../../cli/y.cpp"\n', "cli/y.cpp": ""},
            1, "server/src/x.cpp:1: server/ reaches into cli/ by a relative path"),
        "a public header is open to all": (
            {**seam, "core/include/abf/filter.hpp": "", "server/src/x.cpp": '#include "abf/filter.hpp"\n'},
            0, ""),
    }
    for name, (files, code, expected) in cases.items():
        folder = tree(files)
        try:
            done = run(folder)
        finally:
            subprocess.run(["rm", "-rf", str(folder)], check=True)
        assert done.returncode == code, f"{name}: exit {done.returncode}\n{done.stdout}{done.stderr}"
        assert expected in done.stdout, f"{name}: expected {expected!r} in\n{done.stdout}"
    print("layering: ok")


if __name__ == "__main__":
    main()
