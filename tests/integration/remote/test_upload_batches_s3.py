"""Batched uploads against each object-store backend (local directory, a real moto_server, LocalStack when
installed): segments larger than the part size go up as multipart uploads inside one batch, a batch costs
two manifest versions, every object round-trips byte for byte, and a failure mid-batch keeps the prefix
and is cleaned without leaks on the next pass."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.integration.remote.conftest import Backend
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote import packed_indexes
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.inventory import check
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.remote_log import RemoteLog
from tierlog.wire.errors import UnavailableError

START = 1_700_000_000_000


class FailOneLog(FaultInjectingStore):
    """Refuses, once, ``put_file`` of the ``.log`` object of the segment at ``fail_base``."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner)
        self.fail_base: int | None = None

    async def put_file(self, key: str, path: str | Path) -> None:
        name = key.rsplit("/", 1)[-1]
        if (
            self.fail_base is not None
            and name.startswith(f"{self.fail_base:020d}-")
            and name.endswith(".log")
        ):
            self.fail_base = None
            raise UnavailableError(f"injected failure of put_file {key}")
        await super().put_file(key, path)


@pytest.fixture
def plog(tmp_path: Path, backend: Backend) -> Iterator[PartitionLog]:
    # segments of about 2.5 parts: each .log object is a multipart upload on the S3 backends
    config = LogConfig(segment_bytes=backend.part_size * 5 // 2)
    opened = PartitionLog.open(tmp_path / "t-0", config, clock=ManualClock(START), topic="t")
    batch = build_batch([Record(b"k", bytes(range(256)) * 16, timestamp=START)])  # ~4 KiB
    while len(opened.sealed_segments()) < 5:
        opened.append(batch)
    opened.roll()
    yield opened
    opened.close()


@pytest.fixture
async def faulty(backend: Backend) -> AsyncIterator[FailOneLog]:
    opened = FailOneLog(backend.open())
    yield opened
    await opened.close()


async def newest_version(manifests: ManifestStore) -> int:
    versions = await manifests.versions("t", 0)
    return versions[-1] if versions else 0


async def test_a_batch_uploads_multipart_segments_with_two_manifest_versions(
    plog: PartitionLog, faulty: FailOneLog
) -> None:
    manifests = ManifestStore(faulty)
    remote = RemoteLog(faulty, manifests, plog, "t", 0, ManualClock(START))
    await remote.open(reset_local=False)
    sealed = plog.sealed_segments()

    assert await remote.sync() == len(sealed)

    assert await newest_version(manifests) == 2
    readable = mf.readable_segments(await manifests.load("t", 0))
    assert [s.base_offset for s in readable] == [s.base_offset for s in sealed]
    for info, segment in zip(sealed, readable, strict=True):
        keys = segment_keys("t", 0, info.base_offset, segment.segment_uuid)
        assert await faulty.get(keys["log"]) == info.log_path.read_bytes()
        indexes = (info.index_path.read_bytes(), info.timeindex_path.read_bytes())
        assert packed_indexes.unpack(await faulty.get(keys["indexes"])) == indexes
    assert (await check(faulty, manifests)).clean


async def test_a_failure_mid_batch_keeps_the_prefix_and_the_next_pass_finishes_cleanly(
    plog: PartitionLog, faulty: FailOneLog
) -> None:
    manifests = ManifestStore(faulty)
    remote = RemoteLog(faulty, manifests, plog, "t", 0, ManualClock(START))
    await remote.open(reset_local=False)
    sealed = plog.sealed_segments()
    faulty.fail_base = sealed[2].base_offset

    with pytest.raises(UnavailableError):
        await remote.sync()

    stored = await manifests.load("t", 0)
    assert [s.base_offset for s in mf.readable_segments(stored)] == [s.base_offset for s in sealed[:2]]
    assert remote.remote_next_offset == sealed[1].next_offset
    assert (await check(faulty, manifests)).clean  # the copy_started entries name every object stored

    assert await remote.sync() == len(sealed) - 2
    stored = await manifests.load("t", 0)
    assert [s.base_offset for s in mf.readable_segments(stored)] == [s.base_offset for s in sealed]
    assert all(s.state is mf.SegmentState.COPY_FINISHED for s in stored.segments)
    report = await check(faulty, manifests)
    assert report.clean, report
