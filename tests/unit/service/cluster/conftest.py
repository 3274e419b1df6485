"""Fixtures of the controller tests: a manual clock, a local metadata store on it, and a cluster of
memberships and controllers on that store (:class:`tests.unit.service.cluster.test_controller.Cluster`)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.unit.service.cluster.test_controller import Cluster
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.tiering.log.clock import ManualClock


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_700_000_000_000)


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[LocalMetadataStore]:
    store = LocalMetadataStore(clock=clock)
    await store.start()
    yield store
    await store.close()


@pytest.fixture
async def cluster(store: LocalMetadataStore, clock: ManualClock) -> AsyncIterator[Cluster]:
    cluster = Cluster(store, clock)
    yield cluster
    await cluster.close()
