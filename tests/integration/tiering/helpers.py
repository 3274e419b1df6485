"""Produce and consume helpers for the tiering tests: raw batches in over the native path, records out
over both the native fetch and the REST v2 records endpoint, decoded and compared exactly."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

from tests.integration.broker import START_MS, Client
from tierlog.service.native_api.routes import LOG_END_OFFSET, LOG_START_OFFSET
from tierlog.service.topics.broker import Broker
from tierlog.service.web.keys import BROKER
from tierlog.tiering.codec.batch import build_batch, decode_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record

BATCHES = "application/vnd.tierlog.batches"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
WAIT_S = 60  # deadline for conditions the broker reaches on its own; never a timing assertion


def broker_of(client: Client) -> Broker:
    return client.app[BROKER]


def record(n: int, size: int = 60) -> tuple[bytes, bytes]:
    return f"key-{n}".encode(), f"value-{n}-".encode() + bytes([n % 251]) * size


async def produce(
    client: Client, topic: str, first: int, count: int, *, per_batch: int = 10, ts: int = START_MS
) -> list[tuple[bytes, bytes]]:
    """Append records ``first .. first+count-1`` (see :func:`record`) in batches; returns them."""
    sent = []
    for start in range(first, first + count, per_batch):
        numbers = range(start, min(start + per_batch, first + count))
        pairs = [record(n) for n in numbers]
        batch = build_batch(
            [Record(k, v, timestamp=ts + n) for n, (k, v) in zip(numbers, pairs, strict=True)]
        )
        response = await client.post(
            f"/native/v1/topics/{topic}/partitions/0/batches", data=batch, headers={"Content-Type": BATCHES}
        )
        assert response.status == 200, await response.text()
        sent.extend(pairs)
    return sent


async def post_batch(client: Client, topic: str, n: int) -> Any:
    """One single-record batch; returns the raw response (tests check refusals)."""
    k, v = record(n)
    return await client.post(
        f"/native/v1/topics/{topic}/partitions/0/batches",
        data=build_batch([Record(k, v, timestamp=START_MS + n)]),
        headers={"Content-Type": BATCHES},
    )


async def consume_native(client: Client, topic: str, offset: int = 0, max_bytes: int = 4096) -> list[Record]:
    """Every record from ``offset`` to the end through the native fetch; checks the range headers."""
    out: list[Record] = []
    while True:
        response = await client.get(
            f"/native/v1/topics/{topic}/partitions/0/batches",
            params={"offset": str(offset), "max_bytes": str(max_bytes)},
            headers={"Accept": BATCHES},
        )
        assert response.status == 200, await response.text()
        end = int(response.headers[LOG_END_OFFSET])
        assert int(response.headers[LOG_START_OFFSET]) <= offset
        data = await response.read()
        if offset >= end:
            assert data == b""
            return out
        assert data, f"empty fetch at {offset} < end {end}"
        for position, _ in iter_batches(data):
            for rec in decode_batch(data, position).records:
                if rec.offset >= offset:
                    out.append(rec)
        offset = out[-1].offset + 1


async def consume_rest(client: Client, topic: str, offset: int = 0) -> list[tuple[int, bytes, bytes]]:
    """Every ``(offset, key, value)`` from ``offset`` to the end through the REST v2 records endpoint."""
    out: list[tuple[int, bytes, bytes]] = []
    end = broker_of(client).topic(topic).partition(0).log_end_offset
    while offset < end:
        response = await client.get(
            f"/topics/{topic}/partitions/0/records",
            params={"offset": str(offset), "timeout": "0", "max_bytes": "4096"},
            headers={"Accept": BINARY_V2},
        )
        assert response.status == 200, await response.text()
        body = await response.json(content_type=None)
        assert body, f"no records at {offset} < end {end}"
        for item in body:
            out.append((item["offset"], base64.b64decode(item["key"]), base64.b64decode(item["value"])))
        offset = out[-1][0] + 1
    return out


async def wait_uploaded(client: Client, topic: str, offset: int) -> None:
    """Wait (bounded) until the remote tier of ``topic``-0 holds every offset below ``offset``."""
    broker = broker_of(client)
    remote = broker.remote.remote_of(topic, 0)
    assert remote is not None
    broker.remote.wake()

    def done() -> bool:
        broker.remote.wake()
        return (remote.remote_log.remote_next_offset or 0) >= offset

    async with asyncio.timeout(WAIT_S):
        await broker.remote.wait_for(done)


async def create_topic(client: Client, topic: str, **configs: str) -> None:
    broker = broker_of(client)
    await broker.create_topic(topic, 1, {"remote.storage.enable": "true", **configs})
