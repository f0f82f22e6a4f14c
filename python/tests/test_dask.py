"""abf.dask on a real distributed.LocalCluster of two worker processes:
builds bit-identical to abf.build whatever the partitioning, filter sets
reduced shard by shard, and bulk dedup equal to SQLite's answer."""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
dask = pytest.importorskip("dask")
import dask.array as da  # noqa: E402
import dask.bag as db  # noqa: E402
from dask.delayed import Delayed  # noqa: E402

import abf  # noqa: E402
import abf.dask  # noqa: E402
from conftest import random_digests  # noqa: E402

CATALOG_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    # The workers' folder (dask-worker-space) under the run's tmp_path, not
    # in $TMPDIR, where it would stay.
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=None, silence_logs=logging.ERROR,
                                       death_timeout=120,
                                       local_directory=str(tmp_path_factory.mktemp("dask")))
    client = distributed.Client(cluster, timeout=120)
    client.wait_for_workers(2, timeout=120)
    yield client
    client.close(timeout=60)
    cluster.close(timeout=60)


def chunks_bag(digests, chunk_count, partitions):
    return db.from_sequence(np.array_split(digests, chunk_count), npartitions=partitions)


def test_the_workers_are_separate_processes(client):
    pids = client.run(lambda: __import__("os").getpid())
    assert len(set(pids.values())) == 2


def test_build_is_bit_identical_whatever_the_partitioning(client):
    d = random_digests(50_000, seed=30)
    reference = abf.build(d, 60_000, 0.01, catalog_version=3, catalog_id=CATALOG_ID)
    for chunk_count, partitions in ((1, 1), (5, 3), (20, 8), (40, 40)):
        bag = chunks_bag(d, chunk_count, partitions)
        f = abf.dask.build(bag, 60_000, 0.01, catalog_version=3, catalog_id=CATALOG_ID)
        assert isinstance(f, abf.Filter)
        assert f == reference and f.to_bytes() == reference.to_bytes(), partitions
    # Partitions already held by the workers: merged where they are first.
    persisted = client.persist(chunks_bag(d, 20, 10))
    distributed.wait(persisted)
    sources, _ = abf.dask._sources(persisted, None)
    order = abf.dask._by_location(persisted, sources)
    assert sorted(order) == list(range(10))
    holders = {f.key: min(client.who_has([f]).popitem()[1])
               for f in distributed.futures_of(persisted)}
    places = [holders[sources[i].key] for i in order]
    changes = sum(a != b for a, b in zip(places, places[1:]))
    assert changes == len(set(places)) - 1  # each worker's partitions in one run
    assert abf.dask.build(persisted, 60_000, 0.01, catalog_version=3,
                          catalog_id=CATALOG_ID) == reference
    small = d[:3000]
    items = db.from_sequence([bytes(row) for row in small], npartitions=4)
    assert abf.dask.build(items, 60_000, 0.01) == abf.build(small, 60_000, 0.01)
    hex_items = db.from_sequence(["sha256:" + bytes(row).hex() for row in small], npartitions=3)
    assert abf.dask.build(hex_items, 60_000, 0.01) == abf.build(small, 60_000, 0.01)


def test_build_from_arrays_and_dataframes(client):
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    d = random_digests(20_000, seed=31)
    reference = abf.build(d, 20_000, 0.001)
    array = da.from_array(d, chunks=(3000, 16))  # split columns are joined back
    assert abf.dask.build(array, 20_000, 0.001) == reference
    frame = pd.DataFrame({"digest": [bytes(row) for row in d], "size": np.arange(len(d))})
    ddf = dd.from_pandas(frame, npartitions=5)
    assert abf.dask.build(ddf, 20_000, 0.001, column="digest") == reference
    assert abf.dask.build(ddf["digest"], 20_000, 0.001) == reference
    with pytest.raises(ValueError, match="column"):
        abf.dask.build(ddf, 20_000, 0.001)


def test_keyed_builds_and_worker_errors_keep_their_codes(client):
    d = random_digests(10_000, seed=32)
    key = abf.Key.generate()
    bag = chunks_bag(d, 10, 5)
    keyed = abf.dask.build(bag, 10_000, 0.01, key=key)
    assert keyed.keyed and keyed == abf.build(d, 10_000, 0.01, key=key)
    with pytest.raises(abf.CapacityError) as e:  # the merge finds 10,000 > 9,999
        abf.dask.build(bag, 9_999, 0.01)
    assert e.value.code == "capacity_exceeded"
    with pytest.raises(abf.LayoutError) as e:  # checked before any task runs
        abf.dask.build(bag, 10_000, 2.0)
    assert e.value.code == "invalid_false_positive_rate"
    bad = db.from_sequence([b"x" * 31], npartitions=1)
    with pytest.raises(abf.DigestError):
        abf.dask.build(bad, 10_000, 0.01)


def test_sets_are_reduced_shard_by_shard(client):
    d = random_digests(90_000, seed=33)
    reference = abf.build(d, 90_000, 0.01, catalog_version=2, shards=3)
    bag = chunks_bag(d, 12, 6)
    with distributed.get_task_stream(client) as stream:
        s = abf.dask.build(bag, 90_000, 0.01, catalog_version=2, shards=3)
    assert isinstance(s, abf.FilterSet) and s == reference
    # No task's result held more than one shard's bitset (plus headers):
    # each partial and each reduction is of one shard.
    filter_tasks = [record for record in stream.data
                    if str(record["key"]).lstrip("('").startswith(("_build_partial", "_merge"))]
    assert len(filter_tasks) >= 3 * 6
    largest = max(record.get("nbytes", 0) for record in filter_tasks)
    assert reference.shard_bit_count // 8 <= largest < 2 * (reference.shard_bit_count // 8)
    auto = abf.dask.build(bag, 90_000, 0.01, catalog_version=2, shards="auto")
    assert auto == abf.build(d, 90_000, 0.01, catalog_version=2, shards="auto")
    abf.dask.release_worker_buffers(client)  # the next build allocates afresh
    assert abf.dask.build(bag, 90_000, 0.01, catalog_version=2, shards=3) == reference


def test_blocked_builds_and_sets_are_bit_identical_to_one_process(client):
    """layout="blocked" (protocol 3, 4 with a key): every partitioning gives
    abf.build's filter byte for byte, and a set's shards are the one-process
    set's, reduced shard by shard."""
    d = random_digests(30_000, seed=50)
    for key in (None, abf.Key.generate()):
        reference = abf.build(d, 40_000, 0.01, catalog_version=4, key=key, layout="blocked")
        assert reference.hash_protocol_version == (3 if key is None else 4)
        for chunk_count, partitions in ((1, 1), (7, 4), (30, 12)):
            f = abf.dask.build(chunks_bag(d, chunk_count, partitions), 40_000, 0.01,
                               catalog_version=4, key=key, layout="blocked")
            assert f.layout == "blocked" and f.to_bytes() == reference.to_bytes(), partitions
        bag = chunks_bag(d, 12, 6)
        sharded = abf.build(d, 40_000, 0.01, key=key, shards=3, layout="blocked")
        s = abf.dask.build(bag, 40_000, 0.01, key=key, shards=3, layout="blocked")
        assert isinstance(s, abf.FilterSet) and s.layout == "blocked" and s == sharded
        for mine, theirs in zip(s.shards, sharded.shards):
            assert mine.to_bytes() == theirs.to_bytes()
    # A classic reference differs: the layout reached every partial.
    assert abf.dask.build(chunks_bag(d, 4, 2), 40_000, 0.01).layout == "classic"


def test_dask_builds_carry_the_vectors_fingerprint(client):
    """Issue 22: a Dask build (partitions merged, and a sharded one) has
    the fingerprint of tests/data/vectors/fingerprint.tsv for member-10000,
    as Python's and C++'s builds do."""
    from conftest import DATA, members
    expected = None
    for line in (DATA / "vectors" / "fingerprint.tsv").read_text().splitlines():
        fields = line.split("\t")
        if fields[0] == "set" and fields[1] == "member-10000":
            expected = fields[4]
    assert expected
    d = members(10_000)
    f = abf.dask.build(chunks_bag(d, 7, 5), 10_000, 0.01)
    assert f.content_fingerprint == expected
    s = abf.dask.build(chunks_bag(d, 7, 5), 10_000, 0.01, shards=3)
    assert s.content_fingerprint == expected
    assert s == abf.build(d, 10_000, 0.01, shards=3)


@pytest.fixture(scope="module")
def catalog_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("catalog") / "c.db"
    catalog = abf.Catalog.create(path)
    stored = random_digests(40_000, seed=34)
    catalog.add(stored)
    catalog.remove(stored[:4000])
    catalog.close()
    return path, stored


def sqlite_missing(path, candidates, version):
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db_:
        present = {bytes(r[0]) for r in db_.execute(
            "SELECT digest FROM artifacts WHERE added_version <= ? "
            "AND (removed_version IS NULL OR removed_version > ?)", (version, version))}
    seen, out = set(), []
    for row in candidates:
        digest = bytes(row)
        if digest not in present and digest not in seen:
            seen.add(digest)
            out.append(row)
    return np.array(out, np.uint8).reshape(-1, 32)


def test_find_missing_equals_sqlite(client, catalog_file):
    path, stored = catalog_file
    with abf.Catalog(path, read_only=True) as catalog:
        version = catalog.version
        f = catalog.build_filter(40_000, 0.01)
        s = catalog.build_filter(40_000, 0.01, shards=2)
    fresh = random_digests(60_000, seed=35)
    candidates = np.concatenate([fresh, stored[2000:8000], fresh[:5000], stored[:1000]])
    np.random.default_rng(36).shuffle(candidates)
    expected = sqlite_missing(path, candidates, version)
    bag = chunks_bag(candidates, 16, 7)
    for filter_ in (f, s):
        missing, counts = abf.dask.find_missing(bag, filter_, str(path), return_counts=True)
        assert np.array_equal(missing, expected)
        assert counts["total"] == len(candidates) and counts["new"] == len(expected)
        assert counts["exact_lookups"] == counts["maybe"] < len(candidates) // 4
        assert counts["partitions"] == bag.npartitions
    other = abf.build(candidates[:10], 100, 0.01, catalog_version=version)
    with pytest.raises(abf.CatalogMismatchError):
        abf.dask.find_missing(bag, other, str(path))


def test_find_missing_compute_false_is_lazy_and_the_same(client, catalog_file):
    """compute=False returns a Delayed of the same answer, computed only
    when asked (and composable with other Dask work)."""
    path, stored = catalog_file
    with abf.Catalog(path, read_only=True) as catalog:
        f = catalog.build_filter(40_000, 0.01)
    candidates = np.concatenate([random_digests(5000, seed=37), stored[5000:7000]])
    bag = chunks_bag(candidates, 6, 3)
    eager, eager_counts = abf.dask.find_missing(bag, f, str(path), return_counts=True)
    assert np.array_equal(abf.dask.find_missing(bag, f, str(path)), eager)
    lazy = abf.dask.find_missing(bag, f, str(path), compute=False)
    assert isinstance(lazy, Delayed)
    assert np.array_equal(lazy.compute(), eager)
    assert dask.delayed(len)(lazy).compute() == len(eager) == 5000
    lazy_counts = abf.dask.find_missing(bag, f, str(path), return_counts=True, compute=False)
    (missing, counts), = dask.compute(lazy_counts)
    assert np.array_equal(missing, eager)
    assert {k: v for k, v in counts.items() if k != "seconds"} == \
        {k: v for k, v in eager_counts.items() if k != "seconds"}
    # The checks here still run at once, before anything is computed.
    other = abf.build(candidates[:10], 100, 0.01, catalog_version=f.catalog_version)
    with pytest.raises(abf.CatalogMismatchError):
        abf.dask.find_missing(bag, other, str(path), compute=False)


def test_the_dask_module_is_typed():
    """Annotations on every public function, none of them Any."""
    import inspect
    for name in abf.dask.__all__:
        function = getattr(abf.dask, name)
        signature = inspect.signature(function)
        annotations = [p.annotation for p in signature.parameters.values()]
        annotations.append(signature.return_annotation)
        for annotation in annotations:
            assert annotation is not inspect.Parameter.empty, (name, signature)
            assert "Any" not in str(annotation), (name, annotation)
    source = open(abf.dask.__file__).read()
    assert "typing import Any" not in source and ": Any" not in source


def test_find_missing_refuses_a_filter_of_other_contents(client, catalog_file):
    """Issue 22: a filter of the catalog's id and version that does not hold
    the version's digests (here, a build of a tenth of them) is refused, on
    this machine before any task runs, and on a worker too."""
    path, stored = catalog_file
    with abf.Catalog(path, read_only=True) as catalog:
        version, catalog_id = catalog.version, catalog.id
        present = catalog.digests()
    part = abf.build(present[: len(present) // 10], 40_000, 0.01, catalog_version=version,
                     catalog_id=catalog_id)
    bag = chunks_bag(stored[:2000], 4, 2)
    with pytest.raises(abf.CatalogMismatchError, match="does not hold what"):
        abf.dask.find_missing(bag, part, str(path))
    future = client.submit(abf.dask._dedup_partition, stored[:100], part, str(path), "auto")
    with pytest.raises(abf.CatalogMismatchError, match="does not hold what"):
        future.result(timeout=120)


def test_find_missing_with_an_index_equals_without(client, catalog_file, tmp_path):
    """index=: each worker answers the filter's maybes from the index (loaded
    once per worker process), with the answers and counts of SQLite's."""
    path, stored = catalog_file
    index_path = tmp_path / "c.abfx"
    empty_path = tmp_path / "empty.abfx"
    with abf.Catalog(path, read_only=True) as catalog:
        version = catalog.version
        f = catalog.build_filter(40_000, 0.2)  # many maybes for the index
        catalog.write_index(index_path)
        catalog.write_index(empty_path, version=0)
    fresh = random_digests(20_000, seed=37)
    candidates = np.concatenate([stored[2000:22000], fresh, fresh[:100]])  # ~50% present
    np.random.default_rng(38).shuffle(candidates)
    expected = sqlite_missing(path, candidates, version)
    assert 0.3 < len(expected) / len(candidates) < 0.7
    bag = chunks_bag(candidates, 16, 7)
    plain, plain_counts = abf.dask.find_missing(bag, f, str(path), return_counts=True)
    assert np.array_equal(plain, expected)
    given_indexes = [(str(index_path), version), (abf.Index.load(index_path), version),
                     (str(empty_path), 0)]
    cli = os.environ.get("ABF_CLI")
    if cli:  # an index set (abf index --shards 3): the same answers
        set_path = tmp_path / "c.abxs"
        subprocess.run([cli, "index", "--db", str(path), "--shards", "3", "-o", str(set_path)],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        given_indexes += [(str(set_path), version), (abf.Index.load(set_path), version)]
    for given, at in given_indexes:
        missing, counts = abf.dask.find_missing(bag, f, str(path), return_counts=True,
                                                index=given)
        assert np.array_equal(missing, expected)
        extra = {name: counts.pop(name) for name in ("index_version", "index_lookups",
                                                       "store_lookups")}
        assert counts == plain_counts
        assert counts["exact_lookups"] > 1000
        assert extra["index_version"] == at
        assert extra["index_lookups"] + extra["store_lookups"] == counts["exact_lookups"]
        if at == version:
            assert extra["store_lookups"] == 0  # the index alone answers at its version
        else:
            # The empty index of version 0: every present digest was added
            # after it, so each is asked of the catalog.
            assert extra["store_lookups"] >= len(candidates) - len(expected) - 100
    loaded = client.run(lambda: sorted(abf.dask._indexes))
    assert any(str(index_path) in paths for paths in loaded.values()), loaded
    # Another catalog's index: refused here before any task runs, and on a
    # worker too.
    other_db = tmp_path / "other.db"
    with abf.Catalog.create(other_db) as other:
        other.add(stored)
        other.remove(stored[:4000])
        other.write_index(tmp_path / "other.abfx")
    with pytest.raises(abf.CatalogMismatchError, match="other.abfx"):
        abf.dask.find_missing(bag, f, str(path), index=tmp_path / "other.abfx")
    future = client.submit(abf.dask._dedup_partition, stored[:100], f, str(path), "auto",
                           str(tmp_path / "other.abfx"))
    with pytest.raises(abf.CatalogMismatchError, match="other.abfx"):
        future.result(timeout=120)


def test_progress_bars_only_when_asked(client, catalog_file, capsys, monkeypatch):
    path, stored = catalog_file
    d = random_digests(8_000, seed=40)
    reference = abf.build(d, 10_000, 0.01)
    candidates = np.concatenate([random_digests(3_000, seed=41), stored[:500]])
    with abf.Catalog(path, read_only=True) as catalog:
        version = catalog.version
        f = catalog.build_filter(40_000, 0.01)
    expected = sqlite_missing(path, candidates, version)
    capsys.readouterr()
    # Silent by default.
    assert abf.dask.build(chunks_bag(d, 4, 4), 10_000, 0.01) == reference
    assert "Completed" not in capsys.readouterr().out
    # distributed's console bar, ending at 100%, and the same answers.
    assert abf.dask.build(chunks_bag(d, 4, 4), 10_000, 0.01, progress=True) == reference
    assert "100% Completed" in capsys.readouterr().out
    missing = abf.dask.find_missing(chunks_bag(candidates, 4, 4), f, str(path), progress=True)
    assert np.array_equal(missing, expected)
    assert "100% Completed" in capsys.readouterr().out
    # Without a distributed client: dask's local ProgressBar.
    monkeypatch.setattr(abf.dask, "_default_client", lambda: None)
    with dask.config.set(scheduler="synchronous"):
        assert abf.dask.build(chunks_bag(d, 4, 4), 10_000, 0.01, progress=True) == reference
        assert "100% Completed" in capsys.readouterr().out
        missing = abf.dask.find_missing(chunks_bag(candidates, 4, 4), f, str(path),
                                        progress=True)
        assert np.array_equal(missing, expected)
        assert "100% Completed" in capsys.readouterr().out


def test_the_sha256_prefix_is_read_in_any_case(client):
    """Issue 33: hex str items with "SHA256:" (any case), as the CLI reads
    them, build what their raw digests build; another algorithm's prefix is
    still refused."""
    small = random_digests(2000, seed=39)
    reference = abf.build(small, 10_000, 0.01)
    for prefix in ("SHA256:", "Sha256:"):
        items = db.from_sequence([prefix + bytes(row).hex() for row in small], npartitions=3)
        assert abf.dask.build(items, 10_000, 0.01) == reference, prefix
    bad = db.from_sequence(["sha512:" + bytes(small[0]).hex()], npartitions=1)
    with pytest.raises(abf.DigestError):
        abf.dask.build(bad, 10_000, 0.01)
