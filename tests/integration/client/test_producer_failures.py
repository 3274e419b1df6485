"""The producer while the broker is down: back-pressure, delivery timeouts, and retries that succeed."""

from __future__ import annotations

import asyncio
import socket

import pytest

from tests.integration.broker import Brokers, RunningBroker
from tests.integration.client.helpers import CLIENT_SETTINGS, read_topic, wait_until
from tierlog.client import (
    AsyncProducer,
    BrokerUnavailableError,
    BufferExhaustedError,
    DeliveryTimeoutError,
    RecordMetadata,
)
from tierlog.client.accumulator import ProducerBatch


async def test_back_pressure_then_delivery_timeout_when_the_broker_is_down(broker: RunningBroker) -> None:
    producer = AsyncProducer(
        broker.url,
        buffer_memory=4096,
        max_block_ms=300,
        # the first send, with the broker up, auto-creates the topic within these too
        delivery_timeout_ms=3000,
        retry_backoff_ms=20,
        retry_backoff_max_ms=100,
        request_timeout_ms=2000,
    )
    try:
        await producer.send_and_wait("down", b"first", partition=0)
        await broker.stop()
        futures: list[asyncio.Future[RecordMetadata]] = []
        with pytest.raises(BufferExhaustedError) as caught:
            for _ in range(1000):
                futures.append(await producer.send("down", b"x" * 100, partition=0))
        assert "max_block_ms" in str(caught.value)
        assert 0 < len(futures) < 1000
        results = await asyncio.gather(*futures, return_exceptions=True)
        assert all(isinstance(r, DeliveryTimeoutError) for r in results)
        assert isinstance(results[0], DeliveryTimeoutError)
        assert isinstance(results[0].__cause__, BrokerUnavailableError)
        assert producer._acc is not None and producer._acc.buffered_bytes == 0
    finally:
        await producer.close(timeout=0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_retriable_failures_are_retried_until_the_broker_is_back(brokers: Brokers) -> None:
    port = _free_port()
    first = await brokers.start(CLIENT_SETTINGS, port=port, wait_groups=True)
    url = f"http://127.0.0.1:{port}"
    async with AsyncProducer(url, retry_backoff_ms=20, retry_backoff_max_ms=50, linger_ms=0) as producer:
        await producer.send_and_wait("retried", b"before", partition=0)
        await first.stop()
        futures = [await producer.send("retried", b"while down %d" % i, partition=0) for i in range(5)]
        assert producer._acc is not None
        acc = producer._acc

        def retrying() -> bool:
            return any(isinstance(b, ProducerBatch) and b.attempts > 0 for b in acc.incomplete)

        await wait_until(retrying, what="a retried batch")
        await brokers.start(CLIENT_SETTINGS, port=port, wait_groups=True)
        offsets = [(await f).offset for f in futures]
        assert offsets == [1, 2, 3, 4, 5]
        records = await read_topic(url, "retried", 6)
        assert [r.value for r in records] == [b"before"] + [b"while down %d" % i for i in range(5)]
