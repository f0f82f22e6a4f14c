"""layout="blocked" (hash protocols 3 and 4, docs/protocol.md sections 3c
and 4c) through the Python package: builds against vectors/v3's golden
builds and files, queries against the scalar reference and the abf command,
info and the layout property, pickling, filter sets of one-line shards, and
a catalog's build_filter."""

from __future__ import annotations

import hashlib
import pickle
import subprocess

import numpy as np
import pytest

import abf
from conftest import members, non_members, random_digests

GOLDEN_KEY = bytes(range(16))


def golden_rows(path):
    rows = [line.split("\t") for line in path.read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    assert rows, path
    return rows


def fp_indices(field):
    return [int(x) for x in field.split(",")] if field else []


def test_blocked_builds_match_the_golden_vectors(data_dir):
    probes = non_members(100_000)
    for row in golden_rows(data_dir / "vectors" / "v3" / "builds-v3.tsv"):
        protocol, key_hex, member_count, n, p_hex, m, k, popcount, payload_sha = row[:9]
        key = None if protocol == "3" else abf.Key.from_hex(key_hex)
        f = abf.build(members(int(member_count)), int(n), float.fromhex(p_hex), key=key,
                      layout="blocked")
        assert f.hash_protocol_version == int(protocol) and f.layout == "blocked"
        assert f.keyed == (key is not None)
        assert (f.bit_count, f.hash_count, f.popcount) == (int(m), int(k), int(popcount))
        assert (f.bit_count, f.hash_count) == abf.choose_layout(int(n), float.fromhex(p_hex),
                                                                layout="blocked")
        assert hashlib.sha256(f.payload).hexdigest() == payload_sha
        expected = fp_indices(row[9] if len(row) > 9 else "")
        assert np.flatnonzero(f.query(probes)).tolist() == expected, row[:3]
        assert np.flatnonzero(f.query(probes, backend="scalar")).tolist() == expected
        assert f.query(members(int(member_count))).all()


def test_the_golden_files_load_and_a_build_writes_their_payload(data_dir):
    v3 = data_dir / "vectors" / "v3"
    for name, key in (("member-1000-v3.abf", None), ("member-1000-v4.abf", GOLDEN_KEY)):
        golden = (v3 / name).read_bytes()
        for mode in ("copy", "map"):
            loaded = abf.load(v3 / name, key=key, mode=mode)
            assert loaded.layout == "blocked"
            assert loaded.hash_protocol_version == (3 if key is None else 4)
            assert loaded.info["hash_protocol_version"] == loaded.hash_protocol_version
            assert loaded.info["layout"] == "blocked"
        built = abf.build(members(1000), 1000, 0.01, key=key, layout="blocked")
        assert built.to_bytes()[128:] == golden[128:]
        assert bytes(built.payload) == bytes(loaded.payload)
    with pytest.raises(abf.FilterKeyError):
        abf.load(v3 / "member-1000-v4.abf")


def test_queries_equal_the_scalar_reference_might_contain_and_the_abf_command(tmp_path, abf_cli):
    d = members(20_000)
    f = abf.build(d, 20_000, 0.01, layout="blocked", catalog_version=5)
    probes = np.concatenate([random_digests(50_000, seed=40), d[:1000]])
    scalar = f.query(probes, backend="scalar")
    for backend in ("simd", "auto"):
        assert np.array_equal(f.query(probes, backend=backend), scalar), backend
    for i in range(0, len(probes), 499):
        assert f.might_contain(probes[i]) == scalar[i]
    assert f.query(d).all()
    path = tmp_path / "b.abf"
    f.save(path)
    (tmp_path / "probes.bin").write_bytes(probes.tobytes())
    out = subprocess.run([abf_cli, "query", "--snapshot", str(path), "--input",
                          str(tmp_path / "probes.bin"), "--input-format", "bin"],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    cli = np.array([line.split("\t")[1] == "maybe" for line in out.splitlines()])
    assert np.array_equal(cli, scalar)


def test_info_pickles_and_files_keep_the_protocol(tmp_path):
    for key, protocol in ((None, 3), (abf.Key.generate(), 4)):
        f = abf.build(members(3000), 4000, 0.01, catalog_version=9, key=key, layout="blocked")
        info = f.info
        assert info["hash_protocol_version"] == protocol and info["layout"] == "blocked"
        assert info["hash_count"] == 8 and info["bit_count"] % 512 == 0
        assert (info["bit_count"], info["hash_count"]) == abf.choose_layout(4000, 0.01,
                                                                            layout="blocked")
        for pickle_protocol in (2, 4, 5):
            g = pickle.loads(pickle.dumps(f, protocol=pickle_protocol))
            assert g == f and g.to_bytes() == f.to_bytes() and g.layout == "blocked"
            assert g.hash_protocol_version == protocol
        f.save(tmp_path / "f.abf")
        assert abf.load(tmp_path / "f.abf", key=key) == f
        classic = abf.build(members(3000), 4000, 0.01, catalog_version=9, key=key)
        assert classic.layout == "classic" and classic.hash_protocol_version == protocol - 2
        assert classic != f


def test_layout_arguments_are_checked():
    with pytest.raises(ValueError, match="classic"):
        abf.build(members(10), 10, 0.01, layout="diagonal")
    with pytest.raises(TypeError):
        abf.build(members(10), 10, 0.01, layout=3)
    with pytest.raises(ValueError):
        abf.choose_layout(10, 0.01, layout="diagonal")
    # 3e8 digests at p = 0.01: three classic shards, one one-line filter.
    assert abf.choose_shard_count(3e8, 0.01) == 3
    assert abf.choose_shard_count(3e8, 0.01, layout="blocked") == 1
    # Past 2^30 digests one classic filter cannot hold n; a blocked one can
    # (the spec alone is checked: nothing that large is built).
    with pytest.raises(abf.LayoutError):
        abf.choose_layout(2**31, 0.01)
    m, k = abf.choose_layout(2**31, 0.01, layout="blocked")
    assert k == 8 and m > 2**34


def test_blocked_sets_answer_as_each_shard_alone_and_pickle(tmp_path):
    d = members(9000)
    probes = np.concatenate([random_digests(30_000, seed=41), d[:500]])
    for key in (None, GOLDEN_KEY):
        s = abf.build(d, 9000, 0.01, key=key, shards=3, layout="blocked")
        assert isinstance(s, abf.FilterSet) and s.layout == "blocked"
        assert s.hash_protocol_version == (3 if key is None else 4)
        assert s.info["layout"] == "blocked"
        n_i = abf.shard_expected_item_count(9000, 3)
        route = abf._abf._split_by_shard(d, 3)
        for i, shard in enumerate(s.shards):
            alone = abf.build(route[i], n_i, 0.01, key=key, layout="blocked", backend="scalar")
            assert bytes(shard.payload) == bytes(alone.payload), i
            assert shard.layout == "blocked"
        answers = s.query(probes, backend="scalar")
        assert np.array_equal(s.query(probes), answers)
        for j in range(0, len(probes), 97):
            assert s.might_contain(probes[j]) == answers[j]
        assert s.query(d).all()
        for pickle_protocol in (2, 5):
            t = pickle.loads(pickle.dumps(s, protocol=pickle_protocol))
            assert t == s and t.layout == "blocked"
        s.save(tmp_path / "s.abfs")
        assert abf.load(tmp_path / "s.abfs", key=key) == s
    assert abf.build(d, 9000, 0.01, shards="auto", layout="blocked").shard_count == 1


def test_a_catalog_builds_blocked_filters_and_sets(tmp_path):
    d = random_digests(4000, seed=42)
    with abf.Catalog.create(tmp_path / "c.db") as catalog:
        catalog.add(d)
        f = catalog.build_filter(5000, 0.01, layout="blocked")
        assert f.layout == "blocked" and f.catalog_id == catalog.id and f.catalog_version == 1
        assert f == abf.build(catalog.digests(), 5000, 0.01, catalog_version=1,
                              catalog_id=catalog.id, layout="blocked")
        s = catalog.build_filter(5000, 0.01, shards=3, layout="blocked")
        assert isinstance(s, abf.FilterSet) and s.layout == "blocked"
        assert s == abf.build(catalog.digests(), 5000, 0.01, catalog_version=1,
                              catalog_id=catalog.id, shards=3, layout="blocked")
        missing = abf.dedup(np.concatenate([d[:100], random_digests(1000, seed=43)]), s, catalog)
        assert len(missing) == 1000
