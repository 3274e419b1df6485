"""Real brokers for the client tests: one on the test's event loop, one in a background thread.

``broker`` serves a broker app on a loopback aiohttp server in the test's own loop (for the asyncio clients).
``thread_broker`` runs a broker app on its own event loop in a thread the fixture owns and joins (for the
synchronous clients and the CLI, which run their own loops and block the calling thread). Both come from the
shared fixtures of ``tests/integration/conftest.py``; this module adds the client suite's settings.
"""

from __future__ import annotations

import pytest

from tests.integration.broker import Brokers, BrokerThread, RunningBroker, StartThread
from tests.integration.client.helpers import CLIENT_SETTINGS
from tierlog.tiering.log import ManualClock


@pytest.fixture
def broker_overrides() -> dict[str, str]:
    """Settings a test module may override (dotted names)."""
    return {}


@pytest.fixture
async def broker(brokers: Brokers, broker_overrides: dict[str, str]) -> RunningBroker:
    return await brokers.start({**CLIENT_SETTINGS, **broker_overrides}, wait_groups=True)


@pytest.fixture
async def clocked_broker(brokers: Brokers, clock: ManualClock) -> tuple[RunningBroker, ManualClock]:
    """A broker whose group coordinator runs on a manual clock (session expiry only when the test says)."""
    return await brokers.start(CLIENT_SETTINGS, clock=clock, wait_groups=True), clock


@pytest.fixture
def thread_broker(broker_threads: StartThread) -> BrokerThread:
    return broker_threads(CLIENT_SETTINGS)
