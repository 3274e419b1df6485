"""The idempotent AsyncProducer against a real broker: lost answers store nothing twice, a sequence gap bumps
the epoch, a fenced producer stays failed, and ``enable_idempotence=False`` keeps the old behaviour."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.integration.broker import RunningBroker
from tests.integration.client.helpers import raw_batches, read_topic
from tests.integration.client.lossy_proxy import LossyProxy
from tierlog.client import AsyncProducer, ConsumerRecord
from tierlog.client.transport import BATCHES_TYPE
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import OutOfOrderSequenceError, ProducerFencedError

FAST = {"retry_backoff_ms": 10, "retry_backoff_max_ms": 50, "linger_ms": 2}


@pytest.fixture
async def lossy(broker: RunningBroker) -> AsyncIterator[LossyProxy]:
    """The broker behind a proxy that loses the answers of produce requests 1, 3, 4 and every 5th."""
    proxy = LossyProxy(broker.url, lambda n: n in (1, 3, 4) or n % 5 == 0)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def _post(url: str, path: str, *, json: Any = None, data: bytes | None = None, **params: str) -> Any:
    headers = {"Content-Type": BATCHES_TYPE} if data is not None else None
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + path, json=json, data=data, params=params, headers=headers) as answer,
    ):
        body = await answer.json(content_type=None)
        assert answer.status == 200, body
        return body


async def _raw_produce(url: str, topic: str, partition: int, batch: bytes) -> Any:
    path = f"/native/v1/topics/{topic}/partitions/{partition}/batches"
    return await _post(url, path, data=batch, acks="all")


def _per_partition(records: list[ConsumerRecord]) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for record in sorted(records, key=lambda r: (r.partition, r.offset)):
        assert record.value is not None
        out.setdefault(record.partition, []).append(record.value)
    return out


async def _send_all(producer: AsyncProducer, topic: str, count: int) -> list[Any]:
    futures = []
    for i in range(count):
        futures.append(await producer.send(topic, b"v%04d" % i, partition=i % 2))
        if i % 7 == 6:
            await asyncio.sleep(0.005)  # several requests per partition, not one big batch
    return list(await asyncio.gather(*futures))


async def test_records_are_stored_once_and_in_order_when_answers_are_lost(
    broker: RunningBroker, lossy: LossyProxy
) -> None:
    topic, count = "lossy-once", 60
    async with AsyncProducer(lossy.url, **FAST) as producer:
        acked = await _send_all(producer, topic, count)
        identity = producer.producer_identity
    assert lossy.dropped >= 4, "the proxy lost answers of appended requests"
    assert identity is not None and identity[1] == 0, "retries after lost answers need no bump"
    stored = _per_partition(await read_topic(broker.url, topic, count))
    assert stored[0] == [b"v%04d" % i for i in range(0, count, 2)]
    assert stored[1] == [b"v%04d" % i for i in range(1, count, 2)]
    by_value = {r.value: (r.partition, r.offset) for r in await read_topic(broker.url, topic, count)}
    assert {(m.partition, m.offset) for m in acked} == set(by_value.values())
    for header in await raw_batches(broker.url, topic, 0):
        assert header.producer_id == identity[0] and header.base_sequence >= 0


async def test_without_idempotence_lost_answers_store_records_twice(
    broker: RunningBroker, lossy: LossyProxy
) -> None:
    topic, count = "lossy-twice", 20
    async with AsyncProducer(lossy.url, enable_idempotence=False, **FAST) as producer:
        assert producer.config.acks_param == "all"
        await _send_all(producer, topic, count)
        assert producer.producer_identity is None
    assert lossy.dropped >= 2
    headers = await raw_batches(broker.url, topic, 0) + await raw_batches(broker.url, topic, 1)
    assert headers and all(h.producer_id == -1 for h in headers)
    stored = sum(h.last_offset_delta + 1 for h in headers)
    assert stored > count, "a retried request whose answer was lost is appended again"


async def test_a_sequence_gap_fails_the_batch_bumps_the_epoch_and_later_sends_succeed(
    broker: RunningBroker,
) -> None:
    topic = "gap"
    async with AsyncProducer(broker.url, linger_ms=0) as producer:
        first = await producer.send_and_wait(topic, b"first", partition=0)
        identity = producer.producer_identity
        assert identity is not None and first.offset == 0
        producer_id, epoch = identity
        # Another writer under the same id continues the sequence: the producer's next batch (sequence 1)
        # is then neither the next sequence (4) nor a cached batch.
        records = [Record(None, b"raw%d" % i, (), -1) for i in range(3)]
        raw = build_batch(records, producer_id=producer_id, producer_epoch=epoch, base_sequence=1)
        await _raw_produce(broker.url, topic, 0, raw)
        with pytest.raises(OutOfOrderSequenceError):
            await producer.send_and_wait(topic, b"refused", partition=0)
        after = await producer.send_and_wait(topic, b"after", partition=0)
        assert producer.producer_identity == (producer_id, epoch + 1)
    assert after.offset == 4
    stored = await read_topic(broker.url, topic, 5)
    assert [r.value for r in stored] == [b"first", b"raw0", b"raw1", b"raw2", b"after"]
    headers = await raw_batches(broker.url, topic, 0)
    assert (headers[-1].producer_epoch, headers[-1].base_sequence) == (epoch + 1, 0)


async def test_an_unknown_producer_id_on_a_bump_takes_a_new_id(broker: RunningBroker) -> None:
    topic = "unknown-id"
    proxy = LossyProxy(broker.url, lambda _: False)
    await proxy.start()
    try:
        proxy.bump_answers.append((404, {"error_code": 40404, "message": "unknown producer id"}))
        async with AsyncProducer(proxy.url, linger_ms=0) as producer:
            await producer.send_and_wait(topic, b"first", partition=0)
            identity = producer.producer_identity
            assert identity is not None
            gap = build_batch(
                [Record(None, b"raw", (), -1)] * 3,
                producer_id=identity[0],
                producer_epoch=identity[1],
                base_sequence=1,
            )
            await _raw_produce(broker.url, topic, 0, gap)
            with pytest.raises(OutOfOrderSequenceError):
                await producer.send_and_wait(topic, b"refused", partition=0)
            after = await producer.send_and_wait(topic, b"after", partition=0)
            fresh = producer.producer_identity
    finally:
        await proxy.close()
    assert proxy.id_requests == [None, {"producer_id": identity[0], "producer_epoch": identity[1]}, None]
    assert fresh is not None and fresh[0] != identity[0] and fresh[1] == 0
    assert after.offset == 4
    headers = await raw_batches(broker.url, topic, 0)
    assert (headers[-1].producer_id, headers[-1].producer_epoch, headers[-1].base_sequence) == (
        fresh[0],
        0,
        0,
    )


async def test_a_fenced_producer_fails_and_stays_failed(broker: RunningBroker) -> None:
    topic = "fenced"
    producer = AsyncProducer(broker.url, linger_ms=0)
    try:
        await producer.send_and_wait(topic, b"old", partition=0)
        identity = producer.producer_identity
        assert identity is not None
        bumped = await _post(
            broker.url,
            "/native/v1/producers",
            json={"producer_id": identity[0], "producer_epoch": identity[1]},
        )
        assert (bumped["producer_id"], bumped["producer_epoch"]) == (identity[0], identity[1] + 1)
        newer = build_batch(
            [Record(None, b"new", (), -1)],
            producer_id=bumped["producer_id"],
            producer_epoch=bumped["producer_epoch"],
            base_sequence=0,
        )
        await _raw_produce(broker.url, topic, 0, newer)
        with pytest.raises(ProducerFencedError):
            await producer.send_and_wait(topic, b"stale", partition=0)
        with pytest.raises(ProducerFencedError):
            await producer.send(topic, b"later", partition=1)
        assert isinstance(producer.fatal_error, ProducerFencedError)
    finally:
        await producer.close()
    stored = await read_topic(broker.url, topic, 2)
    assert [r.value for r in stored] == [b"old", b"new"]
