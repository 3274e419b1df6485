"""A test wrapper around a real store: switch it "down" (every call fails as an unreachable service
does, with UnavailableError) and back, or make uploads of chosen keys hang mid-upload (a broker that
dies there leaves exactly the state a crash leaves)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore
from tierlog.wire.errors import UnavailableError


class SwitchableStore:
    """:class:`ObjectStore` over ``inner`` with an outage switch and a hang-on-upload trap."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.down = False
        self.failed_calls = 0
        self.hang_suffix: str | None = None
        self.hanging = asyncio.Event()

    def _check(self) -> None:
        if self.down:
            self.failed_calls += 1
            raise UnavailableError("object store unreachable (test outage)")

    async def put(self, key: str, data: bytes) -> None:
        self._check()
        await self._maybe_hang(key)
        await self.inner.put(key, data)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        self._check()
        return await self.inner.put_if_absent(key, data)

    async def put_file(self, key: str, path: str | Path) -> None:
        self._check()
        await self._maybe_hang(key)
        await self.inner.put_file(key, path)

    async def _maybe_hang(self, key: str) -> None:
        if self.hang_suffix is not None and key.endswith(self.hang_suffix):
            self.hanging.set()
            await asyncio.Event().wait()  # until cancelled: the "crash"

    async def get(self, key: str) -> bytes:
        self._check()
        return await self.inner.get(key)

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        self._check()
        return await self.inner.get_range(key, start, end)

    async def head(self, key: str) -> ObjectInfo:
        self._check()
        return await self.inner.head(key)

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        self._check()
        async for info in self.inner.list(prefix, start_after=start_after):
            yield info

    async def delete(self, key: str) -> None:
        self._check()
        await self.inner.delete(key)

    async def delete_many(self, keys: Iterable[str]) -> None:
        self._check()
        await self.inner.delete_many(keys)

    async def close(self) -> None:
        """Leaves ``inner`` open: the test owns it."""
