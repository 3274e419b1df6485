"""Tiering under replication (KIP-405's rules) on real partition logs and a real store (a local directory
and a bucket on moto_server): two replicas of one partition, each with its own RemoteLog, one leading.

Replicas hold the same batches at the same offsets but roll their segments independently (different
``segment.bytes`` here), which is what makes a new leader's segment straddle the remote end.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from tests.integration.remote.conftest import create_bucket
from tests.integration.tiering.conftest import StartBroker
from tests.integration.tiering.helpers import broker_of, consume_native, produce, wait_uploaded
from tierlog.service.remote.remote_partition import RemotePartition
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import decode_header
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.tiering.log.leader_epoch import EpochEntry
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.epochs import load_remote_epoch_history
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.reader import RemoteReader
from tierlog.tiering.remote.remote_log import RemoteLog
from tierlog.tiering.remote.s3 import S3ObjectStore
from tierlog.tiering.remote.trim import TRIM_DIR
from tierlog.tiering.remote.uploader import clean_unfinished, upload_segments
from tierlog.wire.errors import FencedLeaderEpochError

START = 1_700_000_000_000


@pytest.fixture(params=["local", pytest.param("moto", marks=pytest.mark.integration)])
async def backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ObjectStore]:
    if request.param == "local":
        opened: ObjectStore = LocalObjectStore(tmp_path / "remote", fsync=False)
    else:
        server = request.getfixturevalue("moto_server")
        opened = S3ObjectStore(await create_bucket(server), endpoint_url=server.endpoint_url)
    yield opened
    await opened.close()


class Replicas:
    """Two replicas of ``t-0``: ``a`` rolls every ~1 KiB, ``b`` every ~1.5 KiB."""

    def __init__(self, root: Path, clock: ManualClock) -> None:
        self.a = PartitionLog.open(root / "a" / "t-0", LogConfig(segment_bytes=1024), clock=clock, topic="t")
        self.b = PartitionLog.open(root / "b" / "t-0", LogConfig(segment_bytes=1500), clock=clock, topic="t")

    def append(self, count: int, epoch: int) -> None:
        """The same records at the same offsets on both, stamped ``epoch``; high watermarks at the end."""
        for _ in range(count):
            n = self.a.log_end_offset
            batch = build_batch([Record(b"k", n.to_bytes(4, "big") * 12, timestamp=START + n)])
            self.a.append(batch, leader_epoch=epoch)
            self.b.append(batch, leader_epoch=epoch)
        for log in (self.a, self.b):
            log.update_high_watermark(log.log_end_offset)

    def close(self) -> None:
        self.a.close()
        self.b.close()


@pytest.fixture
def replicas(tmp_path: Path, clock: ManualClock) -> Iterator[Replicas]:
    opened = Replicas(tmp_path, clock)
    yield opened
    opened.close()


RemoteLogFactory = Callable[..., Awaitable[RemoteLog]]


@pytest.fixture
def remote_log(backend_store: ObjectStore, clock: ManualClock) -> RemoteLogFactory:
    async def make(
        log: PartitionLog, *, leading: bool, epoch: int | None, store: ObjectStore | None = None
    ) -> RemoteLog:
        used = store or backend_store
        opened = RemoteLog(used, ManifestStore(used), log, "t", 0, clock, leading=leading, leader_epoch=epoch)
        await opened.open(reset_local=False)
        return opened

    return make


def committed(manifest: mf.Manifest) -> list[mf.RemoteSegment]:
    return [s for s in manifest.segments if s.state is mf.SegmentState.COPY_FINISHED]


def assert_contiguous(manifest: mf.Manifest, end: int) -> None:
    """Finished segments tile ``[0, end)`` exactly: no overlap, no hole."""
    expected = 0
    for segment in committed(manifest):
        assert segment.base_offset == expected, [(s.base_offset, s.last_offset) for s in committed(manifest)]
        expected = segment.last_offset + 1
    assert expected == end


async def read_all(store: ObjectStore, manifest: mf.Manifest) -> list[int]:
    """The base offset of every batch the remote tier serves, reading sequentially from 0."""
    reader = RemoteReader(store, cache_bytes=1 << 20)
    offsets: list[int] = []
    try:
        offset = 0
        end = committed(manifest)[-1].last_offset + 1
        while offset < end:
            result = await reader.read(manifest, offset, 1 << 20)
            data = result.data
            position = 0
            while position < len(data):
                header = decode_header(data, position)
                if header.base_offset >= offset:
                    offsets.append(header.base_offset)
                position += header.size
            offset = result.next_offset
    finally:
        await reader.close()
    return offsets


async def test_a_new_leader_continues_and_the_old_one_is_fenced(
    replicas: Replicas, remote_log: RemoteLogFactory, backend_store: ObjectStore
) -> None:
    replicas.append(60, epoch=1)
    old = await remote_log(replicas.a, leading=True, epoch=1)
    assert await old.sync() > 0
    first = old.manifest
    assert first.leader_epoch == 1
    assert all(s.leader_epochs == ((1, s.base_offset),) for s in committed(first))
    remote_end = old.remote_next_offset
    assert remote_end is not None

    new = await remote_log(replicas.b, leading=False, epoch=None)
    assert await new.sync() == 0  # a follower never uploads
    new.set_role(True, 2)
    replicas.append(40, epoch=2)
    straddler = next(s for s in replicas.b.sealed_segments() if s.base_offset < remote_end < s.next_offset)
    assert await new.sync() > 0

    manifest = new.manifest
    assert manifest.leader_epoch == 2
    end = replicas.b.sealed_segments()[-1].next_offset
    assert_contiguous(manifest, end)
    trimmed = next(s for s in committed(manifest) if s.base_offset == remote_end)
    assert trimmed.last_offset == straddler.next_offset - 1
    assert trimmed.leader_epochs[0] == (1, remote_end)
    epoch2 = next(e.start_offset for e in replicas.b.epochs.entries() if e.epoch == 2)
    holder = next(s for s in committed(manifest) if s.contains(epoch2))
    assert (2, epoch2) in holder.leader_epochs
    assert not (replicas.b.path / TRIM_DIR).exists()
    assert await read_all(backend_store, manifest) == list(range(end))

    # the deposed leader: no upload, no deletion, no error storm, and the manifest is untouched
    versions = await new.manifests.versions("t", 0)
    failures = old.failures
    assert await old.sync() == 0
    assert old.fenced and old.failures == failures and old.last_error is None
    assert await old.sync() == 0
    assert await old.apply_retention(retention_ms=-1, retention_bytes=0, local_only_bytes=0) == -1
    assert await new.manifests.versions("t", 0) == versions
    old.set_role(False, 2)
    assert not old.fenced
    assert await old.refresh()
    assert old.manifest == manifest

    history = await load_remote_epoch_history(new.manifests, "t", 0, end)
    assert history == [EpochEntry(1, 0), EpochEntry(2, epoch2)]
    report = await check(backend_store, ManifestStore(backend_store))
    assert report.clean, (report.leaks, report.missing)


class HookedStore(FaultInjectingStore):
    """Runs ``hook`` once, before the first ``put_file``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.hook: Callable[[], Awaitable[None]] | None = None

    async def put_file(self, key: str, path: str | Path) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            await hook()
        await super().put_file(key, path)


async def test_a_leader_deposed_mid_upload_leaves_no_objects_behind(
    replicas: Replicas, backend_store: ObjectStore, clock: ManualClock
) -> None:
    replicas.append(40, epoch=1)
    hooked = HookedStore(backend_store)
    manifests = ManifestStore(backend_store)

    async def new_leader_takes_over() -> None:  # cleans the old leader's copy_started entries at epoch 2
        manifest, cleaned = await clean_unfinished(backend_store, manifests, "t", 0, leader_epoch=2)
        assert cleaned == 1 and manifest.leader_epoch == 2

    hooked.hook = new_leader_takes_over
    info = replicas.a.sealed_segments()[0]
    result = await upload_segments(
        hooked, ManifestStore(hooked), "t", 0, [info], clock, uuids=[uuid.uuid4()], leader_epoch=1
    )
    assert isinstance(result.error, FencedLeaderEpochError)
    assert result.segments == ()
    newest = await manifests.load("t", 0)
    assert newest.segments == () and newest.leader_epoch == 2
    report = await check(backend_store, ManifestStore(backend_store))
    assert report.clean, (report.leaks, report.missing)


async def test_a_follower_applies_local_retention_from_the_leaders_manifest(
    replicas: Replicas, remote_log: RemoteLogFactory, clock: ManualClock
) -> None:
    replicas.append(60, epoch=1)
    leader = await remote_log(replicas.a, leading=True, epoch=1)
    follower = await remote_log(replicas.b, leading=False, epoch=None)
    remote = RemotePartition(cast(Any, None), follower)  # retention never touches the tier
    config = LogConfig(segment_bytes=1500, local_retention_bytes=0, retention_bytes=1, retention_ms=1)
    before = replicas.b.segments()

    assert await remote.apply_retention(config) == []  # nothing uploaded yet: nothing covered
    assert await leader.sync() > 0
    assert await remote.apply_retention(config) == []  # the follower has not reloaded the manifest
    assert not await follower.refresh(min_interval_ms=10_000)  # loaded at open, not again so soon
    clock.advance(10_000)
    assert await follower.refresh(min_interval_ms=10_000)

    deleted = await remote.apply_retention(config)
    remote_end = follower.remote_next_offset
    assert remote_end is not None and deleted
    assert all(s.next_offset <= remote_end for s in deleted)
    assert [s.base_offset for s in deleted] == [
        s.base_offset for s in before if s.next_offset <= remote_end and s.sealed
    ]
    assert replicas.b.segments()[0].next_offset > remote_end  # the first segment not covered is kept
    # total retention is the leader's: the follower deleted no remote data, whatever retention.* says
    assert await leader.manifests.load("t", 0) == leader.manifest
    assert follower.manifest.log_start_offset == 0


async def test_the_leader_uploads_only_below_the_high_watermark(
    replicas: Replicas, remote_log: RemoteLogFactory
) -> None:
    replicas.append(60, epoch=1)
    sealed = replicas.a.sealed_segments()
    replicas.a.update_high_watermark(sealed[1].next_offset - 1)  # the second segment is not committed
    leader = await remote_log(replicas.a, leading=True, epoch=1)
    assert await leader.sync() == 1
    assert leader.remote_next_offset == sealed[0].next_offset
    replicas.a.update_high_watermark(replicas.a.log_end_offset)
    assert await leader.sync() == len(sealed) - 1


async def test_a_role_change_during_a_pass_stops_it_after_the_batch_in_flight(
    replicas: Replicas, backend_store: ObjectStore, clock: ManualClock
) -> None:
    replicas.append(60, epoch=1)
    hooked = HookedStore(backend_store)
    leader = RemoteLog(
        hooked,
        ManifestStore(hooked),
        replicas.a,
        "t",
        0,
        clock,
        leading=True,
        leader_epoch=1,
        upload_batch_segments=1,
    )
    await leader.open(reset_local=False)

    async def demoted() -> None:
        leader.set_role(False, 2)

    hooked.hook = demoted
    assert await leader.sync() == 1  # the batch in flight finishes under epoch 1; no more under epoch 2
    assert leader.manifest.leader_epoch == 1
    assert len(committed(leader.manifest)) == 1
    assert await leader.sync() == 0  # a follower now
    assert not leader.fenced


async def test_the_broker_uploads_only_while_leading_and_follows_the_manifest_otherwise(
    start_broker: StartBroker, store: ObjectStore, clock: ManualClock
) -> None:
    client = await start_broker()
    broker = broker_of(client)
    await broker.create_topic(
        "roles", 1, {"remote.storage.enable": "true", "segment.bytes": "2048", "local.retention.bytes": "0"}
    )
    partition = broker.topic("roles").partition(0)
    tier = broker.remote
    tier.set_role(partition, True, 1)
    sent = await produce(client, "roles", 0, 100)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    first_end = partition.log.sealed_segments()[-1].next_offset
    await wait_uploaded(client, "roles", first_end)
    remote = tier.remote_of("roles", 0)
    assert remote is not None
    assert remote.remote_log.manifest.leader_epoch == 1

    tier.set_role(partition, False, 2)  # another replica leads now
    sent += await produce(client, "roles", 100, 100)
    partition.log.update_high_watermark(partition.log.log_end_offset)
    version = remote.remote_log.manifest.version
    # a follower reloads the manifest at most once per upload interval: the background pass the role
    # change woke may have used this interval's load before the produce, so the next pass gets its own
    clock.advance(broker.settings.remote_upload_interval_ms)
    await tier.upload_pass()
    await tier.upload_pass()
    assert remote.remote_log.manifest.version == version  # a follower writes nothing
    assert remote.remote_log.remote_next_offset == first_end
    assert partition.local_log_start_offset == first_end  # local retention from the manifest
    records = await consume_native(client, "roles", 0)  # the remote tier serves the start
    assert [(r.key, r.value) for r in records] == sent[: len(records)] and records

    tier.set_role(partition, True, 3)  # leading again, in a newer epoch
    second_end = partition.log.sealed_segments()[-1].next_offset
    await wait_uploaded(client, "roles", second_end)
    manifest = await ManifestStore(store).load("roles", 0)
    assert manifest.leader_epoch == 3
    assert_contiguous(manifest, second_end)
    report = await check(store, ManifestStore(store))
    assert report.clean, (report.leaks, report.missing)
