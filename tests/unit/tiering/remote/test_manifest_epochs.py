"""Leader epochs in the remote manifest: the additive format-1 fields, fencing in the manifest store (on a
real local-directory store), and the epoch history a follower bootstraps from."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import crc32c
import pytest

from tests.unit.tiering.remote.test_manifest import GOLDEN, GOLDEN_MANIFEST
from tierlog.tiering.log.leader_epoch import EpochEntry
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.epochs import load_remote_epoch_history, remote_epoch_history
from tierlog.tiering.remote.layout import manifest_key
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest import RemoteSegment, SegmentState
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.wire.errors import (
    ConflictError,
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidRequestError,
)


def seg(
    base: int,
    last: int,
    epochs: tuple[tuple[int, int], ...] = (),
    *,
    state: SegmentState = SegmentState.COPY_FINISHED,
    n: int = 0,
) -> RemoteSegment:
    return RemoteSegment(base, last, 5, 100, uuid.UUID(int=n + 1), state, 1000 + n, leader_epochs=epochs)


def reencode(obj: dict[str, object]) -> bytes:
    """``obj`` with a fresh checksum, as a writer would store it."""
    body = {k: v for k, v in obj.items() if k != "crc32c"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
    return json.dumps({**body, "crc32c": crc32c.crc32c(canonical)}).encode()


# -- codec ---------------------------------------------------------------------------------------


def test_round_trip_keeps_the_leader_epochs() -> None:
    manifest = mf.Manifest(
        "orders", 3, 7, 0, (seg(0, 99, ((0, 0), (2, 57)), n=0), seg(100, 149, ((2, 100),), n=1)), 2
    )
    data = mf.encode(manifest)
    decoded = mf.decode(data)
    assert decoded == manifest
    assert decoded.leader_epoch == 2
    assert decoded.segments[0].leader_epochs == ((0, 0), (2, 57))
    obj = json.loads(data)
    assert obj["leader_epoch"] == 2
    assert obj["segments"][0]["leader_epochs"] == [[0, 0], [2, 57]]


def test_empty_epoch_fields_are_written_all_the_same() -> None:
    obj = json.loads(mf.encode(mf.Manifest("orders", 0, 1, 0, (seg(0, 9),))))
    assert obj["leader_epoch"] == -1
    assert obj["segments"][0]["leader_epochs"] == []


def test_a_manifest_without_the_fields_decodes_as_unfenced_without_epochs() -> None:
    decoded = mf.decode(GOLDEN)
    assert b"leader_epoch" not in GOLDEN
    assert decoded == GOLDEN_MANIFEST
    assert decoded.leader_epoch == -1
    assert all(s.leader_epochs == () for s in decoded.segments)


@pytest.mark.parametrize(
    "epochs",
    [
        [[1, 5], [1, 7]],  # epoch not increasing
        [[1, 7], [2, 5]],  # start not increasing
        [[1, 200]],  # outside the segment
        [[-1, 100]],  # negative epoch
        [[1]],  # not a pair
        [[1, "100"]],  # not integers
        {"1": 100},  # not a list
    ],
)
def test_malformed_leader_epochs_are_corrupt(epochs: object) -> None:
    obj = json.loads(mf.encode(mf.Manifest("orders", 0, 1, 0, (seg(100, 199),))))
    obj["segments"][0]["leader_epochs"] = epochs
    with pytest.raises(CorruptRecordError):
        mf.decode(reencode(obj))


def test_invalid_epochs_are_refused_when_built() -> None:
    with pytest.raises(InvalidRequestError):
        seg(100, 199, ((3, 150), (2, 160)))
    with pytest.raises(InvalidRequestError):
        mf.Manifest("orders", 0, 1, 0, (), -2)


def test_transitions_keep_the_segment_epochs() -> None:
    started = seg(0, 9, ((4, 0),), state=SegmentState.COPY_STARTED)
    manifest = mf.add_segment(mf.empty("t", 0), started)
    finished = mf.transition(manifest, started.segment_uuid, SegmentState.COPY_FINISHED)
    assert finished.segments[0].leader_epochs == ((4, 0),)


# -- fencing -------------------------------------------------------------------------------------


@pytest.fixture
async def manifests(tmp_path: Path) -> AsyncIterator[ManifestStore]:
    store = LocalObjectStore(tmp_path / "remote", fsync=False)
    yield ManifestStore(store)
    await store.close()


def add(n: int, base: int, last: int) -> mf.Manifest:
    return mf.add_segment(mf.empty("t", 0), seg(base, last, state=SegmentState.COPY_STARTED, n=n))


async def test_update_stamps_the_epoch_and_fences_an_older_writer(manifests: ManifestStore) -> None:
    first = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 1), leader_epoch=5)
    assert first.leader_epoch == 5 and first.version == 1
    assert (await manifests.load("t", 0)).leader_epoch == 5
    with pytest.raises(FencedLeaderEpochError):
        await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 2), leader_epoch=4)
    with pytest.raises(FencedLeaderEpochError):  # a no-op change is refused as well: the writer learns
        await manifests.update("t", 0, lambda m: m, leader_epoch=4)
    assert await manifests.versions("t", 0) == [1]  # nothing written by the deposed writer
    same = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 2), leader_epoch=5)
    newer = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 3), leader_epoch=6)
    assert (same.leader_epoch, newer.leader_epoch) == (5, 6)


async def test_an_unfenced_writer_keeps_the_epoch(manifests: ManifestStore) -> None:
    await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 1), leader_epoch=5)
    tool = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 2))
    assert tool.leader_epoch == 5  # an operator tool never unfences the partition
    with pytest.raises(FencedLeaderEpochError):
        await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 3), leader_epoch=4)


async def test_embedded_writes_stay_unfenced(manifests: ManifestStore) -> None:
    written = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 1))
    assert written.leader_epoch == -1
    assert b'"leader_epoch":-1' in await manifests.store.get(manifest_key("t", 0, 1))


async def test_a_deposed_writer_that_loses_the_race_is_fenced_on_reload(manifests: ManifestStore) -> None:
    base = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 1), leader_epoch=3)
    await manifests.commit(base, mf.set_log_start_offset(base, 2), leader_epoch=4)  # the new leader wins
    with pytest.raises(ConflictError):  # the old leader built on the same base
        await manifests.commit(base, mf.set_log_start_offset(base, 5), leader_epoch=3)
    with pytest.raises(FencedLeaderEpochError):  # it reloads, sees epoch 4, stops
        await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 5), leader_epoch=3)
    newest = await manifests.load("t", 0)
    assert (newest.leader_epoch, newest.log_start_offset) == (4, 2)


async def test_commit_on_a_newer_base_is_fenced_before_writing(manifests: ManifestStore) -> None:
    base = await manifests.update("t", 0, lambda m: mf.set_log_start_offset(m, 1), leader_epoch=7)
    with pytest.raises(FencedLeaderEpochError):
        await manifests.commit(base, mf.set_log_start_offset(base, 2), leader_epoch=6)
    assert await manifests.versions("t", 0) == [1]


# -- epoch history -------------------------------------------------------------------------------


def history_manifest() -> mf.Manifest:
    return mf.Manifest(
        "t",
        0,
        4,
        0,
        (
            seg(0, 99, ((0, 0), (1, 40)), n=0),
            seg(100, 199, ((1, 100), (3, 150)), n=1),
            seg(200, 299, ((3, 200), (4, 260)), state=SegmentState.COPY_STARTED, n=2),
            seg(200, 249, ((3, 200),), n=3),
            seg(250, 299, ((5, 250),), n=4),
        ),
    )


def test_remote_epoch_history_merges_epochs_across_segments() -> None:
    history = remote_epoch_history(history_manifest(), 300)
    assert history == [EpochEntry(0, 0), EpochEntry(1, 40), EpochEntry(3, 150), EpochEntry(5, 250)]


def test_remote_epoch_history_stops_below_the_offset() -> None:
    manifest = history_manifest()
    assert remote_epoch_history(manifest, 150) == [EpochEntry(0, 0), EpochEntry(1, 40)]
    assert remote_epoch_history(manifest, 151) == [EpochEntry(0, 0), EpochEntry(1, 40), EpochEntry(3, 150)]
    assert remote_epoch_history(manifest, 0) == []
    assert remote_epoch_history(mf.empty("t", 0), 10) == []


def test_remote_epoch_history_ignores_unfinished_segments_and_missing_epochs() -> None:
    manifest = mf.Manifest(
        "t",
        0,
        1,
        0,
        (seg(0, 99, n=0), seg(100, 199, ((2, 100),), state=SegmentState.COPY_STARTED, n=1)),
    )
    assert remote_epoch_history(manifest, 200) == []


async def test_load_remote_epoch_history_reads_the_newest_manifest(manifests: ManifestStore) -> None:
    assert await load_remote_epoch_history(manifests, "t", 0, 100) == []

    def build(m: mf.Manifest) -> mf.Manifest:
        m = mf.add_segment(m, seg(0, 99, ((2, 0), (3, 60)), state=SegmentState.COPY_STARTED))
        return mf.transition(m, uuid.UUID(int=1), SegmentState.COPY_FINISHED)

    await manifests.update("t", 0, build, leader_epoch=3)
    assert await load_remote_epoch_history(manifests, "t", 0, 100) == [EpochEntry(2, 0), EpochEntry(3, 60)]
    assert await load_remote_epoch_history(manifests, "t", 0, 60) == [EpochEntry(2, 0)]
