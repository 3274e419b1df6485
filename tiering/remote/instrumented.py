"""A wrapper that counts object-store requests, bytes, errors and latency per operation.

:meth:`InstrumentedStore.snapshot` returns a plain dict the broker's ``/metrics`` endpoint publishes and
tests assert on (for example, that a Spark read with an offset bound issued exactly N ranged GETs)::

    {
      "ops": {"get_range": {"requests": 3, "errors": 0, "bytes": 12288,
                            "latency_seconds_sum": 0.004, "latency_seconds_max": 0.002}, ...},
      "errors": {"NotFoundError": 1, ...}
    }

``bytes`` is the payload moved: written for put/put_if_absent/put_file, read for get/get_range, and
for ``list`` the number of objects listed is under ``items`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore
from tierlog.wire.errors import TierlogError

__all__ = ["InstrumentedStore", "OPERATIONS"]

OPERATIONS = (
    "put",
    "put_if_absent",
    "put_file",
    "get",
    "get_range",
    "head",
    "list",
    "delete",
    "delete_many",
)
_T = TypeVar("_T")


@dataclass(slots=True)
class _OpStats:
    requests: int = 0
    errors: int = 0
    bytes: int = 0
    items: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0


class InstrumentedStore:
    """:class:`ObjectStore` that records what passes through to ``inner``.

    Counting happens on the event loop thread with no awaits in between, so concurrent calls are safe.
    ``clock`` (default ``time.perf_counter``) is injectable. Errors are counted by the class name of
    the :mod:`tierlog.wire.errors` kind (``"UnavailableError"``...); anything else as ``"other"``.
    """

    def __init__(self, inner: ObjectStore, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.inner = inner
        self._clock = clock
        self._ops = {op: _OpStats() for op in OPERATIONS}
        self._errors: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"InstrumentedStore({self.inner!r})"

    def snapshot(self) -> dict[str, Any]:
        """A copy of the counters (see the module docstring). Safe to call at any time."""
        ops = {
            op: {
                "requests": s.requests,
                "errors": s.errors,
                "bytes": s.bytes,
                "items": s.items,
                "latency_seconds_sum": s.latency_sum,
                "latency_seconds_max": s.latency_max,
            }
            for op, s in self._ops.items()
        }
        return {"ops": ops, "errors": dict(self._errors)}

    def requests(self, op: str) -> int:
        """Shorthand for ``snapshot()["ops"][op]["requests"]``."""
        return self._ops[op].requests

    def reset(self) -> None:
        """Zero every counter (tests use it between phases)."""
        self._ops = {op: _OpStats() for op in OPERATIONS}
        self._errors = {}

    def _record_error(self, stats: _OpStats, err: BaseException) -> None:
        stats.errors += 1
        name = type(err).__name__ if isinstance(err, TierlogError) else "other"
        self._errors[name] = self._errors.get(name, 0) + 1

    def _finish(self, stats: _OpStats, started: float) -> None:
        elapsed = max(0.0, self._clock() - started)
        stats.latency_sum += elapsed
        stats.latency_max = max(stats.latency_max, elapsed)

    async def _call(self, op: str, fn: Callable[[], Awaitable[_T]], sent: int = 0) -> _T:
        stats = self._ops[op]
        stats.requests += 1
        started = self._clock()
        try:
            result = await fn()
        except Exception as err:
            self._record_error(stats, err)
            raise
        finally:
            self._finish(stats, started)
        stats.bytes += len(result) if isinstance(result, bytes) else sent
        return result

    async def put(self, key: str, data: bytes) -> None:
        """See :meth:`ObjectStore.put`."""
        await self._call("put", lambda: self.inner.put(key, data), len(data))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        """See :meth:`ObjectStore.put_if_absent` (bytes are counted only when the create won)."""
        created = await self._call("put_if_absent", lambda: self.inner.put_if_absent(key, data))
        if created:
            self._ops["put_if_absent"].bytes += len(data)
        return created

    async def put_file(self, key: str, path: str | Path) -> None:
        """See :meth:`ObjectStore.put_file`."""
        await self._call("put_file", lambda: self.inner.put_file(key, path))
        with contextlib.suppress(OSError):  # a file gone after its upload only loses the byte count
            self._ops["put_file"].bytes += (await asyncio.to_thread(os.stat, path)).st_size

    async def get(self, key: str) -> bytes:
        """See :meth:`ObjectStore.get`."""
        return await self._call("get", lambda: self.inner.get(key))

    async def get_range(self, key: str, start: int, end: int | None = None) -> bytes:
        """See :meth:`ObjectStore.get_range`."""
        return await self._call("get_range", lambda: self.inner.get_range(key, start, end))

    async def head(self, key: str) -> ObjectInfo:
        """See :meth:`ObjectStore.head`."""
        return await self._call("head", lambda: self.inner.head(key))

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        """See :meth:`ObjectStore.list`: one request per listing; ``items`` counts the objects yielded."""
        stats = self._ops["list"]
        stats.requests += 1
        started = self._clock()
        try:
            async for info in self.inner.list(prefix, start_after=start_after):
                stats.items += 1
                yield info
        except Exception as err:
            self._record_error(stats, err)
            raise
        finally:
            self._finish(stats, started)

    async def delete(self, key: str) -> None:
        """See :meth:`ObjectStore.delete`."""
        await self._call("delete", lambda: self.inner.delete(key))

    async def delete_many(self, keys: Iterable[str]) -> None:
        """See :meth:`ObjectStore.delete_many`; ``items`` counts the keys."""
        batch = list(keys)
        self._ops["delete_many"].items += len(batch)
        await self._call("delete_many", lambda: self.inner.delete_many(batch))

    async def close(self) -> None:
        """Close the inner store."""
        await self.inner.close()
