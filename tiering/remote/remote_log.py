"""The remote state of one partition: its manifest in memory, uploads, remote retention and deletion.

A :class:`RemoteLog` pairs a local :class:`~tierlog.tiering.log.PartitionLog` with its remote tier. It keeps
the last committed manifest in memory, so the local-retention veto and the offset queries are cheap and
never touch the network. All changes go through :mod:`tierlog.tiering.remote.uploader`'s idempotent protocol.

Threading: the coroutines run on one event loop and are serialised per partition by an asyncio lock
(uploads, retention and deletion never overlap for one partition). The cheap queries (:meth:`covers`,
:attr:`remote_next_offset`, ...) read immutable snapshots and are safe from worker threads too.

Roles (KIP-405 under replication, ``docs/design/0010-replication.md``): only a *leading* remote log
uploads, cleans and deletes remote data, and every manifest it writes carries its leader epoch (None: the
embedded broker, unfenced). A leader deposed without knowing it is refused by the manifest store
(:class:`FencedLeaderEpochError`) and stops writing until its role changes. A *following* remote log only
reloads the manifest (:meth:`refresh`) so that local retention and remote reads follow the leader's
uploads. A leader continuing from a predecessor's manifest skips what is covered and uploads a segment
straddling the remote end as a trimmed copy (:mod:`.trim`), so remote segments never overlap.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tierlog.tiering.log import Clock, PartitionLog, SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.layout import parse_manifest_key, partition_prefix
from tierlog.tiering.remote.manifest_recovery import recover_manifest
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.plans import remote_retention_plan, segment_epochs, upload_batches
from tierlog.tiering.remote.trim import TRIM_DIR, remove_trimmed, trimmed_copy
from tierlog.tiering.remote.uploader import (
    DEFAULT_FILE_CONCURRENCY,
    clean_unfinished,
    delete_segments,
    upload_segments,
)
from tierlog.wire.errors import CorruptRecordError, FencedLeaderEpochError, InvalidRequestError

__all__ = ["RemoteLog", "UploadEvent"]

log = logging.getLogger("tierlog.remote")

DEFAULT_UPLOAD_BATCH_BYTES = 64 * 2**20
DEFAULT_UPLOAD_BATCH_SEGMENTS = 32

# Coalesce append-time marks into buckets of this many ms (bounds memory under a long outage).
_MARK_BUCKET_MS = 1000


@dataclass(frozen=True, slots=True)
class UploadEvent:
    """What a listener hears: ``kind`` is uploaded, failed, deleted, cleaned or recovered (a damaged
    manifest was recovered; ``segments`` re-derived from objects)."""

    kind: str
    segments: int = 0
    bytes: int = 0
    seconds: float = 0.0  # wall time the upload took (for throughput), not the injected clock


class RemoteLog:
    """One partition's remote tier. Create, then :meth:`open` once before anything else.

    Uploads go in batches of consecutive sealed segments of at most ``upload_batch_bytes`` together
    (and ``upload_batch_segments``), two manifest commits per batch, with at most
    ``upload_file_concurrency`` files being put at once (see :func:`upload_segments`), each segment's
    indexes as one packed object unless ``pack_indexes`` is False.
    """

    def __init__(
        self,
        store: ObjectStore,
        manifests: ManifestStore,
        partition_log: PartitionLog,
        topic: str,
        partition: int,
        clock: Clock,
        *,
        listener: Callable[[UploadEvent], None] | None = None,
        upload_batch_bytes: int = DEFAULT_UPLOAD_BATCH_BYTES,
        upload_batch_segments: int = DEFAULT_UPLOAD_BATCH_SEGMENTS,
        upload_file_concurrency: int = DEFAULT_FILE_CONCURRENCY,
        pack_indexes: bool = True,
        leading: bool = True,
        leader_epoch: int | None = None,
    ) -> None:
        self.store = store
        self.upload_batch_bytes = upload_batch_bytes
        self.upload_batch_segments = max(1, upload_batch_segments)
        self.upload_file_concurrency = max(1, upload_file_concurrency)
        self.pack_indexes = pack_indexes
        self.manifests = manifests
        self.log = partition_log
        self.topic = topic
        self.partition = partition
        self._clock = clock
        self._listener = listener
        self._summary = mf.ManifestSummary.of(mf.empty(topic, partition))
        self._needs_cleaning = False
        self._lock = asyncio.Lock()
        self._check_divergence = False
        self._marks: collections.deque[tuple[int, int]] = collections.deque()  # (first offset, ms)
        self.last_error: str | None = None
        self.uploaded_segments = 0
        self.uploaded_bytes = 0
        self.failures = 0
        self.diverged = False  # the local log went its own way (see open): hands off both tiers
        self.manifest_recovery: str | None = None  # what the last recovery of a damaged manifest found
        self.manifest_recoveries = 0
        self._unsaved_recovery = False  # a recovered manifest is served but not yet stored
        self._needs_recovery = False  # a manifest read failed its check while running: recover first
        self._leading = leading
        self._leader_epoch = leader_epoch
        self.fenced = False  # a newer leader epoch wrote the manifest: no writes until the role changes
        self._role_version = 0  # +1 on every role change: a pass started under an older role stops
        self._refreshed_ms: int | None = None  # clock time of a follower's last manifest load

    # ---- role -------------------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """Whether this replica uploads and deletes remote data (the embedded broker always does)."""
        return self._leading

    @property
    def leader_epoch(self) -> int | None:
        """The epoch every manifest write carries; None: unfenced (the embedded broker)."""
        return self._leader_epoch

    def set_role(self, leading: bool, leader_epoch: int | None) -> None:
        """Lead (upload, clean, delete remote data, fenced by ``leader_epoch``) or follow (only reload the
        manifest). Takes effect from the next pass; a pass in flight finishes the batch it is uploading
        under the old role (fenced by the old epoch) and stops. A new leader cleans the unfinished entries
        a predecessor left and checks its log against the remote data on its next pass; a follower reloads
        the manifest on its next refresh. Idempotent for an unchanged role. Event-loop only.
        """
        if (leading, leader_epoch) == (self._leading, self._leader_epoch):
            return
        self._leading = leading
        self._leader_epoch = leader_epoch
        self._role_version += 1
        self.fenced = False
        self._refreshed_ms = None
        if leading:
            self._needs_cleaning = True
            self._check_divergence = True
        else:
            self.diverged = False  # a follower behind the remote data is catching up, not diverged
            if self.last_error is not None and not self._unsaved_recovery:
                self.last_error = None

    # ---- state ------------------------------------------------------------------------------------------

    @property
    def manifest(self) -> mf.Manifest:
        """The last manifest this broker loaded or committed (immutable)."""
        return self._summary.manifest

    @property
    def _manifest(self) -> mf.Manifest:
        return self._summary.manifest

    @_manifest.setter
    def _manifest(self, manifest: mf.Manifest) -> None:
        self._summary = mf.ManifestSummary.of(manifest)  # one atomic swap: readers in threads see old or new

    @property
    def remote_next_offset(self) -> int | None:
        """One past the last offset held by a ``copy_finished`` segment, or None if none is."""
        return self._summary.next_offset

    @property
    def remote_start_offset(self) -> int | None:
        """The first offset readable from the remote tier, or None when it holds nothing readable."""
        return self._summary.start_offset

    @property
    def remote_bytes(self) -> int:
        return self._summary.readable_bytes

    def covers(self, info: SegmentInfo) -> bool:
        """Whether the remote tier holds every offset of local segment ``info`` (so it may go locally).

        Cheap, no I/O; safe from any thread (the local-retention veto calls it under the log lock).
        """
        remote_next = self.remote_next_offset
        if self.diverged or self._unsaved_recovery:  # only a stored, verified manifest may cover
            return False
        return remote_next is not None and info.next_offset <= remote_next

    @property
    def blocked_reason(self) -> str | None:
        """Why this partition neither uploads nor deletes local segments now (a diverged local log, a
        recovered manifest not yet stored), or None. Cheap; safe from any thread."""
        return self.last_error if (self.diverged or self._unsaved_recovery) else None

    def note_append(self, first_offset: int) -> None:
        """Remember when data from ``first_offset`` on arrived (for upload lag in seconds and the idle
        roll). Event-loop only; cheap."""
        now = self._clock.now_ms()
        if not self._marks or now - self._marks[-1][1] >= _MARK_BUCKET_MS:
            self._marks.append((first_offset, now))

    def pending_since_ms(self) -> int | None:
        """Clock time of the oldest appended data not yet in the remote tier, or None if all is there.

        Reads a snapshot: safe from any thread (the metrics collector calls it from a worker)."""
        done = self.remote_next_offset or 0
        if self.log.log_end_offset <= done:
            return None
        return self._arrival_ms(done)

    def _arrival_ms(self, offset: int) -> int | None:
        """When the data at ``offset`` (or the first after it) arrived, per the append marks."""
        found = None
        for first, at in list(self._marks):
            if first > offset:
                return at if found is None else found
            found = at
        return found

    def _prune_marks(self) -> None:
        done = self.remote_next_offset or 0
        while len(self._marks) > 1 and self._marks[1][0] <= done:
            self._marks.popleft()
        if self._marks and self.log.log_end_offset <= done:
            self._marks.clear()

    def lag(self, segments: list[SegmentInfo]) -> tuple[int, int]:
        """``(bytes, ms)`` not yet uploaded, from a snapshot of the local segments. Pure apart from
        reading the clock."""
        done = self.remote_next_offset or 0
        pending = sum(s.size_bytes for s in segments if s.next_offset > done and s.size_bytes)
        since = self.pending_since_ms() if pending else None
        return pending, (max(0, self._clock.now_ms() - since) if since is not None else 0)

    # ---- lifecycle ---------------------------------------------------------------------------------------

    async def open(self, *, reset_local: bool = True) -> mf.Manifest:
        """Load the manifest, finish interrupted deletions and drop abandoned uploads (their objects
        deleted), and, with ``reset_local``, start an empty local log after the remote data if the local
        log ends before it (a lost disk, a restore). Only pass ``reset_local`` before anything was
        appended since the local log opened. Idempotent.

        A newest manifest that fails its check is recovered first (see :mod:`.manifest_recovery`): the
        recovered state is served at once and stored as a new version; ``manifest_recovery`` and
        ``last_error`` say what was found.

        A remote log that does not lead only loads the manifest (a leader cleans and recovers it), as does
        a leader found fenced (a newer leader epoch wrote the manifest: :attr:`fenced` is set).

        Raises:
            UnavailableError: the store is down (the caller retries later).
            CorruptRecordError: a follower found the newest manifest damaged (its leader recovers it).
            TierlogError: storing a recovered manifest failed (it is served meanwhile; call again).
        """
        async with self._lock:
            if self._leading and not self.fenced:
                try:
                    return await self._open_leading(reset_local)
                except FencedLeaderEpochError as err:
                    self._fence(err, self._role_version)
            manifest = await self.manifests.load(self.topic, self.partition)
            self._manifest = manifest
            self._refreshed_ms = self._clock.now_ms()
            self.diverged = False
            self._mark_pending()
            return manifest

    async def _open_leading(self, reset_local: bool) -> mf.Manifest:
        """:meth:`open` of a leading remote log. Lock held."""
        await self._recover_damaged_manifest(self._leader_epoch)
        manifest, cleaned = await clean_unfinished(
            self.store, self.manifests, self.topic, self.partition, leader_epoch=self._leader_epoch
        )
        self._manifest = manifest
        if cleaned:
            log.info("%s-%d: cleaned %d unfinished remote segments", self.topic, self.partition, cleaned)
            self._emit(UploadEvent("cleaned", cleaned))
        remote_next = self.remote_next_offset
        self.diverged = False
        self._check_divergence = False
        if remote_next is not None and self.log.log_end_offset < remote_next and not reset_local:
            self._diverge(remote_next)
        elif remote_next is not None and self.log.log_end_offset < remote_next:
            log.info(
                "%s-%d: local log ends at %d, remote at %d: starting the local log after the remote data",
                self.topic, self.partition, self.log.log_end_offset, remote_next,
            )  # fmt: skip
            await asyncio.to_thread(self.log.truncate_fully_and_start_at, remote_next)
        self._mark_pending()
        return manifest

    def _mark_pending(self) -> None:
        remote_next = self.remote_next_offset
        if self.log.log_end_offset > (remote_next or 0) and not self._marks:
            self._marks.append((max(remote_next or 0, self.log.log_start_offset), self._clock.now_ms()))

    def _diverge(self, remote_next: int) -> None:
        self.diverged = True
        self.last_error = (
            f"local log ends at {self.log.log_end_offset}, before the remote data ({remote_next}): "
            "neither uploading nor deleting local segments until an operator restores the partition"
        )
        log.error("%s-%d: %s", self.topic, self.partition, self.last_error)

    async def refresh(self, *, min_interval_ms: int = 0) -> bool:
        """A follower's pass: reload the newest manifest unless the last load is less than
        ``min_interval_ms`` old (by the clock), so local retention (:meth:`covers`) and remote reads follow
        the leader's uploads and deletions. Returns whether it loaded. No writes. Idempotent.

        Raises:
            UnavailableError: the store is down (the previous manifest stays in use).
            CorruptRecordError: the newest manifest is damaged (the previous one stays in use; the leader
                recovers it).
        """
        async with self._lock:
            now = self._clock.now_ms()
            if self._refreshed_ms is not None and now - self._refreshed_ms < min_interval_ms:
                return False
            self._manifest = await self.manifests.load(self.topic, self.partition)
            self._refreshed_ms = now
            self.diverged = False
            self._prune_marks()
            return True

    async def _recover_damaged_manifest(self, leader_epoch: int | None) -> None:
        """If the newest manifest fails its check, serve and store the recovered one (fenced by
        ``leader_epoch``). Lock held."""
        recovery = await recover_manifest(
            self.store, self.manifests, self.topic, self.partition, now_ms=self._clock.now_ms()
        )
        if recovery is None:
            return
        message = recovery.describe()
        self.manifest_recovery = message
        self.manifest_recoveries += 1
        self.last_error = message
        log.error("%s-%d: %s", self.topic, self.partition, message)
        self._manifest = recovery.manifest
        self._unsaved_recovery = True
        self._emit(UploadEvent("recovered", len(recovery.derived)))
        try:
            self._manifest = await self.manifests.commit(
                recovery.manifest, recovery.manifest, leader_epoch=leader_epoch
            )
        except Exception as err:
            self.last_error = (
                f"{message}; storing the recovered manifest failed ({type(err).__name__}: {err}): "
                "not uploading and not deleting local segments until it is stored"
            )
            log.error("%s-%d: %s", self.topic, self.partition, self.last_error)
            raise
        self._unsaved_recovery = False
        log.warning("%s-%d: stored the recovered manifest as version %d",
                    self.topic, self.partition, self._manifest.version)  # fmt: skip

    async def sync(self, *, idle_roll_ms: int = -1) -> int:
        """Roll the active segment if its oldest unuploaded data is ``idle_roll_ms`` old (-1: never),
        then upload every sealed segment past the remote data, oldest first. Returns how many were
        uploaded. Safe concurrently (serialised per partition); idempotent.

        Only a leading remote log uploads (else 0). Under a leader epoch, only segments wholly below the
        log's high watermark go up (what a new leader is sure to hold too); a segment straddling the
        remote end goes up as a trimmed copy. A fenced leader stops (sets :attr:`fenced`, returns what it
        uploaded) until :meth:`set_role` is called again.

        Raises:
            UnavailableError, ConflictError, NotFoundError: the upload that failed (earlier ones stay).
        """
        async with self._lock:
            if not self._leading or self.fenced:
                return 0
            if idle_roll_ms >= 0:  # judged on the active segment's data only: no tiny rolls in an outage
                active = (await asyncio.to_thread(self.log.segments))[-1]
                since = self._arrival_ms(active.base_offset) if active.size_bytes else None
                if since is not None and self._clock.now_ms() - since >= idle_roll_ms:
                    await asyncio.to_thread(self.log.roll)
            uploaded = 0
            if self.diverged:
                return 0
            role, epoch = self._role_version, self._leader_epoch  # the whole pass writes under this role
            try:
                if self._needs_recovery:  # the newest manifest was damaged while we ran
                    await self._recover_damaged_manifest(epoch)
                    self._needs_recovery = False
                if self._needs_cleaning or self._summary.unfinished:
                    try:
                        self._manifest, _ = await clean_unfinished(
                            self.store,
                            self.manifests,
                            self.topic,
                            self.partition,
                            leader_epoch=epoch,
                        )
                    except CorruptRecordError:
                        self._needs_recovery = True
                        raise
                    self._needs_cleaning = False
                if self._check_divergence:  # a new leader: does its log reach the remote data?
                    self._check_divergence = False
                    remote_next = self.remote_next_offset
                    if remote_next is not None and self.log.log_end_offset < remote_next:
                        self._diverge(remote_next)
                        return 0
                for batch in self._batches(await asyncio.to_thread(self.log.sealed_segments)):
                    if self._role_version != role:  # the role changed meanwhile: the next pass decides
                        break
                    uploaded += await self._upload_batch(batch, epoch)
            except FencedLeaderEpochError as err:
                self._fence(err, role)
            self._prune_marks()
            return uploaded

    def _fence(self, err: FencedLeaderEpochError, role: int) -> None:
        """A newer leader epoch wrote the manifest: stop writing until the role changes (unless it
        already changed since ``role``, the role version the refused write ran under)."""
        if role != self._role_version:
            return
        if not self.fenced:
            log.info("%s-%d: fenced (%s); no remote writes until the role changes",
                     self.topic, self.partition, err.message)  # fmt: skip
        self.fenced = True
        self.last_error = None

    def _batches(self, sealed: list[SegmentInfo]) -> list[list[SegmentInfo]]:
        """:func:`~.plans.upload_batches` of ``sealed`` past the remote data. Under a leader epoch,
        planning stops at the first segment that is not wholly below the high watermark (the engine's
        ``high_watermark``; the log end when it has none)."""
        limit = self.log.log_end_offset
        if self._leader_epoch is not None:
            limit = min(limit, getattr(self.log, "high_watermark", limit))
        return upload_batches(
            sealed,
            done=self.remote_next_offset,
            limit=limit,
            max_bytes=self.upload_batch_bytes,
            max_segments=self.upload_batch_segments,
        )

    async def _upload_batch(self, batch: list[SegmentInfo], epoch: int | None) -> int:
        """Upload one batch (see :func:`upload_segments`); returns how many segments were committed.
        A single segment straddling the remote end is uploaded as a trimmed copy (see :mod:`.trim`) made
        in the partition directory and deleted afterwards. Lock held. Raises the error that stopped the
        batch, after keeping the prefix that succeeded; :class:`FencedLeaderEpochError` as is (not counted
        as a failure)."""
        if self.log.recovery_point < batch[-1].next_offset:
            # never let the bucket hold data the local log could lose in a crash
            await asyncio.to_thread(self.log.flush)
        done = self.remote_next_offset
        trim_dir = self.log.path / TRIM_DIR
        if len(batch) == 1 and done is not None and batch[0].base_offset < done:
            config = self.log.config
            try:
                trimmed = await asyncio.to_thread(
                    trimmed_copy,
                    batch[0],
                    done,
                    trim_dir,
                    index_bytes=config.segment_index_bytes,
                    index_interval=config.index_interval_bytes,
                )
            except (InvalidRequestError, CorruptRecordError, OSError) as err:
                await asyncio.to_thread(remove_trimmed, trim_dir)
                self.failures += 1
                self.last_error = f"trimming segment {batch[0].base_offset} at {done} failed: {err}"
                self._emit(UploadEvent("failed"))
                raise
            if trimmed is None:
                await asyncio.to_thread(remove_trimmed, trim_dir)
                return 0
            log.info("%s-%d: segment %d straddles the remote end %d: uploading it from %d",
                     self.topic, self.partition, batch[0].base_offset, done, trimmed.base_offset)  # fmt: skip
            batch = [trimmed]
        try:
            return await self._upload(batch, epoch)
        finally:
            if batch[0].log_path.parent == trim_dir:
                await asyncio.to_thread(remove_trimmed, trim_dir)

    async def _upload(self, batch: list[SegmentInfo], epoch: int | None) -> int:
        started = time.monotonic()
        epochs = [segment_epochs(self.log, info.base_offset, info.next_offset - 1) for info in batch]
        try:
            result = await upload_segments(
                self.store, self.manifests, self.topic, self.partition, batch, self._clock,
                file_concurrency=self.upload_file_concurrency,
                pack_indexes=self.pack_indexes,
                leader_epoch=epoch,
                leader_epochs=epochs,
            )  # fmt: skip
            error = result.error
        except Exception as err:
            result, error = None, err
        if result is not None and result.segments:
            self._manifest = result.manifest
            seconds = (time.monotonic() - started) / len(result.segments)
            for sent in result.bytes_uploaded:
                self.uploaded_segments += 1
                self.uploaded_bytes += sent
                self._emit(UploadEvent("uploaded", 1, sent, seconds))
        if isinstance(error, FencedLeaderEpochError):
            raise error
        if error is not None:
            self._needs_cleaning = True  # copy_started entries are in the bucket, not in memory
            self._needs_recovery = isinstance(error, CorruptRecordError)
            self.failures += 1
            self.last_error = f"{type(error).__name__}: {error}"
            self._emit(UploadEvent("failed"))
            raise error
        self.last_error = None
        return len(result.segments) if result is not None else 0

    async def apply_retention(self, *, retention_ms: int, retention_bytes: int, local_only_bytes: int) -> int:
        """Whole-log retention of the remote tier: delete the oldest remote segments past the limits,
        raising the manifest's log start offset. Returns the new remote start offset (or -1 when nothing
        was deleted). Only a leading, unfenced remote log deletes (else -1); a fenced deletion stops as
        :meth:`sync` does. Idempotent; serialised per partition.

        Raises:
            UnavailableError, ConflictError: the store or the manifest commit failed; re-run to finish.
        """
        async with self._lock:
            if not self._leading or self.fenced:
                return -1
            role, epoch = self._role_version, self._leader_epoch
            doomed = remote_retention_plan(
                mf.readable_segments(self._manifest),
                now_ms=self._clock.now_ms(),
                retention_ms=retention_ms,
                retention_bytes=retention_bytes,
                local_only_bytes=local_only_bytes,
            )
            if not doomed or self.diverged:
                return -1
            start = doomed[-1].last_offset + 1
            try:
                self._manifest = await delete_segments(
                    self.store,
                    self.manifests,
                    self.topic,
                    self.partition,
                    [s.segment_uuid for s in doomed],
                    log_start_offset=start,
                    leader_epoch=epoch,
                )
            except FencedLeaderEpochError as err:
                self._fence(err, role)
                return -1
            except Exception:
                self._needs_cleaning = True
                raise
            self._emit(UploadEvent("deleted", len(doomed), sum(s.size_bytes for s in doomed)))
            return start

    async def delete_all(self) -> int:
        """Delete every remote object of the partition: segments through the deletion protocol, then
        every key under the partition's prefix (manifests and any stray object) last. Returns how many
        objects were removed by the final sweep. Idempotent.

        Raises:
            UnavailableError: the store failed; re-run (or ``tierlog tiering check``) to finish.
        """
        async with self._lock:
            try:
                manifest = await self.manifests.load(self.topic, self.partition)
            except CorruptRecordError:  # damaged: the sweep below removes every object all the same
                manifest = mf.empty(self.topic, self.partition)
            live = [s.segment_uuid for s in manifest.segments]
            if live:
                await delete_segments(self.store, self.manifests, self.topic, self.partition, live)
                self._emit(UploadEvent("deleted", len(live), sum(s.size_bytes for s in manifest.segments)))
            keys = [info.key async for info in self.store.list(partition_prefix(self.topic, self.partition))]
            manifests = [key for key in keys if parse_manifest_key(key) is not None]
            others = [key for key in keys if parse_manifest_key(key) is None]
            if others:  # segment objects first: a crash here leaves a manifest that still lists nothing
                await self.store.delete_many(others)
            if manifests:
                await self.store.delete_many(manifests)
            self._manifest = mf.empty(self.topic, self.partition)
            return len(keys)

    def note_failure(self, err: BaseException) -> None:
        """Count a failed pass whose error this remote log did not count itself (an open, a clean-up or a
        manifest load that failed before any upload): ``failures`` +1, ``last_error`` set (unless it says
        why uploads are stopped), a ``failed`` event. Event-loop only; never raises."""
        self.failures += 1
        if not (self.diverged or self._unsaved_recovery):
            self.last_error = f"{type(err).__name__}: {err}"
        self._emit(UploadEvent("failed"))

    def note_success(self) -> None:
        """A pass ran without error: ``last_error`` is cleared unless it is why uploads are stopped
        (:attr:`blocked_reason`). Idempotent; event-loop only."""
        if self.blocked_reason is None:
            self.last_error = None

    def _emit(self, event: UploadEvent) -> None:
        if self._listener is not None:
            try:
                self._listener(event)
            except Exception:
                log.exception("remote log listener failed")
