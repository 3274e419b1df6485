"""Issue 11: a REST v2 produce whose append fails on a full disk reports error_code 50701 per record (the
native API's code for it), not the generic retriable 50003. A real broker process on a 4 MiB tmpfs."""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp

from tests.integration.broker_core.test_disk_full import cluster_id, fill, small_disk
from tests.integration.broker_core.test_process import serve

__all__ = ["small_disk"]  # the fixture, used by name

BINARY = {"Content-Type": "application/vnd.kafka.binary.v2+json"}


async def test_a_full_disk_is_50701_per_record(small_disk: Path) -> None:
    async with (
        serve("--data-dir", str(small_disk / "data")) as (_child, url),
        aiohttp.ClientSession() as session,
    ):
        cluster = await cluster_id(session, url)
        body = {"topic_name": "t", "partitions_count": 1}
        async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
            assert resp.status == 201, await resp.text()
        fill(small_disk / "filler")

        value = base64.b64encode(b"x" * 200_000).decode()
        records = {"records": [{"value": value}, {"value": value}]}
        async with session.post(f"{url}/topics/t", json=records, headers=BINARY) as resp:
            assert resp.status == 200, await resp.text()
            answer = await resp.json(content_type=None)
        codes = [o["error_code"] for o in answer["offsets"]]
        assert codes == [50701, 50701], answer
        assert all("disk full" in o["error"] and o["offset"] is None for o in answer["offsets"])
