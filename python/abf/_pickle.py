"""What a pickled Filter or FilterSet is rebuilt with (functions of the
extension module itself cannot be pickled by reference)."""

from . import _abf


def filter_from_snapshot(data, key=None):
    """A Filter from its snapshot bytes, every rule checked (abf.from_bytes)."""
    return _abf._filter_from_snapshot(data, key)


def set_from_snapshots(shards, expected_items, key=None):
    """A FilterSet from its shards' snapshot bytes."""
    return _abf._set_from_snapshots(shards, expected_items, key)
