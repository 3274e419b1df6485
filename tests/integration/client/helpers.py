"""Helpers shared by the client tests: read a topic back, fetch raw batches, produce through REST v2, expire
group sessions on a manual clock."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import aiohttp
from aiohttp import web

from tierlog.client import AsyncConsumer, ConsumerRecord, TopicPartition
from tierlog.service.groups.state import COORDINATOR
from tierlog.tiering.codec.header import BatchHeader, iter_batches
from tierlog.tiering.log import ManualClock

REST_BINARY = "application/vnd.kafka.binary.v2+json"
# The client suite's brokers: three partitions per new topic, and quiet logs.
CLIENT_SETTINGS = {"num.partitions": "3", "logging.level": "WARNING"}


async def read_topic(url: str, topic: str, count: int, *, within: float = 20.0) -> list[ConsumerRecord]:
    """Exactly ``count`` records of all partitions of ``topic`` from the beginning, waiting ``within`` s.

    Raises AssertionError when fewer arrive in time.
    """
    consumer = AsyncConsumer(bootstrap_servers=url, auto_offset_reset="earliest")
    try:
        partitions = await consumer.partitions_for_topic(topic)
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within
        records: list[ConsumerRecord] = []
        while len(records) < count and loop.time() < deadline:
            records += await consumer.poll(timeout=deadline - loop.time())
        assert len(records) == count, f"read {len(records)} of {count} records of {topic}"
        return records
    finally:
        await consumer.close()


async def raw_batches(url: str, topic: str, partition: int) -> list[BatchHeader]:
    """The headers of every stored batch of one partition, read over the native fetch route."""
    async with aiohttp.ClientSession() as session:
        path = f"{url}/native/v1/topics/{topic}/partitions/{partition}/batches"
        async with session.get(path, params={"offset": "0", "max_bytes": str(64 << 20)}) as response:
            assert response.status == 200
            data = await response.read()
    return [header for _, header in iter_batches(data, verify=True)]


async def rest_produce_keyed(url: str, topic: str, keys: list[bytes]) -> list[int]:
    """Produce one record per key through REST v2 (the broker partitions); answer each record's partition."""
    records: list[dict[str, Any]] = [
        {"key": base64.b64encode(k).decode(), "value": base64.b64encode(b"rest").decode()} for k in keys
    ]
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{url}/topics/{topic}", json={"records": records}, headers={"Content-Type": REST_BINARY}
        ) as r,
    ):
        assert r.status == 200, await r.text()
        answer = await r.json(content_type=None)
    return [int(o["partition"]) for o in answer["offsets"]]


async def wait_until(predicate: Any, *, within: float = 10.0, what: str = "condition") -> None:
    """Wait until ``predicate()`` is true, checking every 10 ms; AssertionError after ``within`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while not predicate():
        if loop.time() >= deadline:
            raise AssertionError(f"{what} not reached within {within} s")
        await asyncio.sleep(0.01)


async def expire_sessions(app: web.Application, clock: ManualClock, ms: int) -> None:
    """Move the manual clock and let the coordinator expire sessions and rebalance timeouts."""
    clock.advance(ms)
    await app[COORDINATOR].tick()
