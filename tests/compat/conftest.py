"""Fixtures of the client-library compatibility suite: REST Proxy clients nobody here wrote, installed outside
the project's venv (``tests/compat/install.py``) and run as child processes against a real broker.

``node_env`` and ``python_env`` install once per machine (a stamp makes later sessions instant) and once per
session; without a reachable registry every test needing them skips with the reason. ``broker_url`` serves a
broker on 127.0.0.1 from a thread of its own (the shared ``BrokerThread`` of the integration suites), so the
test can block on a client process while the broker answers it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.install import NodeEnv, PythonEnv, RegistryUnreachable, install_node, install_python
from tests.integration.broker import BrokerThread, broker_settings


@pytest.fixture(scope="session")
def node_env() -> NodeEnv:
    try:
        return install_node()
    except RegistryUnreachable as err:
        pytest.skip(f"npm kafka-rest not installed: {err}")


@pytest.fixture(scope="session")
def python_env() -> PythonEnv:
    try:
        return install_python()
    except RegistryUnreachable as err:
        pytest.skip(f"PyPI REST Proxy clients not installed: {err}")


@pytest.fixture
def broker_url(tmp_path: Path) -> Iterator[str]:
    """A broker with default settings on 127.0.0.1, served from its own thread; its URL (no trailing /)."""
    running = BrokerThread(broker_settings(tmp_path / "data"))
    try:
        yield running.url
    finally:
        running.close()
