"""KIP-392, fetch from the closest replica, in a 3-broker cluster whose brokers are in racks ``rack-1``..
``rack-3`` with ``replica.selector.class=rack-aware``: the leader points a consumer of another rack to the
in-sync follower of its rack (no records, ``preferred_read_replica``); a follower serves a v11+ consumer
fetch up to its high watermark, answers OFFSET_OUT_OF_RANGE past its log end and refuses older versions;
and confluent-kafka with ``client.rack`` consumes every record, the follower of its rack serving them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from tests.integration.cluster.inproc import DEADLINE_S, InprocCluster
from tests.integration.kafka.test_fetch import Raw
from tierlog.service.web.keys import METRICS

pytestmark = pytest.mark.integration

TOPIC = "near"
RECORDS = 20
FETCH_KEY = 1
NOT_LEADER_OR_FOLLOWER = 6
OFFSET_OUT_OF_RANGE = 1
SETTINGS = {"auto.create.topics.enable": "false", "replica.selector.class": "rack-aware"}


def rack(broker_id: int) -> str:
    return f"rack-{broker_id}"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path) as running:
        await asyncio.gather(
            *(running.start_broker(i, {**SETTINGS, "broker.rack": rack(i)}) for i in (1, 2, 3))
        )
        await running.wait_for(running.all_seen, "every broker to see every other")
        await running.brokers[1].broker.create_topic(TOPIC, 1, {}, replication_factor=3)
        await running.wait_for(lambda: running.converged(TOPIC), "the partition led")
        producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap(running), "acks": "all"})
        for i in range(RECORDS):
            producer.produce(TOPIC, f"r-{i}".encode(), partition=0)
        assert await asyncio.to_thread(producer.flush, DEADLINE_S) == 0
        await running.wait_for(lambda: caught_up(running), "every replica's high watermark at the end")
        yield running


def bootstrap(cluster: InprocCluster) -> str:
    return ",".join(r.kafka_bootstrap for r in cluster.brokers.values())


def caught_up(cluster: InprocCluster) -> bool:
    for running in cluster.brokers.values():
        partition = running.broker.local_topics[TOPIC].local(0)
        if partition is None or partition.high_watermark != RECORDS:
            return False
    return True


def fetch(endpoint: str, version: int, offset: int, rack_id: str) -> Any:
    """One consumer Fetch of partition 0 at ``offset``; the partition's answer."""
    wanted = {
        "topic": TOPIC,
        "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
    }
    connection = Raw(endpoint)
    try:
        answer = connection.call(
            FETCH_KEY, version, replica_id=-1, max_wait=0, min_bytes=1, max_bytes=1 << 20, topics=[wanted],
            rack_id=rack_id,
        )  # fmt: skip
    finally:
        connection.close()
    (partition,) = answer.responses[0].partitions
    return partition


async def test_the_leader_points_a_consumer_to_its_rack_and_the_follower_serves_it(
    cluster: InprocCluster,
) -> None:
    (leader,) = cluster.leaders(TOPIC)
    follower = next(i for i in cluster.brokers if i != leader)
    at_leader = cluster.brokers[leader].kafka_bootstrap
    at_follower = cluster.brokers[follower].kafka_bootstrap

    pointed = await asyncio.to_thread(fetch, at_leader, 11, 0, rack(follower))
    assert (pointed.error_code, pointed.preferred_read_replica) == (0, follower) and not pointed.records
    assert pointed.high_watermark == RECORDS
    same_rack = await asyncio.to_thread(fetch, at_leader, 11, 0, rack(leader))
    assert same_rack.preferred_read_replica == -1 and same_rack.records
    no_rack = await asyncio.to_thread(fetch, at_leader, 11, 0, "")
    assert no_rack.preferred_read_replica == -1 and no_rack.records

    served = await asyncio.to_thread(fetch, at_follower, 12, 0, rack(follower))
    assert (served.error_code, served.high_watermark, served.preferred_read_replica) == (0, RECORDS, -1)
    assert served.records == same_rack.records  # the same stored batches
    past_end = await asyncio.to_thread(fetch, at_follower, 12, RECORDS + 5, rack(follower))
    assert past_end.error_code == OFFSET_OUT_OF_RANGE
    old = await asyncio.to_thread(fetch, at_follower, 10, 0, "")
    assert old.error_code == NOT_LEADER_OR_FOLLOWER


def _consume(servers: str, client_rack: str) -> list[bytes]:
    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "near-readers",
            "client.rack": client_rack,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
        for _ in range(int(DEADLINE_S * 10)):
            message = consumer.poll(0.1)
            if message is not None and message.error() is None:
                values.append(message.value() or b"")
            if len(values) >= RECORDS:
                break
    finally:
        consumer.close()
    return values


async def test_a_consumer_with_client_rack_reads_every_record_from_the_follower_of_its_rack(
    cluster: InprocCluster,
) -> None:
    (leader,) = cluster.leaders(TOPIC)
    follower = next(i for i in cluster.brokers if i != leader)
    served = cluster.brokers[follower].app[METRICS]
    before = served.value("tierlog_bytes_out_total", topic=TOPIC)
    values = await asyncio.to_thread(_consume, bootstrap(cluster), rack(follower))
    assert values == [f"r-{i}".encode() for i in range(RECORDS)]
    assert served.value("tierlog_bytes_out_total", topic=TOPIC) > before
