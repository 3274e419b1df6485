"""The metadata store with every call timed and every failure counted (the store's metrics)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from tierlog.service.cluster.metadata_store import (
    Compare,
    KeyValue,
    LeaseTime,
    MetadataStore,
    MetadataStoreError,
    Op,
    WatchEvent,
)
from tierlog.service.metrics import Metrics

__all__ = ["InstrumentedMetadataStore"]


class InstrumentedMetadataStore(MetadataStore):
    """``inner`` with every call timed into ``tierlog_metadata_request_seconds{op}`` and every failure
    counted in ``tierlog_metadata_errors_total{op}``. Watches pass through untimed. Same contract as
    ``inner``."""

    def __init__(self, inner: MetadataStore, metrics: Metrics) -> None:
        self.inner = inner
        self._metrics = metrics
        metrics.describe(
            "tierlog_metadata_request_seconds", "histogram", "Latency of metadata store calls, by op"
        )
        metrics.describe("tierlog_metadata_errors_total", "counter", "Failed metadata store calls, by op")

    async def _timed(self, op: str, call: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call
        except MetadataStoreError:
            self._metrics.inc("tierlog_metadata_errors_total", op=op)
            raise
        finally:
            self._metrics.observe("tierlog_metadata_request_seconds", time.perf_counter() - started, op=op)

    async def start(self) -> None:
        await self._timed("start", self.inner.start())

    async def close(self) -> None:
        await self.inner.close()

    async def get(self, key: str) -> KeyValue | None:
        found: KeyValue | None = await self._timed("get", self.inner.get(key))
        return found

    async def range(self, prefix: str) -> tuple[list[KeyValue], int]:
        found: tuple[list[KeyValue], int] = await self._timed("range", self.inner.range(prefix))
        return found

    async def commit(self, compares: Sequence[Compare], ops: Sequence[Op]) -> int | None:
        revision: int | None = await self._timed("commit", self.inner.commit(compares, ops))
        return revision

    async def grant_lease(self, ttl_seconds: int) -> int:
        lease: int = await self._timed("grant_lease", self.inner.grant_lease(ttl_seconds))
        return lease

    async def keep_alive(self, lease: int) -> None:
        await self._timed("keep_alive", self.inner.keep_alive(lease))

    async def lease_time(self, lease: int) -> LeaseTime:
        answer: LeaseTime = await self._timed("lease_time", self.inner.lease_time(lease))
        return answer

    async def revoke_lease(self, lease: int) -> None:
        await self._timed("revoke_lease", self.inner.revoke_lease(lease))

    def watch(self, prefix: str, start_revision: int) -> AsyncIterator[WatchEvent]:
        return self.inner.watch(prefix, start_revision)
