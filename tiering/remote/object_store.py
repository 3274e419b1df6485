"""The one narrow object-store interface every remote-tier component talks to.

Implementations: :class:`~tierlog.tiering.remote.s3.S3ObjectStore` (any S3-compatible service) and
:class:`~tierlog.tiering.remote.local.LocalObjectStore` (a directory). Behaviour is stacked as wrappers that
implement the same protocol: prefixing, retrying, instrumentation and, in tests, fault injection.
Remote reads are cached above this interface, by :mod:`~tierlog.tiering.remote.reader`.

Conventions shared by every implementation (the contract suite checks them against each backend):

* **Keys** are ``/``-separated, non-empty segments of UTF-8, at most 1024 bytes, no ``.``/``..`` segment,
  no empty segment, no NUL or backslash, and no segment beginning with ``.tierlog`` (reserved for the
  local store's temporary files). :func:`validate_key` enforces this everywhere, so a key that works on
  one backend works on all of them.
* **Ranges are half-open**: ``get_range(key, start, end)`` returns bytes ``[start, end)`` like a Python
  slice; ``end=None`` means "to the end of the object". A range past the end is clamped (a start at or
  beyond the size gives ``b""``), so chunked readers need not know the size first.
* **Errors** are only :mod:`tierlog.wire.errors` kinds: a missing key is :class:`NotFoundError`, a lost
  conditional write is ``False`` from :meth:`ObjectStore.put_if_absent` (never an exception), a
  transient failure is :class:`UnavailableError` (the only retriable kind).
* ``list`` yields objects in ascending key order (UTF-8 byte order, as S3 does).
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tierlog.wire.errors import InvalidRequestError

__all__ = [
    "MAX_KEY_BYTES",
    "RESERVED_SEGMENT_PREFIX",
    "ObjectInfo",
    "ObjectStore",
    "validate_key",
    "validate_prefix",
    "validate_range",
]

MAX_KEY_BYTES = 1024
RESERVED_SEGMENT_PREFIX = ".tierlog"


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """What a HEAD or a listing tells about one object.

    ``etag`` is opaque: compare it for equality only (S3 gives an MD5 or a multipart digest, the local
    store a size/mtime fingerprint). ``last_modified`` is timezone-aware UTC.
    """

    key: str
    size: int
    etag: str
    last_modified: _dt.datetime


@runtime_checkable
class ObjectStore(Protocol):
    """An async key/value store of immutable-by-convention byte objects.

    Every method is safe to call concurrently from one event loop. Methods raise only
    :mod:`tierlog.wire.errors` kinds (see the module docstring).
    """

    async def put(self, key: str, data: bytes) -> None:
        """Store ``data`` under ``key``, replacing any object there. Atomic: readers see old or new.

        Idempotent (the same put twice leaves the same object).
        """
        ...

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """Create ``key`` only if no object exists there; ``True`` if this call created it.

        Of any number of concurrent callers exactly one gets ``True``. Not idempotent by itself: a
        retried call whose first attempt succeeded unseen returns ``False`` (compare the stored bytes).
        """
        ...

    async def put_file(self, key: str, path: str | Path) -> None:
        """Upload the file at ``path`` under ``key``, streaming from disk (multipart when large).

        Atomic like :meth:`put`: a failed upload leaves no partial object. Idempotent.
        """
        ...

    async def get(self, key: str) -> bytes:
        """The whole object. Raises :class:`NotFoundError` if it does not exist."""
        ...

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """Bytes ``[start, end)`` of the object (clamped at its end); ``end=None`` reads to the end.

        Raises :class:`NotFoundError` for a missing key (except that an empty range ``start == end``
        returns ``b""`` without any request), :class:`InvalidRequestError` if ``start < 0`` or
        ``end < start``.
        """
        ...

    async def head(self, key: str) -> ObjectInfo:
        """Size, ETag and modification time. Raises :class:`NotFoundError` if missing."""
        ...

    def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """Every object whose key starts with ``prefix`` (a plain string prefix, not a directory),
        in ascending key order, strictly after ``start_after`` when given. Pages are fetched lazily.
        """
        ...

    async def delete(self, key: str) -> None:
        """Remove ``key``. Idempotent: deleting a missing key succeeds."""
        ...

    async def delete_many(self, keys: Iterable[str]) -> None:
        """Remove every key (batched where the backend allows). Idempotent like :meth:`delete`."""
        ...

    async def close(self) -> None:
        """Release connections. Idempotent; the store must not be used afterwards."""
        ...


def validate_key(key: str) -> str:
    """Return ``key`` if it follows the portable key rules, else raise :class:`InvalidRequestError`.

    Pure and idempotent.
    """
    if not isinstance(key, str) or not key:
        raise InvalidRequestError("object key must be a non-empty string")
    if len(key.encode("utf-8", "surrogatepass")) > MAX_KEY_BYTES:
        raise InvalidRequestError(f"object key longer than {MAX_KEY_BYTES} bytes")
    if "\x00" in key or "\\" in key:
        raise InvalidRequestError(f"object key {key!r} contains NUL or backslash")
    for segment in key.split("/"):
        if segment in ("", ".", ".."):
            raise InvalidRequestError(f"object key {key!r} has an empty, '.' or '..' segment")
        if segment.startswith(RESERVED_SEGMENT_PREFIX):
            raise InvalidRequestError(f"object key {key!r} uses the reserved {RESERVED_SEGMENT_PREFIX!r}")
    return key


def validate_prefix(prefix: str) -> str:
    """Return a listing prefix if it could prefix a valid key ("" is fine), else raise.

    Only NUL, backslash and ``..``/``.`` segments are rejected; a trailing partial segment is allowed.
    """
    if "\x00" in prefix or "\\" in prefix or prefix.startswith("/"):
        raise InvalidRequestError(f"listing prefix {prefix!r} is not valid")
    if any(segment in (".", "..") for segment in prefix.split("/")[:-1]):
        raise InvalidRequestError(f"listing prefix {prefix!r} has a '.' or '..' segment")
    return prefix


def validate_range(start: int, end: int | None) -> None:
    """Raise :class:`InvalidRequestError` unless ``0 <= start`` and (``end`` is None or ``start <= end``)."""
    if start < 0:
        raise InvalidRequestError(f"range start {start} is negative")
    if end is not None and end < start:
        raise InvalidRequestError(f"range end {end} is before its start {start}")
