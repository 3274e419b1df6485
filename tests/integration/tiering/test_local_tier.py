"""The default remote tier, a directory under the data directory (what ``make run`` uses, no S3), and
turning remote storage on for a topic that already has data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.integration.tiering.conftest import Client
from tests.integration.tiering.helpers import broker_of, consume_native, produce, wait_uploaded
from tierlog.service.app import create_app
from tierlog.service.config import build_settings
from tierlog.service.state import BROKER
from tierlog.service.tasks import MAINTENANCE
from tierlog.tiering.log import ManualClock


async def test_default_remote_tier_is_a_directory_in_the_data_dir(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    data = tmp_path / "data"
    settings = build_settings({"data.dir": str(data), "port": "0", "num.partitions": "1"})
    app = create_app(settings, clock=ManualClock(1_700_000_000_000))
    client: Client = await aiohttp_client(app)
    broker = app[BROKER]
    await broker.wait_ready()
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

    logs = sorted(p.name for p in (data / "remote" / "local" / "0").iterdir() if p.suffix == ".log")
    assert logs and logs[0].startswith("00000000000000000000-")
    assert not (data / "remote" / "plain").exists()
    assert broker.remote.remote_of("plain", 0) is None
    assert broker.topic("local").partition(0).local_log_start_offset > 0
    records = await consume_native(client, "local", 0)
    assert [(r.key, r.value) for r in records] == sent


async def test_enabling_remote_storage_later_uploads_existing_segments_and_cannot_be_undone(
    tmp_path: Path, aiohttp_client: Any
) -> None:
    settings = build_settings({"data.dir": str(tmp_path / "d"), "port": "0", "num.partitions": "1"})
    app = create_app(settings, clock=ManualClock(1_700_000_000_000))
    client: Client = await aiohttp_client(app)
    broker = app[BROKER]
    await broker.wait_ready()
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
