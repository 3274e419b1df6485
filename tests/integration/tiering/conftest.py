"""A real broker app on loopback whose remote tier is a bucket on a real ``moto_server`` process.

Each test gets a fresh bucket, a fresh data directory and a ManualClock (idle rolls and retention are
driven by advancing it). ``start_broker`` can be called again after the previous app is closed, to
restart on the same data directory; ``store`` is an S3 store on the same bucket for direct checks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

import pytest

from tests.integration.broker import Brokers, Client
from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server
from tierlog.tiering.log import ManualClock
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.s3 import S3ObjectStore

StartBroker = Callable[..., Awaitable[Client]]


@pytest.fixture
async def bucket(moto_server: S3Server) -> str:
    return await create_bucket(moto_server)


@pytest.fixture
def remote_uri(bucket: str) -> str:
    return f"s3://{bucket}/tl"


@pytest.fixture
async def store(moto_server: S3Server, bucket: str) -> AsyncIterator[ObjectStore]:
    """The test's own view of the bucket prefix (keys relative to ``tl/``)."""
    opened = PrefixedStore(S3ObjectStore(bucket, endpoint_url=moto_server.endpoint_url), "tl")
    yield opened
    await opened.close()


@pytest.fixture
def start_broker(brokers: Brokers, clock: ManualClock, remote_uri: str, moto_server: S3Server) -> StartBroker:
    """Start a broker (settings overrides as dotted names; ``remote_store`` replaces the bucket store)."""

    async def start(remote_store: ObjectStore | None = None, **overrides: str) -> Client:
        defaults = {
            "num.partitions": "1",
            "remote.uri": remote_uri,
            "s3.endpoint.url": moto_server.endpoint_url,
            # bounds whole calls, the in-flight attempt included: room for a moto_server request while
            # the other test worker, Spark's JVM and brokers share two cores (2 s once timed out a
            # broker's first manifest read, which then adopted nothing)
            "remote.retry.deadline.ms": "10000",
            "log.retention.check.interval.ms": str(2**31 - 1),
        }
        running = await brokers.start({**defaults, **overrides}, clock=clock, remote_store=remote_store)
        return running.client

    return start
