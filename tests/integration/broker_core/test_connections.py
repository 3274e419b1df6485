"""A real ``tierlog serve`` process closes half-sent and idle connections and caps open connections."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp

from tests.integration.broker_core.test_process import serve

DEADLINE_S = 30


@contextlib.asynccontextmanager
async def raw_connections(
    url: str, count: int
) -> AsyncIterator[list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    conns = [await asyncio.open_connection(parts.hostname, parts.port) for _ in range(count)]
    try:
        yield conns
    finally:
        for _, writer in conns:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()


async def read_to_eof(reader: asyncio.StreamReader) -> bytes:
    """Everything the server sends until it closes the connection; fails after a generous deadline."""
    return await asyncio.wait_for(reader.read(), DEADLINE_S)


async def metric(session: aiohttp.ClientSession, url: str, line_prefix: str) -> float:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_prefix)]
    return sum(values)


async def test_partial_and_idle_connections_are_closed(tmp_path: Path) -> None:
    args = (
        "--data-dir",
        f"{tmp_path}/data",
        "--request-read-timeout-ms",
        "300",
        "--connections-max-idle-ms",
        "3000",  # the partial requests must be sent before it: room for a loaded machine
    )
    async with serve(*args) as (_child, url), raw_connections(url, 8) as conns:
        partial, idle = conns[:5], conns[5:]
        for _, writer in partial:
            writer.write(b"GET /health HT")
            await writer.drain()
        for reader, _ in partial + idle:
            assert await read_to_eof(reader) == b""
        async with aiohttp.ClientSession() as session:
            assert await metric(session, url, 'tierlog_connection_timeouts_total{reason="read"}') >= 5
            assert await metric(session, url, 'tierlog_connection_timeouts_total{reason="idle"}') >= 3


async def test_a_half_sent_body_is_closed_but_a_long_poll_is_not(tmp_path: Path) -> None:
    args = ("--data-dir", f"{tmp_path}/data", "--request-read-timeout-ms", "300")
    async with serve(*args) as (_child, url), raw_connections(url, 1) as conns:
        reader, writer = conns[0]
        writer.write(
            b"POST /topics/t HTTP/1.1\r\nHost: x\r\nContent-Type: application/vnd.kafka.json.v2+json\r\n"
            b'Content-Length: 100\r\n\r\n{"records":'
        )
        await writer.drain()
        assert await read_to_eof(reader) == b""
        async with aiohttp.ClientSession() as session:
            body = {"topic_name": "lp", "partitions_count": 1}
            async with session.get(f"{url}/v3/clusters") as resp:
                cluster = (await resp.json())["data"][0]["cluster_id"]
            async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
                assert resp.status == 201
            # A long poll that outlives request.read.timeout.ms still answers (with no data).
            fetch = f"{url}/native/v1/topics/lp/partitions/0/batches?offset=0&max_wait_ms=1000"
            async with session.get(fetch) as resp:
                assert resp.status == 200, await resp.text()
                assert await resp.read() == b""


async def test_max_connections_answers_503_and_frees_slots(tmp_path: Path) -> None:
    args = ("--data-dir", f"{tmp_path}/data", "--max-connections", "3")
    async with serve(*args) as (_child, url):
        async with raw_connections(url, 3), raw_connections(url, 1) as extra:
            reader, _ = extra[0]
            answer = await read_to_eof(reader)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 503")
            assert json.loads(body)["error_code"] == 50301
        loop = asyncio.get_running_loop()
        deadline = loop.time() + DEADLINE_S
        async with aiohttp.ClientSession() as session:
            while True:  # the server sees the three closes asynchronously; a slot frees within the deadline
                async with session.get(f"{url}/health") as resp:
                    if resp.status == 200:
                        break
                    assert resp.status == 503 and loop.time() < deadline
            assert await metric(session, url, "tierlog_connections_rejected_total") >= 1
