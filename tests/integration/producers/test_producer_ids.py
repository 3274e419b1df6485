"""``POST /native/v1/producers`` on real broker apps (design note 0011, "Producer ids"): new ids, epoch
bumps, blocks that survive restarts, and ids handed out by two brokers of one cluster."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import Brokers
from tests.integration.cluster.inproc import InprocCluster
from tests.integration.producers.conftest import PRODUCERS, init_producer
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.topics.data_dir import CLUSTER_METADATA_FILE, BrokerState
from tierlog.service.topics.producer_ids import BLOCK_SIZE, MAX_EPOCH, NEXT_BLOCK_KEY, ProducerIdManager


async def test_new_ids_are_unique_at_epoch_zero(brokers: Brokers) -> None:
    running = await brokers.start()
    got = [await init_producer(running.client) for _ in range(BLOCK_SIZE + 5)]  # crosses a block
    assert {epoch for _, epoch in got} == {0}
    ids = [pid for pid, _ in got]
    assert len(set(ids)) == len(ids)
    assert min(ids) >= 0
    # an empty JSON object asks for a new id too
    pid, epoch = await init_producer(running.client, {})
    assert epoch == 0 and pid not in ids


async def test_concurrent_requests_get_distinct_ids(brokers: Brokers) -> None:
    running = await brokers.start()
    got = await asyncio.gather(*(init_producer(running.client) for _ in range(50)))
    assert len({pid for pid, _ in got}) == 50


async def test_restart_takes_a_new_block_and_never_reuses_ids(brokers: Brokers, data_dir: Path) -> None:
    first = await brokers.start()
    before = [pid for pid, _ in [await init_producer(first.client) for _ in range(3)]]
    await first.stop()
    doc = json.loads((data_dir / CLUSTER_METADATA_FILE).read_text())
    stored = next(item["value"] for item in doc["keys"] if item["key"] == NEXT_BLOCK_KEY)
    next_block = json.loads(base64.b64decode(stored))["next"]
    assert next_block >= max(before) + 1

    second = await brokers.start()
    after = [pid for pid, _ in [await init_producer(second.client) for _ in range(3)]]
    assert min(after) >= next_block  # the rest of the old block is never used
    assert min(after) % BLOCK_SIZE == 0
    # an id issued before the restart is still known: its epoch can be bumped
    bumped = await init_producer(second.client, {"producer_id": before[0], "producer_epoch": 0})
    assert bumped == (before[0], 1)


async def test_bump_raises_the_epoch_by_one(brokers: Brokers) -> None:
    running = await brokers.start()
    pid, epoch = await init_producer(running.client)
    assert await init_producer(running.client, {"producer_id": pid, "producer_epoch": epoch}) == (pid, 1)
    # the bump is not idempotent and not checked against the current epoch: the partitions fence by epoch
    assert await init_producer(running.client, {"producer_id": pid, "producer_epoch": 1}) == (pid, 2)
    assert await init_producer(running.client, {"producer_id": pid, "producer_epoch": 7}) == (pid, 8)


async def test_bump_of_the_last_epoch_gives_a_new_id(brokers: Brokers) -> None:
    running = await brokers.start()
    pid, _ = await init_producer(running.client)
    new_pid, epoch = await init_producer(running.client, {"producer_id": pid, "producer_epoch": MAX_EPOCH})
    assert epoch == 0
    assert new_pid != pid


async def test_bump_of_an_id_never_issued_is_404(brokers: Brokers) -> None:
    running = await brokers.start()
    pid, _ = await init_producer(running.client)
    unknown = (pid // BLOCK_SIZE + 1) * BLOCK_SIZE + 10**6
    resp = await running.client.post(PRODUCERS, json={"producer_id": unknown, "producer_epoch": 0})
    assert resp.status == 404
    assert resp.content_type == "application/json"
    doc = await resp.json()
    assert doc["error_code"] == 40404
    assert str(unknown) in doc["message"]


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        (b"{not json", "application/json", 400, 40001),
        (b"[1, 2]", "application/json", 400, 40001),
        (b'{"producer_id": 1}', "application/json", 400, 40001),
        (b'{"producer_id": 1, "producer_epoch": 0, "x": 1}', "application/json", 400, 40001),
        (b'{"producer_id": "1", "producer_epoch": 0}', "application/json", 400, 40001),
        (b'{"producer_id": true, "producer_epoch": 0}', "application/json", 400, 40001),
        (b'{"producer_id": -1, "producer_epoch": 0}', "application/json", 422, 42202),
        (b'{"producer_id": 0, "producer_epoch": 32768}', "application/json", 422, 42202),
        (b'{"producer_id": 0, "producer_epoch": -1}', "application/json", 422, 42202),
        (b'{"producer_id": 9223372036854775808, "producer_epoch": 0}', "application/json", 422, 42202),
        (b'{"producer_id": 0, "producer_epoch": 0}', "text/plain", 415, 41501),
    ],
)
async def test_bad_bodies_are_refused_with_json_errors(
    brokers: Brokers, body: bytes, content_type: str, status: int, code: int
) -> None:
    running = await brokers.start()
    resp = await running.client.post(PRODUCERS, data=body, headers={"Content-Type": content_type})
    assert resp.status == status, await resp.text()
    doc: dict[str, Any] = await resp.json()
    assert doc["error_code"] == code


async def test_an_answer_other_than_json_is_refused(brokers: Brokers) -> None:
    running = await brokers.start()
    resp = await running.client.post(PRODUCERS, headers={"Accept": "application/octet-stream"})
    assert resp.status == 406
    assert (await resp.json())["error_code"] == 40601


def test_state_files_without_the_block_still_load() -> None:
    doc = BrokerState(cluster_id="c", next_producer_id_block=3000).to_json()
    assert BrokerState.from_json(doc).next_producer_id_block == 3000
    del doc["next_producer_id_block"]
    assert BrokerState.from_json(doc).next_producer_id_block == 0


async def test_two_brokers_of_a_cluster_hand_out_disjoint_ids(tmp_path: Path) -> None:
    async with InprocCluster(tmp_path) as cluster:
        b1, b2 = await cluster.start(2)
        got1 = await asyncio.gather(*(init_producer(b1.client) for _ in range(30)))
        got2 = await asyncio.gather(*(init_producer(b2.client) for _ in range(30)))
        ids1, ids2 = {pid for pid, _ in got1}, {pid for pid, _ in got2}
        assert len(ids1) == 30 and len(ids2) == 30
        assert not ids1 & ids2
        assert cluster.store is not None
        stored = await cluster.store.get(NEXT_BLOCK_KEY)
        assert stored is not None
        assert json.loads(stored.value) == {"next": 2 * BLOCK_SIZE}
        # any broker bumps an id another one issued (it reads the store for the latest block)
        pid = min(ids1)
        assert await init_producer(b2.client, {"producer_id": pid, "producer_epoch": 0}) == (pid, 1)
        # a restarted broker takes a new block
        await cluster.stop_broker(2)
        b2 = await cluster.start_broker(2)
        pid3, _ = await init_producer(b2.client)
        assert pid3 >= 2 * BLOCK_SIZE
        unknown = 10 * BLOCK_SIZE
        resp = await b1.client.post(PRODUCERS, json={"producer_id": unknown, "producer_epoch": 0})
        assert resp.status == 404
        assert (await resp.json())["error_code"] == 40404


async def test_concurrent_block_takers_on_one_store_never_overlap() -> None:
    store = LocalMetadataStore()
    await store.start()
    try:
        managers = [ProducerIdManager.cluster(store) for _ in range(4)]
        # each manager asks for more than a block, so blocks are taken while the others take theirs
        results = await asyncio.gather(
            *(asyncio.gather(*(m.new_id() for _ in range(BLOCK_SIZE + 1))) for m in managers)
        )
        ids = [pid for result in results for pid, _ in result]
        assert len(ids) == len(set(ids)) == 4 * (BLOCK_SIZE + 1)
        stored = await store.get(NEXT_BLOCK_KEY)
        assert stored is not None
        assert json.loads(stored.value) == {"next": 8 * BLOCK_SIZE}
        assert all(m.issued_below() <= 8 * BLOCK_SIZE for m in managers)
    finally:
        await store.close()
