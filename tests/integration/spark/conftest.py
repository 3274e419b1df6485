"""Fixtures of the Spark data source tests: one SparkSession (``local[2]``) for the whole session, a real
``moto_server`` bucket behind a counting proxy, and archives written by the real log engine.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# The S3 server fixtures of the object-store suite: a real moto_server process with test credentials.
from tests.integration.remote.conftest import aws_test_env, create_bucket, moto_server  # noqa: F401
from tests.integration.remote.servers import S3Server
from tests.integration.spark.proxy import CountingProxy, counting_proxy
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.s3 import S3ObjectStore
from tierlog.tiering.remote.store import ObjectStore

try:
    import pyspark  # noqa: F401 - only checking that the Spark extra is installed
except ImportError:  # the Spark extra is optional: without it these tests are not collected
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The one SparkSession of these tests, with the ``tierlog`` source registered."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from pyspark.sql import SparkSession

    from tierlog.client.spark.source import TierlogDataSource

    session = (
        SparkSession.builder.master("local[2]")
        .appName("tierlog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
        .config("spark.sql.warehouse.dir", str(tmp_path_factory.mktemp("spark-warehouse")))
        .config("spark.sql.pyspark.worker.logging.enabled", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    session.dataSource.register(TierlogDataSource)
    yield session
    session.stop()


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
def proxy(moto_server: S3Server) -> Iterator[CountingProxy]:  # noqa: F811 - the imported fixture
    with counting_proxy(moto_server.endpoint_url) as running:
        yield running


@pytest.fixture(scope="session")
def session_bucket(moto_server: S3Server, proxy: CountingProxy) -> Bucket:  # noqa: F811
    """One bucket shared by the read-only tests of the session."""
    name = asyncio.run(create_bucket(moto_server))
    return Bucket(moto_server, proxy, name, "archive")


@pytest.fixture
def bucket(moto_server: S3Server, proxy: CountingProxy) -> Bucket:  # noqa: F811
    """A bucket of its own, for tests that write after reading."""
    name = asyncio.run(create_bucket(moto_server))
    return Bucket(moto_server, proxy, name, f"p-{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="session")
def logs_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")
