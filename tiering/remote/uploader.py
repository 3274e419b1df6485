"""The upload and deletion protocol for one remote segment (KIP-405's lifecycle), as plain coroutines.

Upload of a batch of consecutive sealed local segments (one or more)::

    1. manifest += {uuid, copy_started} for each (one commit: an interrupted upload is findable)
    2. put_file .log, then put .indexes          (segments concurrently, files bounded; fresh uuid =>
                                                  fresh keys; multipart when large; .indexes packs the
                                                  offset and time index, read before step 1)
    3. manifest: uuid -> copy_finished           (one commit, for the longest prefix of the batch whose
                                                  objects are all stored: only now do readers and local
                                                  retention see them)

A batch of small segments thus costs two manifest commits in all rather than two per segment. The first
loads the newest manifest (so a damaged one is noticed on every pass); the second is tried directly on
the version the first stored, which saves loading it again (a LIST and a GET); a lost race falls back to
:meth:`ManifestStore.update`, which reloads and re-applies.

Deletion of a remote segment (retention, topic deletion, or cleaning an abandoned upload)::

    1. manifest: uuid -> delete_started          (readers stop using it; copy_started may go here too)
    2. delete the objects                        (idempotent; a missing object is fine)
    3. manifest: uuid -> deleted, then pruned

Every step is idempotent and each manifest change is a pure function re-applied on a lost commit race,
so a crash or a failure at any point is repaired by running :func:`clean_unfinished` and uploading the
segment again under a new uuid: nothing half-uploaded is ever listed as readable.

Under replication every commit carries the writer's ``leader_epoch`` (see :class:`ManifestStore`): a
deposed leader's commit raises :class:`FencedLeaderEpochError`. A batch fenced at its ``copy_finished``
commit deletes the objects it put whose entries the newest manifest no longer lists as finished: the new
leader may have cleaned the ``copy_started`` entries before those objects arrived, and they would leak.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tierlog.tiering.log import Clock, SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote import packed_indexes
from tierlog.tiering.remote.layout import segment_keys
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.wire.errors import ConflictError, FencedLeaderEpochError, InvalidRequestError, NotFoundError

__all__ = [
    "UploadResult",
    "BatchUploadResult",
    "upload_segment",
    "upload_segments",
    "delete_segments",
    "clean_unfinished",
    "unfinished",
]

DEFAULT_FILE_CONCURRENCY = 4


@dataclass(frozen=True, slots=True)
class UploadResult:
    """A finished upload: the committed manifest and the segment entry it now holds."""

    manifest: mf.Manifest
    segment: mf.RemoteSegment
    bytes_uploaded: int


def _packed_indexes(info: SegmentInfo) -> tuple[bytes, tuple[int, int]]:
    """The ``.indexes`` object of a local segment and its index sizes. Blocking: run in a thread.

    Raises:
        NotFoundError: an index file vanished (topic deleted meanwhile).
    """
    try:
        with open(info.index_path, "rb") as f:
            offset_index = f.read()
        with open(info.timeindex_path, "rb") as f:
            time_index = f.read()
    except FileNotFoundError as err:
        raise NotFoundError(f"local index of segment {info.base_offset} vanished during its upload") from err
    return packed_indexes.pack(offset_index, time_index), (len(offset_index), len(time_index))


@dataclass(frozen=True, slots=True)
class BatchUploadResult:
    """A finished batch: the committed manifest, the entries now ``copy_finished`` (a prefix of the
    batch, in offset order) with the bytes each sent, and the error that stopped the rest (or None)."""

    manifest: mf.Manifest
    segments: tuple[mf.RemoteSegment, ...]
    bytes_uploaded: tuple[int, ...]
    error: BaseException | None


async def upload_segment(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    info: SegmentInfo,
    clock: Clock,
    *,
    segment_uuid: uuid.UUID | None = None,
    leader_epoch: int | None = None,
    leader_epochs: tuple[tuple[int, int], ...] = (),
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
    result = await upload_segments(
        store,
        manifests,
        topic,
        partition,
        [info],
        clock,
        uuids=[segment_uuid or uuid.uuid4()],
        leader_epoch=leader_epoch,
        leader_epochs=[leader_epochs],
    )
    if result.error is not None:
        raise result.error
    return UploadResult(result.manifest, result.segments[0], result.bytes_uploaded[0])


async def upload_segments(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    infos: Sequence[SegmentInfo],
    clock: Clock,
    *,
    uuids: Sequence[uuid.UUID] | None = None,
    file_concurrency: int = DEFAULT_FILE_CONCURRENCY,
    pack_indexes: bool = True,
    leader_epoch: int | None = None,
    leader_epochs: Sequence[tuple[tuple[int, int], ...]] | None = None,
) -> BatchUploadResult:
    """Upload consecutive sealed, non-empty local segments (offset order) with one ``copy_started``
    commit for all of them and one ``copy_finished`` commit for the longest prefix whose objects (``.log``
    and the packed ``.indexes``) were all stored. At most ``file_concurrency`` objects are being put at
    once (a ``.log`` may itself be a multipart upload with its own part concurrency). ``pack_indexes``
    False writes the older layout instead of ``.indexes``: separate ``.index`` and ``.timeindex`` objects,
    which releases before the packed layout read without scanning (``remote.upload.indexes.packed``).

    A failure after the first commit is returned in ``error`` (the prefix before the failed segment is
    committed; the failed and later entries stay ``copy_started`` for :func:`clean_unfinished`), so the
    caller keeps what succeeded. Not idempotent as a whole (fresh uuids); callers must not upload two
    batches of one partition concurrently.

    ``leader_epoch`` fences every commit (None: unfenced, the embedded broker); ``leader_epochs`` gives
    each segment's ``RemoteSegment.leader_epochs`` (default: none recorded). A fenced ``copy_finished``
    commit is returned as ``error`` after the objects were deleted (see the module docstring).

    Raises (nothing is committed then):
        UnavailableError, ConflictError: the first commit failed.
        NotFoundError: a local index file is gone (topic deleted meanwhile).
        FencedLeaderEpochError: the newest manifest carries a newer leader epoch.
        InvalidRequestError: an empty segment, or ``uuids`` or ``leader_epochs`` of the wrong length.
    """
    chosen = list(uuids) if uuids is not None else [uuid.uuid4() for _ in infos]
    epochs = list(leader_epochs) if leader_epochs is not None else [() for _ in infos]
    if len(chosen) != len(infos) or len(epochs) != len(infos) or not infos:
        raise InvalidRequestError(
            "upload_segments needs one uuid (and epoch list) per segment and at least one segment"
        )
    now = max(0, clock.now_ms())
    # Indexes are small next to their segment (about 20 bytes per 4 KiB of log) and sealed: read them
    # first, so the entries record their sizes and each segment costs one small PUT.
    packed: list[tuple[bytes, tuple[int, int] | None]] = [(b"", None) for _ in infos]
    if pack_indexes:
        packed[:] = await asyncio.to_thread(lambda: [_packed_indexes(info) for info in infos])
    entries = [
        mf.RemoteSegment(
            base_offset=info.base_offset,
            last_offset=info.next_offset - 1,
            max_timestamp=info.max_timestamp,
            size_bytes=info.size_bytes,
            segment_uuid=u,
            state=mf.SegmentState.COPY_STARTED,
            created_ms=now,
            leader_epochs=e,
            indexes=sizes,
        )
        for info, u, e, (_, sizes) in zip(infos, chosen, epochs, packed, strict=True)
    ]

    def start(m: mf.Manifest) -> mf.Manifest:
        for entry in entries:
            m = mf.add_segment(m, entry)
        return m

    # The first commit loads the newest version (a damaged one is found here, as on every pass); the
    # second builds on the version the first stored, skipping the reload unless someone got in between.
    started = await manifests.update(topic, partition, start, leader_epoch=leader_epoch)
    limit = asyncio.Semaphore(max(1, file_concurrency))

    async def put_file(key: str, path: Path) -> None:
        async with limit:
            await _put_file(store, key, str(path))

    async def one(info: SegmentInfo, u: uuid.UUID, i: int) -> int:
        keys = segment_keys(topic, partition, info.base_offset, u)
        await put_file(keys["log"], info.log_path)  # the indexes only once the data is stored
        if not pack_indexes:
            async with asyncio.TaskGroup() as group:
                group.create_task(put_file(keys["index"], info.index_path))
                group.create_task(put_file(keys["timeindex"], info.timeindex_path))
            return info.size_bytes + await asyncio.to_thread(_size, info.index_path, info.timeindex_path)
        data, packed[i] = packed[i][0], (b"", packed[i][1])  # held here only until it is sent
        async with limit:
            await store.put(keys["indexes"], data)
        return info.size_bytes + len(data)

    outcomes = await asyncio.gather(
        *(one(info, u, i) for i, (info, u) in enumerate(zip(infos, chosen, strict=True))),
        return_exceptions=True,
    )
    done: list[int] = []
    error: BaseException | None = None
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            error = _first_error(outcome)
            break
        done.append(outcome)
    if not done:
        return BatchUploadResult(started, (), (), error)
    finished = chosen[: len(done)]

    def finish(m: mf.Manifest) -> mf.Manifest:
        for u in finished:
            m = mf.transition(m, u, mf.SegmentState.COPY_FINISHED)
        return m

    try:
        committed = await _commit(manifests, topic, partition, started, finish, leader_epoch)
    except FencedLeaderEpochError as err:  # deposed meanwhile: the new leader owns the manifest now
        await _drop_fenced(store, manifests, topic, partition, infos, chosen)
        return BatchUploadResult(started, (), (), err)
    except Exception as err:  # nothing of this batch is readable; all entries stay for clean-up
        return BatchUploadResult(started, (), (), err)
    return BatchUploadResult(committed, tuple(committed.segment(u) for u in finished), tuple(done), error)


async def _commit(
    manifests: ManifestStore,
    topic: str,
    partition: int,
    base: mf.Manifest,
    change: Callable[[mf.Manifest], mf.Manifest],
    leader_epoch: int | None = None,
) -> mf.Manifest:
    """Apply ``change`` on ``base`` (the manifest we just committed) with one conditional write; if
    another version got in first, reload and re-apply (:meth:`ManifestStore.update`)."""
    with contextlib.suppress(ConflictError):
        updated = change(base)
        return base if updated == base else await manifests.commit(base, updated, leader_epoch=leader_epoch)
    return await manifests.update(topic, partition, change, leader_epoch=leader_epoch)


async def _drop_fenced(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    infos: Sequence[SegmentInfo],
    uuids: Sequence[uuid.UUID],
) -> None:
    """After a fenced ``copy_finished`` commit: delete this batch's objects unless the newest manifest
    lists them finished. Best effort: a failure leaves them to ``tierlog tiering check``."""
    try:
        newest = await manifests.load(topic, partition)
        keys = [
            key
            for info, u in zip(infos, uuids, strict=True)
            if (found := mf.find_segment(newest, u)) is None
            or found.state is not mf.SegmentState.COPY_FINISHED
            for key in segment_keys(topic, partition, info.base_offset, u).values()
        ]  # every kind: this batch's entries may be gone from the newest manifest
        if keys:
            await store.delete_many(keys)
    except Exception:  # best effort: the leak check reports what is left
        return


def _first_error(err: BaseException) -> BaseException:
    """The first leaf of a TaskGroup's exception group (the tierlog kind it already is)."""
    while isinstance(err, BaseExceptionGroup):
        err = err.exceptions[0]
    return err


async def _put_file(store: ObjectStore, key: str, path: str) -> None:
    try:
        await store.put_file(key, path)
    except FileNotFoundError as err:
        raise NotFoundError(f"local file {path} vanished during its upload") from err


def _size(*paths: Path) -> int:
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
    leader_epoch: int | None = None,
) -> mf.Manifest:
    """Delete segments: mark them ``delete_started`` (raising the log start offset to
    ``log_start_offset`` in the same commit), delete their objects, then mark them ``deleted`` and prune.
    Both commits are fenced by ``leader_epoch`` (None: unfenced).

    Idempotent: entries already deleted or gone are skipped; re-running after a crash finishes the job.

    Raises:
        UnavailableError: the store failed (entries stay ``delete_started``; re-run to finish).
        ConflictError: the manifest kept changing under us.
        FencedLeaderEpochError: a newer leader epoch wrote the manifest (nothing more is deleted).
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

    marked = await manifests.update(topic, partition, start, leader_epoch=leader_epoch)
    keys = [
        key
        for u in wanted
        if (s := mf.find_segment(marked, u)) is not None
        # every kind, whatever the entry's layout: a release before the packed layout that rewrote the
        # manifest dropped the entry's ``indexes`` field, so a packed segment may be listed as separate
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

    return await manifests.update(topic, partition, finish, leader_epoch=leader_epoch)


async def clean_unfinished(
    store: ObjectStore,
    manifests: ManifestStore,
    topic: str,
    partition: int,
    *,
    leader_epoch: int | None = None,
) -> tuple[mf.Manifest, int]:
    """Delete the objects of every ``copy_started`` (abandoned upload) and ``delete_started`` (interrupted
    deletion) entry and drop the entries. Returns the new manifest and how many entries were cleaned.

    Must not run while an upload of this partition is in progress (by this broker; a deposed leader's
    upload in flight is handled by its fencing). Idempotent.

    Raises:
        UnavailableError, ConflictError, FencedLeaderEpochError: as :func:`delete_segments`.
    """
    manifest = await manifests.load(topic, partition)
    stale = unfinished(manifest)
    if not stale:
        return manifest, 0
    cleaned = await delete_segments(
        store, manifests, topic, partition, [s.segment_uuid for s in stale], leader_epoch=leader_epoch
    )
    return cleaned, len(stale)
