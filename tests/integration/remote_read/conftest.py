"""Fixtures of the remote read tests: a ``read_store`` per backend (a local directory, a fresh bucket on the
session's real moto_server), instrumented, and a partition uploaded to it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server
from tests.integration.remote_read.helpers import Partition, upload, write_log
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.s3 import S3ObjectStore


@pytest.fixture(params=["local", pytest.param("moto", marks=pytest.mark.integration)])
async def read_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[InstrumentedStore]:
    """An instrumented, empty store: a directory, or a new bucket on the session's moto_server."""
    inner: ObjectStore
    if request.param == "local":
        inner = LocalObjectStore(tmp_path / "bucket", fsync=False)
    else:
        server: S3Server = request.getfixturevalue("moto_server")
        bucket = await create_bucket(server)
        inner = S3ObjectStore(bucket, endpoint_url=server.endpoint_url)
    store = InstrumentedStore(inner)
    yield store
    await store.close()


@pytest.fixture
async def uploaded(
    request: pytest.FixtureRequest, read_store: InstrumentedStore, tmp_path: Path
) -> AsyncIterator[Partition]:
    """One partition of ~120 batches in ~10 sealed segments, uploaded to ``read_store``; counters reset.
    Indexes packed, or in the older separate objects when parametrized indirectly with ``"separate"``."""
    part = await asyncio.to_thread(write_log, tmp_path / "orders-0")
    await upload(read_store, part, packed=getattr(request, "param", "packed") == "packed")
    read_store.reset()
    yield part
    await asyncio.to_thread(part.log.close)
