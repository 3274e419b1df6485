"""Fixtures of the cluster suites: one real etcd process per test session (``etcd_server``) and, per test,
a ``metadata.uri`` on it with a prefix of the test's own (``etcd_uri``), so tests never see each other's keys.

A test that stops, kills or restarts etcd starts an ``EtcdServer`` of its own instead of the shared one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.integration.cluster.etcd import EtcdServer


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """A real etcd on 127.0.0.1 for the whole session (fails, never skips, without the etcd binary)."""
    with EtcdServer(tmp_path_factory.mktemp("etcd")) as server:
        yield server


@pytest.fixture
def etcd_uri(etcd_server: EtcdServer) -> str:
    """``etcd://127.0.0.1:PORT/<unique prefix>`` on the shared server."""
    return etcd_server.uri(f"test-{uuid.uuid4().hex[:12]}")
