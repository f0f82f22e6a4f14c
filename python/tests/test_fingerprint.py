"""The content fingerprint (docs/protocol.md, "Content fingerprint") from
Python: builds, sets, merges of disjoint parts and files all carry the
fingerprint that tests/data/vectors/fingerprint.tsv (an independent
implementation, scripts/fingerprint-vectors) gives for the same digests."""

from __future__ import annotations

import numpy as np

import abf
from conftest import DATA, members


def vectors():
    """name -> (selector, count, fingerprint hex) of every set row."""
    rows = {}
    for line in (DATA / "vectors" / "fingerprint.tsv").read_text().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        fields = line.split("\t")
        if fields[0] == "set":
            rows[fields[1]] = (fields[2], int(fields[3]), fields[4])
    assert rows
    return rows


def test_python_builds_carry_the_vectors_fingerprint():
    rows = vectors()
    for name, count in (("member-1", 1), ("member-1000", 1000), ("member-10000", 10000)):
        selector, size, expected = rows[name]
        assert selector == f"members 0 {count}" and size == count
        d = members(count)
        f = abf.build(d, max(count, 1), 0.01)
        assert f.content_fingerprint == expected, name
        assert f.info["content_fingerprint"] == expected
        # Any order, any set split, any merge of disjoint parts.
        shuffled = d[np.random.default_rng(1).permutation(count)]
        assert abf.build(shuffled, count, 0.01).content_fingerprint == expected
        s = abf.build(d, max(count, 3), 0.01, shards=3)
        assert s.content_fingerprint == expected
        assert s.info["content_fingerprint"] == expected
        if count >= 3:
            parts = np.array_split(d, 3)
            merged = abf.merge([abf.build(part, count, 0.01) for part in parts])
            assert merged.content_fingerprint == expected
    assert abf.build(members(0), 1, 0.01).content_fingerprint == rows["empty"][2]


def test_the_shards_carry_their_parts(tmp_path):
    rows = vectors()
    s = abf.build(members(1000), 1000, 0.01, shards=3)
    for i in range(3):
        assert s.shard(i).content_fingerprint == rows[f"member-1000-shard-3-{i}"][2]
    path = tmp_path / "c.abfs"
    s.save(str(path))
    loaded = abf.load(str(path))
    assert loaded.content_fingerprint == rows["member-1000"][2]
    assert loaded == s


def test_a_file_without_one_says_none(tmp_path):
    golden = abf.load(str(DATA / "vectors" / "v2" / "member-1000-v2.abf"))
    assert golden.content_fingerprint is None
    assert golden.info["content_fingerprint"] is None
    part = abf.build(members(10), 1000, 0.01)
    # A merge with a part that does not know its own does not know either.
    # (It holds 1,000 digests at n = 1,000: the other part is empty.)
    both = abf.merge([golden, abf.build(members(0), 1000, 0.01, catalog_version=42,
                                        catalog_id=golden.catalog_id)])
    assert both.content_fingerprint is None
    assert part.content_fingerprint is not None
