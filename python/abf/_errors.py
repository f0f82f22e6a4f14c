"""The exceptions abf raises: one per family of the library's error codes.

Every library error arrives as an instance of a subclass of :class:`Error`,
with ``.code`` the library's snake_case code name (``"key_mismatch"``) and
``.message`` its message, which says what failed and where. ``str(error)``
is ``"<code>: <message>"``, as the ``abf`` command prints it.
"""

from __future__ import annotations

import errno as _errno
import os as _os

__all__ = [
    "Error",
    "LayoutError",
    "CapacityError",
    "DigestError",
    "SnapshotError",
    "FilterKeyError",
    "CatalogMismatchError",
    "IncompatibleError",
    "IoError",
    "InvalidArgumentError",
    "BackendError",
    "CatalogStoreError",
    "CatalogNotFoundError",
    "error_class",
]


class Error(Exception):
    """An error of the abf library: ``.code`` (snake_case) and ``.message``."""

    code: str
    message: str

    def __init__(self, message: str, code: str = "unknown_error") -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self):
        return (type(self), (self.message, self.code))


class LayoutError(Error, ValueError):
    """No layout for (n, p): invalid_expected_item_count,
    invalid_false_positive_rate, filter_too_large."""


class CapacityError(Error):
    """capacity_exceeded: more digests than the filter was designed for."""


class DigestError(Error, ValueError):
    """invalid_digest: not 32 bytes, not 64 hex digits, a partial record."""


class SnapshotError(Error):
    """A snapshot, filter-set or exact index file breaks a rule of its format
    (snapshot_*, set_manifest_*, set_shard_*, index_*, index_set_*); never
    used."""


class FilterKeyError(Error):
    """key_required, key_mismatch, invalid_key."""


class CatalogMismatchError(Error):
    """catalog_mismatch: a filter of another catalog, or of none."""


class IncompatibleError(Error):
    """incompatible_filters: filters that cannot be merged (the field is named)."""


class IoError(Error, OSError):
    """io_error: a file could not be opened, read, written or renamed."""


class InvalidArgumentError(Error, ValueError):
    """invalid_argument: an argument the library does not accept."""


class BackendError(Error):
    """backend_unavailable, cuda_error."""


class CatalogStoreError(Error):
    """catalog_error: the exact store (the SQLite catalog) failed."""


class CatalogNotFoundError(CatalogStoreError, FileNotFoundError):
    """catalog_error for a catalog file that does not exist (abf.Catalog,
    abf.dedup): a CatalogStoreError and a FileNotFoundError, with ``errno``
    ENOENT and ``filename`` the path, so ``except FileNotFoundError`` and
    ``except OSError`` catch it as they catch ``open``'s."""

    def __init__(self, message: str, code: str = "catalog_error",
                 filename: str | None = None) -> None:
        super().__init__(message, code)
        self.errno = _errno.ENOENT
        self.strerror = _os.strerror(_errno.ENOENT)
        self.filename = filename

    def __reduce__(self):
        return (type(self), (self.message, self.code, self.filename))


_BY_CODE = {
    "invalid_expected_item_count": LayoutError,
    "invalid_false_positive_rate": LayoutError,
    "filter_too_large": LayoutError,
    "capacity_exceeded": CapacityError,
    "invalid_digest": DigestError,
    "key_required": FilterKeyError,
    "key_mismatch": FilterKeyError,
    "invalid_key": FilterKeyError,
    "catalog_mismatch": CatalogMismatchError,
    "incompatible_filters": IncompatibleError,
    "io_error": IoError,
    "invalid_argument": InvalidArgumentError,
    "backend_unavailable": BackendError,
    "cuda_error": BackendError,
    "catalog_error": CatalogStoreError,
}


def error_class(code: str) -> type[Error]:
    """The exception class of a library error code."""
    cls = _BY_CODE.get(code)
    if cls is not None:
        return cls
    if code.startswith(("snapshot_", "set_", "index_")):
        return SnapshotError
    return Error
