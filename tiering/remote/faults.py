"""A wrapper for tests that makes chosen object-store calls fail or return corrupted bytes.

    store = FaultInjectingStore(LocalObjectStore(tmp))
    store.fail_next("get_range", 2, lambda: UnavailableError("injected"))
    store.corrupt_next("get", 1, byte_index=7)

Faults are consumed in call order per operation; ``calls`` counts every call that reached this wrapper,
so tests can assert how many attempts a retrying caller made.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.remote.instrumented import OPERATIONS
from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore
from tierlog.wire.errors import InvalidRequestError, UnavailableError

__all__ = ["FaultInjectingStore"]

ErrorFactory = Callable[[], BaseException]


@dataclass(slots=True)
class _Corruption:
    byte_index: int


class FaultInjectingStore:
    """:class:`ObjectStore` that injects scripted faults in front of ``inner``.

    A failure is raised *before* the inner call (the inner store sees nothing), except with
    ``after=True``, which performs the inner call first and then raises: the shape of a lost response,
    where the write happened but the caller cannot know. Safe to use concurrently on one event loop.
    """

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self._failures: dict[str, deque[tuple[ErrorFactory, bool]]] = {op: deque() for op in OPERATIONS}
        self._corruptions: dict[str, deque[_Corruption]] = {"get": deque(), "get_range": deque()}

    def __repr__(self) -> str:
        return f"FaultInjectingStore({self.inner!r})"

    def fail_next(
        self,
        op: str,
        count: int = 1,
        error: ErrorFactory | None = None,
        *,
        after: bool = False,
    ) -> None:
        """Make the next ``count`` calls of ``op`` raise ``error()`` (default: :class:`UnavailableError`)."""
        if op not in self._failures:
            raise InvalidRequestError(f"unknown object-store operation {op!r}")
        factory = error or (lambda: UnavailableError(f"injected failure of {op}"))
        for _ in range(count):
            self._failures[op].append((factory, after))

    def corrupt_next(self, op: str, count: int = 1, *, byte_index: int = 0) -> None:
        """Flip every bit of byte ``byte_index`` (modulo the length) in the next ``count`` results of
        ``op`` (``get`` or ``get_range``). Empty results are returned unchanged.
        """
        if op not in self._corruptions:
            raise InvalidRequestError(f"only get and get_range results can be corrupted, not {op!r}")
        for _ in range(count):
            self._corruptions[op].append(_Corruption(byte_index))

    def pending(self, op: str) -> int:
        """How many injected failures of ``op`` are still waiting."""
        return len(self._failures[op])

    def _before(self, op: str) -> ErrorFactory | None:
        """Count the call; raise a pre-call fault, or return the post-call one that is due."""
        self.calls[op] += 1
        queue = self._failures[op]
        if not queue:
            return None
        factory, after = queue.popleft()
        if after:
            return factory
        raise factory()

    def _maybe_corrupt(self, op: str, data: bytes) -> bytes:
        queue = self._corruptions[op]
        if not queue or not data:
            return data
        index = queue.popleft().byte_index % len(data)
        flipped = bytearray(data)
        flipped[index] ^= 0xFF
        return bytes(flipped)

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`."""
        post = self._before("put")
        await self.inner.put(key, data)
        if post:
            raise post()

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent`."""
        post = self._before("put_if_absent")
        created = await self.inner.put_if_absent(key, data)
        if post:
            raise post()
        return created

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file`."""
        post = self._before("put_file")
        await self.inner.put_file(key, path)
        if post:
            raise post()

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get`."""
        post = self._before("get")
        data = await self.inner.get(key)
        if post:
            raise post()
        return self._maybe_corrupt("get", data)

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range`."""
        post = self._before("get_range")
        data = await self.inner.get_range(key, start, end)
        if post:
            raise post()
        return self._maybe_corrupt("get_range", data)

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        post = self._before("head")
        info = await self.inner.head(key)
        if post:
            raise post()
        return info

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list`; a post-call fault is raised after the first item."""
        post = self._before("list")
        yielded = False
        async for info in self.inner.list(prefix, start_after=start_after):
            if post and yielded:
                raise post()
            yield info
            yielded = True
        if post:
            raise post()

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete`."""
        post = self._before("delete")
        await self.inner.delete(key)
        if post:
            raise post()

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`."""
        post = self._before("delete_many")
        await self.inner.delete_many(keys)
        if post:
            raise post()

    async def close(self) -> None:
        """Close the inner store."""
        await self.inner.close()
