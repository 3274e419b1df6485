"""Restore onto an empty data directory, topic deletion removing remote data, and the leak check, against
a real moto_server bucket."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest

from tests.integration.remote.servers import S3Server
from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import (
    broker_of,
    consume_native,
    consume_rest,
    create_topic,
    post_batch,
    produce,
    record,
    wait_uploaded,
)
from tierlog.service.remote import cli as tiering_cli
from tierlog.tiering.log import ManualClock
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import manifest_key, segment_key
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore

pytestmark = pytest.mark.integration


async def _upload_everything(
    start_broker: StartBroker, clock: ManualClock, topic: str, count: int
) -> list[tuple[bytes, bytes]]:
    client = await start_broker(**{"remote.max.upload.interval.ms": "1000"})
    await create_topic(client, topic, **{"segment.bytes": "2048", "local.retention.bytes": "2048"})
    sent = await produce(client, topic, 0, count)
    clock.advance(1001)  # the idle roll seals the active segment too
    await wait_uploaded(client, topic, count)
    await client.close()
    return sent


def _cli(*args: str) -> int:
    return tiering_cli.main(list(args))


async def test_restore_onto_an_empty_data_directory(
    start_broker: StartBroker,
    clock: ManualClock,
    tmp_path: Path,
    remote_uri: str,
    moto_server: S3Server,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sent = await _upload_everything(start_broker, clock, "orders", 120)
    fresh = tmp_path / "new-machine"
    code = await asyncio.to_thread(
        _cli, "restore", "--data-dir", str(fresh), "--remote-uri", remote_uri,
        "--s3-endpoint-url", moto_server.endpoint_url,
    )  # fmt: skip
    assert code == 0
    assert "restored topic orders (1 partitions)" in capsys.readouterr().out

    client = await start_broker(**{"data.dir": str(fresh)})
    partition = broker_of(client).topic("orders").partition(0)
    assert (partition.log_start_offset, partition.log_end_offset) == (0, 120)
    assert partition.local_log_start_offset == 120
    records = await consume_native(client, "orders", 0)
    assert [(r.offset, r.key, r.value) for r in records] == [(n, k, v) for n, (k, v) in enumerate(sent)]
    response = await post_batch(client, "orders", 120)
    assert response.status == 200
    assert (await response.json())["base_offset"] == 120
    rest = await consume_rest(client, "orders", 115)
    assert [o for o, _, _ in rest] == list(range(115, 121))
    assert rest[-1][1:] == record(120)


async def test_restore_on_start_setting_recreates_missing_topics(
    start_broker: StartBroker, clock: ManualClock, tmp_path: Path
) -> None:
    sent = await _upload_everything(start_broker, clock, "events", 40)
    client = await start_broker(**{"data.dir": str(tmp_path / "other"), "remote.restore.on.start": "true"})
    broker = broker_of(client)
    assert broker.topic_names() == ["events"]
    assert broker.topic("events").configs()["remote.storage.enable"] == "true"
    records = await consume_native(client, "events", 0)
    assert [(r.key, r.value) for r in records] == sent


async def test_deleting_a_topic_deletes_its_remote_data_and_check_reports_leaks(
    start_broker: StartBroker,
    store: ObjectStore,
    data_dir: Path,
    remote_uri: str,
    moto_server: S3Server,
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ("--remote-uri", remote_uri, "--s3-endpoint-url", moto_server.endpoint_url)
    client = await start_broker()
    broker = broker_of(client)
    await create_topic(client, "gone", **{"segment.bytes": "2048"})
    await create_topic(client, "kept", **{"segment.bytes": "2048"})
    await produce(client, "gone", 0, 60)
    await produce(client, "kept", 0, 60)
    for topic in ("gone", "kept"):
        await wait_uploaded(
            client, topic, broker.topic(topic).partition(0).log.sealed_segments()[-1].next_offset
        )
    assert await asyncio.to_thread(_cli, "check", *args) == 0
    assert capsys.readouterr().out.strip().endswith("clean")

    stray = segment_key("kept", 0, 5, uuid.uuid4(), "log")
    await store.put(stray, b"an upload nobody recorded")
    await store.put("kept/notes.txt", b"not part of the layout")
    assert await asyncio.to_thread(_cli, "check", "--json", *args) == 1
    report = json.loads(capsys.readouterr().out)
    assert [leak["key"] for leak in report["leaks"]] == ["kept/0/" + stray.split("/")[-1], "kept/notes.txt"]
    assert report["missing"] == [] and report["clean"] is False

    assert await asyncio.to_thread(_cli, "check", "--delete", *args) == 1
    assert await asyncio.to_thread(_cli, "check", *args) == 0
    capsys.readouterr()

    await broker.delete_topic("gone")
    await broker.background.drain()
    assert [info.key async for info in store.list("gone/")] == []
    assert [info.key async for info in store.list("kept/")] != []
    assert await asyncio.to_thread(_cli, "check", *args) == 0
    assert "1 partitions" in capsys.readouterr().out

    # remains of a topic this broker does not have: only a check that knows the topics can tell
    await ManifestStore(store).update("ghost", 0, lambda m: mf.set_log_start_offset(m, 1))
    assert await asyncio.to_thread(_cli, "check", *args) == 0
    with_topics = ("--data-dir", str(data_dir), *args)
    capsys.readouterr()
    assert await asyncio.to_thread(_cli, "check", "--json", *with_topics) == 1
    leaks = [leak["key"] for leak in json.loads(capsys.readouterr().out)["leaks"]]
    assert leaks == [manifest_key("ghost", 0, 1)]


def test_check_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert tiering_cli.main(["check"]) == 2
    assert "give --remote-uri, --data-dir or --config" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        tiering_cli.main(["vacuum"])
    assert exit_info.value.code == 2


async def test_a_topic_created_over_remote_data_adopts_it_unless_that_was_deleted(
    start_broker: StartBroker, clock: ManualClock, tmp_path: Path, store: ObjectStore
) -> None:
    sent = await _upload_everything(start_broker, clock, "adopt", 30)
    client = await start_broker(**{"data.dir": str(tmp_path / "second")})
    broker = broker_of(client)
    await create_topic(client, "adopt")
    partition = broker.topic("adopt").partition(0)
    assert (partition.log_start_offset, partition.log_end_offset) == (0, 30)
    assert [(r.key, r.value) for r in await consume_native(client, "adopt", 0)] == sent

    await broker.delete_topic("adopt")
    await create_topic(client, "adopt")  # at once: waits for the remote deletion, adopts nothing
    partition = broker.topic("adopt").partition(0)
    assert (partition.log_start_offset, partition.log_end_offset) == (0, 0)
    assert [info.key async for info in store.list("adopt/")] == []
