"""The upload and deletion protocol for one remote segment (KIP-405's lifecycle), as plain coroutines.

Upload of a sealed local segment::

    1. manifest += {uuid, copy_started}          (committed first: an interrupted upload is findable)
    2. put_file .log, .index, .timeindex         (fresh uuid => fresh keys; multipart when large)
    3. manifest: uuid -> copy_finished           (only now do readers and local retention see it)

Deletion of a remote segment (retention, topic deletion, or cleaning an abandoned upload)::

    1. manifest: uuid -> delete_started          (readers stop using it; copy_started may go here too)
    2. delete the objects                        (idempotent; a missing object is fine)
    3. manifest: uuid -> deleted, then pruned

Every step is idempotent and each manifest change is a pure function re-applied on a lost commit race,
so a crash or a failure at any point is repaired by running :func:`clean_unfinished` and uploading the
segment again under a new uuid: nothing half-uploaded is ever listed as readable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from tierlog.tiering.errors import NotFoundError
from tierlog.tiering.log import Clock, SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import SegmentKind, segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.store import ObjectStore

__all__ = ["UploadResult", "upload_segment", "delete_segments", "clean_unfinished", "unfinished"]


@dataclass(frozen=True, slots=True)
class UploadResult:
    """A finished upload: the committed manifest and the segment entry it now holds."""

    manifest: mf.Manifest
    segment: mf.RemoteSegment
    bytes_uploaded: int


def _paths(info: SegmentInfo) -> dict[SegmentKind, str]:
    return {"log": str(info.log_path), "index": str(info.index_path), "timeindex": str(info.timeindex_path)}


async def upload_segment(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    info: SegmentInfo,
    clock: Clock,
    *,
    segment_uuid: uuid.UUID | None = None,
) -> UploadResult:
    """Upload one sealed, non-empty local segment and commit it ``copy_finished``.

    Not idempotent as a whole (each call uses a fresh uuid), but safe to retry after any failure once
    :func:`clean_unfinished` ran. Callers must not upload two segments of one partition concurrently.

    Raises:
        UnavailableError: the store failed (the ``copy_started`` entry stays for clean-up).
        NotFoundError: a local file disappeared (topic deleted meanwhile).
        ConflictError: the manifest kept changing under us, or the segment overlaps a committed one.
        InvalidRequestError: the segment is empty.
    """
    chosen = segment_uuid or uuid.uuid4()
    entry = mf.RemoteSegment(
        base_offset=info.base_offset,
        last_offset=info.next_offset - 1,
        max_timestamp=info.max_timestamp,
        size_bytes=info.size_bytes,
        segment_uuid=chosen,
        state=mf.SegmentState.COPY_STARTED,
        created_ms=max(0, clock.now_ms()),
    )
    await manifests.update(topic, partition, lambda m: mf.add_segment(m, entry))
    keys = segment_keys(topic, partition, info.base_offset, chosen)
    paths = _paths(info)
    for kind in ("log", "index", "timeindex"):
        await _put_file(store, keys[kind], paths[kind])
    sent = info.size_bytes + await asyncio.to_thread(_size, paths["index"], paths["timeindex"])
    committed = await manifests.update(
        topic, partition, lambda m: mf.transition(m, chosen, mf.SegmentState.COPY_FINISHED)
    )
    return UploadResult(committed, committed.segment(chosen), sent)


async def _put_file(store: ObjectStore, key: str, path: str) -> None:
    try:
        await store.put_file(key, path)
    except FileNotFoundError as err:
        raise NotFoundError(f"local file {path} vanished during its upload") from err


def _size(*paths: str) -> int:
    total = 0
    for path in paths:
        with contextlib.suppress(OSError):
            total += os.stat(path).st_size
    return total


def unfinished(manifest: mf.Manifest) -> list[mf.RemoteSegment]:
    """Entries left by an interrupted upload or deletion (``copy_started``/``delete_started``). Pure."""
    return [
        s
        for s in manifest.segments
        if s.state in (mf.SegmentState.COPY_STARTED, mf.SegmentState.DELETE_STARTED)
    ]


async def delete_segments(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    uuids: Iterable[uuid.UUID],
    *,
    log_start_offset: int | None = None,
) -> mf.Manifest:
    """Delete segments: mark them ``delete_started`` (raising the log start offset to
    ``log_start_offset`` in the same commit), delete their objects, then mark them ``deleted`` and prune.

    Idempotent: entries already deleted or gone are skipped; re-running after a crash finishes the job.

    Raises:
        UnavailableError: the store failed (entries stay ``delete_started``; re-run to finish).
        ConflictError: the manifest kept changing under us.
    """
    wanted = list(dict.fromkeys(uuids))

    def start(m: mf.Manifest) -> mf.Manifest:
        if log_start_offset is not None:
            m = mf.set_log_start_offset(m, log_start_offset)
        for u in wanted:
            found = mf.find_segment(m, u)
            if found is not None and found.state is not mf.SegmentState.DELETED:
                m = mf.transition(m, u, mf.SegmentState.DELETE_STARTED)
        return m

    marked = await manifests.update(topic, partition, start)
    keys = [
        key
        for u in wanted
        if (s := mf.find_segment(marked, u)) is not None
        for key in segment_keys(topic, partition, s.base_offset, u).values()
    ]
    if keys:
        await store.delete_many(keys)

    def finish(m: mf.Manifest) -> mf.Manifest:
        for u in wanted:
            found = mf.find_segment(m, u)
            if found is not None and found.state is mf.SegmentState.DELETE_STARTED:
                m = mf.transition(m, u, mf.SegmentState.DELETED)
        return mf.prune_deleted(m)

    return await manifests.update(topic, partition, finish)


async def clean_unfinished(
    store: ObjectStore, manifests: ManifestStore, topic: str, partition: int
) -> tuple[mf.Manifest, int]:
    """Delete the objects of every ``copy_started`` (abandoned upload) and ``delete_started`` (interrupted
    deletion) entry and drop the entries. Returns the new manifest and how many entries were cleaned.

    Must not run while an upload of this partition is in progress. Idempotent.

    Raises:
        UnavailableError, ConflictError: as :func:`delete_segments`.
    """
    manifest = await manifests.load(topic, partition)
    stale = unfinished(manifest)
    if not stale:
        return manifest, 0
    cleaned = await delete_segments(store, manifests, topic, partition, [s.segment_uuid for s in stale])
    return cleaned, len(stale)
