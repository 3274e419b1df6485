"""``tierlog serve`` at ``logging.level=DEBUG`` with an S3 remote tier on a real moto_server: botocore logs
every request, and no credential the broker was given appears anywhere in its log."""

from __future__ import annotations

import asyncio
import re
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

pytestmark = [pytest.mark.integration, pytest.mark.slow]

COUNT = 200
# shaped as AWS's are: an STS key id, a 40-character secret, a long session token with / + =
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "ASIAQXZ7TIERLOG5TEST",
    "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYtierlogKEY",
    "AWS_SESSION_TOKEN": "IQoJb3JpZ2luX2VjEtierlog/session+token/Zm9vYmFyYmF6cXV4==" + "x" * 200,
    "TIERLOG_INTER_BROKER_USERNAME": "broker",
    "TIERLOG_INTER_BROKER_PASSWORD": "inter-broker-secret-pw",
}


async def _until(condition: Any) -> None:
    """Poll an out-of-process condition until it holds (a bounded wait for readiness, not an assertion)."""
    async with asyncio.timeout(WAIT_S):
        while not await condition():  # noqa: ASYNC110 - the condition lives in another process
            await asyncio.sleep(0.05)


async def test_no_credential_in_a_debug_log(tmp_path: Path, remote_uri: str, moto_server: S3Server) -> None:
    args = (
        "--data-dir", str(tmp_path / "data"), "--remote-uri", remote_uri,
        "--s3-endpoint-url", moto_server.endpoint_url, "--logging-level", "DEBUG",
        "--remote-upload-interval-ms", "50", "--log-retention-check-interval-ms", "100",
    )  # fmt: skip
    base = "/native/v1/topics/k/partitions/0/batches"
    async with serve(*args, env=clean_env(**CREDENTIALS)) as (child, url), aiohttp.ClientSession() as session:
        cluster = (await get_json(session, f"{url}/v3/clusters"))["data"][0]["cluster_id"]
        configs = {
            "remote.storage.enable": "true",
            "segment.bytes": "1024",
            "local.retention.bytes": "1024",
            "retention.ms": "-1",
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
        describe = f"{url}/v3/clusters/{cluster}/topics/k/partitions/0"

        async def tiered() -> bool:
            tiering = (await get_json(session, describe))["tiered_storage"]
            return bool(tiering["upload_lag_bytes"] < 1024 and tiering["local_log_start_offset"] > 0)

        await _until(tiered)
        params = {"offset": "0", "max_bytes": "4096"}
        async with session.get(f"{url}{base}", params=params, headers={"Accept": BATCHES}) as resp:
            assert resp.status == 200, await resp.text()
            payload = await resp.read()  # from the remote tier: offset 0 is gone locally
        first = [r for position, _ in iter_batches(payload) for r in decode_batch(payload, position).records]
        assert (first[0].offset, first[0].key) == (0, record(0)[0])
        assert await child.stop(signal.SIGTERM) == 0

    log = "\n".join(child.lines)
    # botocore logged its requests, signing included: the test cannot pass by logging nothing
    assert re.search(r"DEBUG botocore\.endpoint: Sending http request: [^\n]*method=PUT", log)
    assert re.search(r"DEBUG botocore\.endpoint: Sending http request: [^\n]*method=GET", log)
    assert "DEBUG botocore.auth: CanonicalRequest" in log
    assert "[REDACTED]" in log
    for name, value in CREDENTIALS.items():
        if name != "TIERLOG_INTER_BROKER_USERNAME":
            assert value not in log, name
    assert "ASIAQXZ7" not in log and "IQoJb3JpZ2luX2VjEtierlog" not in log  # nor a part of them
