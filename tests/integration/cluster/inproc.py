"""In-process clusters: several real broker apps on 127.0.0.1, in the test's event loop, sharing one
:class:`~tierlog.service.cluster.local_store.LocalMetadataStore` (no etcd, fast).

Each broker is a full ``create_app`` app served by an aiohttp ``TestServer`` on a free port, with its own
data directory (``<base>/broker-<id>``) and ``broker.id``; it registers the URL it is served at. Use it as
an async context manager::

    async with InprocCluster(tmp_path) as cluster:
        b1, b2, b3 = await cluster.start(3, {"num.partitions": "3"})
        await b1.broker.create_topic("t", 6)
        await cluster.wait_for(lambda: cluster.leaders("t") ...)   # a bounded poll over the caches

:meth:`InprocCluster.stop_broker` stops one broker cleanly (its lease is revoked, so it leaves the cluster at
once); :meth:`InprocCluster.start_broker` with the same id brings it back on the same data directory.
Everything started is stopped by :meth:`InprocCluster.close` (the ``async with`` exit). The store belongs to
the cluster object: it is created (unless one is passed) and closed here.

``InprocCluster(tmp_path, metadata_uri=etcd_uri)`` runs the same brokers on a real etcd instead: each then
builds its own ``EtcdMetadataStore`` from ``metadata.uri``, as ``tierlog serve`` does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType

from aiohttp.test_utils import TestClient, TestServer

from tests.integration.broker import Client, RunningBroker, broker_settings
from tierlog.service.app import create_app
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.model import NO_LEADER
from tierlog.tiering.log import Clock

__all__ = ["DEADLINE_S", "InprocCluster"]

DEADLINE_S = 30.0  # bounded waits for the cluster to converge; a deadline, not a timing assertion

# Fast enough for tests that stop brokers, slow enough for a loaded 2-core machine.
TEST_DEFAULTS = {"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "1000"}


class InprocCluster:
    """Brokers sharing one metadata store, in this event loop (see the module doc). Not thread-safe."""

    def __init__(
        self,
        base_dir: Path,
        store: LocalMetadataStore | None = None,
        *,
        metadata_uri: str | None = None,
        defaults: Mapping[str, str] | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.base_dir = base_dir
        self.store: LocalMetadataStore | None = None
        if metadata_uri is None:
            self.store = store if store is not None else LocalMetadataStore()
        self.defaults = {**TEST_DEFAULTS, **(defaults or {})}
        if metadata_uri is not None:
            self.defaults["metadata.uri"] = metadata_uri
        self.clock = clock
        self.brokers: dict[int, RunningBroker] = {}

    async def __aenter__(self) -> InprocCluster:
        if self.store is not None:
            await self.store.start()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    def data_dir(self, broker_id: int) -> Path:
        return self.base_dir / f"broker-{broker_id}"

    async def start_broker(
        self, broker_id: int, overrides: Mapping[str, str] | None = None, *, wait: bool = True
    ) -> RunningBroker:
        """Start broker ``broker_id`` (``overrides``: dotted settings, ``broker.rack`` included); with
        ``wait``, return once it is registered and open. Raises ValueError when it is already running."""
        if broker_id in self.brokers:
            raise ValueError(f"broker {broker_id} is already running")
        values = {**self.defaults, **(overrides or {}), "broker.id": str(broker_id), "port": "0"}
        settings = broker_settings(self.data_dir(broker_id), values)
        app = create_app(settings, clock=self.clock, metadata_store=self.store)
        server = TestServer(app, host="127.0.0.1")
        client: Client = TestClient(server)
        try:
            await server.start_server()
            await client.start_server()
        except BaseException:
            await client.close()
            raise
        running = RunningBroker(app, server, client, str(server.make_url("")).rstrip("/"))
        self.brokers[broker_id] = running
        running.broker.advertise(running.url)
        if wait:
            await asyncio.wait_for(running.broker.wait_ready(), DEADLINE_S)
        return running

    async def start(self, count: int, overrides: Mapping[str, str] | None = None) -> list[RunningBroker]:
        """Start brokers ``1..count`` (concurrently) and wait until every one is open and sees all of them
        (so a topic created next is placed over every broker)."""
        started = list(await asyncio.gather(*(self.start_broker(i, overrides) for i in range(1, count + 1))))
        await self.wait_for(self.all_seen, "every broker to see every other")
        return started

    async def stop_broker(self, broker_id: int) -> None:
        """Stop one broker cleanly: it revokes its lease (leaving the cluster at once) and closes its logs."""
        await self.brokers.pop(broker_id).stop()

    async def close(self) -> None:
        """Stop every broker (the last started first), then close the store. Idempotent."""
        for broker_id in list(reversed(self.brokers)):
            await self.stop_broker(broker_id)
        if self.store is not None:
            await self.store.close()

    # ---- observing ---------------------------------------------------------------------------------------

    def leaders(self, topic: str) -> list[int]:
        """Partition leaders of ``topic`` as the first running broker's cache shows them (-1: none)."""
        view = next(iter(self.brokers.values())).broker.cluster_view()
        return [p.leader for p in view.partitions.get(topic, ())]

    def all_seen(self) -> bool:
        """Every running broker's cache lists exactly the running brokers."""
        running = sorted(self.brokers)
        return all(
            [b.broker_id for b in r.broker.cluster_view().brokers] == running for r in self.brokers.values()
        )

    def converged(self, topic: str) -> bool:
        """Every running broker's cache shows a leader for every partition of ``topic``, all the same,
        and each leader has its partition open and leads it at that leader epoch."""
        views = [r.broker.cluster_view() for r in self.brokers.values()]
        first = [(p.leader, p.leader_epoch) for p in views[0].partitions.get(topic, ())]
        if not first or any(leader == NO_LEADER for leader, _ in first):
            return False
        if any([(p.leader, p.leader_epoch) for p in v.partitions.get(topic, ())] != first for v in views):
            return False
        for index, (leader, epoch) in enumerate(first):
            running = self.brokers.get(leader)
            if running is None:
                return False
            local = running.broker.local_topics.get(topic)
            partition = None if local is None else local.local(index)
            if partition is None or partition.role != "leader" or partition.leader_epoch != epoch:
                return False
        return True

    async def wait_for(self, predicate: Callable[[], bool], what: str = "the cluster to converge") -> None:
        """Poll ``predicate`` (every 20 ms) until it holds; AssertionError after :data:`DEADLINE_S`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        while not predicate():
            if loop.time() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            await asyncio.sleep(0.02)
