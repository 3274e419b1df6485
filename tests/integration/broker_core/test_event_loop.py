"""The event loop stays free: log I/O runs on its own executor, and a client that leaves during a long
poll costs nothing worse than a DEBUG line."""

from __future__ import annotations

import asyncio
import logging
import threading
from pathlib import Path

import aiohttp
import pytest

from tests.integration.broker import broker_settings, start_broker
from tests.unit.tiering.log.support import make_batch
from tierlog.service.web.keys import METRICS

DEADLINE_S = 30


async def test_log_io_runs_on_the_log_io_threads(tmp_path: Path) -> None:
    running = await start_broker(broker_settings(tmp_path / "data", {"log.io.threads": "2"}))
    try:
        topic = await running.broker.create_topic("t", 1, {"segment.bytes": "100"})
        partition = topic.partitions[0]
        threads: list[str] = []
        partition.log.add_roll_listener(lambda _info: threads.append(threading.current_thread().name))
        for n in range(3):  # every append after the first rolls the 100-byte segment
            await partition.append(make_batch([b"%d" % n * 60]))
        assert threads and all(name.startswith("tierlog-log-io") for name in threads), threads
    finally:
        await running.stop()


async def test_a_client_leaving_a_long_poll_logs_nothing_at_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start_broker(broker_settings(tmp_path / "data"))
    try:
        topic = await running.broker.create_topic("t", 1)
        metrics = running.app[METRICS]
        route = "/native/v1/topics/{topic}/partitions/{partition}/batches"
        fetch = f"{running.url}/native/v1/topics/t/partitions/0/batches?offset=0&max_wait_ms=1500"
        with caplog.at_level(logging.DEBUG):
            async with aiohttp.ClientSession() as session:
                with pytest.raises(TimeoutError):
                    await session.get(fetch, timeout=aiohttp.ClientTimeout(total=0.3))
            # data arrives for the abandoned poll: it answers into a closed connection
            await topic.partitions[0].append(make_batch([b"x" * 100_000]))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + DEADLINE_S
            while sum_requests(metrics.render(), route) < 1:
                assert loop.time() < deadline, "the abandoned long poll never finished"
                await asyncio.sleep(0.05)
            resp = await running.client.get("/health")  # one more full turn of the server
            assert resp.status == 200
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert errors == [], [r.getMessage() for r in errors]
    finally:
        await running.stop()


def sum_requests(text: str, route: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tierlog_http_requests_total{") and f'route="{route}"' in line
    )
