"""A consumer reads records the broker serves from the remote tier exactly as it reads local ones."""

from __future__ import annotations

import random

import pytest

from tests.integration.broker import RunningBroker
from tests.integration.client.helpers import read_topic, wait_until
from tierlog.client import AsyncAdmin, AsyncProducer
from tierlog.service.web.keys import BROKER


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    return {"remote.upload.interval.ms": "50", "log.retention.check.interval.ms": "50"}


async def test_a_consumer_streams_records_from_the_remote_tier(broker: RunningBroker) -> None:
    configs = {"remote.storage.enable": "true", "segment.bytes": "4096", "local.retention.bytes": "4096"}
    async with AsyncAdmin(broker.url) as admin:
        await admin.create_topic("archived", 1, configs)
    values = [b"%04d " % i + random.Random(i).randbytes(200) for i in range(300)]
    async with AsyncProducer(broker.url, batch_size=1024, compression_type="lz4") as producer:
        for value in values:
            await producer.send("archived", value)
    partition = broker.app[BROKER].topic("archived").partition(0)
    await wait_until(
        lambda: partition.local_log_start_offset >= 150, what="local segments moved to the bucket"
    )
    records = await read_topic(broker.url, "archived", 300)
    assert [r.offset for r in records] == list(range(300))
    assert [r.value for r in records] == values
