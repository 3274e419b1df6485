"""A damaged newest manifest (a flipped byte: bad CRC; or invalid UTF-8) against a real broker and a real
store (a moto_server bucket, and a local directory): after a restart the broker falls back to the newest
valid version, re-derives the segments that version lacks from the segment objects, stores a repaired
version, and keeps the log start offset, every record and the uploads; describe and the metrics say what
happened. Data that cannot be re-derived answers 500 / 50002 instead of being skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.broker import Client
from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import (
    BATCHES,
    broker_of,
    consume_native,
    consume_rest,
    create_topic,
    produce,
    wait_uploaded,
)
from tests.integration.tiering.switchable import SwitchableStore
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.service.web.keys import METRICS
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import manifest_key, segment_key
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.wire.errors import CorruptRecordError, UnauthorizedError

pytestmark = pytest.mark.integration

TOPIC = "m"


@pytest.fixture(params=["s3", "local"])
async def backend(
    request: pytest.FixtureRequest, store: ObjectStore, tmp_path: Path
) -> AsyncIterator[ObjectStore]:
    """The store the broker uploads to and the test damages: the moto bucket, or a local directory."""
    if request.param == "s3":
        yield store
        return
    local = LocalObjectStore(tmp_path / "remote-dir", fsync=False)
    yield local
    await local.close()


def damage(data: bytes, how: str) -> bytes:
    if how == "crc":  # still valid JSON, one size changed: only the CRC can tell
        at = data.index(b'"size_bytes":') + len(b'"size_bytes":')
        return data[:at] + (b"7" if data[at : at + 1] != b"7" else b"8") + data[at + 1 :]
    return data[:10] + b"\xff\xfe\xc3" + data[13:]  # invalid UTF-8 in the JSON


async def _start(start_broker: StartBroker, backend: ObjectStore) -> Client:
    # the broker closes its store at shutdown: the wrapper leaves the test's backend open across restarts;
    # one segment per upload batch, so each upload is its own started/finished pair of manifest versions
    # whatever the uploader's timing (the tests count versions back from the newest)
    return await start_broker(remote_store=SwitchableStore(backend), **{"remote.upload.batch.segments": "1"})


async def _uploaded_topic(
    start_broker: StartBroker, backend: ObjectStore
) -> tuple[Client, list[tuple[bytes, bytes]]]:
    client = await _start(start_broker, backend)
    await create_topic(client, TOPIC, **{"segment.bytes": "2048", "local.retention.bytes": "2048"})
    sent = await produce(client, TOPIC, 0, 100)
    partition = broker_of(client).topic(TOPIC).partition(0)
    await wait_uploaded(client, TOPIC, partition.log.sealed_segments()[-1].next_offset)
    await client.app[MAINTENANCE].retention_pass()
    assert partition.local_log_start_offset > 0
    return client, sent


@pytest.mark.parametrize("how", ["crc", "utf8"])
async def test_damaged_newest_manifest_is_recovered_and_nothing_is_hidden(
    start_broker: StartBroker, backend: ObjectStore, how: str
) -> None:
    client, sent = await _uploaded_topic(start_broker, backend)
    partition = broker_of(client).topic(TOPIC).partition(0)
    remote = partition.remote
    assert remote is not None
    log_start, remote_next = partition.log_start_offset, remote.remote_log.remote_next_offset
    local_start = partition.local_log_start_offset
    newest = (await ManifestStore(backend).load(TOPIC, 0)).version
    await client.close()
    # the newest version is the one that marked the last segment copy_finished: the version before it
    # lists that segment only as copy_started, so recovering it takes its objects
    key = manifest_key(TOPIC, 0, newest)
    await backend.put(key, damage(await backend.get(key), how))
    with pytest.raises(CorruptRecordError):
        await ManifestStore(backend).load(TOPIC, 0)

    client = await _start(start_broker, backend)
    broker = broker_of(client)
    partition = broker.topic(TOPIC).partition(0)
    remote = partition.remote
    assert remote is not None
    assert partition.log_start_offset == log_start == 0
    assert remote.remote_log.remote_next_offset == remote_next
    assert partition.local_log_start_offset == local_start
    state = await broker.remote.describe(partition)
    assert state["manifest_recovery"] is not None and f"{newest} (" in state["manifest_recovery"]
    assert ("checksum" if how == "crc" else "UTF-8") in state["manifest_recovery"]
    assert state["last_error"] == state["manifest_recovery"]
    metrics = client.app[METRICS]
    assert metrics.value("tierlog_remote_manifest_recoveries_total", topic=TOPIC, partition="0") == 1
    assert metrics.value("tierlog_remote_manifest_rederived_segments_total", topic=TOPIC, partition="0") >= 1
    stored = await ManifestStore(backend).load(TOPIC, 0)  # a valid version is on top again
    assert stored.version == newest + 1
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in stored.segments)

    records = await consume_native(client, TOPIC, 0)
    assert [(r.key, r.value) for r in records] == sent
    rest = await consume_rest(client, TOPIC, partition.log_start_offset)  # "earliest" over REST v2
    assert [(key, value) for _, key, value in rest] == sent

    sent += await produce(client, TOPIC, 100, 60)  # uploads continue on top of the repaired version
    await wait_uploaded(client, TOPIC, partition.log.sealed_segments()[-1].next_offset)
    assert (await broker.remote.describe(partition))["last_error"] is None
    records = await consume_native(client, TOPIC, 0)
    assert [(r.key, r.value) for r in records] == sent


async def _fetch_status(client: Client, offset: int) -> tuple[int, int | None]:
    response = await client.get(
        f"/native/v1/topics/{TOPIC}/partitions/0/batches",
        params={"offset": str(offset), "max_bytes": "4096"},
        headers={"Accept": BATCHES},
    )
    if response.status == 200:
        await response.read()
        return 200, None
    return response.status, (await response.json())["error_code"]


async def test_data_that_cannot_be_rederived_answers_corrupt_and_the_log_start_stays(
    start_broker: StartBroker, backend: ObjectStore
) -> None:
    client, sent = await _uploaded_topic(start_broker, backend)
    partition = broker_of(client).topic(TOPIC).partition(0)
    local_start = partition.local_log_start_offset
    manifest = await ManifestStore(backend).load(TOPIC, 0)
    await client.close()
    readable = mf.readable_segments(manifest)
    lost = [s for s in readable if s.last_offset < local_start][-1]  # its records live only in the bucket
    assert lost.base_offset > 0 and lost is readable[-2]
    # the newest three versions (finished/started of the last upload, finished of ``lost``) are damaged:
    # the newest valid one lists ``lost`` as copy_started, and its .log object is gone too
    for version in range(manifest.version - 2, manifest.version + 1):
        key = manifest_key(TOPIC, 0, version)
        await backend.put(key, damage(await backend.get(key), "crc"))
    await backend.delete(segment_key(TOPIC, 0, lost.base_offset, lost.segment_uuid, "log"))

    client = await _start(start_broker, backend)
    broker = broker_of(client)
    partition = broker.topic(TOPIC).partition(0)
    assert partition.log_start_offset == 0
    assert partition.local_log_start_offset == local_start
    assert await _fetch_status(client, lost.base_offset) == (500, 50002)
    assert await _fetch_status(client, local_start - 1) == (500, 50002)
    assert await _fetch_status(client, 0) == (200, None)  # what precedes the loss still reads back
    assert await _fetch_status(client, lost.base_offset - 1) == (200, None)

    # uploads go on past the hole; the hole still answers corrupt data, never the next segment's records
    sent += await produce(client, TOPIC, 100, 60)
    await wait_uploaded(client, TOPIC, partition.log.sealed_segments()[-1].next_offset)
    assert await _fetch_status(client, lost.base_offset) == (500, 50002)
    assert partition.log_start_offset == 0


class RefusingManifestWrites(SwitchableStore):
    """The broker's store, with conditional writes (manifest commits) refused while ``refuse`` is set,
    as a read-only credential would."""

    refuse = True

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        if self.refuse:
            raise UnauthorizedError("test: manifest writes are refused")
        return await super().put_if_absent(key, data)


async def test_a_recovered_manifest_that_cannot_be_stored_is_served_and_reported(
    start_broker: StartBroker, backend: ObjectStore
) -> None:
    client, sent = await _uploaded_topic(start_broker, backend)
    local_start = broker_of(client).topic(TOPIC).partition(0).local_log_start_offset
    newest = (await ManifestStore(backend).load(TOPIC, 0)).version
    await client.close()
    key = manifest_key(TOPIC, 0, newest)
    await backend.put(key, damage(await backend.get(key), "utf8"))

    refusing = RefusingManifestWrites(backend)
    client = await start_broker(remote_store=refusing)
    broker = broker_of(client)
    partition = broker.topic(TOPIC).partition(0)
    assert partition.log_start_offset == 0
    records = await consume_native(client, TOPIC, 0)  # the recovered state is served meanwhile
    assert [(r.key, r.value) for r in records] == sent
    await client.app[MAINTENANCE].retention_pass()
    assert partition.local_log_start_offset == local_start  # nothing more is trimmed on an unstored manifest
    ready = await client.get("/ready")
    assert ready.status == 200
    problems = (await ready.json())["remote_tier_problems"]
    assert [(p["topic"], p["partition"]) for p in problems] == [(TOPIC, 0)]
    assert "storing the recovered manifest failed" in problems[0]["reason"]
    state = await broker.remote.describe(partition)
    assert "storing the recovered manifest failed" in state["last_error"]
    metrics_text = await (await client.get("/metrics")).text()
    assert f'tierlog_remote_uploads_blocked{{partition="0",topic="{TOPIC}"}} 1' in metrics_text

    refusing.refuse = False
    sent += await produce(client, TOPIC, 100, 40)
    await wait_uploaded(client, TOPIC, partition.log.sealed_segments()[-1].next_offset)
    assert "remote_tier_problems" not in await (await client.get("/ready")).json()
    assert (await ManifestStore(backend).load(TOPIC, 0)).version > newest
    records = await consume_native(client, TOPIC, 0)
    assert [(r.key, r.value) for r in records] == sent


async def test_a_manifest_damaged_while_the_broker_runs_is_recovered_by_the_next_upload_pass(
    start_broker: StartBroker, backend: ObjectStore
) -> None:
    client, sent = await _uploaded_topic(start_broker, backend)
    broker = broker_of(client)
    partition = broker.topic(TOPIC).partition(0)
    newest = (await ManifestStore(backend).load(TOPIC, 0)).version
    key = manifest_key(TOPIC, 0, newest)
    await backend.put(key, damage(await backend.get(key), "crc"))

    sent += await produce(client, TOPIC, 100, 60)  # the first upload attempt meets the damaged version
    await wait_uploaded(client, TOPIC, partition.log.sealed_segments()[-1].next_offset)
    assert partition.log_start_offset == 0
    state = await broker.remote.describe(partition)
    assert state["manifest_recovery"] is not None and f"{newest} (" in state["manifest_recovery"]
    assert (
        client.app[METRICS].value("tierlog_remote_manifest_recoveries_total", topic=TOPIC, partition="0") == 1
    )
    assert (await ManifestStore(backend).load(TOPIC, 0)).version > newest
    records = await consume_native(client, TOPIC, 0)
    assert [(r.key, r.value) for r in records] == sent


async def test_deleting_a_topic_with_a_damaged_manifest_deletes_all_its_remote_data(
    start_broker: StartBroker, backend: ObjectStore
) -> None:
    client, _ = await _uploaded_topic(start_broker, backend)
    broker = broker_of(client)
    newest = (await ManifestStore(backend).load(TOPIC, 0)).version
    key = manifest_key(TOPIC, 0, newest)
    await backend.put(key, damage(await backend.get(key), "utf8"))
    assert [info.key async for info in backend.list(f"{TOPIC}/")] != []

    await broker.delete_topic(TOPIC)
    await broker.background.drain()
    assert [info.key async for info in backend.list(f"{TOPIC}/")] == []
