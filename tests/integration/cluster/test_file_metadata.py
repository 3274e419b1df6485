"""``metadata.uri=file:///path``: one broker running the cluster code path (membership, controller, cache,
reconciler) on the local metadata store persisted in one file, without etcd, across a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.broker import Brokers
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import MetadataStoreError
from tierlog.service.cluster.model import TopicAssignment, topic_key
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record


async def test_a_broker_on_a_metadata_file_keeps_its_topics_and_leads_them_after_a_restart(
    brokers: Brokers, tmp_path: Path
) -> None:
    path = tmp_path / "meta" / "metadata.json"
    path.parent.mkdir()
    settings = {
        "metadata.uri": f"file://{path}",
        "broker.id": "7",
        # the session also bounds the wait for the topic's leaders and for the broker's own registration:
        # room for a loaded machine (a clean stop deregisters, so the restart does not wait on it)
        "broker.session.timeout.ms": "6000",
        "broker.heartbeat.interval.ms": "1000",
    }
    first = await brokers.start(settings)
    broker = first.broker
    assert broker.cluster is not None
    await broker.create_topic("t", 2)
    await broker.topic("t").partition(1).append(build_batch([Record(b"k", b"kept")]))
    view = broker.cluster_view()
    assert (view.controller_id, [b.broker_id for b in view.brokers]) == (7, [7])
    assert [(p.leader, p.replicas) for p in view.partitions["t"]] == [(7, (7,)), (7, (7,))]
    await first.stop()

    reader = LocalMetadataStore(path)  # what the file holds: the topic, not the broker's session keys
    await reader.start()
    try:
        found = await reader.get(topic_key("t"))
        assert found is not None
        assert TopicAssignment.decode(found.key, found.value).replicas == ((7,), (7,))
        brokers_left, _ = await reader.range("brokers/")
        assert brokers_left == []
    finally:
        await reader.close()

    again = await brokers.start(settings)
    view = again.broker.cluster_view()
    assert [p.leader for p in view.partitions["t"]] == [7, 7]
    assert view.controller_epoch >= 2  # a new session, a new controller epoch
    read = await again.broker.topic("t").partition(1).read(0, 1 << 20)
    assert b"kept" in read.data


async def test_a_metadata_file_serves_one_store_at_a_time(tmp_path: Path) -> None:
    path = tmp_path / "metadata.json"
    first = LocalMetadataStore(path)
    await first.start()
    second = LocalMetadataStore(path)
    try:
        with pytest.raises(MetadataStoreError, match="in use by another process"):
            await second.start()
    finally:
        await first.close()
    await second.start()  # the lock went with the first store
    await second.close()
