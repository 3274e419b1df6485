"""At-least-once delivery across a consumer crash: a killed member's uncommitted records are read again."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from tests.integration.broker import RunningBroker
from tests.integration.client.helpers import expire_sessions
from tierlog.client import AsyncAdmin, AsyncConsumer, AsyncProducer, ConsumerRecord, TopicPartition
from tierlog.tiering.log import ManualClock

ROOT = Path(__file__).resolve().parents[3]


async def test_records_after_the_last_commit_are_redelivered_after_a_crash(
    clocked_broker: tuple[RunningBroker, ManualClock],
) -> None:
    broker, clock = clocked_broker
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("payments", 1)
    async with AsyncProducer(broker.url, linger_ms=5) as producer:
        for i in range(50):
            await producer.send("payments", b"payment %d" % i)
    crashing = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.integration.client.crashing_consumer", broker.url, "payments", "ledger",
        "30", "20", cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert crashing.stdout is not None
        read_line = (await asyncio.wait_for(crashing.stdout.readline(), 30)).decode().split()
        committed_line = (await asyncio.wait_for(crashing.stdout.readline(), 30)).decode().split()
    finally:
        crashing.send_signal(signal.SIGKILL)
        await crashing.wait()
    assert read_line[0] == "read" and [int(o) for o in read_line[1].split(",")] == list(range(30))
    assert committed_line == ["committed", "20"]

    successor = AsyncConsumer(
        "payments",
        bootstrap_servers=broker.url,
        group_id="ledger",
        enable_auto_commit=False,
        heartbeat_interval_ms=50,
    )
    try:
        await successor.start()
        # The dead member never leaves: its session expires once the broker's clock passes the timeout.
        await expire_sessions(broker.app, clock, 60_000)
        records: list[ConsumerRecord] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while len(records) < 30 and loop.time() < deadline:
            records += await successor.poll(timeout=0.5)
        assert [r.offset for r in records] == list(range(20, 50))
        assert records[0].value == b"payment 20"
        await successor.commit()
        assert await successor.committed(TopicPartition("payments", 0)) == 50
    finally:
        await successor.close()
