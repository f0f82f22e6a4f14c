"""abf: absence-first Bloom filters over SHA-256 digests.

A filter answers "definitely not" or "maybe" for each digest; only a
"maybe" needs the exact store (a catalog). The bindings call the C++
library (the same bits, files and errors as the ``abf`` command)::

    import numpy as np, abf

    digests = np.frombuffer(data, np.uint8).reshape(-1, 32)   # (N, 32), no copy
    f = abf.build(digests, expected_items=1_000_000, fpp=0.001)
    f.save("catalog.abf")
    g = abf.load("catalog.abf")
    maybe = g.query(candidates)        # NumPy bool array, True = maybe
    s = abf.build(digests, 300_000_000, 0.01, shards="auto")  # a FilterSet

Digests are a NumPy uint8 array of shape (N, 32), N * 32 bytes (bytes,
memoryview, mmap), or an iterable of 32-byte bytes (or hex str). Arrays and
buffers are read in place; builds, queries, merges and catalog calls
release the GIL. Errors are :class:`abf.Error` subclasses with ``.code``.
``abf.dask`` (import it explicitly) builds and dedups on a Dask cluster.
"""

from ._errors import (
    BackendError,
    CapacityError,
    CatalogMismatchError,
    CatalogNotFoundError,
    CatalogStoreError,
    DigestError,
    Error,
    FilterKeyError,
    IncompatibleError,
    InvalidArgumentError,
    IoError,
    LayoutError,
    SnapshotError,
)
from ._abf import (
    MAX_SHARD_COUNT,
    Catalog,
    Filter,
    FilterSet,
    Index,
    Key,
    __version__,
    backends,
    build,
    choose_layout,
    choose_shard_count,
    cuda_compiled,
    dedup,
    from_bytes,
    load,
    merge,
    read_key_file,
    release_cached_buffers,
    shard_expected_item_count,
    simd_target,
    write_key_file,
)

__all__ = [
    "MAX_SHARD_COUNT",
    "BackendError",
    "CapacityError",
    "Catalog",
    "CatalogMismatchError",
    "CatalogNotFoundError",
    "CatalogStoreError",
    "DigestError",
    "Error",
    "Filter",
    "FilterKeyError",
    "FilterSet",
    "IncompatibleError",
    "Index",
    "InvalidArgumentError",
    "IoError",
    "Key",
    "LayoutError",
    "SnapshotError",
    "__version__",
    "backends",
    "build",
    "choose_layout",
    "choose_shard_count",
    "cuda_compiled",
    "dedup",
    "from_bytes",
    "load",
    "merge",
    "read_key_file",
    "release_cached_buffers",
    "shard_expected_item_count",
    "simd_target",
    "write_key_file",
]

from ._signatures import python_function as _python_function

for _cls in (Catalog, Filter, FilterSet, Index, Key):
    _cls.__module__ = "abf"
    # Static methods as Python functions too (Catalog.create, Index.load, ...).
    for _name, _member in list(vars(_cls).items()):
        if isinstance(_member, staticmethod) and not _name.startswith("_"):
            setattr(_cls, _name, staticmethod(
                _python_function(_member.__func__, f"{_cls.__name__}.{_name}")))

# The module functions as Python functions of the same signatures, which
# call the extension's (abf._signatures.python_function): help(abf.build)
# and an unknown keyword's TypeError read as any Python function's.
(backends, build, choose_layout, choose_shard_count, dedup, from_bytes, load, merge,
 read_key_file, release_cached_buffers, shard_expected_item_count, simd_target,
 write_key_file) = (
    _python_function(_f, _f.__name__)
    for _f in (backends, build, choose_layout, choose_shard_count, dedup, from_bytes, load,
               merge, read_key_file, release_cached_buffers, shard_expected_item_count,
               simd_target, write_key_file))
del _cls, _name, _member
