"""The package as a Python user expects it (issue 37): real signatures in
help() and in TypeErrors, stubs that need only the standard library, the
CLI's field names and value forms, one wording for ranges, merge errors in
the names users read, and FileNotFoundError for a missing catalog."""

from __future__ import annotations

import ast
import errno
import importlib
import importlib.util
import inspect
import json
import os
import pathlib
import pickle
import pydoc
import re
import subprocess
import sys

import numpy as np
import pytest

import abf
from conftest import random_digests

PACKAGE = pathlib.Path(abf.__file__).parent


def parameters(function) -> list[str]:
    return [str(p) for p in inspect.signature(function).parameters.values()]


def test_signatures_name_the_real_parameters_and_defaults():
    assert parameters(abf.build) == [
        "digests", "expected_items", "fpp", "catalog_version=0", "catalog_id=None", "key=None",
        "shards=1", "backend='auto'", "layout='classic'"]
    assert parameters(abf.load) == ["path", "key=None", "mode='auto'"]
    assert parameters(abf.Filter.query) == ["self", "digests", "out=None", "backend='auto'"]
    f = abf.build(random_digests(10, 1), 100, 0.01)
    assert parameters(f.query) == ["digests", "out=None", "backend='auto'"]
    assert parameters(abf.Catalog) == ["path", "read_only=False"]
    assert parameters(abf.Catalog.create) == ["path"]
    assert parameters(abf.Index.load) == ["path", "mode='auto'"]
    assert parameters(abf.dedup)[:5] == ["digests", "filter", "catalog", "key=None",
                                         "use_filter=True"]
    # No C++ type anywhere a user reads the signature.
    text = pydoc.render_doc(abf.build, renderer=pydoc.plaintext)
    assert "build(digests, expected_items, fpp, catalog_version=0" in text, text[:300]
    assert "Builds a filter of digests" in text
    for function in (abf.build, abf.merge, abf.dedup, abf.Filter.query, abf.Catalog.add,
                     abf.Catalog.build_filter, abf.FilterSet.from_shards, abf.Key.from_hex):
        shown = str(inspect.signature(function))
        assert "handle" not in shown and "object" not in shown, shown
    # The whole package's help: no C++ type, no capsule, anywhere.
    whole = "\n".join(pydoc.render_doc(getattr(abf, name), renderer=pydoc.plaintext)
                      for name in ("Filter", "FilterSet", "Catalog", "Index", "Key"))
    whole += pydoc.render_doc(abf, renderer=pydoc.plaintext)
    assert "__exit__(self, *args)" in whole and "add(self, digests)" in whole
    for word in (": handle", ": object", "-> object", "abf._abf.", "PyCapsule"):
        assert word not in whole, (word, whole[max(0, whole.find(word) - 200):][:300])
    for name in abf.__all__:
        value = getattr(abf, name)
        if callable(value) and not isinstance(value, type) and name != "error_class":
            inspect.signature(value)  # every public function has one


def test_a_wrong_call_names_the_function_and_the_bad_argument():
    d = random_digests(10, 2)
    f = abf.build(d, 100, 0.01)
    cases = [
        (lambda: abf.build(d, 100, 0.01, shard=2),
         "build() got an unexpected keyword argument 'shard'"),
        (lambda: abf.build(d, 100), "build() missing 1 required positional argument: 'fpp'"),
        (lambda: f.query(d, bogus=1),
         "Filter.query() got an unexpected keyword argument 'bogus'"),
        (lambda: abf.Index.load("x.abfx", "map", 3),
         "Index.load() takes from 1 to 2 positional arguments but 3 were given"),
        (lambda: abf.Catalog.create(path="c.db", read_only=True),
         "Catalog.create() got an unexpected keyword argument 'read_only'"),
        (lambda: abf.merge([f], catalog_version=1, version=2),
         "merge() got an unexpected keyword argument 'version'"),
    ]
    for call, words in cases:
        with pytest.raises(TypeError) as caught:
            call()
        assert str(caught.value).startswith(words), str(caught.value)
    # The module functions are Python functions of the extension's signatures
    # (pydoc calls no "method of builtins.PyCapsule instance"); the extension's
    # own, and the methods, refuse a call in the same words, then give the
    # signature as help() shows it and what was given, by type.
    assert inspect.isfunction(abf.build) and inspect.isfunction(abf.Catalog.create)
    assert "PyCapsule" not in pydoc.render_doc(abf.build, renderer=pydoc.plaintext)
    for call in (lambda: abf._abf.build(d, 100, 0.01, shard=2),
                 lambda: abf.Filter.query(f, d, bogus=1)):
        with pytest.raises(TypeError) as caught:
            call()
        assert re.match(r"(build|Filter\.query)\(\) got an unexpected keyword argument "
                        r"'(shard|bogus)'; the signature is (build\(digests, expected_items, "
                        r"fpp, catalog_version=0|query\(self, digests, out=None)",
                        str(caught.value)), str(caught.value)
        assert "numpy.ndarray of shape (10, 32) and dtype uint8" in str(caught.value)


def test_stubs_need_only_the_standard_library():
    for path in [*PACKAGE.glob("*.pyi"), *PACKAGE.glob("*.py")]:
        tree = ast.parse(path.read_text(), str(path))
        compile(tree, str(path), "exec")
        for node in ast.walk(tree):
            modules = []
            if isinstance(node, ast.Import):
                modules = [(a.name, []) for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [(node.module, [a.name for a in node.names])]
            for module, names in modules:
                assert module.split(".")[0] != "typing_extensions", f"{path.name} imports {module}"
                if path.suffix == ".pyi" and module.split(".")[0] in ("typing", "os", "numpy"):
                    # Every name imported exists in this Python's own module.
                    loaded = importlib.import_module(module)
                    for name in names:
                        assert hasattr(loaded, name), f"{path.name}: {module}.{name} missing"


def test_mypy_accepts_the_package_and_a_small_program(tmp_path):
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (Debian: python3-mypy); the stubs' imports "
                    "are checked by test_stubs_need_only_the_standard_library")
    program = tmp_path / "use.py"
    program.write_text(
        "import numpy as np\nimport dask.bag as db\nimport abf\nimport abf.dask\n"
        "d = np.zeros((3, 32), np.uint8)\n"
        "f: abf.Filter = abf.build(d, 100, 0.01)\n"
        "s: abf.FilterSet = abf.build(d, 100, 0.01, shards=2)\n"
        "answers = f.query(d)\n"
        "with abf.Catalog.create('c.db') as c:\n"
        "    added: int = c.add(d)['added']\n"
        "    removed: int = c.remove(d)['removed']\n"
        "    missing, counts = abf.dedup(d, f, c, return_counts=True)\n"
        "bag = db.from_sequence([d], npartitions=1)\n"
        "lazy = abf.dask.find_missing(bag, f, 'c.db', compute=False)\n"
        "eager: np.ndarray = abf.dask.find_missing(bag, f, 'c.db')\n"
        "g = abf.dask.build(bag, 100, 0.01)\n")
    env = {"MYPYPATH": str(PACKAGE.parent), "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # where mypy itself may be
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    for target in (["-p", "abf"], [str(program)]):
        done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                               "--cache-dir", str(tmp_path / "cache"), *target],
                              capture_output=True, text=True, timeout=300, env=env,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr


def cli_json(cli: str, *args) -> dict:
    done = subprocess.run([cli, *map(str, args), "--json"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_catalog_changes_have_the_clis_keys_and_values(tmp_path, abf_cli):
    stored = random_digests(300, 3)
    batch = np.concatenate([stored[:50], random_digests(20, 4), stored[:5]])
    ours, theirs = tmp_path / "ours.db", tmp_path / "theirs.db"
    (tmp_path / "stored.txt").write_text("".join(bytes(r).hex() + "\n" for r in stored))
    (tmp_path / "batch.txt").write_text("".join(bytes(r).hex() + "\n" for r in batch))
    subprocess.run([abf_cli, "catalog", "init", "--db", str(theirs)], check=True,
                   capture_output=True, timeout=120)
    with abf.Catalog.create(ours) as catalog:
        for operation, digests, name in (("add", stored, "stored"), ("add", batch, "batch"),
                                         ("remove", batch, "batch"), ("remove", batch, "batch")):
            python = getattr(catalog, operation)(digests)
            command = cli_json(abf_cli, "catalog", operation, "--db", theirs, "-i", tmp_path / f"{name}.txt")
            assert list(python) == list(command), (python, command)  # same keys, same order
            assert python.pop("db") == str(ours) and command.pop("db") == str(theirs)
            assert python == command, operation
            assert all(type(python[k]) is type(command[k]) for k in python)


def test_info_has_the_forms_of_inspect_json(tmp_path, abf_cli):
    key = abf.Key(bytes(range(16)))
    abf.write_key_file(key, tmp_path / "key")
    d = random_digests(500, 5)
    for name, f, extra in (
            ("plain.abf", abf.build(d, 1000, 0.01), []),
            ("keyed.abf", abf.build(d, 1000, 0.01, key=key, catalog_version=4,
                                    catalog_id="0123456789abcdef0123456789abcdef"),
             ["--key-file", tmp_path / "key"]),
            ("blocked.abf", abf.build(d, 1000, 0.01, layout="blocked"), []),
            ("set.abfs", abf.build(d, 1000, 0.01, shards=3, catalog_version=2), [])):
        f.save(tmp_path / name)
        command = cli_json(abf_cli, "inspect", tmp_path / name, *extra)
        info = f.info
        if isinstance(f, abf.Filter):
            assert re.fullmatch(r"0x[0-9a-f]{16}", info["payload_checksum"]), info
        else:
            assert info["hash_count"] == f.hash_count and info["bit_count"] == f.bit_count
        for field, value in info.items():
            if field == "layout":  # Python's name for the protocol's layout
                continue
            assert field in command, f"{field} missing from abf inspect --json"
            if value is None and field in ("catalog_id", "key_fingerprint"):
                assert set(command[field]) == {"0"}, (field, command[field])  # none: zeros
                continue
            assert value == command[field] and type(value) is type(command[field]), field


def test_ranges_are_worded_one_way():
    d = random_digests(5, 6)
    messages = {}
    for value in (-1, 2**64, 2.0**70, 2**31):
        with pytest.raises(abf.LayoutError) as caught:
            abf.build(d, value, 0.01)
        messages[value] = caught.value.message
    with pytest.raises(abf.InvalidArgumentError) as caught:
        abf.build(d, 100, 0.01, catalog_version=-3)
    messages["catalog_version"] = caught.value.message
    with pytest.raises(abf.InvalidArgumentError) as caught:
        abf.build(d, 100, 0.01, shards=70_000)
    messages["shards"] = caught.value.message
    pattern = re.compile(r"\S+ is outside \d+\.\.\S+")
    for value, message in messages.items():
        assert pattern.search(message), (value, message)
        assert "whole number in" not in message and "out of range" not in message, message
    assert messages[-1] == "expected_items -1 is outside 0..2^63-1 (9223372036854775807)"
    assert messages[2**31] == "expected item count 2147483648 is outside 1..2^30 (1073741824)"
    assert messages["shards"] == "shards 70000 is outside 1..65536"
    with pytest.raises(abf.LayoutError) as caught:
        abf.build(d, 1.5, 0.01)
    assert caught.value.message == "expected_items 1.5 is not a whole number"


def test_a_failed_merge_names_the_field_as_python_does(tmp_path):
    d = random_digests(50, 7)
    a, b = abf.build(d, 100, 0.01), abf.build(d, 100, 0.001)
    with pytest.raises(abf.IncompatibleError) as caught:
        abf.merge([a, b])
    message = caught.value.message
    assert f"hash_count differs: parts[0] has {a.hash_count}, parts[1] has {b.hash_count}" \
        in message, message
    assert "hashCount" not in message
    c = abf.build(d, 100, 0.01, catalog_version=2)
    c.save(tmp_path / "c.abf")
    with pytest.raises(abf.IncompatibleError) as caught:
        abf.merge([a, tmp_path / "c.abf"])
    assert "catalog_version differs: parts[0] has 0, parts[1] (" in caught.value.message
    assert str(tmp_path / "c.abf") in caught.value.message and \
        "catalogVersion" not in caught.value.message
    # info and the properties use the names the message uses.
    assert a.info["hash_count"] == a.hash_count


def test_a_missing_catalog_is_a_file_not_found_error(tmp_path):
    missing = tmp_path / "missing.db"
    f = abf.build(random_digests(5, 8), 100, 0.01)
    for call in (lambda: abf.Catalog(missing), lambda: abf.Catalog(str(missing), read_only=True),
                 lambda: abf.dedup(random_digests(3, 9), f, missing)):
        with pytest.raises(FileNotFoundError) as caught:
            call()
        error = caught.value
        assert isinstance(error, abf.CatalogStoreError) and isinstance(error, abf.Error)
        assert isinstance(error, abf.CatalogNotFoundError) and isinstance(error, OSError)
        assert error.errno == errno.ENOENT and error.filename == str(missing)
        assert error.code == "catalog_error"
        assert error.message == f"catalog {missing}: no such file (abf.Catalog.create makes a new one)"
        assert "abf catalog init" not in str(error) and "--" not in str(error)
        again = pickle.loads(pickle.dumps(error))
        assert type(again) is type(error) and again.filename == error.filename
        assert again.errno == errno.ENOENT and str(again) == str(error)
    # Another catalog failure is no FileNotFoundError.
    (tmp_path / "dir.db").mkdir()
    with pytest.raises(abf.CatalogStoreError) as caught:
        abf.Catalog(tmp_path / "dir.db")
    assert not isinstance(caught.value, FileNotFoundError)


def test_stats_index_and_dedup_reports_have_the_clis_keys_and_values(tmp_path, abf_cli):
    db = tmp_path / "c.db"
    stored = random_digests(3000, 10)
    candidates = np.concatenate([stored[1000:2000], random_digests(1500, 11), stored[:10]])
    (tmp_path / "q.txt").write_text("".join(bytes(r).hex() + "\n" for r in candidates))
    with abf.Catalog.create(db) as catalog:
        catalog.add(stored)
        f = catalog.build_filter(4000, 0.01)
        f.save(tmp_path / "c.abf")
        catalog.add(random_digests(20, 12))  # the filter lags the head by one version
    with abf.Catalog(db, read_only=True) as catalog:
        assert catalog.stats() == cli_json(abf_cli, "catalog", "stats", "--db", db)
        python = catalog.write_index(tmp_path / "py.abfx")
        command = cli_json(abf_cli, "index", "--db", db, "-o", tmp_path / "cli.abfx")
        assert python.pop("output") == str(tmp_path / "py.abfx")
        assert command.pop("output") == str(tmp_path / "cli.abfx")
        del command["seconds"]
        assert python == command
        for index in (None, tmp_path / "py.abfx"):
            _, counts = abf.dedup(candidates, f, catalog, return_counts=True, index=index)
            args = ["dedup", "-s", tmp_path / "c.abf", "--db", db, "-i", tmp_path / "q.txt",
                    "-o", tmp_path / "new.txt"] + (["--index", index] if index else [])
            command = cli_json(abf_cli, *args)
            assert list(counts) == list(command), (list(counts), list(command))
            del counts["seconds"], command["seconds"]
            assert counts == command and counts["lag_versions"] == 1
            assert all(type(counts[k]) is type(command[k]) for k in counts)
