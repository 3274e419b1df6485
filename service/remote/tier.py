"""The broker's remote tier: the object store, the uploader loop, remote reads, the disk budget, metrics.

One :class:`RemoteTier` per broker. The store comes from ``remote.uri`` (``<data.dir>/remote`` by default,
or ``s3://bucket/prefix`` at ``s3.endpoint.url``), stacked as backend -> retrying -> instrumented. Every
partition of a topic with ``remote.storage.enable=true`` gets a :class:`RemotePartition`. The uploader
loop (owned by the maintenance ``cleanup_ctx``, see :mod:`tierlog.service.topics.tasks`) runs an upload pass
when a
segment rolls and every ``remote.upload.interval.ms``; partitions upload in parallel, at most
``remote.upload.concurrency`` at a time, each partition's segments one after another in offset order.
The store is checked at start and before a tiered topic is created, and upload failures are logged once
per store per interval (:mod:`tierlog.service.remote.store_health`).
Design: ``docs/design/0004-uploader.md``; operations: ``docs/tiering.md``.

In a cluster (``metadata.uri`` set) only a partition's leader uploads and deletes remote data, fenced by its
leader epoch: the replica manager calls :meth:`RemoteTier.set_role` on every role change, and until it
has, an attached partition follows. A follower's pass only reloads the manifest (at most every
``remote.upload.interval.ms``) and applies local retention from it; remote reads work on every replica
(``docs/design/0010-replication.md``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tierlog.service.remote.remote_partition import RemotePartition
from tierlog.service.remote.store_health import StoreHealth
from tierlog.service.security.redact import without_userinfo
from tierlog.tiering.log import Clock, SegmentInfo
from tierlog.tiering.log.leader_epoch import EpochEntry
from tierlog.tiering.log.waits import wait_signalled
from tierlog.tiering.remote.epochs import load_remote_epoch_history
from tierlog.tiering.remote.factory import open_object_store
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.reader import RemoteReader
from tierlog.tiering.remote.remote_log import RemoteLog, UploadEvent
from tierlog.tiering.remote.retrying import RetryingStore, RetryPolicy
from tierlog.wire.errors import TierlogError, UnavailableError

if TYPE_CHECKING:
    from tierlog.service.metrics import Metrics, Sample
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.partition import Partition

__all__ = ["UPLOAD_RETRY_CAP_S", "UPLOAD_RETRY_FIRST_S", "RemoteTier", "open_remote_store"]

log = logging.getLogger("tierlog.remote")

_OPEN_TIMEOUT_S = 10.0
UPLOAD_RETRY_FIRST_S = 0.5  # the upload loop's backoff after a failed pass, doubling up to the cap
UPLOAD_RETRY_CAP_S = 2.0

_COUNTERS = (
    ("tierlog_remote_uploaded_bytes_total", "Bytes uploaded to the remote tier (with indexes), by partition"),
    ("tierlog_remote_uploaded_segments_total", "Segments uploaded to the remote tier, by partition"),
    ("tierlog_remote_upload_failures_total", "Failed upload passes (uploads, manifest loads, clean-ups)"),
    ("tierlog_remote_deleted_segments_total", "Remote segments deleted (retention, topic deletion)"),
    ("tierlog_remote_cleaned_segments_total", "Abandoned uploads and interrupted deletions cleaned up"),
    ("tierlog_remote_manifest_recoveries_total", "Damaged newest manifests recovered, by partition"),
    ("tierlog_remote_manifest_rederived_segments_total", "Segments re-derived from objects in recoveries"),
    ("tierlog_remote_read_bytes_total", "Record batch bytes served from the remote tier, by topic"),
    ("tierlog_produce_refused_disk_budget_total", "Produces refused: local disk budget full, uploads behind"),
)
_GAUGES = (
    ("tierlog_remote_upload_lag_bytes", "Local bytes not yet in the remote tier, by partition"),
    ("tierlog_remote_uploads_blocked", "1 while a partition's remote state stops its uploads (see /ready)"),
    ("tierlog_remote_upload_lag_seconds", "Age of the oldest data not yet in the remote tier, by partition"),
    ("tierlog_remote_log_start_offset", "First offset readable from the remote tier, by partition"),
    ("tierlog_remote_next_offset", "One past the last offset in the remote tier, by partition"),
    ("tierlog_remote_size_bytes", "Bytes of readable remote segments, by partition"),
    ("tierlog_remote_segments", "Readable remote segments, by partition"),
    ("tierlog_remote_store_retries", "Object-store requests retried by the broker (since start)"),
    ("tierlog_remote_store_requests", "Object-store requests, by operation (since start)"),
    ("tierlog_remote_store_errors", "Object-store request errors, by operation (since start)"),
    ("tierlog_remote_reader_stat", "Remote read path counters (cache hits/misses, remote bytes), by stat"),
    ("tierlog_remote_cache_hits", "Remote read chunk-cache hits (since start)"),
    ("tierlog_remote_cache_misses", "Remote read chunk-cache misses (since start)"),
    ("tierlog_remote_fetched_bytes", "Bytes fetched from the object store by remote reads (since start)"),
)


def open_remote_store(settings: Settings) -> ObjectStore:
    """The backend ``remote.uri`` names, without wrappers. Blocking for a local directory (creates it).

    Raises:
        InvalidRequestError: a malformed URI.
    """
    if settings.remote_uri.scheme != "s3":
        return open_object_store(str(settings.remote_uri), retry=None)
    return open_object_store(
        str(settings.remote_uri),
        endpoint_url=settings.s3_endpoint_url,
        retry=None,
        connect_timeout=settings.s3_connect_timeout_ms / 1000,
        read_timeout=settings.s3_read_timeout_ms / 1000,
        read_threads=settings.remote_log_reader_threads,
        upload_threads=settings.remote_upload_part_threads,
    )


def store_name(settings: Settings) -> str:
    """``remote.uri`` (and the S3 endpoint when one is set) without credentials, for logs and answers."""
    name = without_userinfo(str(settings.remote_uri))
    if settings.remote_uri.scheme == "s3" and settings.s3_endpoint_url:
        name += f" at {without_userinfo(settings.s3_endpoint_url)}"
    return name


def _blocked(remote: RemotePartition) -> str | None:
    rl = remote.remote_log
    if not remote.opened and rl.last_error is not None:
        return rl.last_error
    return rl.blocked_reason


class RemoteTier:
    """The remote tier of one broker. Event-loop only (the metrics collector also runs in threads)."""

    def __init__(
        self,
        settings: Settings,
        metrics: Metrics,
        clock: Callable[[], Clock],
        *,
        store: ObjectStore | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._clock = clock
        self._given_store = store
        self._retry = retry or RetryPolicy(deadline=settings.remote_retry_deadline_ms / 1000)
        self._retrying: RetryingStore | None = None
        self._backend: ObjectStore | None = None
        self.health = StoreHealth(store_name(settings))
        self._store: InstrumentedStore | None = None
        self._manifests: ManifestStore | None = None
        self._reader: RemoteReader | None = None
        self._parts: dict[tuple[str, int], tuple[Partition, RemotePartition]] = {}
        self._deletions: dict[tuple[str, int], asyncio.Task[Any]] = {}
        self._roles: dict[tuple[str, int], tuple[bool, int]] = {}  # (leading, leader epoch) per partition
        self._store_down = False
        self._failing = False  # an upload failed in the last pass: retry on a short backoff
        self._wake = asyncio.Event()
        self._changed = asyncio.Condition()
        self.passes = 0
        metrics.add_collector(self._collect)
        for name, help_text in _COUNTERS:
            metrics.describe(name, "counter", help_text)
        for name, help_text in _GAUGES:
            metrics.describe(name, "gauge", help_text)
        metrics.describe("tierlog_remote_upload_seconds", "histogram", "Time to upload one segment, by topic")

    # ---- lifecycle -------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the store (no network I/O yet). Idempotent.

        Raises:
            InvalidRequestError: a malformed ``remote.uri``.
        """
        if self._store is not None:
            return
        backend = self._given_store
        if backend is None:
            backend = await asyncio.to_thread(open_remote_store, self.settings)
        self._backend = backend
        self._retrying = RetryingStore(backend, self._retry)
        self._store = InstrumentedStore(self._retrying)
        self._manifests = ManifestStore(self._store)

    async def check_store(self) -> str | None:
        """Check the store with one request (no retries, bounded): the problem found, None when it is
        usable. Logged and kept in :attr:`health` (``/ready`` and ``/v3`` show it). Never raises but
        ``CancelledError``; safe to call again.

        Raises:
            UnavailableError: the tier is not started.
        """
        if self._backend is None:
            raise UnavailableError("the remote tier is not started")
        return await self.health.check(self._backend)

    @property
    def store(self) -> InstrumentedStore:
        """The broker's store (retrying, instrumented). Raises UnavailableError before :meth:`start`."""
        if self._store is None:
            raise UnavailableError("the remote tier is not started")
        return self._store

    @property
    def manifests(self) -> ManifestStore:
        if self._manifests is None:
            raise UnavailableError("the remote tier is not started")
        return self._manifests

    def reader(self) -> RemoteReader:
        """The shared remote reader (created on first use). Idempotent.

        Raises:
            UnavailableError: the tier is not started, or closed.
        """
        if self._reader is None:
            self._reader = RemoteReader(
                self.store,
                cache_bytes=self.settings.remote_cache_bytes,
                readahead_chunks=self.settings.remote_fetch_readahead_chunks,
            )
        return self._reader

    async def close(self) -> None:
        """Close the reader and the store. Idempotent. The uploader loop must be stopped first."""
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
        store, self._store = self._store, None
        if store is not None:
            await store.close()

    # ---- partitions ----------------------------------------------------------------------------------

    async def attach(self, partition: Partition, *, reset_local: bool = True) -> RemotePartition:
        """Give ``partition`` its remote side: load the manifest, clean unfinished uploads and (with
        ``reset_local``, for a partition just opened) start the local log after the remote data when it
        ends before it (a restore, a lost disk). A store that is down is logged and retried by the next
        upload pass. Idempotent per partition.

        Never raises for the store's sake: an unreachable store or an undecodable manifest is logged, the
        partition serves its local data (keeping every segment) and the upload passes try again.
        """
        key = (partition.topic, partition.index)
        existing = self._parts.get(key)
        if existing is not None and existing[0] is partition:
            return existing[1]
        deletion = self._deletions.get(key)
        if deletion is not None:  # a topic re-created under a deleted one's name starts from nothing
            await asyncio.wait({deletion})
        leading, leader_epoch = self._role_of(partition)
        remote_log = RemoteLog(
            self.store,
            self.manifests,
            partition.log,
            partition.topic,
            partition.index,
            self._clock(),
            listener=lambda event: self._on_event(partition, event),
            upload_batch_bytes=self.settings.remote_upload_batch_bytes,
            upload_batch_segments=self.settings.remote_upload_batch_segments,
            upload_file_concurrency=self.settings.remote_upload_file_concurrency,
            pack_indexes=self.settings.remote_upload_indexes_packed,
            leading=leading,
            leader_epoch=leader_epoch,
        )
        remote = RemotePartition(self, remote_log)
        if not self._store_down:  # one timeout at start-up is enough: the upload passes retry the rest
            try:
                await asyncio.wait_for(remote_log.open(reset_local=reset_local), _OPEN_TIMEOUT_S)
                remote.opened = True
                remote.opened_leading = leading
            except (UnavailableError, TimeoutError) as err:
                self._store_down = True
                log.warning("%s: remote tier unavailable at open (%s); will retry", partition.label, err)
            except TierlogError as err:  # e.g. a recovered manifest not stored: keep every local segment
                remote_log.last_error = remote_log.last_error or f"{type(err).__name__}: {err.message}"
                log.error("%s: remote tier state unusable (%s); not uploading", partition.label, err)
        remote.local_bytes = partition.size_bytes
        remote.local_end = partition.log_end_offset
        loop = asyncio.get_running_loop()
        segments = await asyncio.to_thread(partition.log.segments)
        remote.sealed_end = segments[-1].base_offset

        def rolled(info: SegmentInfo) -> None:
            remote.on_roll(info)
            self._wake_from_thread(loop)

        partition.log.add_roll_listener(rolled)
        partition.attach_remote(remote)
        self._parts[key] = (partition, remote)
        self._wake.set()
        return remote

    async def take_lead(self, partition: Partition, leader_epoch: int) -> None:
        """About to lead ``partition`` at ``leader_epoch``: unless its remote side was already opened as a
        leader, open it now as one, as :meth:`attach` opens a leading partition: a damaged manifest is
        recovered, unfinished uploads are cleaned, and an empty local log (a restore, a lost disk) starts
        after the remote data. Skipped while the store is known to be down (the upload passes do it).
        Idempotent. Never raises for the store's sake (logged; the upload passes retry)."""
        found = self._parts.get((partition.topic, partition.index))
        if found is None or found[0] is not partition:
            return
        remote = found[1]
        empty = partition.log_end_offset == 0
        if (remote.opened_leading and not empty) or self._store_down:
            return
        remote.remote_log.set_role(True, leader_epoch)
        self._roles[(partition.topic, partition.index)] = (True, leader_epoch)
        try:
            await asyncio.wait_for(remote.remote_log.open(reset_local=empty), _OPEN_TIMEOUT_S)
            remote.opened = remote.opened_leading = True
        except (UnavailableError, TimeoutError) as err:
            log.warning("%s: remote tier unavailable while taking the lead (%s)", partition.label, err)
        except TierlogError as err:
            log.error("%s: remote tier state unusable while taking the lead (%s)", partition.label, err)
        remote.local_end = partition.log_end_offset

    def detach(self, partition: Partition) -> RemotePartition | None:
        """Forget ``partition`` (closed or deleted) and its role. Idempotent."""
        found = self._parts.get((partition.topic, partition.index))
        if found is None or found[0] is not partition:
            return None
        del self._parts[(partition.topic, partition.index)]
        self._roles.pop((partition.topic, partition.index), None)
        return found[1]

    def _role_of(self, partition: Partition) -> tuple[bool, int | None]:
        """``(leading, leader epoch)`` for a partition being attached: the role :meth:`set_role` last gave,
        else the partition's own (a topic that starts tiering after the role was set), else follow until
        told."""
        role = self._roles.get((partition.topic, partition.index))
        if role is not None:
            return role
        epoch = getattr(partition, "leader_epoch", -1)
        if getattr(partition, "role", None) == "leader" and isinstance(epoch, int) and epoch >= 0:
            return True, epoch
        return False, None

    def set_role(self, partition: Partition, leading: bool, leader_epoch: int) -> None:
        """This broker now leads ``partition`` in ``leader_epoch`` (uploads, cleans and deletes remote
        data, every manifest write fenced by the epoch) or follows it (reloads the manifest, applies local
        retention from it). Remembered for a partition attached later (a topic that starts tiering).
        Takes effect from the next upload pass, which it starts. Idempotent; event-loop only; never raises.
        """
        key = (partition.topic, partition.index)
        self._roles[key] = (leading, leader_epoch)
        found = self._parts.get(key)
        if found is not None and found[0] is partition:
            found[1].remote_log.set_role(leading, leader_epoch)
        self._wake.set()

    async def remote_epoch_history(self, topic: str, partition: int, offset: int) -> list[EpochEntry]:
        """The leader epochs the remote tier records below ``offset`` for ``topic``-``partition``, from its
        newest manifest (for a follower that starts its log at the leader's local log start, 41602).
        Idempotent; no writes.

        Raises:
            UnavailableError: the tier is not started, or the store is down.
            CorruptRecordError: the newest manifest is damaged.
        """
        return await load_remote_epoch_history(self.manifests, topic, partition, offset)

    def deleting(self, partition: Partition, task: asyncio.Task[Any]) -> None:
        """Remember the task deleting a deleted partition's remote data (the broker's task set owns it):
        re-creating the partition waits for it."""
        key = (partition.topic, partition.index)
        self._deletions[key] = task
        task.add_done_callback(
            lambda done: self._deletions.pop(key, None) if self._deletions.get(key) is done else None
        )

    async def delete_partition_data(self, remote: RemotePartition) -> None:
        """Delete every remote object of a deleted partition. Never raises: failures are logged (the
        leak check ``tierlog tiering check`` lists what is left)."""
        label = f"{remote.remote_log.topic}-{remote.remote_log.partition}"
        try:
            removed = await remote.remote_log.delete_all()
            log.info("%s: deleted its remote data (%d objects swept)", label, removed)
        except Exception:
            log.exception("%s: deleting remote data failed; run `tierlog tiering check`", label)

    def remote_of(self, topic: str, index: int) -> RemotePartition | None:
        found = self._parts.get((topic, index))
        return None if found is None else found[1]

    # ---- uploads ---------------------------------------------------------------------------------------

    def wake(self) -> None:
        """Ask for an upload pass now. Event-loop only."""
        self._wake.set()

    def _wake_from_thread(self, loop: asyncio.AbstractEventLoop) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: the broker is gone
            loop.call_soon_threadsafe(self._wake.set)

    async def run(self, interval_s: float) -> None:
        """Run upload passes on every wake-up and every ``interval_s`` until cancelled. After a pass in
        which an upload failed, the next one comes sooner (capped exponential backoff from
        ``UPLOAD_RETRY_FIRST_S`` to ``UPLOAD_RETRY_CAP_S``): uploads resume within seconds of the store's
        return.
        """
        retry_s = UPLOAD_RETRY_FIRST_S
        while True:
            self._wake.clear()
            await self.upload_pass()
            if self._failing:
                wait_s = min(interval_s, retry_s)
                retry_s = min(UPLOAD_RETRY_CAP_S, retry_s * 2)
            else:
                wait_s, retry_s = interval_s, UPLOAD_RETRY_FIRST_S
            await wait_signalled(self._wake, wait_s)

    async def upload_pass(self) -> int:
        """One pass: every remote partition rolls if idle too long and uploads its sealed segments,
        ``remote.upload.concurrency`` partitions at a time. Returns segments uploaded. Never raises
        (failures are logged and counted and retried next pass)."""
        gate = asyncio.Semaphore(self.settings.remote_upload_concurrency)
        parts = [pair for pair in self._parts.values() if not pair[0].closed]
        self._failing = False
        results = await asyncio.gather(*(self._sync(partition, remote, gate) for partition, remote in parts))
        if parts and not self._failing:
            self.health.pass_succeeded()
        if not self._failing and self.health.problem is not None and self._backend is not None:
            # a problem the start check found, no upload to prove it gone: check again on the backoff
            self._failing = await self.health.check(self._backend) is not None
        async with self._changed:
            self.passes += 1
            self._changed.notify_all()
        return sum(results)

    async def _sync(self, partition: Partition, remote: RemotePartition, gate: asyncio.Semaphore) -> int:
        rl = remote.remote_log
        async with gate:
            counted = rl.failures
            try:
                if not remote.opened:
                    await rl.open(reset_local=False)
                    remote.opened = True
                    self._store_down = False
                uploaded = 0
                if not rl.leading:  # a follower: the leader's manifest, local retention
                    if await rl.refresh(min_interval_ms=self.settings.remote_upload_interval_ms):
                        await partition.apply_retention()
                else:
                    uploaded = await rl.sync(idle_roll_ms=self.settings.remote_max_upload_interval_ms)
                rl.note_success()
                return uploaded
            except asyncio.CancelledError:
                raise
            except Exception as err:
                self._failing = True
                if not isinstance(err, TierlogError):
                    log.exception("%s: upload failed", partition.label)
                if rl.failures == counted:  # an open, clean-up or manifest load: not counted by the log
                    rl.note_failure(err)
                self.health.upload_failed(partition.label, err)
            return 0

    async def wait_for(self, predicate: Callable[[], bool]) -> None:
        """Return once ``predicate()`` holds after some upload pass (or now). Safe concurrently."""
        async with self._changed:
            await self._changed.wait_for(predicate)

    def problems(self) -> list[tuple[str, int, str]]:
        """``(topic, partition, reason)`` of every partition whose remote state stops its uploads: not
        opened because of an error other than an unreachable store, a diverged local log, a recovered
        manifest not yet stored. Cheap, no I/O."""
        found = []
        for partition, remote in list(self._parts.values()):
            reason = _blocked(remote)
            if reason is not None and not partition.closed:
                found.append((partition.topic, partition.index, reason))
        return found

    def _on_event(self, partition: Partition, event: UploadEvent) -> None:
        labels = {"topic": partition.topic, "partition": str(partition.index)}
        if event.kind == "uploaded":
            self.metrics.inc("tierlog_remote_uploaded_segments_total", event.segments, **labels)
            self.metrics.inc("tierlog_remote_uploaded_bytes_total", event.bytes, **labels)
            self.metrics.observe("tierlog_remote_upload_seconds", event.seconds, topic=partition.topic)
        elif event.kind == "failed":
            self.metrics.inc("tierlog_remote_upload_failures_total", 1, **labels)
        elif event.kind == "deleted":
            self.metrics.inc("tierlog_remote_deleted_segments_total", event.segments, **labels)
        elif event.kind == "cleaned":
            self.metrics.inc("tierlog_remote_cleaned_segments_total", event.segments, **labels)
        elif event.kind == "recovered":
            self.metrics.inc("tierlog_remote_manifest_recoveries_total", 1, **labels)
            self.metrics.inc("tierlog_remote_manifest_rederived_segments_total", event.segments, **labels)

    # ---- produce and fetch hooks ---------------------------------------------------------------------

    def check_budget(self, size: int) -> None:
        """Raises UnavailableError (503, retriable) when ``size`` more bytes would take the local bytes of
        remote-enabled partitions past ``remote.local.disk.budget.bytes`` while uploads are behind."""
        budget = self.settings.remote_local_disk_budget_bytes
        if budget < 0:
            return
        remotes = [remote for _, remote in self._parts.values()]
        used = sum(remote.local_bytes for remote in remotes)
        if used + size <= budget:
            return
        behind = sum(1 for remote in remotes if remote.behind)
        if not behind:
            return
        self.metrics.inc("tierlog_produce_refused_disk_budget_total")
        raise UnavailableError(
            f"local disk budget full: {used} of remote.local.disk.budget.bytes={budget} used and uploads to "
            f"the remote tier are behind on {behind} partitions; retry when the object store catches up"
        )

    def count_read(self, topic: str, size: int) -> None:
        self.metrics.inc("tierlog_remote_read_bytes_total", size, topic=topic)

    # ---- describe and metrics ------------------------------------------------------------------------

    async def describe(self, partition: Partition) -> dict[str, Any]:
        """The remote state of ``partition`` for the v3 describe output (no network I/O; the local
        segment list is read in a worker thread). Idempotent.

        Raises:
            UnavailableError: the partition's log is closed.
        """
        offsets = {
            "log_start_offset": partition.log_start_offset,
            "local_log_start_offset": partition.local_log_start_offset,
            "log_end_offset": partition.log_end_offset,
        }
        remote = self.remote_of(partition.topic, partition.index)
        if remote is None or remote.remote_log.log is not partition.log:
            return {"enabled": False, **offsets}
        rl = remote.remote_log
        manifest = rl.manifest
        lag_bytes, lag_ms = rl.lag(await asyncio.to_thread(rl.log.segments))
        return {
            "enabled": True,
            **offsets,
            "upload_lag_bytes": lag_bytes,
            "upload_lag_ms": lag_ms,
            "manifest_version": manifest.version,
            "remote_log_start_offset": rl.remote_start_offset,
            "remote_next_offset": rl.remote_next_offset,
            "remote_size_bytes": rl.remote_bytes,
            "remote_segments": len([s for s in manifest.segments if s.state.value == "copy_finished"]),
            "uploaded_segments": rl.uploaded_segments,
            "uploaded_bytes": rl.uploaded_bytes,
            "upload_failures": rl.failures,
            "store_retries": self._retrying.stats.retries if self._retrying is not None else 0,
            "last_error": rl.last_error,
            "manifest_recovery": rl.manifest_recovery,
        }

    def _collect(self) -> list[Sample]:
        from tierlog.service.metrics import Sample

        samples: list[Sample] = []
        for partition, remote in list(self._parts.values()):
            if partition.closed:
                continue
            rl = remote.remote_log
            labels = {"topic": partition.topic, "partition": str(partition.index)}
            try:
                lag_bytes, lag_ms = rl.lag(rl.log.segments())
            except TierlogError:
                continue
            readable = [s for s in rl.manifest.segments if s.state.value == "copy_finished"]
            samples += [
                Sample("tierlog_remote_upload_lag_bytes", lag_bytes, labels),
                Sample("tierlog_remote_upload_lag_seconds", lag_ms / 1000, labels),
                Sample("tierlog_remote_log_start_offset", rl.remote_start_offset or 0, labels),
                Sample("tierlog_remote_next_offset", rl.remote_next_offset or 0, labels),
                Sample("tierlog_remote_size_bytes", rl.remote_bytes, labels),
                Sample("tierlog_remote_segments", len(readable), labels),
                Sample("tierlog_remote_uploads_blocked", int(_blocked(remote) is not None), labels),
            ]
        if self._retrying is not None:
            samples.append(Sample("tierlog_remote_store_retries", self._retrying.stats.retries, {}))
        store = self._store
        if store is not None:
            for op, stats in store.snapshot()["ops"].items():
                samples.append(Sample("tierlog_remote_store_requests", stats["requests"], {"op": op}))
                samples.append(Sample("tierlog_remote_store_errors", stats["errors"], {"op": op}))
        reader = self._reader
        if reader is not None:
            read_stats = reader.stats()
            for stat, value in read_stats.items():
                samples.append(Sample("tierlog_remote_reader_stat", value, {"stat": stat}))
            for name, stat in (
                ("tierlog_remote_cache_hits", "cache_hits"),
                ("tierlog_remote_cache_misses", "cache_misses"),
                ("tierlog_remote_fetched_bytes", "remote_bytes"),
            ):
                samples.append(Sample(name, read_stats[stat], {}))
        return samples
