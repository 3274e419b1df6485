"""The default remote tier, a directory under the data directory (what ``make run`` uses, no S3), and
turning remote storage on for a topic that already has data."""

from __future__ import annotations

from pathlib import Path

from tests.integration.broker import Brokers
from tests.integration.tiering.helpers import broker_of, consume_native, produce, wait_uploaded
from tierlog.service.topics.tasks import MAINTENANCE
from tierlog.tiering.log import ManualClock


async def test_default_remote_tier_is_a_directory_in_the_data_dir(
    brokers: Brokers, clock: ManualClock, data_dir: Path
) -> None:
    running = await brokers.start({"num.partitions": "1"}, clock=clock)
    app, client, broker = running.app, running.client, running.broker
    await broker.create_topic("plain", 1)
    await broker.create_topic(
        "local",
        1,
        {"segment.bytes": "2048", "local.retention.bytes": "2048", "remote.storage.enable": "true"},
    )
    sent = await produce(client, "local", 0, 100)
    await produce(client, "plain", 0, 10)
    await wait_uploaded(
        client, "local", broker.topic("local").partition(0).log.sealed_segments()[-1].next_offset
    )
    await app[MAINTENANCE].retention_pass()

    logs = sorted(p.name for p in (data_dir / "remote" / "local" / "0").iterdir() if p.suffix == ".log")
    assert logs and logs[0].startswith("00000000000000000000-")
    assert not (data_dir / "remote" / "plain").exists()
    assert broker.remote.remote_of("plain", 0) is None
    assert broker.topic("local").partition(0).local_log_start_offset > 0
    records = await consume_native(client, "local", 0)
    assert [(r.key, r.value) for r in records] == sent


async def test_enabling_remote_storage_later_uploads_existing_segments_and_cannot_be_undone(
    brokers: Brokers, clock: ManualClock
) -> None:
    running = await brokers.start({"num.partitions": "1"}, clock=clock)
    client, broker = running.client, running.broker
    await broker.create_topic("later", 1, {"segment.bytes": "2048"})
    sent = await produce(client, "later", 0, 60)
    end = broker.topic("later").partition(0).log.sealed_segments()[-1].next_offset
    assert broker.remote.remote_of("later", 0) is None

    url = f"/v3/clusters/{broker.cluster_id}/topics/later/configs/remote.storage.enable"
    response = await client.put(url, json={"value": "true"})
    assert response.status == 204, await response.text()
    await wait_uploaded(client, "later", end)
    assert broker_of(client).topic("later").partition(0).log_start_offset == 0

    response = await client.put(url, json={"value": "false"})
    assert response.status == 400
    assert (await response.json())["error_code"] == 40002
    assert broker.topic("later").configs()["remote.storage.enable"] == "true"
    records = await consume_native(client, "later", 0)
    assert [(r.key, r.value) for r in records] == sent
