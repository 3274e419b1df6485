"""``tierlog consume`` (a subprocess) tells stderr when it cannot read: a lost broker within seconds and its
return, leaderless partitions by name, and an exit status that says partitions were skipped."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.broker import Brokers
from tests.integration.client.helpers import CLIENT_SETTINGS
from tests.integration.cluster.inproc import InprocCluster
from tierlog.client import AsyncProducer
from tierlog.client.cli.health import EXIT_SKIPPED, REPORT_AFTER_S

ROOT = Path(__file__).resolve().parents[3]
LINE_WITHIN_S = 20.0  # a deadline for lines the test waits on, not a timing assertion


async def consume(*argv: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tierlog", "consume", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip


async def line_with(stream: asyncio.StreamReader | None, text: str) -> str:
    """The first line of ``stream`` that contains ``text``; AssertionError after LINE_WITHIN_S."""
    assert stream is not None
    seen: list[str] = []

    async def find() -> str:
        while True:
            raw = await stream.readline()
            if not raw:
                raise AssertionError(f"{text!r} never came; got {seen}")
            seen.append(raw.decode())
            if text in seen[-1]:
                return seen[-1]

    try:
        return await asyncio.wait_for(find(), LINE_WITHIN_S)
    except TimeoutError:
        raise AssertionError(f"{text!r} not within {LINE_WITHIN_S} s; got {seen}") from None


@pytest.fixture
async def reader() -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """Processes a test starts; killed at teardown if still running."""
    started: list[asyncio.subprocess.Process] = []
    yield started
    for process in started:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_lost_broker_is_named_within_seconds_and_its_return_too(
    brokers: Brokers, reader: list[asyncio.subprocess.Process]
) -> None:
    broker = await brokers.start(CLIENT_SETTINGS, wait_groups=True)
    url, port = broker.url, broker.server.port
    async with AsyncProducer(url) as producer:
        await producer.send_and_wait("lost", b"first", partition=0)
    process = await consume(
        "lost", "--partition", "0", "--offset", "0", "--format", "value", "--bootstrap-server", url
    )
    reader.append(process)
    assert await line_with(process.stdout, "first") == "first\n"

    loop = asyncio.get_running_loop()
    lost_at = loop.time()
    await broker.stop()
    line = await line_with(process.stderr, f"broker {url} unreachable")
    noticed = loop.time() - lost_at
    assert "retrying (partitions lost-0)" in line
    assert noticed < REPORT_AFTER_S + 8, noticed  # ~2-3 s; generous for a loaded machine

    back = await brokers.start(CLIENT_SETTINGS, port=port, wait_groups=True)
    assert back.url == url
    await line_with(process.stderr, f"reconnected to broker {url}")
    async with AsyncProducer(url) as producer:
        await producer.send_and_wait("lost", b"second", partition=0)
    assert await line_with(process.stdout, "second") == "second\n"
    process.send_signal(signal.SIGINT)
    assert await asyncio.wait_for(process.wait(), LINE_WITHIN_S) == 130


async def test_leaderless_partitions_are_named_and_the_exit_status_says_they_were_skipped(
    tmp_path: Path, reader: list[asyncio.subprocess.Process]
) -> None:
    async with InprocCluster(tmp_path / "cluster", defaults={"logging.level": "WARNING"}) as cluster:
        brokers = await cluster.start(3)
        await brokers[0].broker.create_topic("orders", 6)
        await cluster.wait_for(lambda: cluster.converged("orders"))
        url = cluster.brokers[1].url
        async with AsyncProducer(url, acks="all") as producer:
            for partition in range(6):
                await producer.send_and_wait("orders", b"p%d" % partition, partition=partition)
        orphaned = [p for p, leader in enumerate(cluster.leaders("orders")) if leader == 3]
        assert orphaned, "broker 3 leads no partition"
        await cluster.stop_broker(3)
        await cluster.wait_for(lambda: all(cluster.leaders("orders")[p] == -1 for p in orphaned), "no leader")

        process = await consume(
            "orders",
            "--from-beginning",
            "--format",
            "value",
            "--timeout-ms",
            "4000",
            "--bootstrap-server",
            url,
        )
        reader.append(process)
        out, err = await asyncio.wait_for(process.communicate(), 60)
        names = ", ".join(f"orders-{p}" for p in orphaned)
        assert process.returncode == EXIT_SKIPPED, err
        stderr = err.decode()
        assert f"partitions {names} have no leader; retrying" in stderr
        skipped = ", ".join(f"orders-{p} (no leader)" for p in orphaned)
        assert f"skipped {len(orphaned)} partition(s) that could not be read: {skipped}" in stderr
        readable = sorted(b"p%d" % p for p in range(6) if p not in orphaned)
        assert sorted(out.splitlines()) == readable
