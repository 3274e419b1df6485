"""A real broker (with consumer groups) on loopback, on a manual clock, for the REST Proxy compatibility
suite. The suite is written from Confluent REST Proxy's API reference (v2 and v1): routes, media types,
error codes and message prefixes, and response shapes."""

from __future__ import annotations

import pytest

from tests.integration.broker import Brokers, RunningBroker
from tierlog.tiering.log import ManualClock


@pytest.fixture
async def node(brokers: Brokers, clock: ManualClock) -> RunningBroker:
    return await brokers.start(
        {"num.partitions": "1", "max.request.size": "65536"}, clock=clock, wait_groups=True
    )
