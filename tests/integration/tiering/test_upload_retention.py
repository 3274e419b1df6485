"""Uploads and retention across tiers against a real moto_server bucket: sealed segments go up in order,
the hot tier is trimmed only behind confirmed uploads, whole-log retention deletes remote segments, idle
partitions roll, and every record comes back exactly from offset 0 over both fetch paths."""

from __future__ import annotations

import pytest

from tests.integration.broker import START_MS
from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import (
    broker_of,
    consume_native,
    consume_rest,
    create_topic,
    produce,
    wait_uploaded,
)
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.service.web.keys import METRICS
from tierlog.tiering.log import ManualClock
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.layout import partition_prefix
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore

pytestmark = pytest.mark.integration


async def test_sealed_segments_upload_then_local_tier_trims_and_every_record_reads_back(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    client = await start_broker()
    broker = broker_of(client)
    await create_topic(client, "t", **{"segment.bytes": "2048", "local.retention.bytes": "4096"})
    sent = await produce(client, "t", 0, 300)
    partition = broker.topic("t").partition(0)
    sealed = partition.log.sealed_segments()
    assert len(sealed) >= 8
    await wait_uploaded(client, "t", sealed[-1].next_offset)

    manifest = await ManifestStore(store).load("t", 0)
    finished = mf.readable_segments(manifest)
    assert [(s.base_offset, s.last_offset) for s in finished] == [
        (s.base_offset, s.next_offset - 1) for s in sealed
    ]
    assert [s.size_bytes for s in finished] == [s.size_bytes for s in sealed]
    keys = {info.key async for info in store.list(partition_prefix("t", 0))}
    for segment in finished:  # every upload has its two objects, the indexes packed
        base = f"t/0/{segment.base_offset:020d}-{segment.segment_uuid}"
        assert {f"{base}.log", f"{base}.indexes"} <= keys and segment.indexes is not None
        assert f"{base}.index" not in keys

    deleted = await client.app[MAINTENANCE].retention_pass()
    assert deleted > 0
    local_start = partition.local_log_start_offset
    assert local_start > 0
    assert local_start <= manifest.segments[-1].last_offset + 1  # nothing local went before its upload
    assert partition.size_bytes <= 4096 + 2048
    assert partition.log_start_offset == 0  # the remote tier's start

    for timestamp, expected in ((START_MS + 155, (150, START_MS + 159)), (START_MS - 1, (0, START_MS + 9))):
        response = await client.get(
            "/native/v1/topics/t/partitions/0/offsets",
            params={"timestamp": str(timestamp)},
            headers={"Accept": "application/json"},
        )
        found = await response.json()
        assert (found["offset"], found["timestamp"]) == expected  # batch granularity, from the bucket
    assert local_start > 160

    records = await consume_native(client, "t", 0)
    assert [r.offset for r in records] == list(range(300))
    assert [(r.key, r.value) for r in records] == sent
    rest = await consume_rest(client, "t", 0)
    assert [(o, k, v) for o, k, v in rest] == [(n, k, v) for n, (k, v) in enumerate(sent)]

    text = client.app[METRICS].render()
    assert 'tierlog_remote_uploaded_segments_total{partition="0",topic="t"}' in text
    lag = [
        line for line in text.splitlines() if line.startswith('tierlog_remote_upload_lag_bytes{partition="0"')
    ]
    active_bytes = partition.log.segments()[-1].size_bytes
    assert lag == [f'tierlog_remote_upload_lag_bytes{{partition="0",topic="t"}} {active_bytes}']
    assert 'tierlog_remote_reader_stat{stat="cache_misses"}' in text
    fetched = [line for line in text.splitlines() if line.startswith("tierlog_remote_fetched_bytes ")]
    assert len(fetched) == 1 and float(fetched[0].split()[1]) > 0
    assert any(line.startswith("tierlog_remote_cache_misses ") for line in text.splitlines())
    assert 'tierlog_remote_store_requests{op="put_file"}' in text
    assert f'tierlog_remote_upload_seconds_count{{topic="t"}} {len(sealed)}' in text
    assert client.app[METRICS].value("tierlog_remote_read_bytes_total", topic="t") > 0
    assert client.app[METRICS].value(
        "tierlog_remote_uploaded_segments_total", topic="t", partition="0"
    ) == len(sealed)


async def test_both_index_layouts_upload_and_read_back_through_one_broker(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    # A rolling upgrade: separate index objects first (remote.upload.indexes.packed=false), then packed.
    client = await start_broker(**{"remote.upload.indexes.packed": "false"})
    config = {"segment.bytes": "2048", "local.retention.bytes": "2048", "index.interval.bytes": "1"}
    await create_topic(client, "m", **config)  # an index entry per batch
    sent = await produce(client, "m", 0, 120)
    partition = broker_of(client).topic("m").partition(0)
    await wait_uploaded(client, "m", partition.log.sealed_segments()[-1].next_offset)
    older = len(mf.readable_segments(await ManifestStore(store).load("m", 0)))
    await client.close()

    client = await start_broker()
    sent += await produce(client, "m", 120, 120)
    partition = broker_of(client).topic("m").partition(0)
    await wait_uploaded(client, "m", partition.log.sealed_segments()[-1].next_offset)
    assert await client.app[MAINTENANCE].retention_pass() > 0
    assert partition.local_log_start_offset >= 200  # nearly everything is read from the bucket

    finished = mf.readable_segments(await ManifestStore(store).load("m", 0))
    layouts = [s.indexes is not None for s in finished]
    assert older > 0 and layouts == [False] * older + [True] * (len(finished) - older)
    keys = {info.key async for info in store.list(partition_prefix("m", 0))}
    for segment in finished:
        base = f"m/0/{segment.base_offset:020d}-{segment.segment_uuid}"
        wanted = {".indexes"} if segment.indexes else {".index", ".timeindex"}
        assert {base + suffix for suffix in wanted | {".log"}} <= keys
    records = await consume_native(client, "m", 0)
    assert [r.offset for r in records] == list(range(240))
    assert [(r.key, r.value) for r in records] == sent
    remote_only = [s for s in finished if s.last_offset < partition.local_log_start_offset]
    older_one = next(s for s in remote_only if s.indexes is None and s.base_offset > 0)
    packed_one = next(s for s in remote_only if s.indexes is not None)
    for segment in (older_one, packed_one):  # one of each layout, found through both its indexes
        timestamp = START_MS + segment.last_offset  # the second batch's: its index entries lead there
        response = await client.get(
            "/native/v1/topics/m/partitions/0/offsets",
            params={"timestamp": str(timestamp)},
            headers={"Accept": "application/json"},
        )
        found = await response.json()
        assert found["offset"] == segment.last_offset - 9  # the batch's base offset (10 per batch)
    stats = broker_of(client).remote.reader().stats()
    assert stats["index_loads"] == 4 and stats["index_missing"] == stats["index_invalid"] == 0
    assert (await check(store, ManifestStore(store))).clean


async def test_whole_log_retention_deletes_remote_segments_and_raises_the_log_start(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    client = await start_broker()
    broker = broker_of(client)
    configs = {"segment.bytes": "2048", "local.retention.bytes": "4096", "retention.bytes": "10000"}
    await create_topic(client, "r", **configs)
    await produce(client, "r", 0, 300)
    partition = broker.topic("r").partition(0)
    await wait_uploaded(client, "r", partition.log.sealed_segments()[-1].next_offset)
    before = {info.key async for info in store.list("r/0/") if info.key.endswith(".log")}

    await client.app[MAINTENANCE].retention_pass()

    manifest = await ManifestStore(store).load("r", 0)
    readable = mf.readable_segments(manifest)
    assert manifest.log_start_offset > 0
    assert readable[0].base_offset == manifest.log_start_offset
    assert partition.log_start_offset == manifest.log_start_offset
    after = {info.key async for info in store.list("r/0/") if info.key.endswith(".log")}
    assert after < before
    assert len(after) == len(readable)  # deleted segments' objects are gone, entries pruned
    remote_end = readable[-1].last_offset
    local_only = sum(s.size_bytes for s in partition.log.segments() if s.base_offset > remote_end)
    assert sum(s.size_bytes for s in readable) + local_only < 10000 + readable[0].size_bytes

    response = await client.get(
        "/native/v1/topics/r/partitions/0/batches",
        params={"offset": "0"},
        headers={"Accept": "application/vnd.tierlog.batches"},
    )
    assert response.status == 416
    assert int(response.headers["Tierlog-Log-Start-Offset"]) == manifest.log_start_offset
    records = await consume_native(client, "r", manifest.log_start_offset)
    assert [r.offset for r in records] == list(range(manifest.log_start_offset, 300))


async def test_an_idle_partition_rolls_after_the_max_upload_interval(
    start_broker: StartBroker, clock: ManualClock
) -> None:
    client = await start_broker(**{"remote.max.upload.interval.ms": "60000"})
    broker = broker_of(client)
    await create_topic(client, "idle")
    await produce(client, "idle", 0, 5)
    remote = broker.remote.remote_of("idle", 0)
    assert remote is not None
    await broker.remote.upload_pass()
    assert remote.remote_log.remote_next_offset is None  # too young to roll
    lag = await broker.remote.describe(broker.topic("idle").partition(0))
    assert lag["upload_lag_bytes"] > 0

    clock.advance(60_001)
    await wait_uploaded(client, "idle", 5)

    described = await client.get(
        f"/v3/clusters/{broker.cluster_id}/topics/idle/partitions/0", headers={"Accept": "application/json"}
    )
    body = await described.json()
    tiered = body["tiered_storage"]
    assert tiered["enabled"] is True
    assert tiered["remote_next_offset"] == 5
    assert tiered["upload_lag_bytes"] == 0
    assert tiered["uploaded_segments"] == 1
