"""A wrapper that confines a store to the keys under one prefix (``s3://bucket/<prefix>/...``)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore, validate_key, validate_prefix

__all__ = ["PrefixedStore"]


class PrefixedStore:
    """:class:`ObjectStore` whose key ``k`` is ``<prefix>/k`` in ``inner``; listings strip the prefix.

    Stateless apart from ``inner``: as safe to call concurrently as ``inner``, and each call is as
    idempotent as the inner call. An empty prefix is allowed and adds nothing.
    """

    def __init__(self, inner: ObjectStore, prefix: str) -> None:
        prefix = prefix.strip("/")
        if prefix:
            validate_key(prefix)
        self.inner = inner
        self.prefix = prefix
        self._head = f"{prefix}/" if prefix else ""

    def __repr__(self) -> str:
        return f"PrefixedStore({self.inner!r}, {self.prefix!r})"

    def _full(self, key: str) -> str:
        return self._head + validate_key(key)

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`."""
        await self.inner.put(self._full(key), data)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent`."""
        return await self.inner.put_if_absent(self._full(key), data)

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file`."""
        await self.inner.put_file(self._full(key), path)

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get`."""
        return await self.inner.get(self._full(key))

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range`."""
        return await self.inner.get_range(self._full(key), start, end)

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`; the returned key is relative to the prefix."""
        info = await self.inner.head(self._full(key))
        return ObjectInfo(key, info.size, info.etag, info.last_modified)

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list`; keys are yielded relative to the prefix."""
        validate_prefix(prefix)
        after = None if start_after is None else self._head + start_after
        cut = len(self._head)
        async for info in self.inner.list(self._head + prefix, start_after=after):
            yield ObjectInfo(info.key[cut:], info.size, info.etag, info.last_modified)

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete`."""
        await self.inner.delete(self._full(key))

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`."""
        await self.inner.delete_many([self._full(k) for k in keys])

    async def close(self) -> None:
        """Close the inner store. Idempotent if the inner close is."""
        await self.inner.close()
