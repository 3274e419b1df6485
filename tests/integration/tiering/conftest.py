"""A real broker app on loopback whose remote tier is a bucket on a real ``moto_server`` process.

Each test gets a fresh bucket, a fresh data directory and a ManualClock (idle rolls and retention are
driven by advancing it). ``start_broker`` can be called again after the previous app is closed, to
restart on the same data directory; ``store`` is an S3 store on the same bucket for direct checks.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.integration.remote.conftest import aws_test_env, create_bucket, moto_server  # noqa: F401
from tests.integration.remote.servers import S3Server
from tierlog.service.app import create_app
from tierlog.service.config import build_settings
from tierlog.service.state import BROKER
from tierlog.tiering.log import ManualClock
from tierlog.tiering.remote.s3 import S3ObjectStore
from tierlog.tiering.remote.store import ObjectStore

Client = TestClient[web.Request, web.Application]
StartBroker = Callable[..., Awaitable[Client]]

START_MS = 1_700_000_000_000


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def bucket(moto_server: S3Server) -> str:  # noqa: F811
    return await create_bucket(moto_server)


@pytest.fixture
def remote_uri(bucket: str) -> str:
    return f"s3://{bucket}/tl"


@pytest.fixture
async def store(moto_server: S3Server, bucket: str) -> AsyncIterator[ObjectStore]:  # noqa: F811
    """The test's own view of the bucket prefix (keys relative to ``tl/``)."""
    from tierlog.tiering.remote.prefixed import PrefixedStore

    opened = PrefixedStore(S3ObjectStore(bucket, endpoint_url=moto_server.endpoint_url), "tl")
    yield opened
    await opened.close()


@pytest.fixture
def start_broker(
    data_dir: Path,
    clock: ManualClock,
    aiohttp_client: Any,
    remote_uri: str,
    moto_server: S3Server,  # noqa: F811
) -> StartBroker:
    """Start a broker (settings overrides as dotted names; ``remote_store`` replaces the bucket store)."""

    async def start(remote_store: ObjectStore | None = None, **overrides: str) -> Client:
        values = {
            "data.dir": str(data_dir),
            "num.partitions": "1",
            "port": "0",
            "remote.uri": remote_uri,
            "s3.endpoint.url": moto_server.endpoint_url,
            "remote.retry.deadline.ms": "200",
            "log.retention.check.interval.ms": str(2**31 - 1),
            **overrides,
        }
        app = create_app(build_settings(values), clock=clock, remote_store=remote_store)
        client: Client = await aiohttp_client(app)
        await app[BROKER].wait_ready()
        return client

    return start
