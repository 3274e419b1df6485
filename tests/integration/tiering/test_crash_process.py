"""``tierlog serve`` killed with SIGKILL while it uploads to a real moto_server bucket, then restarted:
nothing half-uploaded is ever readable or left behind, and every record reads back from offset 0."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.integration.broker_core.test_process import clean_env, get_json, serve
from tests.integration.remote.servers import S3Server
from tests.integration.tiering.helpers import BATCHES, WAIT_S, record
from tierlog.tiering.codec.batch import build_batch, decode_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 400


async def _until(condition: Any) -> None:
    """Poll an out-of-process condition until it holds (a bounded wait for readiness, not an assertion)."""
    async with asyncio.timeout(WAIT_S):
        while not await condition():  # noqa: ASYNC110 - the condition lives in another process
            await asyncio.sleep(0.05)


async def test_sigkill_during_uploads_then_restart(
    tmp_path: Path, remote_uri: str, moto_server: S3Server, store: ObjectStore
) -> None:
    data = tmp_path / "data"
    args = (
        "--data-dir", str(data), "--remote-uri", remote_uri, "--s3-endpoint-url", moto_server.endpoint_url,
        "--remote-upload-interval-ms", "50", "--log-retention-check-interval-ms", "100",
    )  # fmt: skip
    env = clean_env()
    manifests = ManifestStore(store)
    base = "/native/v1/topics/k/partitions/0/batches"
    async with serve(*args, env=env) as (child, url), aiohttp.ClientSession() as session:
        cluster = (await get_json(session, f"{url}/v3/clusters"))["data"][0]["cluster_id"]
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": "1024",
            "local.retention.bytes": "1024",
            "retention.ms": "-1",  # the records carry 2023 timestamps; the child runs on the real clock
        }
        body = {
            "topic_name": "k",
            "partitions_count": 1,
            "configs": [{"name": k, "value": v} for k, v in configs.items()],
        }
        async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
            assert resp.status == 201, await resp.text()
        for n in range(0, COUNT, 5):
            batch = build_batch(
                [Record(*record(i), timestamp=1_700_000_000_000 + i) for i in range(n, n + 5)]
            )
            async with session.post(f"{url}{base}", data=batch, headers={"Content-Type": BATCHES}) as resp:
                assert resp.status == 200, await resp.text()

        async def some_uploaded() -> bool:
            return len(mf.readable_segments(await manifests.load("k", 0))) >= 3

        await _until(some_uploaded)
        child.proc.send_signal(signal.SIGKILL)
        assert await child.stop() == -signal.SIGKILL

    async with serve(*args, env=env) as (child, url), aiohttp.ClientSession() as session:
        describe = f"{url}/v3/clusters/{cluster}/topics/k/partitions/0"

        async def caught_up() -> bool:
            tiered = (await get_json(session, describe))["tiered_storage"]
            return bool(tiered["upload_lag_bytes"] < 1024 and tiered["local_log_start_offset"] > 0)

        await _until(caught_up)
        manifest = await manifests.load("k", 0)
        assert all(s.state is mf.SegmentState.COPY_FINISHED for s in manifest.segments)
        assert manifest.segments[0].base_offset == 0
        assert (await check(store, manifests)).clean

        received: list[Record] = []
        offset = 0
        while offset < COUNT:
            params = {"offset": str(offset), "max_bytes": "4096"}
            async with session.get(f"{url}{base}", params=params, headers={"Accept": BATCHES}) as resp:
                assert resp.status == 200, await resp.text()
                payload = await resp.read()
            for position, _ in iter_batches(payload):
                received.extend(r for r in decode_batch(payload, position).records if r.offset >= offset)
            offset = received[-1].offset + 1
        assert [(r.offset, r.key, r.value) for r in received] == [(n, *record(n)) for n in range(COUNT)]
        assert await child.stop(signal.SIGTERM) == 0
