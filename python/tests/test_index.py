"""abf.Index (ABFX exact indexes) and abf.dedup(..., index=), checked against
SQLite itself (the sqlite3 module reading the catalog's tables directly)."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import pathlib
import shutil
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import abf
from conftest import random_digests


def present_in_sqlite(path, version: int) -> set[bytes]:
    """The digests present at version, by the schema's own rule."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
        rows = db.execute(
            "SELECT digest FROM artifacts WHERE added_version <= ? "
            "AND (removed_version IS NULL OR removed_version > ?)", (version, version))
        return {bytes(row[0]) for row in rows}


def missing_reference(candidates: np.ndarray, present: set[bytes]) -> np.ndarray:
    seen, out = set(), []
    for row in candidates:
        digest = bytes(row)
        if digest not in present and digest not in seen:
            seen.add(digest)
            out.append(row)
    return np.array(out, np.uint8).reshape(-1, 32)


@pytest.fixture()
def catalog(tmp_path):
    """Version 1 adds 6,000 random digests, version 2 removes 1,000 of them."""
    c = abf.Catalog.create(tmp_path / "c.db")
    stored = random_digests(6000, seed=40)
    c.add(stored)
    c.remove(stored[:1000])
    yield c, stored, tmp_path / "c.db"
    c.close()


def half_present(stored: np.ndarray, seed: int) -> np.ndarray:
    """~50% present: digests held, removed and never added, shuffled."""
    candidates = np.concatenate([stored[500:3500], random_digests(3000, seed=seed)])
    np.random.default_rng(seed).shuffle(candidates)
    return candidates


def test_index_answers_equal_sqlite(catalog, tmp_path):
    c, stored, db = catalog
    report = c.write_index(tmp_path / "c.abfx")
    assert report["catalog_version"] == 2 and report["digest_count"] == 5000
    present = present_in_sqlite(db, 2)
    for mode in ("auto", "copy", "map"):
        index = abf.Index.load(tmp_path / "c.abfx", mode=mode)
        assert len(index) == 5000
        assert index.catalog_version == 2
        assert index.catalog_id == c.id
        assert index.content_fingerprint == report["content_fingerprint"]
        assert index.path == str(tmp_path / "c.abfx")
        held = index.digests()
        assert {bytes(r) for r in held} == present
        assert [bytes(r) for r in held] == sorted(bytes(r) for r in held)
        candidates = half_present(stored, seed=41)
        expected = np.array([bytes(r) in present for r in candidates])
        assert 0.3 < expected.mean() < 0.7
        answers = index.contains(candidates)
        assert answers.dtype == np.bool_ and answers.shape == (len(candidates),)
        assert np.array_equal(answers, expected)
        # The same inputs as Filter.query: bytes, a list of bytes, hex strings.
        assert np.array_equal(index.contains(candidates.tobytes()), expected)
        assert np.array_equal(index.contains([bytes(r) for r in candidates[:50]]), expected[:50])
        assert np.array_equal(index.contains([bytes(r).hex() for r in candidates[:50]]),
                              expected[:50])
        # Boundaries: the first and last digest held, and just past them.
        first, last = bytes(held[0]), bytes(held[-1])
        assert first in index and last in index and held[0] in index
        assert bytes(stored[0]) not in index  # removed at version 2
        below = bytearray(first)
        below[-1] ^= 1
        assert (bytes(below) in index) == (bytes(below) in present)
        assert index.contains(np.empty((0, 32), np.uint8)).shape == (0,)
    with pytest.raises(abf.DigestError):
        index.contains(b"\0" * 31)
    with pytest.raises(abf.DigestError):
        _ = [b"\0" * 32, b"\0" * 32] in index
    with pytest.raises(ValueError):
        abf.Index.load(tmp_path / "c.abfx", mode="mmap")


def test_empty_index_and_damaged_files(catalog, tmp_path):
    c, stored, _ = catalog
    c.write_index(tmp_path / "empty.abfx", version=0)
    empty = abf.Index.load(tmp_path / "empty.abfx")
    assert len(empty) == 0 and empty.catalog_version == 0
    assert not empty.contains(stored[:100]).any()
    assert bytes(stored[0]) not in empty
    data = bytearray((tmp_path / "empty.abfx").read_bytes())
    data[5] ^= 1
    (tmp_path / "bad.abfx").write_bytes(bytes(data))
    with pytest.raises(abf.Error):
        abf.Index.load(tmp_path / "bad.abfx")
    with pytest.raises(abf.IoError):
        abf.Index.load(tmp_path / "none.abfx")


def test_dedup_with_an_index_equals_sqlite(catalog, tmp_path):
    c, stored, db = catalog
    f = c.build_filter(6000, 0.2)  # many maybes for the index to answer
    c.write_index(tmp_path / "c.abfx")
    index = abf.Index.load(tmp_path / "c.abfx")
    candidates = np.concatenate([half_present(stored, seed=42), stored[:10]])
    expected = missing_reference(candidates, present_in_sqlite(db, 2))
    plain, plain_counts = abf.dedup(candidates, f, c, return_counts=True)
    assert np.array_equal(plain, expected)
    for given in (index, tmp_path / "c.abfx", str(tmp_path / "c.abfx")):
        missing, counts = abf.dedup(candidates, f, c, return_counts=True, index=given)
        assert np.array_equal(missing, expected)
        assert counts["exact_lookups"] == plain_counts["exact_lookups"] > 500
        assert counts["catalog_version"] == counts["index_version"] == 2
        # At the index's version the index alone answers.
        assert counts["index_lookups"] == counts["exact_lookups"]
        assert counts["store_lookups"] == 0
    assert "index_lookups" not in plain_counts
    # Without the filter, every digest goes to the index.
    assert np.array_equal(abf.dedup(candidates, f, c, use_filter=False, index=index), expected)
    # A filter set, and a filter of an older version than the index.
    s = c.build_filter(6000, 0.2, shards=3)
    old = c.build_filter(6000, 0.2, version=1)
    for filter_ in (s, old):
        assert np.array_equal(abf.dedup(candidates, filter_, c, index=index), expected)


def test_dedup_with_an_index_answers_at_the_head(catalog, tmp_path):
    """The index of version 2; the catalog adds (3) and removes (4) after it."""
    c, stored, db = catalog
    f = c.build_filter(20000, 0.2)
    c.write_index(tmp_path / "c.abfx")
    index = abf.Index.load(tmp_path / "c.abfx")
    added = random_digests(2000, seed=43)
    c.add(added)
    candidates = np.concatenate([half_present(stored, seed=44), added[:1000]])
    for version in (3, 4):
        expected = missing_reference(candidates, present_in_sqlite(db, version))
        missing, counts = abf.dedup(candidates, f, c, return_counts=True, index=index)
        assert counts["catalog_version"] == version
        assert np.array_equal(missing, expected)
        # The digests added after the index's version (all of them after a
        # removal, for those the index holds) are asked of the catalog.
        assert counts["index_lookups"] + counts["store_lookups"] == counts["exact_lookups"]
        assert counts["store_lookups"] >= 1000 and counts["index_lookups"] > 0
        assert np.array_equal(abf.dedup(candidates, f, c), expected)
        if version == 3:
            c.remove(np.concatenate([stored[2000:2100], added[:100]]))
    # The empty index of version 0: everything answered through the head.
    c.write_index(tmp_path / "empty.abfx", version=0)
    expected = missing_reference(candidates, present_in_sqlite(db, 4))
    assert np.array_equal(abf.dedup(candidates, f, c, index=tmp_path / "empty.abfx"), expected)


def test_dedup_refuses_an_index_of_another_catalog(catalog, tmp_path):
    c, stored, _ = catalog
    f = c.build_filter(6000, 0.01)
    with abf.Catalog.create(tmp_path / "other.db") as other:
        other.add(stored)
        other.remove(stored[:1000])  # the same digests at the same version
        other.write_index(tmp_path / "other.abfx")
    with pytest.raises(abf.CatalogMismatchError, match="other.abfx"):
        abf.dedup(stored[:10], f, c, index=tmp_path / "other.abfx")
    # Of this catalog's version 2, used with a backup of it taken at version
    # 1 (the same catalog id): the version is missing there.
    with abf.Catalog.create(tmp_path / "r.db") as r:
        r.add(stored)
    for suffix in ("", "-wal"):
        if (tmp_path / ("r.db" + suffix)).exists():
            shutil.copy(tmp_path / ("r.db" + suffix), tmp_path / ("backup.db" + suffix))
    with abf.Catalog(tmp_path / "r.db") as r:
        r.remove(stored[:10])
        r.write_index(tmp_path / "r.abfx")
    with abf.Catalog(tmp_path / "backup.db", read_only=True) as backup:
        old = backup.build_filter(6000, 0.01)
        with pytest.raises(abf.CatalogMismatchError, match="only reaches version 1"):
            abf.dedup(stored[:10], old, backup, index=tmp_path / "r.abfx")
        # The backup's own index serves it.
        assert len(abf.dedup(stored[:10], old, backup)) == 0


def test_dedup_checks_the_digests_of_a_rewritten_index(catalog, tmp_path):
    """An index whose header names this catalog's version and fingerprint
    over other digests is refused (the sum over its digests)."""
    c, stored, _ = catalog
    f = c.build_filter(6000, 0.01)
    c.write_index(tmp_path / "c.abfx")
    data = bytearray((tmp_path / "c.abfx").read_bytes())
    # One digest rewritten in place to a value between its neighbours, the
    # block checksums redone, as a deliberate forger would: the header (and
    # its checksum) still names the catalog's version and fingerprint.
    name = ctypes.util.find_library("xxhash")
    if not name:
        pytest.skip("libxxhash is not installed (Debian libxxhash0)")
    library = ctypes.CDLL(name)
    library.XXH3_64bits.restype = ctypes.c_uint64
    library.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def xxh3(data: bytes) -> bytes:
        return library.XXH3_64bits(data, len(data)).to_bytes(8, "little")

    i = 100
    at = 128 + 32 * i
    digest = bytearray(data[at:at + 32])
    digest[-1] ^= 1
    if not bytes(data[at - 32:at]) < bytes(digest) < bytes(data[at + 32:at + 64]):
        digest[-1] ^= 1
        digest[-2] ^= 1
    assert bytes(data[at - 32:at]) < bytes(digest) < bytes(data[at + 32:at + 64])
    data[at:at + 32] = digest
    count = int.from_bytes(data[56:64], "little")
    block = int.from_bytes(data[64:68], "little")
    blocks = (count + block - 1) // block
    table = 128 + 32 * count
    for b in range(blocks):
        body = bytes(data[128 + 32 * b * block:128 + 32 * min(count, (b + 1) * block)])
        data[table + 8 * b:table + 8 * b + 8] = xxh3(body)
    data[table + 8 * blocks:] = xxh3(bytes(data[table:table + 8 * blocks]))
    (tmp_path / "forged.abfx").write_bytes(bytes(data))
    forged = abf.Index.load(tmp_path / "forged.abfx")
    with pytest.raises(abf.CatalogMismatchError, match="add up"):
        abf.dedup(stored[:10], f, c, index=forged)


# --- index sets (abf index --shards S: an ABXS manifest and S ABFX shards) -----


def write_index_set(cli: str, db, path, shards: int, version: int | None = None):
    args = [cli, "index", "--db", str(db), "--shards", str(shards), "-o", str(path)]
    if version is not None:
        args += ["--version", str(version)]
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                   timeout=120)
    return path


def test_index_set_answers_equal_the_single_index_and_sqlite(catalog, tmp_path, abf_cli):
    c, stored, db = catalog
    report = c.write_index(tmp_path / "c.abfx")
    write_index_set(abf_cli, db, tmp_path / "c.abxs", 3)
    shard_files = sorted(tmp_path.glob("c.abxs.*.abfx"))
    assert len(shard_files) == 3
    one = abf.Index.load(tmp_path / "c.abfx")
    assert one.shard_count == 1 and "shards" not in repr(one)
    present = present_in_sqlite(db, 2)
    # Members, digests removed at version 2, random digests; and every
    # digest held with its last byte flipped (neighbours of members).
    near = stored[1000:2000].copy()
    near[:, -1] ^= 1
    candidates = np.concatenate([half_present(stored, seed=45), stored[:1000], near])
    np.random.default_rng(46).shuffle(candidates)
    expected = np.array([bytes(r) in present for r in candidates])
    assert 0.2 < expected.mean() < 0.8
    assert np.array_equal(one.contains(candidates), expected)
    for mode in ("auto", "copy", "map"):
        s = abf.Index.load(tmp_path / "c.abxs", mode=mode)
        assert s.shard_count == 3 and "3 shards" in repr(s)
        assert len(s) == len(one) == report["digest_count"] == 5000
        assert s.catalog_id == one.catalog_id == c.id
        assert s.catalog_version == one.catalog_version == 2
        assert s.content_fingerprint == one.content_fingerprint == report["content_fingerprint"]
        assert s.path == str(tmp_path / "c.abxs")
        assert np.array_equal(s.contains(candidates), expected)
        assert np.array_equal(s.contains(candidates.tobytes()), expected)
        assert [bytes(r) in s for r in candidates[:300]] == expected[:300].tolist()
        assert np.array_equal(s.digests(), one.digests())
        assert s.contains(np.empty((0, 32), np.uint8)).shape == (0,)
    # Each shard is an index of its own; together they are the whole.
    shards = [abf.Index.load(p) for p in shard_files]
    assert all(x.shard_count == 1 and len(x) > 0 for x in shards)
    assert sum(len(x) for x in shards) == 5000
    union = np.zeros(len(candidates), bool)
    for x in shards:
        union |= x.contains(candidates)
    assert np.array_equal(union, expected)
    # A set of one shard, and the empty set of version 0.
    write_index_set(abf_cli, db, tmp_path / "one.abxs", 1)
    assert np.array_equal(abf.Index.load(tmp_path / "one.abxs").contains(candidates), expected)
    write_index_set(abf_cli, db, tmp_path / "empty.abxs", 4, version=0)
    empty = abf.Index.load(tmp_path / "empty.abxs", mode="map")
    assert len(empty) == 0 and empty.shard_count == 4 and empty.catalog_version == 0
    assert not empty.contains(candidates).any() and empty.digests().shape == (0, 32)


def test_dedup_with_an_index_set_equals_without(catalog, tmp_path, abf_cli):
    c, stored, db = catalog
    f = c.build_filter(20000, 0.2)  # many maybes for the index to answer
    write_index_set(abf_cli, db, tmp_path / "c.abxs", 3)
    candidates = np.concatenate([half_present(stored, seed=47), stored[:10]])
    expected = missing_reference(candidates, present_in_sqlite(db, 2))
    plain, plain_counts = abf.dedup(candidates, f, c, return_counts=True)
    assert np.array_equal(plain, expected)
    s = abf.Index.load(tmp_path / "c.abxs")
    for given in (s, abf.Index.load(tmp_path / "c.abxs", mode="map"), tmp_path / "c.abxs",
                  str(tmp_path / "c.abxs")):
        missing, counts = abf.dedup(candidates, f, c, return_counts=True, index=given)
        assert np.array_equal(missing, expected)
        assert counts["exact_lookups"] == plain_counts["exact_lookups"] > 500
        assert counts["index_version"] == 2
        assert counts["index_lookups"] == counts["exact_lookups"]
        assert counts["store_lookups"] == 0
    assert np.array_equal(abf.dedup(candidates, f, c, use_filter=False, index=s), expected)
    # Past the set's version the catalog answers what changed.
    added = random_digests(2000, seed=48)
    c.add(added)
    c.remove(stored[2000:2100])
    more = np.concatenate([candidates, added[:1000]])
    expected = missing_reference(more, present_in_sqlite(db, 4))
    missing, counts = abf.dedup(more, f, c, return_counts=True, index=s)
    assert np.array_equal(missing, expected)
    assert np.array_equal(abf.dedup(more, f, c), expected)
    assert counts["store_lookups"] >= 1000 and counts["index_lookups"] > 0
    # Another catalog's set is refused, naming the manifest.
    with abf.Catalog.create(tmp_path / "other.db") as other:
        other.add(stored)
        other.remove(stored[:1000])
    write_index_set(abf_cli, tmp_path / "other.db", tmp_path / "other.abxs", 2)
    with pytest.raises(abf.CatalogMismatchError, match="other.abxs"):
        abf.dedup(stored[:10], f, c, index=tmp_path / "other.abxs")


def test_damaged_index_sets_raise_snapshot_error(catalog, tmp_path, abf_cli):
    c, stored, db = catalog
    f = c.build_filter(6000, 0.01)
    manifest = write_index_set(abf_cli, db, tmp_path / "c.abxs", 3)
    good = manifest.read_bytes()
    flipped_header, flipped_body = bytearray(good), bytearray(good)
    flipped_header[40] ^= 1  # the content fingerprint
    flipped_body[-1] ^= 1  # the last shard entry
    for name, data in {"truncated": good[:100], "header": bytes(flipped_header),
                       "body": bytes(flipped_body), "short": good[:-1]}.items():
        bad = tmp_path / f"bad-{name}.abxs"
        bad.write_bytes(data)
        for load in (lambda: abf.Index.load(bad), lambda: abf.Index.load(bad, mode="map"),
                     lambda: abf.dedup(stored[:10], f, c, index=bad)):
            with pytest.raises(abf.SnapshotError) as caught:
                load()
            assert caught.value.code.startswith("index_set_manifest_"), (name, caught.value.code)
            assert str(bad) in str(caught.value)
    # A shard gone, and a shard replaced by another set's shard.
    shard_files = sorted(tmp_path.glob("c.abxs.*.abfx"))
    saved = shard_files[1].read_bytes()
    shard_files[1].unlink()
    with pytest.raises(abf.SnapshotError) as caught:
        abf.Index.load(manifest)
    assert caught.value.code == "index_set_shard_missing"
    write_index_set(abf_cli, db, tmp_path / "v1.abxs", 3, version=1)
    shutil.copy(sorted(tmp_path.glob("v1.abxs.*.abfx"))[1], shard_files[1])
    with pytest.raises(abf.SnapshotError) as caught:
        abf.Index.load(manifest)
    assert caught.value.code == "index_set_shard_mismatch"
    shard_files[1].write_bytes(saved)
    assert len(abf.Index.load(manifest)) == 5000


TRUNCATE_SHARD = textwrap.dedent(
    """
    import os, subprocess, sys
    import abf
    from conftest import random_digests
    cli, path = sys.argv[1], sys.argv[2]
    d = random_digests(300_000, 9)
    c = abf.Catalog.create(path + ".db"); c.add(d); c.close()
    subprocess.run([cli, "index", "--db", path + ".db", "--shards", "3", "-o", path],
                   check=True, stdout=subprocess.DEVNULL)
    s = abf.Index.load(path, mode="map")
    assert s.shard_count == 3 and s.contains(d).all()
    folder = os.path.dirname(path)
    shard = sorted(n for n in os.listdir(folder) if n.endswith(".abfx"))[2]
    os.truncate(os.path.join(folder, shard), 4096)
    for attempt in range(2):  # and again: the damage is remembered
        try:
            s.contains(d)
        except abf.IoError as e:
            assert "truncated" in str(e) and path in str(e), e
            print("io_error", attempt)
    print("alive")
    """
)


def test_a_mapped_index_set_with_a_truncated_shard_raises(tmp_path, abf_cli):
    path = tmp_path / "x" / "m.abxs"
    path.parent.mkdir()
    env = dict(os.environ,
               PYTHONPATH=os.pathsep.join([str(pathlib.Path(__file__).parent)] + sys.path))
    done = subprocess.run([sys.executable, "-c", TRUNCATE_SHARD, abf_cli, str(path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, (done.returncode, done.stderr)
    assert done.stdout.split() == ["io_error", "0", "io_error", "1", "alive"], done.stdout


def test_index_is_exported():
    assert abf.Index.__module__ == "abf" and "Index" in abf.__all__
