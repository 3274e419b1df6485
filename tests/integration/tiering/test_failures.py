"""Failure handling of the remote tier against a real moto_server bucket: an outage during produce (the
hot tier grows up to the disk budget, then produce is refused with a retriable 503, and uploads resume
when the store is back), a broker stopped in the middle of an upload (the half-upload is cleaned and the
segment uploaded again), and a flipped byte in a remote segment (detected, never served)."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import (
    BATCHES,
    BINARY_V2,
    WAIT_S,
    broker_of,
    consume_native,
    create_topic,
    post_batch,
    produce,
    record,
    wait_uploaded,
)
from tests.integration.tiering.switchable import SwitchableStore
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.service.web.keys import METRICS
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.layout import manifest_key, segment_key
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.wire.errors import NotFoundError

pytestmark = pytest.mark.integration


async def test_store_outage_grows_the_local_tier_up_to_the_budget_then_uploads_resume(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    switch = SwitchableStore(store)
    client = await start_broker(remote_store=switch, **{"remote.local.disk.budget.bytes": "16000"})
    broker = broker_of(client)
    await create_topic(client, "o", **{"segment.bytes": "2048", "local.retention.bytes": "4096"})
    sent = await produce(client, "o", 0, 50)
    partition = broker.topic("o").partition(0)
    await wait_uploaded(client, "o", partition.log.sealed_segments()[-1].next_offset)
    uploaded_before = partition.remote.remote_log.remote_next_offset if partition.remote else None
    assert uploaded_before is not None

    switch.down = True
    refused = None
    for n in range(50, 2000):
        response = await post_batch(client, "o", n)
        if response.status != 200:
            refused = response
            break
        sent.append(record(n))
    assert refused is not None and refused.status == 503
    body = await refused.json()
    assert body["error_code"] == 50301
    assert "budget" in body["message"]
    assert partition.log_end_offset == len(sent)  # the refused batch was not appended
    assert partition.size_bytes > 12000

    await broker.remote.upload_pass()
    assert client.app[METRICS].value("tierlog_remote_upload_failures_total", topic="o", partition="0") > 0
    await client.app[MAINTENANCE].retention_pass()
    assert partition.local_log_start_offset <= uploaded_before  # nothing unuploaded went
    state = await broker.remote.describe(partition)
    assert state["upload_lag_bytes"] > 10000
    assert state["last_error"] is not None
    assert state["store_retries"] > 0  # each failed request was retried (within remote.retry.deadline.ms)
    assert state["upload_failures"] > 0

    switch.down = False
    await wait_uploaded(client, "o", partition.log.sealed_segments()[-1].next_offset)
    await client.app[MAINTENANCE].retention_pass()
    assert partition.size_bytes <= 4096 + 2048
    stored = await ManifestStore(store).load("o", 0)
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in stored.segments)
    assert (await check(store, ManifestStore(store))).clean  # failed attempts left nothing behind
    response = await post_batch(client, "o", len(sent))
    assert response.status == 200, await response.text()
    sent.append(record(len(sent)))

    records = await consume_native(client, "o", 0)
    assert [r.offset for r in records] == list(range(len(sent)))
    assert [(r.key, r.value) for r in records] == sent


async def test_broker_stopped_in_the_middle_of_an_upload_cleans_up_and_uploads_again(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    switch = SwitchableStore(store)
    switch.hang_suffix = ".indexes"  # the .log object is up, the broker stops before the .indexes
    # One segment per upload batch: otherwise how many segments the hung batch holds depends on how many
    # were sealed when the uploader first ran (two under a loaded CI run), and each of them is put at once.
    client = await start_broker(remote_store=switch, **{"remote.upload.batch.segments": "1"})
    broker = broker_of(client)
    await create_topic(client, "c", **{"segment.bytes": "2048"})
    sent = await produce(client, "c", 0, 60)
    broker.remote.wake()
    async with asyncio.timeout(WAIT_S):
        await switch.hanging.wait()
    manifest = await ManifestStore(store).load("c", 0)
    assert [s.state for s in manifest.segments] == [mf.SegmentState.COPY_STARTED]
    orphan = manifest.segments[0]
    orphan_log = segment_key("c", 0, orphan.base_offset, orphan.segment_uuid, "log")
    await store.head(orphan_log)  # the half-upload is in the bucket, listed only as copy_started
    await client.close()

    switch.hang_suffix = None
    client = await start_broker(remote_store=switch)
    with pytest.raises(NotFoundError):
        await store.head(orphan_log)
    partition = broker_of(client).topic("c").partition(0)
    end = partition.log.sealed_segments()[-1].next_offset
    await wait_uploaded(client, "c", end)
    manifest = await ManifestStore(store).load("c", 0)
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in manifest.segments)
    assert orphan.segment_uuid not in {s.segment_uuid for s in manifest.segments}
    assert manifest.segments[0].base_offset == 0
    assert (await check(store, ManifestStore(store))).clean
    assert client.app[METRICS].value("tierlog_remote_cleaned_segments_total", topic="c", partition="0") == 1
    records = await consume_native(client, "c", 0)
    assert [(r.key, r.value) for r in records] == sent


async def test_a_flipped_byte_in_a_remote_segment_is_detected_and_never_served(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    client = await start_broker()
    broker = broker_of(client)
    await create_topic(client, "x", **{"segment.bytes": "2048", "local.retention.bytes": "2048"})
    sent = await produce(client, "x", 0, 100)
    partition = broker.topic("x").partition(0)
    await wait_uploaded(client, "x", partition.log.sealed_segments()[-1].next_offset)
    await client.app[MAINTENANCE].retention_pass()
    readable = mf.readable_segments(await ManifestStore(store).load("x", 0))
    assert partition.local_log_start_offset > readable[1].base_offset
    first = readable[0]
    key = segment_key("x", 0, first.base_offset, first.segment_uuid, "log")
    data = bytearray(await store.get(key))
    data[100] ^= 0x01
    await store.put(key, bytes(data))

    native = await client.get(
        "/native/v1/topics/x/partitions/0/batches", params={"offset": "0"}, headers={"Accept": BATCHES}
    )
    assert native.status == 500
    assert (await native.json())["error_code"] == 50002
    rest = await client.get(
        "/topics/x/partitions/0/records",
        params={"offset": "0", "timeout": "0"},
        headers={"Accept": BINARY_V2},
    )
    assert rest.status == 500
    assert (await rest.json(content_type=None))["error_code"] == 50002

    intact = await consume_native(client, "x", readable[1].base_offset)
    assert [(r.key, r.value) for r in intact] == sent[readable[1].base_offset :]


async def test_an_undecodable_manifest_is_recovered_and_every_record_stays_readable(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    client = await start_broker()
    broker = broker_of(client)
    await create_topic(client, "m", **{"segment.bytes": "2048", "local.retention.bytes": "2048"})
    sent = await produce(client, "m", 0, 60)
    await wait_uploaded(client, "m", broker.topic("m").partition(0).log.sealed_segments()[-1].next_offset)
    await client.close()
    newest = (await ManifestStore(store).versions("m", 0))[-1]
    await store.put(manifest_key("m", 0, newest), b'{"format":1,"crc32c":0}\n')

    client = await start_broker()
    partition = broker_of(client).topic("m").partition(0)
    await client.app[MAINTENANCE].retention_pass()
    assert partition.log_start_offset == 0
    assert partition.local_log_start_offset > 0  # the recovered, stored manifest covers the old segments
    records = await consume_native(client, "m", 0)
    assert [(r.key, r.value) for r in records] == sent
    assert (await ManifestStore(store).load("m", 0)).version == newest + 1
    assert (await check(store, ManifestStore(store))).clean


async def test_the_disk_budget_only_refuses_while_sealed_data_waits_for_upload(
    start_broker: StartBroker, store: ObjectStore
) -> None:
    switch = SwitchableStore(store)
    client = await start_broker(remote_store=switch, **{"remote.local.disk.budget.bytes": "1000"})
    broker = broker_of(client)
    await create_topic(client, "b")
    await produce(client, "b", 0, 50)  # far over the budget, all in the active segment: nothing to upload
    partition = broker.topic("b").partition(0)
    assert partition.size_bytes > 1000

    switch.down = True
    await asyncio.to_thread(partition.log.roll)
    refused = await post_batch(client, "b", 50)
    assert refused.status == 503
    assert (await refused.json())["error_code"] == 50301
    assert partition.log_end_offset == 50

    switch.down = False
    await wait_uploaded(client, "b", 50)
    accepted = await post_batch(client, "b", 50)  # still over the budget, but nothing sealed is behind
    assert accepted.status == 200, await accepted.text()
    assert client.app[METRICS].value("tierlog_produce_refused_disk_budget_total") == 1
