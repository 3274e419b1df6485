"""A real broker whose partition runs out of file descriptors mid-roll recovers by itself, losing nothing."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from tests.integration.broker_core.test_process import serve

JSON = {"Content-Type": "application/vnd.kafka.json.v2+json"}


async def produce(session: aiohttp.ClientSession, url: str, value: str) -> tuple[int, Any]:
    async with session.post(f"{url}/topics/t", json={"records": [{"value": value}]}, headers=JSON) as resp:
        return resp.status, await resp.json()


def acknowledged(answer: Any) -> bool:
    return all(entry["error_code"] is None for entry in answer["offsets"])


async def test_emfile_on_roll_goes_offline_then_recovers_without_restart(tmp_path: Path) -> None:
    async with serve("--data-dir", str(tmp_path / "data")) as (child, url):
        pid = child.proc.pid
        # one kept-alive connection: no new descriptor is needed to talk to the broker
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector) as session:
            async with session.get(f"{url}/v3/clusters") as resp:
                cluster = (await resp.json())["data"][0]["cluster_id"]
            body = {
                "topic_name": "t",
                "partitions_count": 1,
                "configs": [{"name": "segment.bytes", "value": "300"}],
            }
            async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
                assert resp.status == 201, await resp.text()
            acked: list[str] = []
            for n in range(3):
                status, answer = await produce(session, url, f"before-{n}-" + "x" * 100)
                assert status == 200 and acknowledged(answer), answer
                acked.append(f"before-{n}-" + "x" * 100)

            soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
            # stdin, stdout and stderr hold 0-2: with a soft limit of 3 no new descriptor can be made
            resource.prlimit(pid, resource.RLIMIT_NOFILE, (3, hard))
            try:
                failed: Any = None
                for n in range(5):  # appends until one needs a new segment, which cannot be opened
                    value = f"during-{n}-" + "x" * 100
                    status, answer = await produce(session, url, value)
                    assert status == 200, answer
                    if answer["offsets"][0]["error_code"] is not None:  # REST v2 answers errors per record
                        failed = answer["offsets"][0]
                        break
                    acked.append(value)
                assert failed is not None
                assert failed["offset"] is None and "EMFILE" in failed["error"]
                status, answer = await produce(session, url, "refused")
                assert "offline" in answer["offsets"][0]["error"]
                async with session.get(f"{url}/ready") as resp:
                    assert resp.status == 503
                    ready = await resp.json()
                assert ready["status"] == "DEGRADED"
                assert ready["offline_partitions"][0]["topic"] == "t"
                assert "EMFILE" in ready["offline_partitions"][0]["reason"]
                # new connections cannot be accepted either: one WARNING line, not a traceback per retry
                parts = urlsplit(url)
                pending = [await asyncio.open_connection(parts.hostname, parts.port) for _ in range(3)]
                await child.wait_for_line("cannot accept connections")
            finally:
                resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
            for _, writer in pending:
                writer.close()

            # the maintenance pass retries recovery (after a backoff); no request or restart is needed
            await child.wait_for_line("recovered from disk")
            async with session.get(f"{url}/ready") as resp:
                assert resp.status == 200, await resp.text()
            status, answer = await produce(session, url, "after")
            assert status == 200 and acknowledged(answer), answer
            acked.append("after")
            async with session.get(f"{url}/metrics") as resp:
                text = await resp.text()
            assert 'tierlog_partition_failures_total{partition="0",topic="t"} 1' in text
            assert 'tierlog_partition_offline{partition="0",topic="t"} 0' in text
            assert "\ntierlog_accept_errors_total 0" not in text and "tierlog_accept_errors_total" in text
            native = f"{url}/v3/clusters/{cluster}/topics/t/partitions/0"
            async with session.get(native) as resp:
                assert resp.status == 200
        assert await child.stop() == 0
    assert sum("cannot accept connections" in line for line in child.lines) <= 2
    assert not any("Traceback" in line for line in child.lines)
    async with (
        serve("--data-dir", str(tmp_path / "data")) as (_again, url),
        aiohttp.ClientSession() as session,
    ):
        values = await consume_all(session, url)
    assert values == acked


async def consume_all(session: aiohttp.ClientSession, url: str) -> list[str]:
    base = f"{url}/consumers/g"
    headers = {"Content-Type": "application/vnd.kafka.v2+json"}
    body = {"name": "c", "format": "json", "auto.offset.reset": "earliest"}
    async with session.post(base, json=body, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        instance = (await resp.json())["base_uri"]
    async with session.post(
        f"{instance}/assignments", json={"partitions": [{"topic": "t", "partition": 0}]}, headers=headers
    ) as resp:
        assert resp.status == 204, await resp.text()
    values: list[str] = []
    for _ in range(20):
        accept = {"Accept": "application/vnd.kafka.json.v2+json"}
        async with session.get(f"{instance}/records?timeout=200", headers=accept) as resp:
            assert resp.status == 200, await resp.text()
            batch = await resp.json()
        values.extend(record["value"] for record in batch)
        if batch == [] and values:
            break
    return values
