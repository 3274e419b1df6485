"""Idempotent produce over the native route with a real broker app (design note 0011, "Broker wiring"):
batches whose header carries a producer id, sent as raw HTTP (a lost answer is simulated by sending the
same bytes again)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.integration.broker import START_MS, Brokers, Client
from tests.integration.producers.conftest import init_producer
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import ManualClock

BATCHES = "application/vnd.tierlog.batches"
TOPIC = "idem"
DEADLINE_S = 30  # bounded waits for a periodic pass; a deadline, not a timing assertion


def _batch(pid: int, epoch: int, seq: int, count: int = 3) -> bytes:
    records = [Record(None, f"v{seq + i}".encode(), timestamp=START_MS) for i in range(count)]
    return build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


async def _produce(client: Client, body: bytes, acks: str = "1") -> tuple[int, dict[str, Any]]:
    resp = await client.post(
        f"/native/v1/topics/{TOPIC}/partitions/0/batches?acks={acks}",
        data=body,
        headers={"Content-Type": BATCHES},
    )
    doc: dict[str, Any] = await resp.json()
    return resp.status, doc


async def _log_end(client: Client) -> int:
    resp = await client.get(f"/native/v1/topics/{TOPIC}")
    assert resp.status == 200, await resp.text()
    partitions = (await resp.json())["partitions"]
    return int(partitions[0]["log_end_offset"])


async def _metric(client: Client, prefix: str) -> float:
    text = await (await client.get("/metrics")).text()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(prefix))


@pytest.mark.parametrize("acks", ["1", "all"])
async def test_a_batch_sent_twice_is_stored_once_with_the_same_offsets(brokers: Brokers, acks: str) -> None:
    running = await brokers.start()
    client = running.client
    pid, epoch = await init_producer(client)
    await _produce(client, _batch(pid, epoch, 0, count=2))  # the producer's earlier batch
    body = _batch(pid, epoch, 2)
    status, first = await _produce(client, body, acks)
    assert status == 200, first
    assert first["duplicate"] is False
    end = await _log_end(client)
    status, again = await _produce(client, body, acks)
    assert status == 200, again
    assert again["duplicate"] is True
    for field in ("base_offset", "last_offset", "batch_base_offsets", "record_count"):
        assert again[field] == first[field], field
    assert (first["base_offset"], first["last_offset"]) == (2, 4)
    assert await _log_end(client) == end == 5
    assert await _metric(client, f'tierlog_produce_duplicates_total{{topic="{TOPIC}"}}') == 1
    # the next sequence is accepted as new
    status, after = await _produce(client, _batch(pid, epoch, 5), acks)
    assert status == 200 and after["duplicate"] is False and after["base_offset"] == 5


async def test_a_gap_in_sequence_is_refused_and_appends_nothing(brokers: Brokers) -> None:
    running = await brokers.start()
    client = running.client
    pid, epoch = await init_producer(client)
    await _produce(client, _batch(pid, epoch, 0))
    end = await _log_end(client)
    status, doc = await _produce(client, _batch(pid, epoch, 10))
    assert status == 409, doc
    assert doc["error_code"] == 40906
    assert await _log_end(client) == end
    errors = await _metric(client, "tierlog_produce_sequence_errors_total{")
    assert errors == 1


async def test_an_old_epoch_is_fenced_and_appends_nothing(brokers: Brokers) -> None:
    running = await brokers.start()
    client = running.client
    pid, epoch = await init_producer(client)
    await _produce(client, _batch(pid, epoch, 0))
    pid, new_epoch = await init_producer(client, {"producer_id": pid, "producer_epoch": epoch})
    status, doc = await _produce(client, _batch(pid, new_epoch, 0))
    assert status == 200 and doc["duplicate"] is False
    end = await _log_end(client)
    status, doc = await _produce(client, _batch(pid, epoch, 3))  # the old instance's next batch
    assert status == 409, doc
    assert doc["error_code"] == 40907
    assert await _log_end(client) == end


async def test_batches_without_a_producer_id_append_again_when_retried(brokers: Brokers) -> None:
    running = await brokers.start()
    client = running.client
    body = build_batch([Record(None, b"x", timestamp=START_MS)])
    _, first = await _produce(client, body)
    _, again = await _produce(client, body)
    assert first["duplicate"] is False and again["duplicate"] is False
    assert again["base_offset"] == first["base_offset"] + 1
    assert await _log_end(client) == 2


async def test_idle_producers_expire_and_their_next_batch_is_accepted(
    brokers: Brokers, clock: ManualClock
) -> None:
    running = await brokers.start(
        {"producer.id.expiration.ms": "60000", "producer.id.expiration.check.interval.ms": "20"}, clock=clock
    )
    client = running.client
    pid, epoch = await init_producer(client)
    status, _ = await _produce(client, _batch(pid, epoch, 0))
    assert status == 200
    partition = running.broker.topic(TOPIC).partition(0)
    maintenance = running.app[MAINTENANCE]
    # the periodic pass runs (the clock has not moved: nothing expires)
    async with asyncio.timeout(DEADLINE_S):
        await maintenance.wait_for_pass("producer_expiry", maintenance.passes["producer_expiry"] + 1)
    assert [p.producer_id for p in await asyncio.to_thread(partition.log.producers)] == [pid]
    status, doc = await _produce(client, _batch(pid, epoch, 10))
    assert status == 409 and doc["error_code"] == 40906

    clock.advance(60_000)
    # the periodic pass expires it: the second pass to end from here started after the clock moved (a
    # pass running meanwhile may read the clock before or after, so an explicit pass could find it gone)
    async with asyncio.timeout(DEADLINE_S):
        await maintenance.wait_for_pass("producer_expiry", maintenance.passes["producer_expiry"] + 2)
    assert await asyncio.to_thread(partition.log.producers) == []
    assert await maintenance.producer_expiry_pass() == 0  # nothing is left to expire
    # an unknown (expired) producer is accepted at any sequence (KIP-360)
    status, doc = await _produce(client, _batch(pid, epoch, 10))
    assert status == 200 and doc["duplicate"] is False
