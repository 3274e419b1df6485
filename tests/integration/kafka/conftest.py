"""Fixtures for the Kafka protocol listener's tests: a broker served from a thread, reached by Kafka's own
client libraries (confluent-kafka, kafka-python, aiokafka) on its listener."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from tests.integration.broker import BrokerThread, StartThread

_names = itertools.count()


@pytest.fixture
def kafka_broker(broker_threads: StartThread) -> Iterator[BrokerThread]:
    """One broker with its Kafka listener on a free port (``.kafka_bootstrap``) and its HTTP API
    (``.url``); auto-creation off, so a typo is an error."""
    yield broker_threads({"auto.create.topics.enable": "false", "num.partitions": "3"})


@pytest.fixture
def topic_name(request: pytest.FixtureRequest) -> str:
    """A topic name unique within the test session (the test's own name plus a counter)."""
    base = request.node.name.replace("[", "-").replace("]", "").replace("_", "-")[:150]
    return f"{base}-{next(_names)}"
