"""Idempotent produce on a replicated partition of an in-process cluster: a duplicate with ``acks=all``
answers the original offsets once they are committed, and the follower holds the batch once with the
producer in its state (design note 0011, "Broker wiring")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from tests.integration.broker import START_MS, Client
from tests.integration.cluster.inproc import InprocCluster
from tests.integration.producers.conftest import init_producer
from tierlog.service.topics.partition import Partition
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

BATCHES = "application/vnd.tierlog.batches"
TOPIC = "idem-repl"


async def _produce(client: Client, body: bytes) -> tuple[int, dict[str, Any]]:
    resp = await client.post(
        f"/native/v1/topics/{TOPIC}/partitions/0/batches?acks=all",
        data=body,
        headers={"Content-Type": BATCHES},
    )
    doc: dict[str, Any] = await resp.json()
    return resp.status, doc


def _replica(cluster: InprocCluster, broker_id: int) -> Partition:
    local = cluster.brokers[broker_id].broker.local_topics[TOPIC].local(0)
    assert local is not None
    return local


async def test_a_duplicate_with_acks_all_answers_committed_original_offsets(tmp_path: Path) -> None:
    async with InprocCluster(tmp_path) as cluster:
        b1, _ = await cluster.start(2)
        await b1.broker.create_topic(TOPIC, 1, replication_factor=2)

        def isr_full() -> bool:
            node = b1.broker.cluster
            assert node is not None
            state = node.cache.partition_state(TOPIC, 0)
            return cluster.converged(TOPIC) and state is not None and len(state.isr) == 2

        await cluster.wait_for(isr_full, "an ISR of 2")
        leader = cluster.leaders(TOPIC)[0]
        follower = 2 if leader == 1 else 1
        # any broker hands out ids: ask the follower
        pid, epoch = await init_producer(cluster.brokers[follower].client)
        records = [Record(None, f"v{i}".encode(), timestamp=START_MS) for i in range(3)]
        body = build_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=0)
        client = cluster.brokers[leader].client

        status, first = await _produce(client, body)
        assert status == 200, first
        status, again = await _produce(client, body)
        assert status == 200, again
        assert (first["duplicate"], again["duplicate"]) == (False, True)
        assert again["base_offset"] == first["base_offset"] == 0
        assert again["last_offset"] == first["last_offset"] == 2
        leading = _replica(cluster, leader)
        assert leading.high_watermark >= 3  # acks=all: committed before either answer
        assert leading.log_end_offset == 3

        copy = _replica(cluster, follower)
        await cluster.wait_for(lambda: copy.log_end_offset == 3, "the follower to copy the batch")
        producers = await asyncio.to_thread(copy.log.producers)
        assert [(p.producer_id, p.epoch, p.last_sequence) for p in producers] == [(pid, epoch, 2)]
