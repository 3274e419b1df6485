"""A follower's fetch loop for one partition: truncate to where its log agrees with the leader's, then copy.

On start (the manager starts a new fetcher on every leader change) the follower first finds where its log
diverges from the leader's (KIP-101, KIP-279): it asks the leader where the follower's latest epoch ends,
and truncates to :func:`truncation_point` of the answer and of its own end for the epoch the leader named
(:func:`follower_end_offset`). When the leader names an epoch the follower never saw, the follower truncates
to where its largest older epoch ends and asks again about that one (strictly older each round), until both
agree on an epoch. A follower with no epochs, or one asking about an epoch older than any the leader knows,
truncates to its high watermark.

Then it fetches from its log end offset, appends what the leader sent at the leader's offsets
(``append_as_follower``) and keeps ``min(leader high watermark, own LEO)`` as its high watermark. Answers
that need action rather than a retry:

* 41602 (the offset is below the leader's local log start, in the remote tier, KIP-405): the follower
  takes the epoch history below the leader's local start from the remote tier (``remote_history``) and
  restarts its log there (``reset_to``), then fetches from that offset.
* 41601 (out of range): :func:`out_of_range_action` (Kafka's rule): past the leader's end, truncate to it;
  below the leader's start, restart the log at the leader's start.
* 50310/50311/50315/50316 (leadership moved, or the metadata is behind): back off
  ``replica.fetch.backoff.ms`` and try again; the manager replaces the fetcher when the metadata names a
  new leader or epoch. Any other error backs off the same way.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from tierlog.tiering.log.leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    TierlogError,
    UnknownLeaderEpochError,
    UnknownTopicError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.model import BrokerRegistration
    from tierlog.service.replication.client import ReplicaFetch, ReplicationClient
    from tierlog.service.settings.config import Settings
    from tierlog.service.topics.partition import Partition

__all__ = [
    "OutOfRange",
    "RemoteHistory",
    "ReplicaFetcher",
    "Truncation",
    "follower_end_offset",
    "out_of_range_action",
    "truncation_point",
]

log = logging.getLogger("tierlog.replication.fetcher")
T = TypeVar("T")

# ``remote_history(topic, partition, offset)``: the leader epochs of the remote tier below ``offset``.
RemoteHistory = Callable[[str, int, int], Awaitable[Sequence[EpochEntry]]]

# A newly elected leader answers these until it has taken its role (moments after the metadata names it):
# the follower retries them sooner, from FIRST_RETRY_S doubling up to replica.fetch.backoff.ms.
_LEADER_TAKING_OVER = (LeaderNotAvailableError, UnknownLeaderEpochError)
FIRST_RETRY_S = 0.05
UNINTERRUPTED_WAIT_S = 10.0  # how long a cancelled fetcher waits for its log change to end
MAX_TRUNCATION_ROUNDS = 64  # each round asks about a strictly older epoch; this only bounds a broken cache
_WAIT_FOR_METADATA = (
    NotLeaderOrFollowerError,
    LeaderNotAvailableError,
    FencedLeaderEpochError,
    UnknownLeaderEpochError,
)


@dataclass(frozen=True, slots=True)
class Truncation:
    """Where to truncate the follower's log (a no-op at or past its LEO), and whether divergence is settled
    (``done``) or the leader must be asked again about the follower's then-latest epoch."""

    offset: int
    done: bool


def truncation_point(
    leader: tuple[int, int], follower: tuple[int, int], *, log_end_offset: int, high_watermark: int
) -> Truncation:
    """Kafka's follower truncation rule (KIP-279) for one OffsetsForLeaderEpoch round. Pure.

    ``leader`` is the leader's ``(epoch, end offset)`` answer for the follower's latest epoch: the largest
    epoch it knows at or below the one asked and where that epoch ends. ``follower`` is the follower's own
    ``(epoch, end offset)`` for the epoch the leader answered (the same lookup on its own cache).

    * The leader knows no epoch that old (end offset -1): truncate to the high watermark, done.
    * The follower knows no epoch at or below the leader's: truncate to the leader's end offset, done.
    * The follower's largest such epoch is older than the leader's (the follower never saw the leader's
      epoch): truncate to where the follower's epoch ends and ask again (not done).
    * Both know the epoch: truncate to the smaller of the two end offsets, done.

    The offset is never past ``log_end_offset``.
    """
    leader_epoch, leader_end = leader
    if leader_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(high_watermark, log_end_offset), True)
    follower_epoch, follower_end = follower
    if follower_end == UNDEFINED_EPOCH_OFFSET:
        return Truncation(min(leader_end, log_end_offset), True)
    if follower_epoch != leader_epoch:
        return Truncation(min(follower_end, log_end_offset), False)
    return Truncation(min(leader_end, follower_end, log_end_offset), True)


def follower_end_offset(entries: Sequence[EpochEntry], epoch: int, log_end_offset: int) -> tuple[int, int]:
    """Kafka's ``endOffsetFor`` on the follower's own epochs, for an ``epoch`` the leader answered. Pure.

    ``(epoch, log_end_offset)`` for the latest epoch; for an older one, the largest epoch at or below it and
    the start of the next entry. An epoch below the first entry answers ``(epoch, first start)`` as Kafka
    does (every record the follower can place is newer than it: it keeps nothing from there on), where the
    log's own ``epoch_end_offset`` answers undefined. ``(-1, -1)`` with no entries or past the latest.
    """
    if not entries or epoch > entries[-1].epoch:
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
    if epoch == entries[-1].epoch:
        return epoch, log_end_offset
    if epoch < entries[0].epoch:
        return epoch, entries[0].start_offset
    i = bisect.bisect_right([e.epoch for e in entries], epoch)
    return entries[i - 1].epoch, entries[i].start_offset


@dataclass(frozen=True, slots=True)
class OutOfRange:
    """What a follower does about a 41601: ``truncate`` to ``offset`` (the leader ends before the
    follower), or ``reset`` its log to start at ``offset`` (the leader starts after the follower ends)."""

    action: str  # "truncate" or "reset"
    offset: int


def out_of_range_action(*, log_end_offset: int, leader_start: int, leader_end: int) -> OutOfRange | None:
    """Kafka's follower rule for OFFSET_OUT_OF_RANGE at the follower's ``log_end_offset``. Pure.

    The leader's log ends before the follower's (only after an unclean election): truncate to the leader's
    end. The leader's log starts after the follower's end (retention deleted what the follower lacks):
    restart the follower's log at the leader's start. Otherwise (an unknown range, or the leader's range
    moved meanwhile) None: fetch again after the backoff.
    """
    if 0 <= leader_end < log_end_offset:
        return OutOfRange("truncate", leader_end)
    if leader_start > log_end_offset:
        return OutOfRange("reset", leader_start)
    return None


class ReplicaFetcher:
    """The fetch loop of one followed partition (see the module doc), owned by the replica manager.

    :meth:`start` runs the loop in a task; :meth:`close` stops it and waits for it (idempotent). Event-loop
    only. ``caught_up`` is set once a fetch found no data at the leader's log end offset.
    """

    def __init__(
        self,
        partition: Partition,
        *,
        broker_id: int,
        leader: BrokerRegistration,
        leader_epoch: int,
        client: ReplicationClient,
        settings: Settings,
        remote_history: RemoteHistory | None,
    ) -> None:
        self.partition = partition
        self.broker_id = broker_id
        self.leader = leader
        self.leader_epoch = leader_epoch
        self._client = client
        self._settings = settings
        self._remote_history = remote_history
        self.caught_up = asyncio.Event()
        self.fetches = 0  # answers received (tests, metrics)
        self._stopping = asyncio.Event()
        self._quick_retry_s = FIRST_RETRY_S
        self._task: asyncio.Task[None] | None = None

    @property
    def label(self) -> str:
        return f"{self.partition.label} (leader {self.leader.broker_id}, epoch {self.leader_epoch})"

    def start(self) -> None:
        """Start the loop. Idempotent while running; a closed fetcher does not start again."""
        if self._task is None and not self._stopping.is_set():
            self._task = asyncio.create_task(
                self._run(), name=f"tierlog-replica-fetcher-{self.partition.label}"
            )

    async def close(self) -> None:
        """Stop the loop and wait for it to end: a long poll is abandoned, an append in flight completes
        first (so whoever truncates next sees it). Idempotent."""
        self._stopping.set()
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        truncated = False
        while not self._stopping.is_set() and not self.partition.closed:
            try:
                if not truncated:
                    await self._truncate()
                    truncated = True
                await self._fetch_once()
                self._quick_retry_s = FIRST_RETRY_S
                continue
            except OffsetMovedToTieredStorageError as err:
                if await self._bootstrap_from_remote(err):
                    continue
            except OffsetOutOfRangeError as err:
                if await self._handle_out_of_range(err):
                    continue
            except _LEADER_TAKING_OVER as err:
                log.info("replica fetch of %s waits: %s (%d)", self.label, err.message, err.code)
                await self._backoff(self._quick_retry_s)
                self._quick_retry_s *= 2
                continue
            except _WAIT_FOR_METADATA as err:
                log.info("replica fetch of %s waits for metadata: %s (%d)", self.label, err.message, err.code)
            except UnknownTopicError:
                if self.partition.closed:
                    return
                log.info("replica fetch of %s: the leader does not know the topic yet", self.label)
            except TierlogError as err:
                log.warning("replica fetch of %s failed: %s (%d)", self.label, err.message, err.code)
            except Exception:
                log.exception("replica fetch of %s failed", self.label)
            await self._backoff()

    async def _backoff(self, at_most_s: float | None = None) -> None:
        """Wait ``replica.fetch.backoff.ms`` (or ``at_most_s`` when shorter), or until closed."""
        delay = self._settings.replica_fetch_backoff_ms / 1000
        if at_most_s is not None:
            delay = min(delay, at_most_s)
        await wait_signalled(self._stopping, delay)

    async def _truncate(self) -> None:
        """Truncate the local log to where it agrees with the leader's (see :func:`truncation_point`)."""
        partition = self.partition
        entries = await asyncio.to_thread(_epoch_entries, partition)
        if not entries:
            await self._truncate_to(partition.high_watermark, "it has no leader epochs")
            return
        ask = entries[-1].epoch
        for _ in range(MAX_TRUNCATION_ROUNDS):
            leader = await self._client.epoch_end_offset(
                self.leader.url, partition.topic, partition.index, leader_epoch=self.leader_epoch, epoch=ask
            )
            if leader[1] >= 0:
                entries = await asyncio.to_thread(_epoch_entries, partition)
                own = follower_end_offset(entries, leader[0], partition.log_end_offset)
            else:
                own = leader
            step = truncation_point(
                leader, own, log_end_offset=partition.log_end_offset, high_watermark=partition.high_watermark
            )
            await self._truncate_to(step.offset, f"the leader ends epoch {leader[0]} at {leader[1]}")
            if step.done:
                return
            ask = own[0]  # strictly older than the epoch the leader answered: the rounds end
        await self._truncate_to(partition.high_watermark, "the epochs did not converge")

    async def _truncate_to(self, offset: int, why: str) -> None:
        if offset < self.partition.log_end_offset:
            log.info(
                "follower %s truncates from %d to %d: %s",
                self.label,
                self.partition.log_end_offset,
                offset,
                why,
            )
        # also at the log end: an epoch this replica assigned there while leading, with nothing written,
        # is dropped so the batches fetched next are counted in the epochs that wrote them
        await _uninterrupted(self.partition.truncate_to(offset))

    async def _fetch_once(self) -> None:
        partition = self.partition
        offset = partition.log_end_offset
        answer: ReplicaFetch = await self._client.fetch(
            self.leader.url,
            partition.topic,
            partition.index,
            offset=offset,
            leader_epoch=self.leader_epoch,
            max_bytes=self._settings.replica_fetch_max_bytes,
            max_wait_ms=self._settings.replica_fetch_wait_max_ms,
        )
        self.fetches += 1
        if answer.data:
            await _uninterrupted(partition.append_as_follower(answer.data))
        partition.set_follower_high_watermark(answer.high_watermark)
        await _uninterrupted(partition.follow_log_start_offset(answer.log_start_offset))
        if not answer.data and offset >= answer.log_end_offset:
            self.caught_up.set()

    async def _bootstrap_from_remote(self, err: OffsetMovedToTieredStorageError) -> bool:
        """Restart the log at the leader's local log start with the remote tier's epoch history. False
        (back off) when there is no history source or the leader sent no offset."""
        local_start = err.local_log_start_offset
        if self._remote_history is None or local_start < 0:
            log.warning("follower %s cannot build from the remote tier: %s", self.label, err.message)
            return False
        history = await self._remote_history(self.partition.topic, self.partition.index, local_start)
        log.info(
            "follower %s starts its log at %d, the leader's local log start (%d epochs from the remote tier)",
            self.label,
            local_start,
            len(history),
        )
        await _uninterrupted(self.partition.reset_to(local_start, history))
        return True

    async def _handle_out_of_range(self, err: OffsetOutOfRangeError) -> bool:
        step = out_of_range_action(
            log_end_offset=self.partition.log_end_offset,
            leader_start=err.log_start_offset,
            leader_end=err.log_end_offset,
        )
        if step is None:
            log.info("replica fetch of %s out of range, trying again: %s", self.label, err.message)
            return False
        if step.action == "truncate":
            await self._truncate_to(step.offset, f"the leader's log ends at {step.offset}")
        else:
            log.info("follower %s restarts its log at the leader's log start %d", self.label, step.offset)
            await _uninterrupted(self.partition.reset_to(step.offset, []))
        return True


async def _uninterrupted(change: Coroutine[Any, Any, T]) -> T:
    """Run ``change`` (an append, truncation or reset of the log) to its end even when the caller is
    cancelled, then re-raise the cancellation: the engine call runs in a worker thread either way, and a
    fetcher closed midway must not leave it landing after the next fetcher decided where to truncate."""
    task = asyncio.ensure_future(change)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        # a second cancellation must not leave the change running unowned; bounded, so a change stuck on a
        # log being closed cannot hang the close that cancelled us
        deadline = asyncio.get_running_loop().time() + UNINTERRUPTED_WAIT_S
        while not task.done() and asyncio.get_running_loop().time() < deadline:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(asyncio.shield(task), deadline - asyncio.get_running_loop().time())
        if not task.done():
            log.warning("a closing fetcher's log change did not end in %.0f s", UNINTERRUPTED_WAIT_S)
        raise


def _epoch_entries(partition: Partition) -> tuple[EpochEntry, ...]:
    """The follower's leader epochs (the cache may take its lock: called in a worker thread)."""
    return partition.log.epochs.entries()
