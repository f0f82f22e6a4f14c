"""Arguments as a Python caller gives them: wrong types named by type, shape
and dtype (never the contents), whole floats as counts, NUL bytes in paths,
key errors that name key=, and mode="map" files truncated under a query."""

from __future__ import annotations

import os
import pathlib
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import abf
from conftest import random_digests

# A recognisable value: if it shows in a message, the contents were printed.
MARK = 0xAB


def marked(rows: int = 2000) -> np.ndarray:
    return np.full((rows, 32), MARK, np.uint8)


def assert_names_the_array(error: BaseException, array: np.ndarray) -> None:
    text = str(error)
    assert "Invoked with" not in text, text
    assert str(MARK) not in text and "0xab" not in text.lower() and "array(" not in text, text
    assert "numpy.ndarray" in text and str(array.shape) in text and str(array.dtype) in text, text


@pytest.fixture
def keyed_world(tmp_path):
    digests = random_digests(500, 7)
    catalog = abf.Catalog.create(tmp_path / "c.db")
    catalog.add(digests)
    f = catalog.build_filter(1000, 0.01)
    f.save(tmp_path / "f.abf")
    catalog.write_index(tmp_path / "i.abfx")
    index = abf.Index.load(tmp_path / "i.abfx")
    s = abf.build(digests, 1000, 0.01, shards=2)
    yield tmp_path, digests, catalog, f, s, index
    catalog.close()


def test_a_wrong_type_names_type_shape_and_dtype(keyed_world):
    tmp_path, digests, catalog, f, s, index = keyed_world
    big = marked()
    floats = marked().astype(np.float64)
    calls = {
        "Filter.query digests": lambda: f.query(floats),
        "Filter.query out": lambda: f.query(digests, out=floats),
        "Filter.query backend": lambda: f.query(digests, backend=big),
        "FilterSet.query backend": lambda: s.query(digests, backend=big),
        "Filter.might_contain": lambda: f.might_contain(floats),
        "FilterSet.shard_index": lambda: s.shard_index(floats),
        "FilterSet.shard": lambda: s.shard(big),
        "build digests": lambda: abf.build(floats, 1000, 0.01),
        "build expected_items": lambda: abf.build(digests, big, 0.01),
        "build fpp": lambda: abf.build(digests, 1000, big),
        "build catalog_version": lambda: abf.build(digests, 1000, 0.01, catalog_version=big),
        "build shards": lambda: abf.build(digests, 1000, 0.01, shards=big),
        "build backend": lambda: abf.build(digests, 1000, 0.01, backend=big),
        "build layout": lambda: abf.build(digests, 1000, 0.01, layout=big),
        "choose_layout": lambda: abf.choose_layout(1000, big),
        "choose_shard_count": lambda: abf.choose_shard_count(big, 0.01),
        "shard_expected_item_count": lambda: abf.shard_expected_item_count(1000, big),
        "load path": lambda: abf.load(big),
        "load mode": lambda: abf.load(tmp_path / "f.abf", mode=big),
        "from_bytes": lambda: abf.from_bytes(42),
        "merge parts": lambda: abf.merge([f, big]),
        "Key.from_hex": lambda: abf.Key.from_hex(big),
        "write_key_file": lambda: abf.write_key_file(big, tmp_path / "k"),
        "read_key_file": lambda: abf.read_key_file(big),
        "Index.load": lambda: abf.Index.load(big),
        "Index.load mode": lambda: abf.Index.load(tmp_path / "i.abfx", mode=big),
        "Index.contains": lambda: index.contains(floats),
        "Index in": lambda: floats in index,
        "Catalog": lambda: abf.Catalog(big),
        "Catalog read_only": lambda: abf.Catalog(tmp_path / "c.db", read_only=big),
        "Catalog.create": lambda: abf.Catalog.create(big),
        "Catalog.add": lambda: catalog.add(floats),
        "Catalog.remove": lambda: catalog.remove(floats),
        "Catalog.contains": lambda: catalog.contains(floats),
        "Catalog.contains version": lambda: catalog.contains(digests, version=big),
        "Catalog.find_missing": lambda: catalog.find_missing(floats),
        "Catalog.count": lambda: catalog.count(big),
        "Catalog.content": lambda: catalog.content(big),
        "Catalog.digests": lambda: catalog.digests(big),
        "Catalog.write_index path": lambda: catalog.write_index(big),
        "Catalog.write_index block": lambda: catalog.write_index(tmp_path / "j", block_digests=big),
        "Catalog.build_filter n": lambda: catalog.build_filter(big, 0.01),
        "Catalog.build_filter fpp": lambda: catalog.build_filter(1000, big),
        "dedup digests": lambda: abf.dedup(floats, f, catalog),
        "dedup filter": lambda: abf.dedup(digests, big, catalog),
        "dedup catalog": lambda: abf.dedup(digests, f, big),
        "dedup index": lambda: abf.dedup(digests, f, catalog, index=big),
        "dedup use_filter": lambda: abf.dedup(digests, f, catalog, use_filter=big),
        "dedup return_counts": lambda: abf.dedup(digests, f, catalog, return_counts=big),
        "dedup batch_size": lambda: abf.dedup(digests, f, catalog, batch_size=big),
        "dedup backend": lambda: abf.dedup(digests, f, catalog, backend=big),
    }
    for name, call in calls.items():
        with pytest.raises(TypeError) as caught:
            call()
        if name == "from_bytes":
            assert "data must be bytes-like" in str(caught.value) and "not an int" in str(caught.value)
            continue
        array = floats if "floats" in call.__code__.co_freevars else big
        try:
            assert_names_the_array(caught.value, array)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from None


def test_arguments_no_signature_takes_are_named_not_printed(keyed_world):
    """An unknown keyword or one argument too many: pybind11 itself would
    print every argument's repr (an array's contents)."""
    tmp_path, digests, catalog, f, s, index = keyed_world
    big = marked()
    calls = {
        "build shard=": lambda: abf.build(big, 1000, 0.01, shard=2),
        "build too many": lambda: abf.build(big, 1000, 0.01, 0, None, None, 1, "auto", "classic",
                                            big),
        "Filter.query bogus=": lambda: f.query(big, bogus=big),
        "FilterSet.query too many": lambda: s.query(big, None, "auto", big),
        "Filter.query unbound": lambda: abf.Filter.query(big),
        "might_contain": lambda: f.might_contain(big, big),
        "Index.contains": lambda: index.contains(big, version=1),
        "Index.load": lambda: abf.Index.load(big, "map", big),
        "Catalog.add": lambda: catalog.add(big, big),
        "Catalog.create": lambda: abf.Catalog.create(big, big),
        "dedup": lambda: abf.dedup(big, f, catalog, filter_first=big),
        "merge": lambda: abf.merge([f], big, None, "auto", big),
        "Key.from_hex": lambda: abf.Key.from_hex(big, big),
    }
    # The module functions and static methods are Python functions
    # (abf._signatures.python_function): Python refuses the call itself,
    # naming no argument's value.
    by_python = {"build shard=", "build too many", "Index.load", "Catalog.create", "dedup",
                 "merge", "Key.from_hex"}
    for name, call in calls.items():
        with pytest.raises(TypeError) as caught:
            call()
        text = str(caught.value)
        try:
            # Python's own words, naming the function and what is wrong.
            assert "() got an unexpected keyword argument '" in text or \
                " positional argument" in text, text
            if name in by_python:
                assert "Invoked with" not in text and "array(" not in text, text
                assert str(MARK) not in text and "0xab" not in text.lower(), text
            else:
                assert_names_the_array(caught.value, big)
        except AssertionError as failure:
            raise AssertionError(f"{name}: {failure}") from None
    # The docstrings are the functions' own, not pybind11's "Overloaded function".
    for function in (abf.build, abf.Filter.query, abf.Index.load, abf.Catalog.add, abf.dedup):
        assert "Overloaded" not in function.__doc__ and "*args" not in function.__doc__
    assert abf._abf.build.__text_signature__.startswith("(digests, expected_items, fpp")
    assert abf.build.__doc__.startswith("\nBuilds a filter") or \
        abf.build.__doc__.startswith("Builds a filter"), abf.build.__doc__[:40]


def test_whole_floats_count(tmp_path):
    digests = random_digests(100, 3)
    exact = abf.build(digests, 1_000_000, 0.01)
    for n in (1e6, 1_000_000.0, np.float64(1e6)):
        assert abf.build(digests, n, 0.01) == exact
    assert abf.choose_layout(2.0, 0.5) == abf.choose_layout(2, 0.5)
    assert abf.choose_shard_count(1e6, 0.01) == abf.choose_shard_count(10**6, 0.01)
    assert abf.shard_expected_item_count(1e6, 4.0) == abf.shard_expected_item_count(10**6, 4)
    assert abf.build(digests, 1e3, 0.01, catalog_version=5.0).catalog_version == 5
    assert abf.build(digests, 1e3, 0.01, shards=2.0).shard_count == 2
    for bad in (1.5, -1.0, -0.5, float("nan"), float("inf"), float("-inf"), 1e19):
        with pytest.raises(ValueError, match="expected_items") as caught:
            abf.build(digests, bad, 0.01)
        assert isinstance(caught.value, abf.LayoutError)
        with pytest.raises(ValueError, match="catalog_version"):
            abf.build(digests, 1000, 0.01, catalog_version=bad)
        with pytest.raises(ValueError, match="shards"):
            abf.build(digests, 1000, 0.01, shards=bad)
    for bad in (True, "1000", None, 1 + 0j):
        with pytest.raises(TypeError, match="expected_items must be an int"):
            abf.build(digests, bad, 0.01)
    catalog = abf.Catalog.create(tmp_path / "c.db")
    catalog.add(digests)
    assert catalog.count(1.0) == 100
    assert catalog.build_filter(1e3, 0.01, version=1.0) == catalog.build_filter(1000, 0.01)
    with pytest.raises(ValueError, match="version"):
        catalog.count(0.5)
    missing = abf.dedup(digests, catalog.build_filter(1e3, 0.01), catalog, batch_size=64.0)
    assert len(missing) == 0
    with pytest.raises(ValueError, match="batch_size"):
        abf.dedup(digests, exact, catalog, batch_size=2.5)
    catalog.close()


def test_a_nul_in_a_path_is_refused_by_name(tmp_path):
    digests = random_digests(50, 4)
    f = abf.build(digests, 100, 0.01)
    good = tmp_path / "good"
    f.save(good)
    assert abf.load(good) == f
    s = abf.build(digests, 100, 0.01, shards=2)
    s.save(tmp_path / "set")
    catalog = abf.Catalog.create(tmp_path / "c.db")
    catalog.add(digests)
    catalog.write_index(tmp_path / "good.abfx")
    key = abf.Key.generate()

    class Fs:
        def __init__(self, path):
            self.path = path

        def __fspath__(self):
            return self.path

    def spellings(path: pathlib.Path, suffix: str):
        text = str(path) + "\0" + suffix
        return [text, os.fsencode(text), Fs(text), Fs(os.fsencode(text))]

    cases = []
    for p in spellings(good, ".abf"):
        cases += [("path", lambda p=p: abf.load(p)), ("path", lambda p=p: f.save(p))]
        cases += [("path", lambda p=p: abf.Catalog(p)), ("path", lambda p=p: abf.Catalog.create(p))]
        cases += [("path", lambda p=p: s.save(p)), ("path", lambda p=p: abf.read_key_file(p))]
        cases += [("path", lambda p=p: abf.write_key_file(key, p))]
        cases += [("path", lambda p=p: catalog.write_index(p))]
        cases += [("parts item", lambda p=p: abf.merge([f, p]))]
        cases += [("filter", lambda p=p: abf.dedup(digests, p, catalog))]
        cases += [("catalog", lambda p=p: abf.dedup(digests, f, p))]
    for p in spellings(tmp_path / "good.abfx", "x"):
        cases += [("path", lambda p=p: abf.Index.load(p))]
        cases += [("index", lambda p=p: abf.dedup(digests, catalog.build_filter(100, 0.01), catalog, index=p))]
    for what, call in cases:
        with pytest.raises(ValueError, match=f"^{what}: embedded null byte"):
            call()
    assert sorted(x.name for x in tmp_path.iterdir() if x.name.startswith("good")) == [
        "good",
        "good.abfx",
    ]
    catalog.close()


def test_an_error_naming_a_file_that_is_not_utf8_is_the_librarys_error(tmp_path):
    """A set saved under a name that is not UTF-8 (bytes 0xff) names its
    shards after it; with a shard gone, the error names that shard. It is
    abf's SnapshotError with the stray byte spelled \\xff, not a
    UnicodeDecodeError from turning the message into a str."""
    s = abf.build(random_digests(300, 6), 1000, 0.01, shards=2)
    path = os.path.join(os.fsencode(tmp_path), b"set-\xff.abfs")
    s.save(path)
    assert abf.load(path) == s
    shards = [n for n in os.listdir(os.fsencode(tmp_path)) if n.endswith(b".abf")]
    assert len(shards) == 2 and all(b"\xff" in n for n in shards), shards
    os.remove(os.path.join(os.fsencode(tmp_path), shards[0]))
    with pytest.raises(abf.Error) as caught:
        abf.load(path)
    assert not isinstance(caught.value, UnicodeError)
    assert "\\xff" in str(caught.value), str(caught.value)


def test_key_errors_name_the_key_argument(tmp_path):
    key = abf.Key.generate()
    f = abf.build(random_digests(10, 5), 100, 0.01, key=key)
    f.save(tmp_path / "k.abf")
    with pytest.raises(abf.FilterKeyError) as caught:
        abf.load(tmp_path / "k.abf")
    text = str(caught.value)
    assert "--key-file" not in text and "key=abf.read_key_file(path)" in text, text
    with pytest.raises(abf.FilterKeyError, match="key=abf.read_key_file"):
        abf.from_bytes(f.to_bytes())
    assert abf.load(tmp_path / "k.abf", key=key) == f
    with pytest.raises(abf.LayoutError) as caught:
        abf.build(random_digests(1, 1), 2**31, 0.01, shards=2)
    assert "--shards" not in str(caught.value) and 'shards="auto"' in str(caught.value)


TRUNCATE = textwrap.dedent(
    """
    import os, sys
    import abf
    from conftest import random_digests
    kind, path = sys.argv[1], sys.argv[2]
    d = random_digests(300_000, 9)
    if kind == "index":
        c = abf.Catalog.create(path + ".db"); c.add(d); c.write_index(path)
        obj = abf.Index.load(path, mode="map")
        ask = lambda: obj.contains(d)
    elif kind == "set":
        abf.build(d, 300_000, 0.01, shards=3).save(path)
        obj = abf.load(path, mode="map")
        ask = lambda: obj.query(d)
        shard_paths = [os.path.join(os.path.dirname(path), n) for n in os.listdir(os.path.dirname(path))
                       if n.endswith(".abf")]
    else:
        abf.build(d, 300_000, 0.01).save(path)
        obj = abf.load(path, mode="map")
        ask = lambda: obj.query(d)
    assert ask().all()
    for p in (shard_paths if kind == "set" else [path]):
        os.truncate(p, 4096)
    for attempt in range(2):  # and again: the damage is remembered
        try:
            ask()
        except abf.IoError as e:
            assert "truncated" in str(e) and "mode=\\"map\\"" in str(e), e
            print("io_error", attempt)
    print("alive")
    """
)


def run_truncate(path, kind):
    path.parent.mkdir()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent)] + sys.path))
    done = subprocess.run(
        [sys.executable, "-c", TRUNCATE, kind, str(path)],
        capture_output=True, text=True, timeout=120, env=env,
    )
    assert done.returncode != -signal.SIGBUS, done.stderr
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["io_error", "0", "io_error", "1", "alive"], done.stdout


@pytest.mark.parametrize("kind", ["filter", "set", "index"])
def test_a_mapped_file_truncated_raises_instead_of_sigbus(tmp_path, kind):
    run_truncate(tmp_path / "x" / ("m.abfx" if kind == "index" else "m.abf"), kind)


CONCURRENT = textwrap.dedent(
    """
    import os, sys, threading
    import abf
    from conftest import random_digests
    path = sys.argv[1]
    d = random_digests(300_000, 9)
    abf.build(d, 300_000, 0.01, shards=3).save(path)
    obj = abf.load(path, mode="map")
    assert obj.query(d).all()
    folder = os.path.dirname(path)
    for name in os.listdir(folder):
        if name.endswith(".abf"):
            os.truncate(os.path.join(folder, name), 4096)
    raised = []
    def ask():
        try:
            obj.query(d)
        except abf.IoError:
            raised.append(1)
    threads = [threading.Thread(target=ask) for _ in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    print("raised", len(raised))
    """
)


def test_faults_on_several_threads_in_one_mapping_are_all_absorbed(tmp_path):
    """Four queries (each on TBB's threads too) fault in the same truncated
    shards at once: a handler can find another's zero pages already mapped
    where it faulted. Before that case was handled it passed the signal on,
    and the next fault killed the process (about 1 run in 3 of the test
    above on 2 cores), so the scenario runs several times."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent)] + sys.path))
    for attempt in range(5):
        folder = tmp_path / str(attempt)
        folder.mkdir()
        done = subprocess.run(
            [sys.executable, "-c", CONCURRENT, str(folder / "m.abf")],
            capture_output=True, text=True, timeout=120, env=env,
        )
        assert done.returncode != -signal.SIGBUS, f"round {attempt}: {done.stderr}"
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["raised", "4"], done.stdout


def test_a_sigbus_elsewhere_still_kills(tmp_path):
    """The handler absorbs only faults in abf's own mappings: another
    truncated mapping still dies of SIGBUS, as without abf."""
    script = textwrap.dedent(
        """
        import mmap, os, sys
        import abf
        from conftest import random_digests
        d = random_digests(1000, 1)
        abf.build(d, 1000, 0.01).save(sys.argv[1] + ".abf")
        f = abf.load(sys.argv[1] + ".abf", mode="map")  # the handler is installed
        with open(sys.argv[1], "wb") as out:
            out.write(b"x" * 65536)
        fd = os.open(sys.argv[1], os.O_RDONLY)
        m = mmap.mmap(fd, 65536, prot=mmap.PROT_READ)
        os.truncate(sys.argv[1], 0)
        print(m[60000])
        """
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent)] + sys.path))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "other")],
        capture_output=True, text=True, timeout=60, env=env,
    )
    assert done.returncode == -signal.SIGBUS, (done.returncode, done.stderr)
