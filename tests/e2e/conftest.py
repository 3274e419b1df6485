"""Fixtures of the end-to-end scenarios: real parts only. Brokers are ``tierlog serve`` child processes, the
remote tier is a bucket on the session's ``moto_server`` process (``tests/conftest.py``), clients are the
public ``tierlog.client`` classes and the ``tierlog`` CLI, and Spark is a local SparkSession set up the way
docs/spark.md tells users to.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.process import BrokerProcess
from tests.integration.remote.conftest import create_bucket
from tests.integration.remote.servers import S3Server

StartBroker = Callable[..., BrokerProcess]


@pytest.fixture
def start_broker(tmp_path: Path) -> Iterator[StartBroker]:
    """``start(*serve_args)`` runs ``tierlog serve`` in ``tmp_path/broker-N``; all are killed afterwards."""
    started: list[BrokerProcess] = []

    def start(*args: str) -> BrokerProcess:
        process = BrokerProcess(tmp_path / f"broker-{len(started)}", *args)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


@pytest.fixture(scope="module")
def bucket(moto_server: S3Server) -> str:
    """A fresh bucket on the session's moto_server, shared by one module's scenario."""
    return asyncio.run(create_bucket(moto_server))
