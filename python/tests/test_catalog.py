"""abf.Catalog and abf.dedup, checked against SQLite itself (the sqlite3
module reading the catalog's tables directly)."""

from __future__ import annotations

import sqlite3
import subprocess

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
    """The candidates not present, in input order, each once."""
    seen = set()
    out = []
    for row in candidates:
        digest = bytes(row)
        if digest not in present and digest not in seen:
            seen.add(digest)
            out.append(row)
    return np.array(out, np.uint8).reshape(-1, 32)


@pytest.fixture()
def catalog(tmp_path):
    c = abf.Catalog.create(tmp_path / "c.db")
    yield c
    c.close()


def test_add_remove_versions_and_find_missing(catalog, tmp_path):
    a = random_digests(5000, seed=20)
    b = random_digests(3000, seed=21)
    assert catalog.version == 0 and len(catalog.id) == 32
    change = catalog.add(a)
    assert change == {"db": str(tmp_path / "c.db"), "operation": "add", "catalog_version": 1,
                      "read": 5000, "added": 5000, "already_present": 0}
    change = catalog.add(np.concatenate([a[:100], b]))
    assert change["catalog_version"] == 2 and change["added"] == 3000
    assert change["already_present"] == 100 and change["read"] == 3100
    change = catalog.remove(np.concatenate([a[:1000], random_digests(7, seed=24)]))
    assert change == {"db": str(tmp_path / "c.db"), "operation": "remove", "catalog_version": 3,
                      "read": 1007, "removed": 1000, "not_present": 7}
    assert catalog.version == 3 and catalog.count() == 7000 and catalog.count(version=1) == 5000
    assert catalog.stats()["latest_version"] == 3
    candidates = np.concatenate([a[500:1500], random_digests(2000, seed=22), b[:10], a[:600]])
    for version in (0, 1, 2, 3):
        present = present_in_sqlite(tmp_path / "c.db", version)
        assert {bytes(r) for r in catalog.digests(version=version)} == present
        assert np.array_equal(catalog.find_missing(candidates, version=version),
                              missing_reference(candidates, present))
        assert np.array_equal(catalog.contains(candidates, version=version),
                              np.array([bytes(r) in present for r in candidates]))
    with abf.Catalog(tmp_path / "c.db", read_only=True) as ro:
        assert ro.version == 3 and ro.id == catalog.id
        with pytest.raises(abf.CatalogStoreError) as e:
            ro.add(a[:1])
        assert e.value.code == "catalog_error"
    closed = abf.Catalog(tmp_path / "c.db", read_only=True)
    closed.close()
    with pytest.raises(abf.InvalidArgumentError, match="closed"):
        closed.find_missing(a[:1])
    with pytest.raises(abf.CatalogStoreError):
        abf.Catalog(tmp_path / "none.db")
    with pytest.raises(abf.CatalogStoreError):
        abf.Catalog.create(tmp_path / "c.db")  # never over an existing catalog


def test_dedup_equals_sqlite(catalog, tmp_path):
    stored = random_digests(20_000, seed=23)
    catalog.add(stored)
    catalog.remove(stored[:2000])
    version = catalog.version
    fresh = random_digests(30_000, seed=24)
    # New digests, stored ones, removed ones, and repeats of each.
    candidates = np.concatenate([fresh, stored[1000:5000], fresh[:3000], stored[:500]])
    np.random.default_rng(25).shuffle(candidates)
    expected = missing_reference(candidates, present_in_sqlite(tmp_path / "c.db", version))
    for shards in (1, 3):
        f = catalog.build_filter(20_000, 0.01, shards=shards)
        assert f.catalog_id == catalog.id and f.catalog_version == version
        missing, counts = abf.dedup(candidates, f, catalog, return_counts=True)
        assert np.array_equal(missing, expected)
        assert counts["total"] == len(candidates) and counts["new"] == len(expected)
        assert counts["total"] == counts["new"] + counts["repeats"] + counts["present"]
        assert counts["exact_lookups"] == counts["maybe"] < counts["total"] / 2
        assert np.array_equal(abf.dedup(candidates, f, catalog, use_filter=False), expected)
        # Paths for both: the filter loaded, the catalog opened read-only.
        path = tmp_path / ("f.abf" if shards == 1 else "f.abfs")
        f.save(path)
        assert np.array_equal(abf.dedup(candidates, path, tmp_path / "c.db"), expected)


def test_dedup_refuses_a_filter_of_another_catalog(catalog, tmp_path):
    d = random_digests(100, seed=26)
    catalog.add(d)
    other = abf.Catalog.create(tmp_path / "other.db")
    other.add(d)
    for f in (other.build_filter(100, 0.01), abf.build(d, 100, 0.01, catalog_version=1)):
        with pytest.raises(abf.CatalogMismatchError) as e:
            abf.dedup(d, f, catalog)
        assert e.value.code == "catalog_mismatch"
    ahead = abf.build(d, 100, 0.01, catalog_version=5, catalog_id=catalog.id)
    with pytest.raises(abf.CatalogMismatchError, match="only reaches version 1"):
        abf.dedup(d, ahead, catalog)


def test_dedup_equals_the_abf_command(catalog, tmp_path, abf_cli):
    stored = random_digests(5000, seed=27)
    catalog.add(stored)
    f = catalog.build_filter(5000, 0.01)
    f.save(tmp_path / "f.abf")
    candidates = np.concatenate([random_digests(4000, seed=28), stored[:1000]])
    (tmp_path / "cand.bin").write_bytes(candidates.tobytes())
    out = subprocess.run([abf_cli, "dedup", "--snapshot", str(tmp_path / "f.abf"), "--db",
                          str(tmp_path / "c.db"), "--input", str(tmp_path / "cand.bin"),
                          "--input-format", "bin"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    cli = np.array([list(bytes.fromhex(line)) for line in out.splitlines()], np.uint8)
    assert np.array_equal(abf.dedup(candidates, f, catalog), cli)


def fingerprint_reference(digests) -> str:
    """The content fingerprint by its definition (docs/protocol.md): the sum
    mod 2^128 of XXH3-128 of each digest, written low 64 bits then high 64
    bits, each little-endian; XXH3 from the system's libxxhash, not abf."""
    import ctypes
    import ctypes.util

    class Hash128(ctypes.Structure):
        _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]

    lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
    lib.XXH3_128bits.restype = Hash128
    lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    total = 0
    for digest in digests:
        h = lib.XXH3_128bits(bytes(digest), 32)
        total = (total + (h.high64 << 64 | h.low64)) % (1 << 128)
    return ((total & (2**64 - 1)).to_bytes(8, "little") + (total >> 64).to_bytes(8, "little")).hex()


def test_every_version_keeps_its_item_count_and_fingerprint(catalog, tmp_path):
    a = random_digests(300, seed=40)
    catalog.add(a)
    catalog.remove(a[:50])
    catalog.add(np.concatenate([a[:10], a[100:110]]))  # 10 back, 10 already present
    assert catalog.content(version=0) == {"version": 0, "item_count": 0,
                                          "fingerprint": "0" * 32}
    for version in (1, 2, 3):
        present = present_in_sqlite(tmp_path / "c.db", version)
        content = catalog.content(version=version)
        assert content["item_count"] == len(present)
        assert content["fingerprint"] == fingerprint_reference(sorted(present))
    assert catalog.content() == catalog.content(version=3)
    assert catalog.stats()["fingerprint"] == catalog.content()["fingerprint"]
    with abf.Catalog(tmp_path / "c.db", read_only=True) as ro:
        assert ro.content(version=2) == catalog.content(version=2)
    with pytest.raises(abf.InvalidArgumentError, match="does not exist"):
        catalog.content(version=4)


def test_dedup_refuses_a_filter_that_does_not_hold_the_catalogs_version(tmp_path):
    """Issue 22: the same catalog id and version, other contents. Reproduction
    1 (a catalog restored from a backup and advanced again) and 3a (a build
    from files of a few of its digests, given its id): abf.dedup refuses
    both, naming both fingerprints, and answers nothing."""
    import shutil

    base = random_digests(500, seed=41)
    x = random_digests(1000, seed=42)
    y = random_digests(1000, seed=43)
    path = tmp_path / "c.db"
    with abf.Catalog.create(path) as catalog:
        catalog.add(base)
    shutil.copy(path, tmp_path / "backup.db")
    with abf.Catalog(path) as catalog:
        assert catalog.add(x)["catalog_version"] == 2
        old = catalog.build_filter(5000, 0.01)
        old_set = catalog.build_filter(5000, 0.01, shards=3)
        old_fingerprint = catalog.content()["fingerprint"]
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / ("c.db" + suffix)).unlink(missing_ok=True)
    shutil.copy(tmp_path / "backup.db", path)
    with abf.Catalog(path) as catalog:
        assert catalog.add(y)["catalog_version"] == 2
        new_fingerprint = catalog.content()["fingerprint"]
        assert new_fingerprint != old_fingerprint
        for f in (old, old_set):
            with pytest.raises(abf.CatalogMismatchError) as e:
                abf.dedup(y, f, catalog)
            for fragment in (old_fingerprint, new_fingerprint, "catalog version 2",
                             "abf build --from-catalog"):
                assert fragment in str(e.value)
        # Reproduction 3a, and its control: all of the version's digests
        # built from memory with the catalog's id are that version's filter.
        present = catalog.digests()
        few = abf.build(present[:10], 2000, 0.01, catalog_version=2, catalog_id=catalog.id)
        with pytest.raises(abf.CatalogMismatchError, match="over 10 insertions"):
            abf.dedup(present, few, catalog)
        every = abf.build(present, 2000, 0.01, catalog_version=2, catalog_id=catalog.id)
        assert len(abf.dedup(present, every, catalog)) == 0
        assert len(abf.dedup(y, catalog.build_filter(5000, 0.01), catalog)) == 0


def downgrade_to_schema_two(path) -> None:
    """A schema-3 catalog turned back into the schema-2 form (no content
    columns), with the same versions and artifacts, in rollback-journal mode
    (one file: nothing beside it)."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = DELETE")
        db.executescript("BEGIN; ALTER TABLE versions DROP COLUMN fingerprint; "
                         "ALTER TABLE versions DROP COLUMN item_count; "
                         "UPDATE abf_schema SET version = 2; PRAGMA user_version = 2; COMMIT;")
    finally:
        db.close()


def test_reading_a_schema_two_catalog_leaves_it_byte_for_byte_as_it_was(tmp_path):
    """Issue 33: abf.Catalog(path) opened the catalog for writing, so a
    find_missing on a catalog of schema 2 upgraded it to schema 3 (and to
    WAL). Reads now go through a read-only connection and the first add
    opens the writer: every read leaves the file as it was, nothing is made
    beside it, and the answers are SQLite's; the first add upgrades it."""
    path = tmp_path / "c.db"
    a = random_digests(3000, seed=60)
    b = random_digests(1000, seed=61)
    with abf.Catalog.create(path) as catalog:
        catalog.add(a)
        catalog.remove(a[:500])
        catalog.add(b)
        catalog_id = catalog.id
    downgrade_to_schema_two(path)
    before = path.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]
    candidates = np.concatenate([a[:1000], random_digests(2000, seed=62), b[:10]])
    present = present_in_sqlite(path, 3)
    with abf.Catalog(path) as catalog:
        assert not catalog.read_only
        assert np.array_equal(catalog.find_missing(candidates),
                              missing_reference(candidates, present))
        assert np.array_equal(catalog.find_missing(candidates, version=1),
                              missing_reference(candidates, present_in_sqlite(path, 1)))
        assert np.array_equal(catalog.contains(candidates),
                              np.array([bytes(r) in present for r in candidates]))
        assert catalog.version == 3 and catalog.count() == len(present)
        assert catalog.id == catalog_id
        assert {bytes(r) for r in catalog.digests()} == present
        assert catalog.content()["item_count"] == len(present)
        assert catalog.content()["fingerprint"] == fingerprint_reference(sorted(present))
        assert catalog.stats()["schema_version"] == 2
        catalog.build_filter(5000, 0.01)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.db"]
    # The first write opens it for writing, which upgrades it, as
    # `abf catalog upgrade` does; the answers stay SQLite's.
    with abf.Catalog(path) as catalog:
        assert len(catalog.find_missing(candidates)) == len(missing_reference(candidates, present))
        assert catalog.add(candidates[:5])["catalog_version"] == 4
        assert catalog.stats()["schema_version"] == 3
        present = present_in_sqlite(path, 4)
        assert np.array_equal(catalog.find_missing(candidates),
                              missing_reference(candidates, present))
        assert catalog.content()["fingerprint"] == fingerprint_reference(sorted(present))
    assert path.read_bytes() != before
    # read_only=True never writes: add fails, the file is kept.
    downgraded = tmp_path / "d.db"
    with abf.Catalog.create(downgraded) as catalog:
        catalog.add(a)
    downgrade_to_schema_two(downgraded)
    kept = downgraded.read_bytes()
    with abf.Catalog(downgraded, read_only=True) as catalog:
        assert catalog.read_only
        with pytest.raises(abf.CatalogStoreError, match="read-only"):
            catalog.add(b[:1])
        assert len(catalog.find_missing(a)) == 0
    assert downgraded.read_bytes() == kept


def test_the_first_write_of_a_catalog_opened_for_reading_is_seen_by_every_later_call(tmp_path):
    """The connection changes at the first add (read-only, then a writer):
    each call after it reads what the add wrote, and a closed catalog stays
    closed."""
    path = tmp_path / "c.db"
    with abf.Catalog.create(path) as catalog:
        catalog.add(random_digests(100, seed=63))
    more = random_digests(50, seed=64)
    catalog = abf.Catalog(path)
    assert len(catalog.find_missing(more)) == 50
    assert catalog.add(more) == {"db": str(path), "operation": "add", "catalog_version": 2,
                                 "read": 50, "added": 50, "already_present": 0}
    assert len(catalog.find_missing(more)) == 0 and catalog.version == 2
    assert catalog.remove(more[:10])["catalog_version"] == 3
    assert catalog.contains(more).sum() == 40 and catalog.count() == 140
    catalog.close()
    with pytest.raises(abf.InvalidArgumentError, match="closed"):
        catalog.add(more)
    with pytest.raises(abf.InvalidArgumentError, match="closed"):
        catalog.find_missing(more)
