"""Fixtures of the object-store contract suite: one ``store`` per backend (local directory, moto_server,
LocalStack), each a fresh, empty namespace (a new directory or a new bucket) per test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiobotocore.session import get_session

from tests.integration.remote.servers import S3Server, find_localstack_python, run_localstack
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.s3 import S3ObjectStore


@pytest.fixture(scope="session")
def localstack_server(aws_test_env: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    python, reason = find_localstack_python()
    if python is None:
        pytest.skip(reason)
    with run_localstack(python, tmp_path_factory.mktemp("localstack")) as server:
        yield server


async def create_bucket(server: S3Server) -> str:
    """A new, empty bucket on ``server``."""
    bucket = f"tierlog-{uuid.uuid4().hex[:16]}"
    async with get_session().create_client("s3", endpoint_url=server.endpoint_url) as client:
        await client.create_bucket(Bucket=bucket)
    return bucket


@dataclass
class Backend:
    """What a contract test needs to know about the store under test."""

    name: str
    server: S3Server | None
    bucket: str | None
    root: Path | None
    part_size: int

    def s3_store(self, **options: object) -> S3ObjectStore:
        assert self.server is not None and self.bucket is not None
        defaults: dict[str, object] = {
            "part_size": self.part_size,
            "multipart_threshold": self.part_size,
            "page_size": 7,
        }
        defaults.update(options)
        return S3ObjectStore(self.bucket, endpoint_url=self.server.endpoint_url, **defaults)  # type: ignore[arg-type]

    def open(self) -> ObjectStore:
        if self.server is None:
            assert self.root is not None
            return LocalObjectStore(self.root, fsync=False)
        return self.s3_store()


BACKENDS = [
    pytest.param("local", id="local"),
    pytest.param("moto", id="moto", marks=pytest.mark.integration),
    pytest.param("localstack", id="localstack", marks=pytest.mark.integration),
]


@pytest.fixture(params=BACKENDS)
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    name = request.param
    if name == "local":
        return Backend("local", None, None, tmp_path / "store", part_size=64 * 1024)
    server: S3Server = request.getfixturevalue(f"{name}_server")
    bucket = await create_bucket(server)
    return Backend(name, server, bucket, None, part_size=max(server.min_part_size, 64 * 1024))


@pytest.fixture
async def store(backend: Backend) -> AsyncIterator[ObjectStore]:
    opened = backend.open()
    yield opened
    await opened.close()
