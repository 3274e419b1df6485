"""One partition as the web layer sees it: an async face over the synchronous partition log.

Every engine call runs in a worker thread. Long-polling readers wait on per-partition ``asyncio.Event``s
that are replaced on every wake-up, so a reader that took the event before reading cannot miss a change
that lands between its read and its wait. There are two: replicas (followers' fetches) are woken by
appends, consumers by advances of the high watermark, the offset below which they may read.

**Roles** (design 0010). The :class:`~tierlog.service.replication.manager.ReplicaManager` moves a partition
between ``leader`` (with a
``LeaderState`` that computes the high watermark from the followers' fetch offsets) and ``follower`` (its
fetcher appends the leader's batches with :meth:`Partition.append_as_follower`); a follower refuses
produces and consumer reads with the error the manager set (50310 naming the leader, or 50311).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from tierlog.service.log_limit import LogLimiter
from tierlog.service.topics.page_cache import warm_pages
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    TierlogError,
    UnavailableError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from tierlog.service.metrics import Metrics
    from tierlog.service.remote.remote_partition import RemotePartition
    from tierlog.service.replication.leader import LeaderState
    from tierlog.tiering.log import AppendInfo, FileSlice, LogConfig, PartitionLog, ReadResult
    from tierlog.tiering.log.leader_epoch import EpochEntry

__all__ = ["BACKGROUND_ERROR_LOG_INTERVAL_S", "Partition"]

log = logging.getLogger("tierlog.partition")

#: A failed acks=0 append is logged (WARNING) at most once per this interval per partition, with the count of
#: failures since the last line; ``tierlog_background_append_errors_total`` counts every one.
BACKGROUND_ERROR_LOG_INTERVAL_S = 10.0

Spawn = Callable[[Coroutine[Any, Any, None], str], object]
T = TypeVar("T")
Role = Literal["leader", "follower"]
# Refusals of a producer's batch by its sequence (design 0011), by their Kafka error names
SEQUENCE_ERRORS = {
    OutOfOrderSequenceError: "OUT_OF_ORDER_SEQUENCE_NUMBER",
    ProducerFencedError: "PRODUCER_FENCED",
    DuplicateSequenceError: "DUPLICATE_SEQUENCE_NUMBER",
}


def _nothing(result: ReadResult) -> None:
    """The work of a plain consumer read (never run: ``then_up_to`` is -1)."""


class Partition:
    """An open partition of a topic.

    All methods are safe to call concurrently from the event loop. Once the topic is deleted (or the
    broker closes) every call raises :class:`UnknownTopicError` (40401) and pending long polls return early.

    A partition opens as a ``follower`` refusing clients (50311) until the replica manager gives it a role
    (a single broker leads every partition it holds), and its high watermark moves only as the manager's
    :class:`LeaderState` or the leader's fetch answers say. ``min_insync_replicas`` reads the topic's
    ``min.insync.replicas`` at each ``acks=all`` produce; set by the cluster node after opening.
    """

    def __init__(
        self,
        topic: str,
        index: int,
        partition_log: PartitionLog,
        path: Path,
        metrics: Metrics,
        spawn: Spawn,
        config: LogConfig,
        *,
        executor: Executor | None = None,
    ) -> None:
        self.topic = topic
        self.index = index
        self.path = path
        self._log = partition_log
        self._metrics = metrics
        self._spawn = spawn
        self._executor = executor  # log I/O threads (``log.io.threads``); None: the loop's default
        self._data = asyncio.Event()
        self._closed = False
        self._closed_reason: TierlogError | None = None
        self._interrupted = False
        self._inflight = 0
        self._leader_appends = 0  # appends past the leader check, not yet written (see drain_leader_appends)
        self._leader_appends_done = asyncio.Event()
        self._leader_appends_done.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._background = asyncio.Lock()
        self._background_errors = LogLimiter(BACKGROUND_ERROR_LOG_INTERVAL_S)
        self.config = config  # the live log's config: an immutable snapshot, replaced by update_config
        self.remote: RemotePartition | None = None
        self.role: Role = "follower"
        self.leader_epoch = -1
        self.leader: LeaderState | None = None  # set while leading
        self.min_insync_replicas: Callable[[], int] = lambda: 1
        self.on_follower_fetch: Callable[[int], None] | None = None  # the manager's ISR poke
        self._refusal: TierlogError | None = LeaderNotAvailableError(
            f"partition {topic}-{index} is opening on this broker"
        )
        self._committed = asyncio.Event()  # replaced on every high watermark advance: consumer long polls

    @property
    def label(self) -> str:
        return f"{self.topic}-{self.index}"

    @property
    def log(self) -> PartitionLog:
        """The engine object, for the uploader and tools. Call it from worker threads only."""
        return self._log

    @property
    def closed(self) -> bool:
        return self._closed

    def attach_remote(self, remote: RemotePartition) -> None:
        """Serve reads below the local log start from ``remote`` and apply tiered retention. Idempotent."""
        self.remote = remote

    @property
    def log_start_offset(self) -> int:
        """The first offset a fetch may ask for: the remote tier's when it holds data, else the local one."""
        local = int(self._log.log_start_offset)
        return local if self.remote is None else self.remote.log_start_offset(local)

    @property
    def local_log_start_offset(self) -> int:
        return int(self._log.log_start_offset)

    @property
    def log_end_offset(self) -> int:
        return int(self._log.log_end_offset)

    @property
    def high_watermark(self) -> int:
        return int(self._log.high_watermark)

    @property
    def size_bytes(self) -> int:
        return int(self._log.size_bytes)

    @property
    def offline_reason(self) -> str | None:
        """Why the log is offline after a failed append or roll (it recovers by itself), else None."""
        return self._log.offline_reason

    @property
    def failure_count(self) -> int:
        """How many times the log went offline since it was opened."""
        return int(self._log.failure_count)

    async def append(
        self,
        batches: bytes | memoryview,
        *,
        acks: int = 1,
        timeout_ms: int = 30_000,
        check: Callable[[], object] | None = None,
        written: Callable[[], None] | None = None,
    ) -> AppendInfo:
        """Validate and append whole v2 batches, assigning offsets; wake long-polling readers.

        ``check`` (the native route's record-by-record validation) runs in the same worker thread right
        before the log append, outside the log's lock: one hand-over to a worker per request instead of
        two. Whatever it raises fails the append before anything is written. ``written`` is called on the
        event loop once the log has stored the batches and no longer reads ``batches`` (before an
        ``acks=all`` append waits for its replicas); not when the append fails.

        Leader only. ``acks`` 1 (and 0, see :meth:`append_in_background`) answers after the local append
        and the flush the topic's policy requires. ``acks`` -1 (all): in a cluster the ISR must hold at
        least ``min.insync.replicas`` replicas before anything is appended, and the call answers once the
        high watermark passes the last appended offset (every in-sync replica has the batches; a
        single broker is its own ISR). The leader stamps its leader
        epoch into every batch. Batches with a producer id are deduplicated (design 0011): a duplicate
        appends nothing, answers its first offsets (``info.duplicate``), counts in
        ``tierlog_produce_duplicates_total`` and, with ``acks=all``, still waits for them to be committed;
        batches without one append again when retried. Raises:
            CorruptRecordError: a batch fails validation (nothing is appended).
            RecordTooLargeError: a batch exceeds ``max.message.bytes`` (nothing is appended).
            UnknownTopicError: the topic was deleted.
            NotLeaderOrFollowerError (50310) / LeaderNotAvailableError (50311): this replica does not lead
                (also when leadership is lost while an ``acks=all`` append waits).
            NotEnoughReplicasError (50313): ``acks=all`` with the ISR below ``min.insync.replicas``.
            NotEnoughReplicasAfterAppendError (50314): appended and replicated, but the ISR shrank below
                ``min.insync.replicas`` meanwhile.
            ProduceTimedOutError (50318): appended, not replicated to the ISR within ``timeout_ms``.
            OutOfOrderSequenceError (40906), ProducerFencedError (40907), DuplicateSequenceError (40908):
                refused by the producer state (nothing appended; counted in
                ``tierlog_produce_sequence_errors_total``); InvalidRequestError (42201): a bad producer
                identity, a transactional batch, a duplicate after a new batch.
        """
        self._check_leader()
        remote = self.remote
        if remote is not None:
            remote.check_budget(len(batches))
        async with self._operation():
            self._check_leader()
            leader = self.leader  # the role and epoch this append runs under, read together
            assert leader is not None  # set with the leader role (see lead)
            if acks == -1:
                leader.check_min_isr(self.min_insync_replicas())
            epoch = self.leader_epoch
            self._leader_appends += 1  # no await since the role check: a role change waits for it
            self._leader_appends_done.clear()
            try:
                info, size, end = await self._run(self._append_and_measure, batches, epoch, check)
            except tuple(SEQUENCE_ERRORS) as err:
                error = SEQUENCE_ERRORS.get(type(err), str(err.code))
                self._metrics.inc("tierlog_produce_sequence_errors_total", topic=self.topic, error=error)
                raise
            finally:
                self._leader_appends -= 1
                if not self._leader_appends:
                    self._leader_appends_done.set()
            if written is not None:
                written()
            duplicate = info.duplicate
            if remote is not None and not duplicate:
                remote.note_append(info.base_offset, size, end)
        if duplicate:
            self._metrics.inc("tierlog_produce_duplicates_total", topic=self.topic)
        else:
            self._metrics.inc("tierlog_bytes_in_total", len(batches), topic=self.topic)
            self._metrics.inc("tierlog_records_in_total", info.record_count, topic=self.topic)
            self._wake()
        if leader is self.leader:
            self.advance_high_watermark(leader.on_local_append())
        if acks == -1:
            await leader.wait_committed(info.last_offset, max(timeout_ms, 0) / 1000, self.min_insync_replicas)
        return info

    def append_in_background(self, batches: bytes, on_done: Callable[[], None] | None = None) -> None:
        """Append ``batches`` in a task owned by the broker (acks=0); returns at once.

        Background appends to one partition run in the order of these calls. A failure loses the records
        (the producer asked for no acknowledgement): it is counted in
        ``tierlog_background_append_errors_total`` and logged at WARNING, at most once per
        :data:`BACKGROUND_ERROR_LOG_INTERVAL_S` per partition. ``on_done`` is called when the append
        ends, whatever its outcome (a byte budget gives its bytes back there). Raises UnknownTopicError
        if the topic is gone (then ``on_done`` is not called).
        """
        self._check_open()
        self._spawn(self._append_later(batches, on_done), f"tierlog-append-{self.label}")

    async def read(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        replica_id: int | None = None,
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``; long-polls until ``min_bytes`` are available.

        Consumers (``replica_id`` None) read the leader's committed records only: below the high watermark
        (an offset in ``[high watermark, log end offset]`` answers no data), woken by high watermark
        advances. A follower's replica fetch (``replica_id``: its broker id) reads up to the log end offset,
        woken by appends; its ``offset`` is its log end offset and is reported to the leader state first
        (it may advance the high watermark and the ISR). Returns as soon as at least
        ``min(min_bytes, max_bytes)`` bytes are available past ``offset`` or ``max_wait_ms`` has elapsed
        (then possibly with no data). Idempotent. Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
            OffsetMovedToTieredStorageError (41602): a replica fetch below the local log start of a tiered
                partition.
            NotLeaderOrFollowerError / LeaderNotAvailableError: this replica does not lead.
            UnknownTopicError: the topic was deleted.
            CorruptRecordError, UnavailableError: a remote read failed (the bytes or the store).
        """
        if replica_id is None:  # a consumer's: read_then with nothing to run
            answer = await self.read_then(
                offset, max_bytes, _nothing, then_up_to=-1, max_wait_ms=max_wait_ms, min_bytes=min_bytes
            )
            return answer[0]
        self._replica_fetched(replica_id, offset)
        result: ReadResult = await self._poll(
            lambda: self._log.read(offset, max_bytes),
            lambda r: len(r.data),
            max_wait_ms,
            min(min_bytes, max_bytes),
            replica=True,
        )
        self._metrics.inc("tierlog_bytes_out_total", len(result.data), topic=self.topic)
        return result

    async def read_then(
        self,
        offset: int,
        max_bytes: int,
        then: Callable[[ReadResult], T],
        *,
        then_up_to: int,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> tuple[ReadResult, T | None]:
        """A consumer's :meth:`read` (which is this with nothing to run), and ``then(result)`` run in the
        log I/O thread that read the bytes, right after a local read that answers with at most
        ``then_up_to`` bytes (one hand-over to a worker per request instead of two: the REST fetch renders
        its JSON this way).

        ``then`` must be pure CPU work on the result, short at ``then_up_to`` bytes: it holds one of the
        ``log.io.threads`` meanwhile, which appends, reads and flushes wait for. It must not answer None.
        The second item is None when ``then`` did not run: the bytes came from the remote tier, the result
        is larger than ``then_up_to``, or the long poll ended with fewer than ``min_bytes``; the caller
        runs it then. Whatever ``then`` raises is raised here. Raises: as :meth:`read`.
        """
        wait = min(min_bytes, max_bytes)
        self._check_leader()

        def read_local() -> tuple[ReadResult, T | None]:
            result = self._log.read(offset, max_bytes, max_offset=self.high_watermark)
            size = len(result.data)
            return result, then(result) if wait <= size <= then_up_to else None

        answer: tuple[ReadResult, T | None] | ReadResult = await self._local_or_remote(
            offset,
            lambda: self._poll(read_local, lambda pair: len(pair[0].data), max_wait_ms, wait),
            lambda remote: remote.read(offset, max_bytes, self._ranges),
        )
        if not isinstance(answer, tuple):  # a ReadResult from the remote tier
            answer = (answer, None)
        self._metrics.inc("tierlog_bytes_out_total", len(answer[0].data), topic=self.topic)
        return answer

    async def read_slice(
        self,
        offset: int,
        max_bytes: int,
        *,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
        replica_id: int | None = None,
        from_follower: bool = False,
    ) -> FileSlice:
        """As :meth:`read`, but the bytes as a file region for ``sendfile``; the caller closes the slice.

        Remote bytes come in an anonymous memory file (consumers only). ``from_follower``: a consumer may
        read a follower too (KIP-392), up to the follower's high watermark. Raises: as :meth:`read`.
        """
        wait = min(min_bytes, max_bytes)
        if replica_id is not None:
            self._replica_fetched(replica_id, offset)
            result: FileSlice = await self._poll(
                lambda: warm_pages(self._log.read_slice(offset, max_bytes)),
                lambda s: int(s.size),
                max_wait_ms,
                wait,
                discard=lambda s: s.close(),
                replica=True,
            )
        else:
            if from_follower and self.serves_follower_reads:
                self._check_open()
            else:
                self._check_leader()
            result = await self._local_or_remote(
                offset,
                lambda: self._poll(
                    lambda: warm_pages(
                        self._log.read_slice(offset, max_bytes, max_offset=self.high_watermark)
                    ),
                    lambda s: int(s.size),
                    max_wait_ms,
                    wait,
                    discard=lambda s: s.close(),
                ),
                lambda remote: remote.read_slice(offset, max_bytes, self._ranges),
            )
        self._metrics.inc("tierlog_bytes_out_total", result.size, topic=self.topic)
        return result

    @property
    def serves_follower_reads(self) -> bool:
        """Whether this replica follows a known leader epoch, so a consumer may read it (KIP-392)."""
        return self.role == "follower" and self.leader_epoch >= 0 and not self._closed

    def committed_signal(self) -> asyncio.Event:
        """The event set at this partition's next high watermark advance (and at a role change, retention,
        :meth:`interrupt` or :meth:`close`; already set once interrupted or closed). Take it before a read
        and wait on it after, and no advance between the two is missed: how a Kafka fetch over several
        partitions long-polls them all at once. Event-loop only; cheap."""
        if self._interrupted or self._closed:
            done = asyncio.Event()
            done.set()
            return done
        return self._committed

    # ---- replication: the leader's side ------------------------------------------------------------------

    def _replica_fetched(self, replica_id: int, offset: int) -> None:
        """A follower fetches at ``offset`` (its log end offset): check the role and the range, tell the
        leader state (which may advance the high watermark), poke the ISR manager."""
        self._check_open()
        self._check_leader()
        local_start = int(self._log.log_start_offset)
        if offset < local_start and self.remote is not None:
            raise OffsetMovedToTieredStorageError(
                f"offset {offset} of {self.label} is in the remote tier (local log starts at {local_start})",
                log_start_offset=self.log_start_offset,
                log_end_offset=self.log_end_offset,
                local_log_start_offset=local_start,
            )
        leader = self.leader
        if leader is not None and local_start <= offset <= self.log_end_offset:
            self.advance_high_watermark(leader.on_follower_fetch(replica_id, offset))
            poke = self.on_follower_fetch
            if poke is not None:
                poke(replica_id)

    def advance_high_watermark(self, high_watermark: int | None) -> None:
        """Publish a high watermark the leader state computed (``None``: it did not move) and wake the
        consumers' long polls. Event-loop only; idempotent; a no-op once closed."""
        if high_watermark is None or self._closed:
            return
        if high_watermark != self.high_watermark:
            self._log.update_high_watermark(high_watermark)
            self._wake_committed()

    async def assign_leader_epoch(self, epoch: int) -> int:
        """Record that leader epoch ``epoch`` starts at the current log end offset (the partition is about
        to lead it); returns that offset. Call while no append runs (the partition is not leading yet).
        Idempotent. Raises UnknownTopicError once closed."""
        async with self._operation():
            return await self._run(self._assign_epoch, epoch)

    def _assign_epoch(self, epoch: int) -> int:
        end = int(self._log.log_end_offset)
        self._log.epochs.assign(epoch, end)
        return end

    def lead(self, leader: LeaderState, leader_epoch: int) -> None:
        """Start leading at ``leader_epoch`` with ``leader`` computing the high watermark (the replica
        manager calls this). Event-loop only."""
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.role = "leader"
        self._refusal = None
        self.advance_high_watermark(leader.high_watermark)
        self.advance_high_watermark(leader.on_local_append())

    async def drain_leader_appends(self) -> None:
        """Wait until every append that passed the leader check has written or failed. The replica manager
        calls it after :meth:`follow` (before a fetcher decides where to truncate) and before a new leader
        epoch is assigned, so no batch of an old epoch lands after a role change (Kafka's
        ``leaderIsrUpdateLock``). Event-loop only; idempotent."""
        await self._leader_appends_done.wait()

    def follow(self, leader_epoch: int, reason: TierlogError) -> None:
        """Stop leading (if it did): the leader state fails its ``acks=all`` waiters with ``reason``, which
        produces and consumer reads raise from now on (50310 naming the new leader, or 50311). Event-loop
        only; idempotent."""
        leader, self.leader = self.leader, None
        self.role = "follower"
        self.leader_epoch = leader_epoch
        self._refusal = reason
        if leader is not None:
            leader.close(reason)
        self._wake()
        self._wake_committed()

    # ---- replication: the follower's side ----------------------------------------------------------------

    async def append_as_follower(self, batches: bytes) -> int:
        """Append the leader's batches with their offsets and leader epochs kept; returns the new log end
        offset. Follower only. Raises NotLeaderOrFollowerError (this replica leads), CorruptRecordError,
        UnknownTopicError; not idempotent (the fetcher appends each fetched range once)."""
        if self.role != "follower":
            raise NotLeaderOrFollowerError(f"{self.label} leads here: it does not append as a follower")
        if not batches:
            return self.log_end_offset
        async with self._operation():
            info, size, end = await self._run(self._append_follower, batches)
            remote = self.remote
            if remote is not None:
                remote.note_append(info.base_offset, size, end)
        self._metrics.inc("tierlog_replication_bytes_in_total", len(batches), topic=self.topic)
        self._wake()
        return end

    def _append_follower(self, batches: bytes) -> tuple[AppendInfo, int, int]:
        info = self._log.append(batches, assign_offsets=False)
        return info, int(self._log.size_bytes), int(self._log.log_end_offset)

    async def truncate_to(self, offset: int) -> None:
        """Drop every record at or past ``offset`` (a follower's log diverging from its leader's, KIP-101);
        the high watermark and the leader epochs follow. Idempotent. Raises UnknownTopicError."""
        async with self._operation():
            await self._run(self._log.truncate_to, offset)
        self._wake_committed()

    async def reset_to(self, offset: int, epochs: Sequence[EpochEntry]) -> None:
        """Empty the local log and start it at ``offset`` with ``epochs`` (the entries below it), as a
        follower building from the remote tier or past the leader's log start does. Raises
        UnknownTopicError."""
        async with self._operation():
            await self._run(self._log.reset_to, offset, epochs)
        self._wake_committed()

    def set_follower_high_watermark(self, leader_hw: int) -> None:
        """A follower's high watermark: ``min(leader_hw, own log end offset)``. Event-loop only; no-op
        once closed."""
        if self._closed:
            return
        hw = min(leader_hw, self.log_end_offset)
        if hw != self.high_watermark:
            self._log.update_high_watermark(hw)
            self._wake_committed()

    async def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        """``(largest epoch <= epoch, its end offset)`` by this log's leader epochs (Kafka's
        OffsetsForLeaderEpoch); ``(-1, -1)`` when ``epoch`` is older than every entry. Raises
        UnknownTopicError."""
        async with self._operation():
            found = await self._run(self._log.epoch_end_offset, epoch)
        return int(found[0]), int(found[1])

    async def checkpoint_high_watermark(self) -> None:
        """Write the high watermark to ``replication-offset-checkpoint`` (periodic; ``close`` writes it
        too). No-op once closed. Raises UnavailableError on an I/O error."""
        if self._closed:
            return
        async with self._operation():
            await self._run(self._log.checkpoint_high_watermark)

    async def remove_expired_producers(self, now_ms: int, expiration_ms: int) -> int:
        """Drop producer ids idle ``expiration_ms`` or more (design 0011) in a worker thread; how many.
        Idempotent; no-op once closed."""
        if self._closed:
            return 0
        async with self._operation():
            return await self._run(self._log.remove_expired_producers, now_ms, expiration_ms)

    async def offset_for_timestamp(self, ts: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first batch whose max timestamp is at or after ``ts``, else None.

        Idempotent. Raises UnknownTopicError if the topic was deleted.
        """
        async with self._operation():
            found = None if self.remote is None else await self.remote.offset_for_timestamp(ts)
            if found is None:
                found = await self._run(self._log.offset_for_timestamp, ts)
        return None if found is None else (int(found[0]), int(found[1]))

    async def update_config(self, config: LogConfig) -> None:
        """Apply a new config to the live log. Idempotent. Raises UnknownTopicError if the topic is gone."""
        async with self._operation():
            await self._run(self._log.update_config, config)
        self.config = config

    async def maybe_roll_and_flush(self) -> None:
        """Roll by ``segment.ms`` and fsync by ``flush.ms`` if due. Idempotent; no-op once closed."""
        if self._closed:
            return
        async with self._operation():
            try:
                await self._run(self._roll_and_flush)
            except UnavailableError:
                if self._log.offline_reason is None:
                    raise
                # offline: each call retries recovery; the engine logged why, /ready and metrics show it

    async def apply_retention(self) -> int:
        """Delete sealed segments past the retention limits; returns how many. No-op once closed."""
        if self._closed:
            return 0
        async with self._operation():
            if self.remote is not None:
                deleted = await self.remote.apply_retention(self.config)
            else:
                deleted = await self._run(self._log.apply_retention)
        if deleted:
            self._metrics.inc("tierlog_segments_deleted_total", len(deleted), topic=self.topic)
            self._wake()
            self._wake_committed()
        return len(deleted)

    async def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (-1: the high watermark), as Kafka's DeleteRecords
        does on the leader; followers follow on their next fetch. Returns the new log start offset.
        Idempotent.

        Raises:
            NotLeaderOrFollowerError: this broker does not lead the partition.
            OffsetOutOfRangeError: ``offset`` is past the high watermark (or negative but not -1).
            InvalidRequestError: the remote tier holds data of the partition (not supported yet).
            UnavailableError: an I/O error, or the partition closed.
        """
        async with self._operation():
            self._check_leader()
            if self.remote is not None and self.remote.remote_log.remote_start_offset is not None:
                raise InvalidRequestError(
                    f"deleting records of {self.label} is not supported: its remote tier holds data"
                )
            wanted = self.high_watermark if offset == -1 else offset
            start = await self._run(self._log.delete_records_before, wanted)
        self._wake()
        self._wake_committed()
        return int(start)

    async def follow_log_start_offset(self, leader_start: int) -> None:
        """As a follower, move the log start offset up to the leader's ``leader_start`` (records deleted
        on the leader), at most to this replica's high watermark. No-op for a tiered partition. Idempotent."""
        start = min(leader_start, self.high_watermark)
        if self.remote is None and start > self.local_log_start_offset:
            async with self._operation():
                await self._run(self._log.delete_records_before, start)

    def interrupt(self) -> None:
        """End pending long polls now, with whatever data they have, and stop waiting from now on.

        Used at shutdown so open fetches answer at once. Idempotent.
        """
        self._interrupted = True
        self._wake()
        self._wake_committed()

    async def close(self, reason: TierlogError | None = None) -> None:
        """Stop accepting calls, wake long polls, wait for calls in flight, then flush and close the log.

        ``reason`` is what later calls raise (a broker that stops leading the partition passes a
        NotLeaderOrFollowerError naming the new leader); by default they raise UnknownTopicError, the
        topic being deleted or the broker closing. Idempotent. Raises UnavailableError if the final flush
        fails (the log is closed anyway).
        """
        if self._closed:
            return
        self._closed = True
        self._closed_reason = reason
        self._wake()
        self._wake_committed()
        await self._idle.wait()
        await self._run(self._log.close)

    def _remote_for(self, offset: int) -> RemotePartition | None:
        remote = self.remote
        if remote is not None and remote.serves(offset, int(self._log.log_start_offset)):
            return remote
        return None

    def _widen(self, err: OffsetOutOfRangeError) -> OffsetOutOfRangeError:
        """``err`` with the partition's (tiered) log start offset, when a remote tier is attached."""
        if self.remote is None or self.remote.remote_log.remote_start_offset is None:
            return err
        start, end = self.log_start_offset, self.log_end_offset
        return OffsetOutOfRangeError(
            f"offset is outside [{start}, {end}] of {self.label}", log_start_offset=start, log_end_offset=end
        )

    def _ranges(self) -> tuple[int, int, int]:
        return self.high_watermark, self.log_start_offset, self.log_end_offset

    def _append_and_measure(
        self, batches: bytes | memoryview, epoch: int, check: Callable[[], object] | None = None
    ) -> tuple[AppendInfo, int, int]:
        if check is not None:
            check()
        info = self._log.append(batches, leader_epoch=epoch)
        return info, int(self._log.size_bytes), int(self._log.log_end_offset)

    def _run(self, call: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """Run the blocking ``call(*args)`` on the log I/O executor."""
        return asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(call, *args))

    def _roll_and_flush(self) -> None:
        self._log.maybe_roll()
        self._log.maybe_flush()

    async def _append_later(self, batches: bytes, on_done: Callable[[], None] | None) -> None:
        try:
            async with self._background:
                await self.append(batches, acks=0)
        except TierlogError as err:
            self._count_background_error(str(err.code))
            held = self._background_errors.admit()
            if held is not None:
                log.warning(
                    "acks=0 append to %s failed: %s (%d); the records are lost, the producer asked for no "
                    "acknowledgement (%d more failed since the last report)",
                    self.label, err.message, err.code, held,
                )  # fmt: skip
        except Exception:
            self._count_background_error("50001")
            held = self._background_errors.admit()
            if held is not None:
                log.exception(
                    "acks=0 append to %s failed; the records are lost (%d more failed since the last report)",
                    self.label, held,
                )  # fmt: skip
        finally:
            if on_done is not None:
                on_done()

    def _count_background_error(self, code: str) -> None:
        self._metrics.inc("tierlog_background_append_errors_total", topic=self.topic, error_code=code)

    async def _local_or_remote(
        self,
        offset: int,
        local: Callable[[], Awaitable[Any]],
        remote_read: Callable[[Any], Awaitable[Any]],
    ) -> Any:
        """Serve ``offset`` from the local log, or from the remote tier when it lies below the local
        start (also when local retention passes ``offset`` during the read)."""
        remote = self._remote_for(offset)
        if remote is None:
            try:
                return await local()
            except OffsetOutOfRangeError as err:
                remote = self._remote_for(offset)
                if remote is None:
                    widened = self._widen(err)
                    if widened is err:
                        raise
                    raise widened from err
        async with self._operation():
            return await remote_read(remote)

    async def _poll(
        self,
        fetch: Callable[[], Any],
        size: Callable[[Any], int],
        max_wait_ms: int,
        min_bytes: int,
        discard: Callable[[Any], None] | None = None,
        *,
        replica: bool = False,
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_ms, 0) / 1000
        while True:
            wake = self._data if replica else self._committed
            async with self._operation():
                result = await self._run(fetch)
            remaining = deadline - loop.time()
            demoted = replica and self.role != "leader"  # follow() wakes it: answer now, the route re-checks
            if size(result) >= min_bytes or remaining <= 0 or self._closed or self._interrupted or demoted:
                return result
            if discard is not None:
                discard(result)
            if not await wait_signalled(wake, remaining):
                return await self._final(fetch)

    async def _final(self, fetch: Callable[[], Any]) -> Any:
        async with self._operation():
            return await self._run(fetch)

    def _wake(self) -> None:
        event, self._data = self._data, asyncio.Event()
        event.set()

    def _wake_committed(self) -> None:
        event, self._committed = self._committed, asyncio.Event()
        event.set()

    def _check_leader(self) -> None:
        """Raise what a client of a replica that does not lead is told (the manager's reason); once closed,
        why it closed."""
        self._check_open()
        if self.role != "leader":
            raise self._refusal or NotLeaderOrFollowerError(f"this broker does not lead {self.label}")

    def _check_open(self) -> None:
        if self._closed:
            if self._closed_reason is not None:
                raise self._closed_reason
            raise UnknownTopicError(f"Topic not found. ({self.topic})")

    @contextlib.asynccontextmanager
    async def _operation(self) -> AsyncIterator[None]:
        self._check_open()
        self._inflight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()
