"""A blackholed S3 endpoint (a TCP proxy in front of moto_server that accepts and never answers): a remote
read fails with a retriable 503 within about ``remote.retry.deadline.ms`` (not the client's read timeout,
not forever), uploads fail meanwhile, and once the endpoint answers again uploads resume on their own within
seconds, without waiting for ``remote.upload.interval.ms``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import pytest

from tests.integration.remote.blackhole import BlackholeProxy
from tests.integration.remote.servers import S3Server
from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import (
    BATCHES,
    broker_of,
    consume_native,
    create_topic,
    produce,
    wait_uploaded,
)
from tierlog.service.remote.tier import UPLOAD_RETRY_CAP_S
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.service.web.keys import METRICS

pytestmark = pytest.mark.integration

# Also the bounds of the healthy phases' S3 calls (the first manifest read, the catch-up uploads, the
# final remote read): room for a moto_server answer while the other test worker keeps both cores busy.
DEADLINE_MS = 3000
# Generous bounds derived from the settings (scheduling slack, not a performance target).
SLACK_S = 10.0
# Connect and read timeouts of one attempt: longer than the bound on the blackholed read, so that only
# the deadline can end it in time (the attempts' own timeouts and retries would take over 20 s)
TIMEOUT_MS = 20_000
assert TIMEOUT_MS / 1000 > DEADLINE_MS / 1000 * 2 + SLACK_S


@pytest.fixture
async def proxy(moto_server: S3Server) -> AsyncIterator[BlackholeProxy]:
    target = urlsplit(moto_server.endpoint_url)
    assert target.hostname is not None and target.port is not None
    async with BlackholeProxy(target.hostname, target.port) as opened:
        yield opened


async def test_blackholed_endpoint_bounds_reads_by_the_deadline_and_uploads_resume(
    start_broker: StartBroker, proxy: BlackholeProxy
) -> None:
    client = await start_broker(
        **{
            "s3.endpoint.url": proxy.endpoint_url,
            "remote.retry.deadline.ms": str(DEADLINE_MS),
            "s3.connect.timeout.ms": str(TIMEOUT_MS),
            "s3.read.timeout.ms": str(TIMEOUT_MS),
            "remote.upload.interval.ms": str(2**31 - 1),  # only a roll or the retry backoff wakes uploads
        }
    )
    broker = broker_of(client)
    await create_topic(client, "h", **{"segment.bytes": "2048", "local.retention.bytes": "2048"})
    sent = await produce(client, "h", 0, 100)
    partition = broker.topic("h").partition(0)
    await wait_uploaded(client, "h", partition.log.sealed_segments()[-1].next_offset)
    await client.app[MAINTENANCE].retention_pass()
    assert partition.local_log_start_offset > 0  # offset 0 is in the remote tier only

    proxy.blackhole()
    # The answer must come within the retry deadline's reach (two deadlines and scheduling slack), not
    # after the 60 s a hung read used to take: a regression fails here instead of hanging. The answer is
    # either the deadline cutting off a hung attempt or the last attempt's own timeout when the next
    # retry would pass the deadline, so its message is not pinned.
    async with asyncio.timeout(DEADLINE_MS / 1000 * 2 + SLACK_S):
        response = await client.get(
            "/native/v1/topics/h/partitions/0/batches",
            params={"offset": "0", "max_bytes": "4096"},
            headers={"Accept": BATCHES},
        )
        body = await response.json()
    assert response.status == 503, body
    assert body["error_code"] == 50301

    metrics = client.app[METRICS]

    def failures() -> float:
        return metrics.value("tierlog_remote_upload_failures_total", topic="h", partition="0")

    failures_before = failures()
    sent += await produce(client, "h", 100, 60)  # rolls segments; their uploads fail while blackholed
    end = partition.log.sealed_segments()[-1].next_offset
    async with asyncio.timeout(4 * DEADLINE_MS / 1000 + SLACK_S):
        await broker.remote.wait_for(lambda: failures() > failures_before)
    remote = partition.remote
    assert remote is not None and (remote.remote_log.remote_next_offset or 0) < end

    proxy.restore()
    # No wake-up and an upload interval of 24 days: only the loop's capped retry backoff brings the
    # next pass. Bound: the pass in flight (cut off at the deadline), the backoff, one more pass.
    async with asyncio.timeout(2 * DEADLINE_MS / 1000 + UPLOAD_RETRY_CAP_S + SLACK_S):
        await broker.remote.wait_for(lambda: (remote.remote_log.remote_next_offset or 0) >= end)

    records = await consume_native(client, "h", 0)
    assert [(r.key, r.value) for r in records] == sent
