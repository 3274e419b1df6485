"""A real broker on a small tmpfs: a full disk answers 507 / 50701, never 500; a restart on a full disk
waits for space (electing the controller writes the metadata file), then serves what was acknowledged; a
shutdown that cannot close a log exits 1; acks=0 appends lost to a full disk are counted and logged once
per interval."""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.broker_core.test_process import serve
from tests.unit.tiering.log.support import decode, make_batch
from tierlog.service.topics.partition import BACKGROUND_ERROR_LOG_INTERVAL_S

BATCHES = {"Content-Type": "application/vnd.tierlog.batches"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs (needs permission to mount: root in the test container)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount_point)], capture_output=True, check=False
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip() or done.returncode}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill(path: Path) -> None:
    """Write ``path`` until the disk is full (unbuffered, so the last failing write is seen here)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        with pytest.raises(OSError) as err:
            for _ in range(100_000):
                os.write(fd, b"\0" * 4096)
        assert err.value.errno == errno.ENOSPC
    finally:
        os.close(fd)


async def cluster_id(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(f"{url}/v3/clusters") as resp:
        return str((await resp.json())["data"][0]["cluster_id"])


async def native_produce(session: aiohttp.ClientSession, url: str, value: bytes) -> tuple[int, Any]:
    async with session.post(
        f"{url}/native/v1/topics/t/partitions/0/batches", data=make_batch([value]), headers=BATCHES
    ) as resp:
        return resp.status, await resp.json()


async def native_read_all(session: aiohttp.ClientSession, url: str) -> list[bytes]:
    values: list[bytes] = []
    offset = 0
    while True:
        fetch = f"{url}/native/v1/topics/t/partitions/0/batches?offset={offset}&max_bytes=1048576"
        async with session.get(fetch) as resp:
            assert resp.status == 200, await resp.text()
            data = await resp.read()
        if not data:
            return values
        records = decode(data)
        values.extend(value or b"" for _, value, _ in records)
        offset = records[-1][0] + 1


async def eventually_read_all(session: aiohttp.ClientSession, url: str) -> list[bytes]:
    """:func:`native_read_all` once the partition has a leader (the controller retries its election)."""
    for _ in range(300):
        async with session.get(f"{url}/native/v1/topics/t/partitions/0/offsets?timestamp=-2") as resp:
            if resp.status == 200:
                return await native_read_all(session, url)
        await asyncio.sleep(0.05)
    raise AssertionError("t-0 never got a leader after space was freed")


async def test_disk_full_answers_507_and_a_restart_serves_reads_once_space_is_freed(small_disk: Path) -> None:
    data = small_disk / "data"
    acked: list[bytes] = []
    async with serve("--data-dir", str(data)) as (child, url), aiohttp.ClientSession() as session:
        cluster = await cluster_id(session, url)
        body = {"topic_name": "t", "partitions_count": 1}
        async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
            assert resp.status == 201, await resp.text()
        for n in range(3):
            status, answer = await native_produce(session, url, b"%d" % n * 1000)
            assert status == 200, answer
            acked.append(b"%d" % n * 1000)
        fill(small_disk / "filler")

        status, answer = await native_produce(session, url, b"x" * 200_000)
        assert (status, answer["error_code"]) == (507, 50701), answer
        assert "disk full" in answer["message"]
        async with session.post(f"{url}/v3/clusters/{cluster}/topics", json={"topic_name": "u"}) as resp:
            assert resp.status == 507, await resp.text()
            assert (await resp.json())["error_code"] == 50701
        put = f"{url}/v3/clusters/{cluster}/topics/t/configs/retention.ms"
        async with session.put(put, json={"value": "1000000"}) as resp:
            assert resp.status == 507, await resp.text()
            assert (await resp.json())["error_code"] == 50701
        assert await native_read_all(session, url) == acked
        async with session.get(f"{url}/v3/clusters/{cluster}/topics/t/configs/retention.ms") as resp:
            assert (await resp.json())["value"] != "1000000"
        code = await child.stop(signal.SIGTERM)
    assert not any(" 50001" in line or "Internal Server Error" in line for line in child.lines)

    async with serve("--data-dir", str(data)) as (again, url), aiohttp.ClientSession() as session:
        # electing this broker controller is one metadata write: on a full disk no partition has a leader
        status, answer = await native_produce(session, url, b"y" * 200_000)
        assert (status, answer["error_code"]) == (503, 50311), answer
        os.unlink(small_disk / "filler")
        assert await eventually_read_all(session, url) == acked
        status, answer = await native_produce(session, url, b"after")
        assert status == 200, answer
        assert await again.stop() == 0
    # the shutdown could not write the logs' final index entries and checkpoints: exit 1, no clean marker
    assert code == 1
    assert any("could not be closed cleanly" in line for line in child.lines)


async def lost_appends(session: aiohttp.ClientSession, url: str) -> float:
    async with session.get(f"{url}/metrics") as resp:
        text = await resp.text()
    # the first failure is the full disk (50701); the partition's log is then offline, so the later appends
    # fail as unavailable (50301): every one of them is a lost append
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("tierlog_background_append_errors_total{")
    )


async def test_acks_0_appends_lost_to_a_full_disk_are_logged_once_per_interval(small_disk: Path) -> None:
    async with (
        serve("--data-dir", str(small_disk / "data")) as (child, url),
        aiohttp.ClientSession() as session,
    ):
        cluster = await cluster_id(session, url)
        body = {"topic_name": "t", "partitions_count": 1}
        async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
            assert resp.status == 201, await resp.text()
        fill(small_disk / "filler")
        produce = f"{url}/native/v1/topics/t/partitions/0/batches?acks=0"
        for n in range(5):
            async with session.post(produce, data=make_batch([b"%d" % n * 200_000]), headers=BATCHES) as resp:
                assert resp.status == 202, await resp.text()  # Kafka's acks=0: no answer about the append
        async with asyncio.timeout(60):  # the appends run after the answers: wait for all five to fail
            while await lost_appends(session, url) < 5:  # noqa: ASYNC110 - the broker is another process
                await asyncio.sleep(0.05)
        assert await child.stop() in (0, 1)
    warnings = [
        line for line in child.lines if "WARNING tierlog.partition: acks=0 append to t-0 failed" in line
    ]
    assert len(warnings) == 1, warnings  # five failures well within one interval
    assert BACKGROUND_ERROR_LOG_INTERVAL_S >= 10
    assert "disk full" in warnings[0] and "(50701)" in warnings[0] and "the records are lost" in warnings[0]
