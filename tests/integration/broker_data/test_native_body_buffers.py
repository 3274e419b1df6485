"""Native produce bodies read into reused buffers: every stored byte is the byte sent, whatever the
buffer held before, and a refused or cut-off body gives its buffer back without appending anything."""

from __future__ import annotations

import asyncio
import gzip

from tests.integration.broker import Brokers
from tests.integration.broker_data.helpers import BATCHES, as_stored, expect_error
from tierlog.service.native_api.routes import POOLED_BODY_BYTES
from tierlog.service.web.body_buffers import BODY_BUFFERS
from tierlog.tiering.codec.batch import build_batch, decode_batch
from tierlog.tiering.codec.header import CRC_OFFSET, iter_batches
from tierlog.tiering.codec.records import Record

BASE = "/native/v1/topics/t/partitions/0"
CONTENT = {"Content-Type": BATCHES}
NOW = 1_750_000_000_000


def batch(fill: int, count: int, size: int) -> bytes:
    return build_batch([Record(b"k%d" % i, bytes([fill]) * size) for i in range(count)], now_ms=NOW)


async def test_reused_buffers_store_exactly_the_bytes_sent(brokers: Brokers) -> None:
    running = await brokers.start({"num.partitions": "1"})
    client, pool = running.client, running.app[BODY_BUFFERS]
    # large, then smaller (a larger buffer under it), then large again: every body lands on used memory
    bodies = [batch(1, 200, 1000), batch(2, 80, 1000), batch(3, 200, 1000), batch(4, 100, 1500)]
    assert all(len(body) >= POOLED_BODY_BYTES for body in bodies)
    for body in bodies:
        response = await client.post(f"{BASE}/batches", data=body, params={"acks": "1"}, headers=CONTENT)
        assert response.status == 200, await response.text()
    assert pool.reused >= len(bodies) - 1, (pool.reused, pool.fresh)

    stored = []
    offset = 0
    while offset < 580:
        response = await client.get(f"{BASE}/batches", params={"offset": str(offset)})
        data = await response.read()
        for position, header in iter_batches(data):
            stored.extend(decode_batch(data, position).records)
            offset = header.next_offset
    expected = [(fill, size) for fill, count, size in ((1, 200, 1000), (2, 80, 1000), (3, 200, 1000),
                                                        (4, 100, 1500)) for _ in range(count)]  # fmt: skip
    values = [r.value or b"" for r in stored]
    assert [(v[0], len(v)) for v in values] == expected
    assert all(v == bytes([v[0]]) * len(v) for v in values)


async def test_a_refused_body_gives_its_buffer_back_and_appends_nothing(brokers: Brokers) -> None:
    running = await brokers.start({"num.partitions": "1"})
    client, pool = running.client, running.app[BODY_BUFFERS]
    bad = bytearray(batch(5, 200, 1000))
    bad[CRC_OFFSET] ^= 0xFF
    response = await client.post(f"{BASE}/batches", data=bytes(bad), params={"acks": "1"}, headers=CONTENT)
    await expect_error(response, 400, 40003)
    fresh = pool.fresh

    good = batch(6, 200, 1000)
    response = await client.post(f"{BASE}/batches", data=good, params={"acks": "1"}, headers=CONTENT)
    assert response.status == 200, await response.text()
    assert (pool.fresh, pool.reused) == (fresh, 1)
    response = await client.get(f"{BASE}/batches", params={"offset": "0", "max_bytes": str(4 << 20)})
    assert await response.read() == as_stored(good)  # offset 0: the refused batch took no offset


async def test_a_body_cut_short_appends_nothing_and_the_broker_keeps_serving(brokers: Brokers) -> None:
    running = await brokers.start({"num.partitions": "1"})
    client, pool = running.client, running.app[BODY_BUFFERS]
    body = batch(7, 200, 1000)
    host, port = running.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST {BASE}/batches?acks=1 HTTP/1.1\r\nHost: x\r\nContent-Type: {BATCHES}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body[: len(body) // 2])
    await writer.drain()
    writer.close()
    await writer.wait_closed()
    await reader.read()

    # the handler of the cut-off body ends and gives its buffer back; the next request reuses it and
    # gets offset 0: the cut-off body took none
    await asyncio.wait_for(pool.idle.wait(), 30)
    response = await client.post(f"{BASE}/batches", data=body, params={"acks": "1"}, headers=CONTENT)
    assert response.status == 200, await response.text()
    assert (await response.json())["base_offset"] == 0
    assert (pool.fresh, pool.reused) == (1, 1)
    response = await client.get(f"{BASE}/batches", params={"offset": "0", "max_bytes": str(4 << 20)})
    assert await response.read() == as_stored(body)


async def test_an_encoded_body_is_read_the_ordinary_way(brokers: Brokers) -> None:
    running = await brokers.start({"num.partitions": "1"})
    client, pool = running.client, running.app[BODY_BUFFERS]
    body = batch(8, 300, 1000)
    packed = gzip.compress(body)
    assert len(packed) >= POOLED_BODY_BYTES or len(body) >= POOLED_BODY_BYTES
    headers = CONTENT | {"Content-Encoding": "gzip"}
    response = await client.post(f"{BASE}/batches", data=packed, params={"acks": "1"}, headers=headers)
    assert response.status == 200, await response.text()
    assert pool.fresh + pool.reused == 0  # aiohttp inflates it: its Content-Length is not the body's
    response = await client.get(f"{BASE}/batches", params={"offset": "0", "max_bytes": str(4 << 20)})
    assert await response.read() == as_stored(body)
