"""Fixtures shared by the integration suites: real brokers on loopback (see ``tests/integration/broker.py``).

``brokers`` starts broker apps on the test's event loop (``await brokers.start({"num.partitions": "3"})``);
``broker_threads`` starts them on event loops of their own, in threads, for synchronous clients. Both stop
every broker they started, and join every thread, at teardown. A suite's own conftest only adds its defaults.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from pathlib import Path

import pytest

from tests.integration.broker import START_MS, Brokers, BrokerThread, StartThread, broker_settings
from tierlog.tiering.log import ManualClock


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """The data directory brokers of this test use unless a test passes another ``data.dir``."""
    return tmp_path / "data"


@pytest.fixture
def clock() -> ManualClock:
    """A manual clock at ``START_MS``; time-driven behaviour (rolls, retention, sessions) moves when told."""
    return ManualClock(START_MS)


@pytest.fixture
async def brokers(data_dir: Path) -> AsyncIterator[Brokers]:
    started = Brokers(data_dir)
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
def broker_threads(data_dir: Path) -> Iterator[StartThread]:
    """``start(settings)`` serves a broker from a thread of its own; all are stopped and joined after."""
    started: list[BrokerThread] = []

    def start(settings: Mapping[str, str] | None = None) -> BrokerThread:
        running = BrokerThread(broker_settings(data_dir, settings))
        started.append(running)
        return running

    try:
        yield start
    finally:
        while started:
            started.pop().close()
