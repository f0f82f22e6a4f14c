"""The package as a user meets it: stubs and docstrings for every public
name, py.typed, and `import abf` from an install into a venv."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess

import pytest

import abf
from abf import _abf

PACKAGE = pathlib.Path(abf.__file__).parent


def public(module):
    return {name for name in dir(module) if not name.startswith("_")}


def stub_names(path: pathlib.Path) -> tuple[set[str], dict[str, set[str]]]:
    tree = ast.parse(path.read_text())
    names, members = set(), {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
        elif isinstance(node, (ast.AnnAssign, ast.Assign)):
            target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
            names.add(target.id)
    return names, members


def test_stubs_and_py_typed_sit_beside_the_module():
    assert (PACKAGE / "py.typed").exists()
    assert (PACKAGE / "_abf.pyi").exists()
    assert pathlib.Path(_abf.__file__).parent == PACKAGE


def test_every_public_name_has_a_stub_and_a_docstring():
    names, members = stub_names(PACKAGE / "_abf.pyi")
    for name in public(_abf):
        assert name in names, f"{name} missing from _abf.pyi"
        value = getattr(_abf, name)
        if callable(value):
            assert value.__doc__ and value.__doc__.strip(), f"{name} has no docstring"
    inherited = members.get("_FilterLike", set())
    for cls in (abf.Filter, abf.FilterSet, abf.Catalog, abf.Key):
        stubbed = members[cls.__name__] | (inherited if "Filter" in cls.__name__ else set())
        for name in public(cls):
            assert name in stubbed, f"{cls.__name__}.{name} missing from _abf.pyi"
            assert getattr(cls, name).__doc__, f"{cls.__name__}.{name} has no docstring"
    for name in abf.__all__:
        assert hasattr(abf, name)


def test_import_from_an_install_into_a_venv(tmp_path):
    build = os.environ.get("ABF_BUILD_DIR")
    cmake = os.environ.get("ABF_CMAKE")
    if not build or not cmake:
        pytest.skip("ABF_BUILD_DIR and ABF_CMAKE name the build to install (set by CTest)")
    venv = tmp_path / "venv"
    subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=120)
    subprocess.run([cmake, "--install", build, "--prefix", str(venv)], check=True,
                   capture_output=True, timeout=300)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    script = ("import abf, numpy as np; "
              "f = abf.build(np.zeros((1, 32), np.uint8), 10, 0.01); "
              "print(abf.__file__, bool(f.query(np.zeros((1, 32), np.uint8))[0]))")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", script], check=True,
                         capture_output=True, text=True, cwd=tmp_path, env=env,
                         timeout=120).stdout.split()
    assert out[0].startswith(str(venv)) and out[1] == "True"
