"""abf on Dask: filter builds and bulk dedup spread over a cluster.

Nothing here schedules or sends anything itself: the partitions of a Dask
collection become tasks, Dask runs them where the data is, and Dask's own
tree reduction (``dask.bag.Bag.reduction``) ORs the partial filters, which
is exact (docs/protocol.md section 6), so the result is bit for bit
``abf.build`` of the same digests in one process, whatever the
partitioning::

    from distributed import Client
    import abf, abf.dask

    client = Client("tcp://scheduler:8786")          # or LocalCluster()
    f = abf.dask.build(bag, expected_items=10**8, fpp=0.01)
    s = abf.dask.build(bag, 3 * 10**8, 0.01, shards="auto")   # a FilterSet
    missing = abf.dask.find_missing(candidates, f, "/srv/catalog.db")

Collections: a ``dask.bag.Bag`` whose items are digests (32-byte bytes or
hex str) or chunks of them (NumPy uint8 arrays of shape (k, 32), or bytes of
k * 32); a ``dask.array.Array`` of shape (N, 32) and dtype uint8; a
``dask.dataframe`` Series, or a DataFrame and its ``column``, of 32-byte
bytes or hex str; or a list of ``dask.delayed`` objects, each a chunk. A
partition is turned into one (n, 32) array on the worker that holds it
(an array partition in place).

Filters travel between processes pickled as their snapshot bytes (pickle
protocol 5, so Dask sends the bitset as one frame, without a further copy);
each side reads the payload once more for its checksum, which is verified
on arrival. A keyed filter's pickle carries its key.
"""

from __future__ import annotations

import os
import threading
import types
from typing import (TYPE_CHECKING, Callable, Iterable, Literal, Sequence, TypeVar, Union, cast,
                    overload)

import numpy as np

import dask
import dask.bag as db
import dask.sizeof
from dask.delayed import Delayed, delayed

from . import _abf
from ._errors import DigestError

if TYPE_CHECKING:
    import dask.array as da
    import dask.dataframe as dd
    from distributed import Client

    # What abf.dask takes as digests: a Bag, a dask Array, a DataFrame (with
    # column=) or a Series, or a list of Delayed chunks.
    Collection = Union[db.Bag, da.Array, dd.DataFrame, dd.Series, Sequence[Delayed]]

# abf.build's and abf.dedup's argument types (as in _abf.pyi).
FilterLike = Union[_abf.Filter, _abf.FilterSet]
KeyLike = Union[_abf.Key, bytes, bytearray, memoryview]
PathLike = Union[str, "os.PathLike[str]"]
# abf.dedup's counts: ints, the ratios floats, "filter" a bool.
Counts = dict[str, Union[int, float, bool]]
_T = TypeVar("_T")

__all__ = ["build", "find_missing", "partitions", "release_worker_buffers"]

_DIGEST = 32


# Dask weighs results by sizeof when it places tasks, counts memory and
# decides what to spill: a filter is its bitset (sys.getsizeof would say a
# few dozen bytes).
@dask.sizeof.sizeof.register(_abf.Filter)
def _sizeof_filter(f: _abf.Filter) -> int:
    return f.bit_count // 8 + 128


@dask.sizeof.sizeof.register(_abf.FilterSet)
def _sizeof_set(s: _abf.FilterSet) -> int:
    return s.bit_count // 8 + 128 * s.shard_count


def _rows(array: np.ndarray) -> np.ndarray:
    """An (n, 32) uint8 view of a chunk array (a copy only if it has strides)."""
    if array.dtype == np.uint8:
        if array.ndim == 2 and array.shape[1] == _DIGEST:
            return np.ascontiguousarray(array)
        if array.ndim == 1 and array.size % _DIGEST == 0:
            return np.ascontiguousarray(array).reshape(-1, _DIGEST)
    elif array.dtype.itemsize == _DIGEST and array.dtype.kind in "SV" and array.ndim == 1:
        return np.ascontiguousarray(array).view(np.uint8).reshape(-1, _DIGEST)
    elif array.dtype == object:
        return _digests_of(array.tolist())
    raise DigestError(
        f"a chunk array of dtype {array.dtype} and shape {array.shape}; "
        "expected uint8 of shape (k, 32)",
        "invalid_digest",
    )


def _hex_digest(text: str) -> bytes:
    # The prefix in any case ("SHA256:"), as the CLI and abf serve read it.
    hex_text = text[7:] if text[:7].lower() == "sha256:" else text
    try:
        if len(hex_text) != 64:
            raise ValueError
        return bytes.fromhex(hex_text)
    except ValueError:
        raise DigestError(f"{text[:80]!r} is not 64 hex digits", "invalid_digest") from None


def _digests_of(part: object) -> np.ndarray:
    """One (n, 32) uint8 array of a partition's items."""
    if isinstance(part, np.ndarray) and part.dtype != object:
        return _rows(part)
    if hasattr(part, "to_numpy") and not isinstance(part, np.ndarray):  # pandas
        values = part.to_numpy()
        if values.dtype != object:
            return _rows(values)
        part = values.tolist()
    if not isinstance(part, Iterable):
        raise TypeError(f"a partition of a {type(part).__name__}; expected digests")
    arrays: list[np.ndarray] = []
    run: list[bytes] = []

    def flush() -> None:
        if run:
            arrays.append(np.frombuffer(b"".join(run), np.uint8).reshape(-1, _DIGEST))
            run.clear()

    for index, item in enumerate(part):
        if isinstance(item, str):
            run.append(_hex_digest(item))
        elif isinstance(item, (bytes, bytearray, memoryview)):
            size = memoryview(item).nbytes
            if size == 0 or size % _DIGEST:
                raise DigestError(
                    f"partition item {index} is {size} bytes, not a multiple of 32",
                    "invalid_digest",
                )
            run.append(bytes(item))
        elif isinstance(item, np.ndarray):
            flush()
            arrays.append(_rows(item))
        else:
            raise TypeError(
                f"partition item {index} is a {type(item).__name__}; expected 32-byte "
                "bytes, a hex str or a (k, 32) uint8 array"
            )
    flush()
    if not arrays:
        return np.empty((0, _DIGEST), np.uint8)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _dataframes() -> types.ModuleType | None:
    """dask.dataframe, or None for a Dask without pandas."""
    try:
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover - dask without pandas
        return None
    return dd


def _sources(collection: Collection,
             column: str | None) -> tuple[list[Delayed], Callable[..., np.ndarray]]:
    """The collection's partitions as Delayed, and what turns one into digests."""
    import dask.array as da

    if isinstance(collection, db.Bag):
        return list(collection.to_delayed()), _digests_of
    if isinstance(collection, da.Array):
        array = collection
        if array.ndim == 2:
            array = array.rechunk({1: -1})
            return list(array.to_delayed()[:, 0]), _rows
        if array.ndim == 1:
            return list(array.to_delayed()), _rows
        raise DigestError(
            f"a dask array of {array.ndim} dimensions; expected (N, 32)", "invalid_digest"
        )
    frames = _dataframes()
    if frames is not None and isinstance(collection, frames.DataFrame):
        if column is None:
            if len(collection.columns) != 1:
                raise ValueError(
                    "a DataFrame of several columns: name the digest column (column=...)"
                )
            column = collection.columns[0]
        return list(collection[column].to_delayed()), _digests_of
    if frames is not None and isinstance(collection, frames.Series):
        return list(collection.to_delayed()), _digests_of
    if isinstance(collection, (list, tuple)) and all(isinstance(p, Delayed) for p in collection):
        return list(collection), _digests_of
    raise TypeError(
        f"abf.dask takes a dask Bag, Array, DataFrame or Series, or a list of Delayed; "
        f"not a {type(collection).__name__}"
    )


def partitions(collection: Collection, column: str | None = None) -> list[Delayed]:
    """The collection's partitions as Delayed (n, 32) uint8 arrays, in order.

    Each array is made on the worker that computes its partition.
    """
    sources, convert = _sources(collection, column)
    return [delayed(convert, pure=True)(p) for p in sources]


def _by_location(collection: Collection, sources: Sequence[Delayed]) -> list[int]:
    """Partition indices, those held by one worker next to each other.

    For a collection already in the cluster's memory (client.persist), so
    that the tree reduction merges each worker's partials where they are and
    moves few filters between workers (OR is commutative: the bits are the
    same in any order). Any other collection keeps its order.
    """
    order = list(range(len(sources)))
    client = _default_client()
    if client is None or len(sources) < 2:
        return order
    try:
        from dask.utils import stringify
        from distributed import futures_of

        futures = {f.key: f for f in futures_of(collection)}
        held = []
        for source in sources:
            # A persisted bag's partition has its future's key; a
            # delayed(future) wraps exactly one future.
            future = futures.get(source.key)
            if future is None:
                inner = futures_of(source)
                future = inner[0] if len(inner) == 1 else None
            if future is None:
                return order
            held.append(future)
        who = client.who_has(held)
        places = []
        for f in held:
            workers = who.get(f.key) or who.get(stringify(f.key)) or ()
            places.append(min(workers) if workers else "")
        if not all(places):
            return order
        return sorted(order, key=lambda i: (places[i], i))
    except Exception:  # an optimization only: never a reason to fail a build
        return order


def _build_partial(digests: np.ndarray, expected_items: int, fpp: float, catalog_version: int,
                   catalog_id: bytes | str | None, key: _abf.Key | None, backend: str,
                   layout: str) -> _abf.Filter:
    return _abf.build(digests, expected_items, fpp, catalog_version=catalog_version,
                      catalog_id=catalog_id, key=key, shards=1, backend=backend, layout=layout)


def _split_by_shard(digests: np.ndarray, shard_count: int) -> list[np.ndarray]:
    # A Python function: tasks are pickled by reference, which the
    # extension's own functions do not allow.
    return _abf._split_by_shard(digests, shard_count)


def _one(value: _T) -> list[_T]:
    return [value]


def _merge_list(filters: Iterable[_abf.Filter]) -> _abf.Filter:
    filters = list(filters)
    return filters[0] if len(filters) == 1 else _abf.merge(filters)


def _tree_merge(partials: Sequence[Delayed], split_every: int) -> db.Item:
    """Dask's tree reduction of partial filters (split_every inputs a task)."""
    bag = db.from_delayed([delayed(_one, pure=True)(p) for p in partials])
    return bag.reduction(_merge_list, _merge_list, split_every=split_every)


def _key_argument(key: KeyLike | None) -> _abf.Key | None:
    if key is None or isinstance(key, _abf.Key):
        return key
    return _abf.Key(key)


def build(collection: Collection, expected_items: int, fpp: float, catalog_version: int = 0,
          catalog_id: bytes | str | None = None, key: KeyLike | None = None,
          shards: int | str = 1, *,
          column: str | None = None, split_every: int = 4,
          backend: str = "auto", progress: bool = False,
          layout: str = "classic") -> _abf.Filter | _abf.FilterSet:
    """Builds a filter (shards=1) or filter set of the collection's digests on Dask.

    Bit for bit ``abf.build(all_digests, expected_items, fpp, ...)``, whatever
    the partitioning. Each partition builds its partial filter on the worker
    that holds it; Dask's tree reduction ORs them, ``split_every`` partials a
    task (each task holds that many bitsets and its result). For a set
    (shards > 1, or "auto"), each partition is split by shard on its worker
    (``shard(d)``, section 13) and each shard has a reduction of its own, so
    a task holds one shard's bitsets, never the set's; the client receives
    the S finished shards and joins them (``FilterSet.from_shards``). A
    collection already in the cluster's memory (``client.persist``) is
    reduced in the order of the workers that hold its partitions, so each
    worker first merges its own partials and few filters move between them.

    ``layout`` is ``abf.build``'s: "classic" (the default) or "blocked" (hash
    protocol 3, 4 with a key; every partial and every shard takes it).

    Runs on the current Dask scheduler (a ``distributed.Client`` once one is
    made). The spec is checked here first (abf.LayoutError); partitions then
    raise what ``abf.build`` raises for their digests, and the merge
    abf.CapacityError when there are more than ``expected_items``.

    ``progress=True`` shows Dask's progress bar while the tasks run
    (``distributed.progress`` under a client, ``dask.diagnostics.ProgressBar``
    otherwise); nothing is shown by default.
    """
    if split_every < 2:
        raise ValueError("split_every must be at least 2")
    key = _key_argument(key)
    # abf.build's own checks (spec, shard count, shard size, catalog id, key)
    # before any task runs; the empty filter is the answer for no partitions.
    empty = _abf.build([], expected_items, fpp, catalog_version=catalog_version,
                       catalog_id=catalog_id, key=key, shards=shards, backend=backend,
                       layout=layout)
    sources, convert = _sources(collection, column)
    if not sources:
        return empty
    order = _by_location(collection, sources)
    parts = [delayed(convert, pure=True)(sources[i]) for i in order]
    if isinstance(empty, _abf.Filter):
        del empty
        partials = [delayed(_build_partial, pure=True)(p, expected_items, fpp, catalog_version,
                                                       catalog_id, key, backend, layout)
                    for p in parts]
        (result,) = _compute(_tree_merge(partials, split_every), progress=progress)
        return cast(_abf.Filter, result)
    shard_count = empty.shard_count
    shard_items = empty.shard_expected_item_count
    del empty
    per_shard: list[list[Delayed]] = [[] for _ in range(shard_count)]
    for part in parts:
        buckets = delayed(_split_by_shard, nout=shard_count, pure=True)(part, shard_count)
        for s in range(shard_count):
            per_shard[s].append(delayed(_build_partial, pure=True)(
                buckets[s], shard_items, fpp, catalog_version, catalog_id, key, backend, layout))
    shard_filters = _compute(*[_tree_merge(p, split_every) for p in per_shard],
                             progress=progress)
    return _abf.FilterSet.from_shards([cast(_abf.Filter, f) for f in shard_filters],
                                      expected_items)


# --- find_missing ---------------------------------------------------------------

_catalogs: dict[str, _abf.Catalog] = {}
_catalogs_lock = threading.Lock()


def _worker_catalog(path: str) -> _abf.Catalog:
    """The catalog at path, opened read-only once per worker process."""
    with _catalogs_lock:
        catalog = _catalogs.get(path)
        if catalog is None:
            catalog = _abf.Catalog(path, read_only=True)
            _catalogs[path] = catalog
        return catalog


_indexes: dict[str, _abf.Index] = {}
_indexes_lock = threading.Lock()


def _worker_index(path: str) -> _abf.Index:
    """The index at path, loaded (mapped) and verified once per worker
    process; abf.dedup checks it against the catalog on every call, the sum
    over its digests only the first time."""
    with _indexes_lock:
        index = _indexes.get(path)
        if index is None:
            index = _abf.Index.load(path, mode="map")
            _indexes[path] = index
        return index


def _dedup_partition(digests: np.ndarray, filter: FilterLike, catalog_path: str,
                     backend: str, index_path: str | None = None) -> tuple[np.ndarray, Counts]:
    index = _worker_index(index_path) if index_path is not None else None
    return _abf.dedup(digests, filter, _worker_catalog(catalog_path), return_counts=True,
                      backend=backend, index=index)


def _first_occurrences(digests: np.ndarray) -> np.ndarray:
    """Each digest once, at its first occurrence, in order."""
    if len(digests) == 0:
        return digests.reshape(0, _DIGEST)
    rows = np.ascontiguousarray(digests).view(np.dtype((np.void, _DIGEST))).ravel()
    _, first = np.unique(rows, return_index=True)
    first.sort()
    return digests[first]


_SUMMED = ("total", "present", "negative", "maybe", "false_positives", "head_lookups",
           "head_present", "exact_lookups")


def _default_client() -> Client | None:
    try:
        from distributed import get_client
    except ImportError:  # pragma: no cover - dask without distributed
        return None
    try:
        return get_client()
    except ValueError:
        return None


def _compute(*collections: object, progress: bool = False) -> tuple[object, ...]:
    """dask.compute of the collections, with Dask's own progress bar when
    asked: ``distributed.progress`` under a distributed client (a console bar
    on stdout that returns when the work is done; a widget in a notebook),
    ``dask.diagnostics.ProgressBar`` on the local schedulers."""
    if not progress:
        return dask.compute(*collections)
    client = _default_client()
    if client is None:
        from dask.diagnostics import ProgressBar
        with ProgressBar():
            return dask.compute(*collections)
    from distributed import progress as show_progress
    futures = client.compute(list(collections))
    show_progress(futures)
    return tuple(client.gather(futures))


@overload
def find_missing(candidates: Collection, filter_or_set: FilterLike | PathLike,
                 catalog: _abf.Catalog | PathLike, *, key: KeyLike | None = None,
                 column: str | None = None, client: Client | None = None,
                 return_counts: Literal[False] = False, backend: str = "auto",
                 index: _abf.Index | PathLike | None = None, progress: bool = False,
                 compute: Literal[True] = True) -> np.ndarray: ...
@overload
def find_missing(candidates: Collection, filter_or_set: FilterLike | PathLike,
                 catalog: _abf.Catalog | PathLike, *, key: KeyLike | None = None,
                 column: str | None = None, client: Client | None = None,
                 return_counts: Literal[True], backend: str = "auto",
                 index: _abf.Index | PathLike | None = None, progress: bool = False,
                 compute: Literal[True] = True) -> tuple[np.ndarray, Counts]: ...
@overload
def find_missing(candidates: Collection, filter_or_set: FilterLike | PathLike,
                 catalog: _abf.Catalog | PathLike, *, key: KeyLike | None = None,
                 column: str | None = None, client: Client | None = None,
                 return_counts: bool = False, backend: str = "auto",
                 index: _abf.Index | PathLike | None = None, progress: bool = False,
                 compute: Literal[False]) -> Delayed: ...
def find_missing(candidates: Collection, filter_or_set: FilterLike | PathLike,
                 catalog: _abf.Catalog | PathLike, *, key: KeyLike | None = None,
                 column: str | None = None, client: Client | None = None,
                 return_counts: bool = False, backend: str = "auto",
                 index: _abf.Index | PathLike | None = None, progress: bool = False,
                 compute: bool = True) -> np.ndarray | tuple[np.ndarray, Counts] | Delayed:
    """Bulk dedup on Dask: the candidates not in the catalog, in order, each once.

    The filter (a Filter, a FilterSet, or a path loaded here with ``key``) is
    scattered to every worker once; each partition is probed on its worker
    and only its maybes are looked up in the catalog, a SQLite file each
    worker opens read-only (``catalog``: its path, as the workers see it, or
    an ``abf.Catalog``, whose path is taken). Answers are exact: the catalog's
    own, each partition's at the catalog's newest version when it runs (as
    ``abf.dedup``'s; the counts' ``catalog_version`` is the oldest of those),
    however old the filter. Returns a (M, 32) uint8 array, and
    with ``return_counts`` also the summed counts (as ``abf.dedup``'s).

    When the catalog file is also readable here, the filter is checked
    against it first (abf.CatalogMismatchError before any task runs).

    ``index``: an exact index of the catalog (``abf index``,
    ``Catalog.write_index``) or an index set's manifest (``abf index
    --shards S``), its path as the workers see it or an
    ``abf.Index`` (whose path is taken). Each worker process loads it once
    (mapped) and answers the filter's maybes from it instead of SQLite, with
    the same answers (``abf.dedup``'s ``index``). Where the files are readable
    here, it is checked against the catalog here first, the whole check once
    (abf.CatalogMismatchError before any task runs); each partition still
    checks its worker's copy against the catalog, which costs a catalog read.
    The counts then add ``index_version`` (the oldest a worker used),
    ``index_lookups`` and ``store_lookups``, summed.

    ``progress=True`` shows Dask's progress bar while the partitions are
    answered (as ``build``'s); nothing is shown by default.

    ``compute=False`` runs nothing: it returns a ``dask.delayed`` object
    (``Delayed``) of the same answer, the array (or the pair with
    ``return_counts``) once computed (``.compute()``, ``dask.compute``, or
    ``client.compute``), so it can join a larger graph. The checks against
    the catalog here still run first, and under a client the filter is
    scattered now; ``progress`` is then ignored (show the bar around the
    compute instead).
    """
    if isinstance(filter_or_set, (_abf.Filter, _abf.FilterSet)):
        filter = filter_or_set
    else:
        filter = _abf.load(filter_or_set, key=key)
    path = catalog.path if isinstance(catalog, _abf.Catalog) else os.fspath(catalog)
    index_path = None
    if index is not None:
        index_path = index.path if isinstance(index, _abf.Index) else os.fspath(index)
        if os.path.exists(index_path):
            index_path = os.path.abspath(index_path)
    if os.path.exists(path):
        path = os.path.abspath(path)
        here = None
        if index_path is not None and os.path.exists(index_path):
            here = index if isinstance(index, _abf.Index) else _abf.Index.load(index_path, "map")
        # The checks, here: the filter's, and the index's.
        _abf.dedup(np.empty((0, _DIGEST), np.uint8), filter, path, index=here)
    if client is None:
        client = _default_client()
    parts = partitions(candidates, column)
    shipped = client.scatter(filter, broadcast=True, hash=False) if client is not None else filter
    tasks = [delayed(_dedup_partition, pure=True)(p, shipped, path, backend, index_path)
             for p in parts]
    with_index = index_path is not None
    if not compute:
        return delayed(_combine, pure=True)(tasks, filter.catalog_version, with_index,
                                            return_counts)
    results: Sequence[tuple[np.ndarray, Counts]]
    if client is not None:
        futures = client.compute(tasks)
        if progress:
            from distributed import progress as show_progress
            show_progress(futures)
        results = client.gather(futures)
    else:
        results = _compute(*tasks, progress=progress)  # type: ignore[assignment]
    return _combine(results, filter.catalog_version, with_index, return_counts)


def _combine(results: Sequence[tuple[np.ndarray, Counts]], filter_version: int,
             with_index: bool, return_counts: bool) -> np.ndarray | tuple[np.ndarray, Counts]:
    """find_missing's answer from its partitions' (missing, counts)."""
    if results:
        missing = _first_occurrences(np.concatenate([r[0] for r in results]))
    else:
        missing = np.empty((0, _DIGEST), np.uint8)
    if not return_counts:
        return missing
    oldest = min((int(r[1]["catalog_version"]) for r in results), default=None)
    counts: Counts = {
        "catalog_version": filter_version if oldest is None else oldest, "filter": True}
    for name in _SUMMED:
        counts[name] = sum(int(r[1][name]) for r in results)
    if with_index and results:
        counts["index_version"] = min(int(r[1]["index_version"]) for r in results)
        for name in ("index_lookups", "store_lookups"):
            counts[name] = sum(int(r[1][name]) for r in results)
    total, present = int(counts["total"]), int(counts["present"])
    exact, negative = int(counts["exact_lookups"]), int(counts["negative"])
    fp, maybe = int(counts["false_positives"]), int(counts["maybe"])
    counts["new"] = len(missing)
    counts["repeats"] = total - present - len(missing)
    counts["exact_lookups_avoided"] = total - exact
    counts["negative_bypass_ratio"] = negative / total if total else 0.0
    counts["observed_false_positive_rate"] = fp / (negative + fp) if negative + fp else 0.0
    counts["false_discovery_ratio"] = fp / maybe if maybe else 0.0
    counts["partitions"] = len(results)
    return missing, counts


def _release_cached_buffers() -> None:
    _abf.release_cached_buffers()


def release_worker_buffers(client: Client | None = None) -> None:
    """Frees the library's cached build scratch (up to 256 MiB) on every worker.

    A worker keeps it after a build for the next one; between jobs, this
    gives it back (``abf.release_cached_buffers`` on each, by ``client.run``).
    """
    if client is None:
        client = _default_client()
    if client is not None:
        client.run(_release_cached_buffers)
