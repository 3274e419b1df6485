"""Fixtures of the Spark data source tests: a real ``moto_server`` bucket behind a counting proxy, and
archives written by the real log engine. The SparkSession (``spark``) is the one of ``tests/conftest.py``.

The Spark extra is optional. Without it (``pyspark`` or ``pyarrow`` not importable) every test module here is
reported as skipped, with the reason, and never imported (they import the Spark source, which needs both).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import spark_missing
from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server
from tests.integration.spark.proxy import CountingProxy, counting_proxy
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.s3 import S3ObjectStore


class SkippedModule(pytest.Module):
    """A test module reported as skipped without being imported."""

    reason = ""

    def collect(self) -> list[pytest.Item | pytest.Collector]:
        pytest.skip(self.reason)


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Without the Spark extra, each test module here is a skipped one (the default collector otherwise)."""
    reason = spark_missing()
    if reason is None:
        return None
    module = SkippedModule.from_parent(parent, path=module_path)
    module.reason = reason
    return module


@dataclass
class Bucket:
    """A fresh bucket on the moto server; ``uri`` is the archive's ``s3://bucket/prefix``."""

    server: S3Server
    proxy: CountingProxy
    name: str
    prefix: str

    @property
    def uri(self) -> str:
        return f"s3://{self.name}/{self.prefix}"

    def store(self) -> ObjectStore:
        """A store writing straight to moto (not through the proxy, so only readers are counted)."""
        inner = S3ObjectStore(self.name, endpoint_url=self.server.endpoint_url)
        return PrefixedStore(inner, self.prefix)

    def manifests(self, store: ObjectStore) -> ManifestStore:
        return ManifestStore(store)

    def options(self, **extra: str) -> dict[str, str]:
        """Reader options pointing at the bucket through the counting proxy."""
        return {"uri": self.uri, "s3.endpoint.url": self.proxy.endpoint_url, **extra}


@pytest.fixture(scope="session")
def proxy(moto_server: S3Server) -> Iterator[CountingProxy]:
    with counting_proxy(moto_server.endpoint_url) as running:
        yield running


@pytest.fixture(scope="session")
def session_bucket(moto_server: S3Server, proxy: CountingProxy) -> Bucket:
    """One bucket shared by the read-only tests of the session."""
    name = asyncio.run(create_bucket(moto_server))
    return Bucket(moto_server, proxy, name, "archive")


@pytest.fixture
def bucket(moto_server: S3Server, proxy: CountingProxy) -> Bucket:
    """A bucket of its own, for tests that write after reading."""
    name = asyncio.run(create_bucket(moto_server))
    return Bucket(moto_server, proxy, name, f"p-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="session")
def logs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")
