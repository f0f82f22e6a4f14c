"""abf.FilterSet: shards, queries routed by shard, files, pickling, merges,
and the same sets as the abf command writes."""

from __future__ import annotations

import pickle
import subprocess

import numpy as np
import pytest

import abf
from abf import _abf
from conftest import members, random_digests


def shard_of(digests: np.ndarray, shard_count: int) -> np.ndarray:
    """Section 13, written out: big-endian u64 of bytes 24..32, mod S."""
    tail = digests[:, 24:32].copy().view(">u8").ravel()
    return (tail % np.uint64(shard_count)).astype(np.uint32)


def test_a_set_is_its_shards_each_built_alone():
    d = random_digests(60_000, seed=10)
    s = abf.build(d, 60_000, 0.01, catalog_version=4, shards=3)
    assert isinstance(s, abf.FilterSet) and s.shard_count == 3
    assert s.inserted_item_count == 60_000 and s.expected_item_count == 60_000
    n_i = abf.shard_expected_item_count(60_000, 3)
    assert s.shard_expected_item_count == n_i and n_i > 20_000
    index = shard_of(d, 3)
    assert np.array_equal(s.shard_index(d), index)
    buckets = _abf._split_by_shard(d, 3)
    for i, shard in enumerate(s.shards):
        assert np.array_equal(buckets[i], d[index == i])
        alone = abf.build(d[index == i], n_i, 0.01, catalog_version=4)
        assert shard == alone and shard.to_bytes() == alone.to_bytes()
    assert s.bit_count == 3 * s.shard_bit_count
    assert s.popcount == sum(shard.popcount for shard in s.shards)


def test_set_queries_equal_each_shard_alone():
    d = random_digests(40_000, seed=11)
    s = abf.build(d, 40_000, 0.001, shards=5)
    probes = np.concatenate([d[:5000], random_digests(100_000, seed=12)])
    answers = s.query(probes)
    assert answers[:5000].all()
    index = shard_of(probes, 5)
    expected = np.empty(len(probes), bool)
    for i, shard in enumerate(s.shards):
        expected[index == i] = shard.query(probes[index == i], backend="scalar")
    assert np.array_equal(answers, expected)
    assert np.array_equal(s.query(probes, backend="scalar"), expected)
    assert all(s.might_contain(probes[i]) == expected[i] for i in range(0, len(probes), 1009))


def test_shards_auto_and_the_type_follows_the_argument():
    d = members(1000)
    assert isinstance(abf.build(d, 1000, 0.01), abf.Filter)
    auto = abf.build(d, 1000, 0.01, shards="auto")
    assert isinstance(auto, abf.FilterSet) and auto.shard_count == 1
    assert auto.shards[0] == abf.build(d, 1000, 0.01)
    assert abf.choose_shard_count(300_000_000, 0.01) == 3
    assert abf.choose_shard_count(1000, 0.01) == 1
    with pytest.raises(abf.InvalidArgumentError):
        abf.build(d, 1000, 0.01, shards=0)
    with pytest.raises(abf.InvalidArgumentError):
        abf.build(d, 1000, 0.01, shards=70_000)


def test_save_load_round_trip_and_info(tmp_path):
    d = random_digests(20_000, seed=13)
    key = abf.Key.generate()
    s = abf.build(d, 30_000, 0.01, catalog_version=8, catalog_id="ab" * 16, key=key, shards=4)
    path = tmp_path / "c.abfs"
    s.save(path)
    assert len(list(tmp_path.glob("c.abfs.*.abf"))) == 4
    with pytest.raises(abf.FilterKeyError) as e:
        abf.load(path)
    assert e.value.code == "key_required"
    t = abf.load(path, key=key)
    assert isinstance(t, abf.FilterSet) and t == s
    assert t.query(d).all()
    info = t.info
    assert info["shard_count"] == 4 and info["catalog_id"] == "ab" * 16
    assert info["key_fingerprint"] == key.fingerprint and info["catalog_version"] == 8
    assert info["inserted_item_count"] == 20_000 and info["expected_item_count"] == 30_000
    assert info["shard_bit_count"] == t.shard_bit_count
    s.save(path)  # a new set replaces the old one, whose shards go
    assert len(list(tmp_path.glob("c.abfs.*.abf"))) == 4
    shard = sorted(tmp_path.glob("c.abfs.*.abf"))[2]
    shard.unlink()
    with pytest.raises(abf.SnapshotError) as e:
        abf.load(path, key=key)
    assert e.value.code == "set_shard_missing"


def test_sets_pickle_and_merge():
    d = random_digests(30_000, seed=14)
    whole = abf.build(d, 30_000, 0.01, shards=3, catalog_version=2)
    for protocol in (4, 5):
        assert pickle.loads(pickle.dumps(whole, protocol=protocol)) == whole
    parts = [abf.build(p, 30_000, 0.01, shards=3, catalog_version=2)
             for p in np.array_split(d, 4)]
    merged = abf.merge(parts)
    assert isinstance(merged, abf.FilterSet) and merged == whole
    other = abf.build(d[:10], 30_000, 0.01, shards=2, catalog_version=2)
    with pytest.raises(abf.IncompatibleError):
        abf.merge([parts[0], other])
    rebuilt = abf.FilterSet.from_shards(whole.shards, 30_000)
    assert rebuilt == whole
    with pytest.raises(abf.Error):
        abf.FilterSet.from_shards(whole.shards, 40_000)  # the shards' n_i is not 40,000's


def test_the_same_sets_as_the_abf_command(tmp_path, abf_cli):
    d = random_digests(9000, seed=15)
    (tmp_path / "d.bin").write_bytes(d.tobytes())
    subprocess.run([abf_cli, "build", "-n", "9000", "-p", "0.01", "--catalog-version", "3",
                    "--shards", "3", "-f", "bin", "-i", str(tmp_path / "d.bin"),
                    "-o", str(tmp_path / "cli.abfs")],
                   check=True, capture_output=True, timeout=120)
    mine = abf.build(d, 9000, 0.01, catalog_version=3, shards=3)
    assert abf.load(tmp_path / "cli.abfs") == mine
    mine.save(tmp_path / "py.abfs")
    probes = np.concatenate([d[:100], random_digests(5000, seed=16)])
    (tmp_path / "p.bin").write_bytes(probes.tobytes())
    out = subprocess.run([abf_cli, "query", "-s", str(tmp_path / "py.abfs"), "-f", "bin",
                          "-i", str(tmp_path / "p.bin")],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    cli = np.array([line.endswith("\tmaybe") for line in out.splitlines()])
    assert len(cli) == len(probes)
    assert np.array_equal(mine.query(probes), cli)
