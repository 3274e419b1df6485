"""A leader's view of its followers: their progress, the ISR decisions, the high watermark and ``acks=all``.

Pure logic (no I/O, no tasks of its own), used from the event loop only: the partition reports local
appends and follower fetches, the :class:`~tierlog.service.replication.isr.IsrManager` asks which followers
fell out of sync or caught up and tells the outcome of the ISR change it sent to the controller.

The rules are Kafka's (``Partition.scala`` / ``Replica.scala``, KIP-497 for ISR changes):

- A follower's fetch offset is its log end offset (LEO); until its first fetch the LEO is unknown (-1).
- ``last_caught_up_ms`` moves to the fetch time when the fetch offset reaches the leader's LEO, or to the
  previous fetch time when it reaches the LEO the leader had at that previous fetch; it never goes back.
  Every follower starts with the time the state was created (a new leader gives its ISR a full lag window).
- The high watermark (HW) is the smallest LEO over the *maximal* ISR: the committed ISR plus the members of
  a pending expansion (a pending shrink takes effect only once the controller confirmed it). It never goes
  back while leading, so a member whose LEO is unknown holds it where it is.
- A follower is out of sync when it is in the committed ISR, its LEO differs from the leader's and
  ``now - last_caught_up_ms > replica.lag.time.max.ms``; it may join when its LEO is at least the HW and at
  least the offset at which this leader's epoch began.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tierlog.tiering.log.clock import Clock
from tierlog.wire.errors import (
    IllegalStateError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    ProduceTimedOutError,
    TierlogError,
    UnknownPartitionError,
)

__all__ = ["FollowerProgress", "LeaderState", "UNKNOWN_OFFSET"]

UNKNOWN_OFFSET = -1


@dataclass(slots=True)
class FollowerProgress:
    """What the leader knows of one follower (Kafka's ``ReplicaState``).

    ``log_end_offset`` is -1 until the follower's first fetch; ``last_fetch_ms`` is -1 before it, and
    ``last_fetch_leader_leo`` (the leader's LEO at the previous fetch) -1 as well.
    """

    broker_id: int
    log_end_offset: int
    last_fetch_ms: int
    last_fetch_leader_leo: int
    last_caught_up_ms: int


class LeaderState:
    """The state of a partition this broker leads, for as long as it leads it (one leader epoch).

    ``isr`` is the committed ISR (as in the metadata store), ``maximal_isr`` the committed ISR plus a pending
    expansion, ``high_watermark`` the HW, ``pending`` whether a proposal is with the controller.
    ``leader_epoch`` and ``partition_epoch`` are those of the state the leader acts on.

    Event-loop only: nothing here is thread-safe, and :meth:`wait_committed` needs a running loop. The
    constructor does not move the HW; call :meth:`on_local_append` once after it to publish the HW the
    current LEOs allow (an ISR of the leader alone: its LEO).
    """

    def __init__(
        self,
        *,
        topic: str,
        partition: int,
        broker_id: int,
        replicas: Sequence[int],
        isr: Sequence[int],
        leader_epoch: int,
        partition_epoch: int,
        leader_epoch_start_offset: int,
        log_end_offset: Callable[[], int],
        high_watermark: int,
        clock: Clock,
        replica_lag_time_max_ms: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.broker_id = broker_id
        self.replicas: tuple[int, ...] = tuple(replicas)
        self.isr: tuple[int, ...] = tuple(isr)
        self.maximal_isr: tuple[int, ...] = self.isr
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_epoch_start_offset = leader_epoch_start_offset
        self.high_watermark = high_watermark
        self.pending = False
        self._leo = log_end_offset
        self._clock = clock
        self._max_lag_ms = replica_lag_time_max_ms
        now = clock.now_ms()
        self._followers: dict[int, FollowerProgress] = {
            r: FollowerProgress(r, UNKNOWN_OFFSET, -1, UNKNOWN_OFFSET, now)
            for r in dict.fromkeys((*self.replicas, *self.isr))
            if r != broker_id
        }
        self._waiters: list[tuple[int, int, asyncio.Future[None], Callable[[], int]]] = []
        self._seq = itertools.count()
        self._closed: TierlogError | None = None
        self._abandoned = 0  # waiters in the heap that timed out or were cancelled

    @property
    def name(self) -> str:
        """``<topic>-<partition>``, as logs name a partition."""
        return f"{self.topic}-{self.partition}"

    def progress(self, follower: int) -> FollowerProgress:
        """A copy of what is known of ``follower``.

        Raises:
            UnknownPartitionError: ``follower`` is not a follower of this partition.
        """
        return replace(self._follower(follower))

    # --- progress -------------------------------------------------------------------------------------------

    def on_local_append(self) -> int | None:
        """The leader's LEO moved (or may have): recompute the HW. Returns the new HW when it moved, else
        None. Idempotent; wakes the ``acks=all`` waiters the new HW satisfies.
        """
        return self._maybe_advance()

    def on_follower_fetch(self, follower: int, fetch_offset: int) -> int | None:
        """Record a fetch of ``follower`` at ``fetch_offset`` (its LEO) now.

        Applies Kafka's catch-up rule (see the module) and recomputes the HW. Returns the new HW when it
        moved, else None. The caller pokes the :class:`~tierlog.service.replication.isr.IsrManager`
        afterwards, as an expansion may be due.

        Raises:
            UnknownPartitionError: ``follower`` is not a replica of this partition (or is the leader).
        """
        state = self._follower(follower)
        now = self._clock.now_ms()
        leader_leo = self._leo()
        if fetch_offset >= leader_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now)
        elif fetch_offset >= state.last_fetch_leader_leo and state.last_fetch_ms >= 0:
            state.last_caught_up_ms = max(state.last_caught_up_ms, state.last_fetch_ms)
        state.last_fetch_leader_leo = leader_leo
        state.last_fetch_ms = now
        state.log_end_offset = fetch_offset
        return self._maybe_advance()

    # --- ISR decisions --------------------------------------------------------------------------------------

    def out_of_sync(self) -> tuple[int, ...]:
        """Followers of the committed ISR that lag: LEO not the leader's and no catch-up within
        ``replica.lag.time.max.ms``. Never the leader. Pure."""
        now = self._clock.now_ms()
        leader_leo = self._leo()
        return tuple(
            r
            for r in self.isr
            if r != self.broker_id
            and (state := self._followers.get(r)) is not None
            and state.log_end_offset != leader_leo
            and now - state.last_caught_up_ms > self._max_lag_ms
        )

    def catching_up_done(self) -> tuple[int, ...]:
        """Followers outside the committed ISR whose LEO is at least the HW and at least the offset at which
        this leader's epoch began (so they hold every record of this epoch the ISR might need). In replica
        order. Pure."""
        floor = max(self.high_watermark, self.leader_epoch_start_offset)
        return tuple(
            r
            for r, state in self._followers.items()
            if r not in self.isr and state.log_end_offset != UNKNOWN_OFFSET and state.log_end_offset >= floor
        )

    def propose(self, new_isr: Sequence[int]) -> None:
        """Mark ``new_isr`` as sent to the controller. Members it adds count in the HW at once (maximal ISR,
        KIP-497); members it removes keep counting until :meth:`confirm`.

        Raises:
            IllegalStateError: a proposal is already pending, or ``new_isr`` lacks the leader or names a
                broker that is not a replica.
        """
        if self.pending:
            raise IllegalStateError(f"an ISR change of {self.name} is already pending")
        proposed = tuple(new_isr)
        if self.broker_id not in proposed:
            raise IllegalStateError(f"ISR {list(proposed)} of {self.name} lacks its leader {self.broker_id}")
        strangers = [r for r in proposed if r != self.broker_id and r not in self._followers]
        if strangers:
            raise IllegalStateError(f"brokers {strangers} are not replicas of {self.name}")
        self.pending = True
        self.maximal_isr = self.isr + tuple(r for r in proposed if r not in self.isr)

    def confirm(self, isr: Sequence[int], partition_epoch: int) -> int | None:
        """Apply a committed ISR: the controller's answer to a proposal, or a newer state the metadata
        brought. Ends the pending proposal and recomputes the HW (a shrink may let it move). Returns the new
        HW when it moved, else None.

        A state whose ``partition_epoch`` is not newer than the one held is ignored (idempotent; a metadata
        refresh may have delivered the same state before the controller's answer arrived).
        """
        if partition_epoch <= self.partition_epoch:
            return None
        self.isr = tuple(isr)
        self.maximal_isr = self.isr
        self.partition_epoch = partition_epoch
        self.pending = False
        for r in self.isr:
            if r != self.broker_id and r not in self._followers:
                self._followers[r] = FollowerProgress(
                    r, UNKNOWN_OFFSET, -1, UNKNOWN_OFFSET, self._clock.now_ms()
                )
        return self._maybe_advance()

    def abort(self) -> int | None:
        """The proposal failed: back to the committed ISR. Idempotent. Returns the new HW when the members
        the proposal added were holding it back (a leader alone gets no fetch that would recompute it)."""
        self.pending = False
        self.maximal_isr = self.isr
        return self._maybe_advance()

    # --- acks=all -------------------------------------------------------------------------------------------

    def check_min_isr(self, min_insync: int) -> None:
        """Before an ``acks=all`` append.

        Raises:
            NotEnoughReplicasError: the committed ISR is smaller than ``min_insync``.
        """
        if len(self.isr) < min_insync:
            raise NotEnoughReplicasError(
                f"ISR of {self.name} is {list(self.isr)}, smaller than min.insync.replicas {min_insync}"
            )

    async def wait_committed(self, offset: int, timeout_s: float, min_insync: Callable[[], int]) -> None:
        """Wait until the HW is past ``offset`` (the last offset of an appended batch).

        Woken by HW moves, never polled. ``min_insync`` is read when the HW passes the offset: if the maximal
        ISR is then smaller (it shrank after the append; Kafka checks the maximal ISR here), the records are
        stored but the answer is an error. Safe to call concurrently; waiters are released in offset order.

        Raises:
            NotEnoughReplicasAfterAppendError: committed, but the ISR shrank below ``min_insync()``.
            ProduceTimedOutError: not committed within ``timeout_s``.
            TierlogError: the reason given to :meth:`close` (leadership lost, partition closed).
        """
        if self._closed is not None:
            # One instance is raised to every caller: drop the last raise's frames so they do not pile up.
            raise self._closed.with_traceback(None)
        if self.high_watermark > offset:
            self._raise_if_too_few(offset, min_insync)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._seq), future, min_insync))
        try:
            async with asyncio.timeout(timeout_s):
                await future
        except TimeoutError:
            raise ProduceTimedOutError(
                f"offset {offset} of {self.name} not replicated to ISR {list(self.maximal_isr)} within "
                f"{timeout_s:g} s (high watermark {self.high_watermark})"
            ) from None
        finally:
            if future.cancelled():
                self._forget_abandoned()
            elif future.done():
                future.exception()  # an answer that lost the race to the timeout counts as retrieved

    def close(self, reason: TierlogError) -> None:
        """Stop leading: fail every waiter, and every later :meth:`wait_committed`, with ``reason``.
        Idempotent (the first reason stays)."""
        if self._closed is None:
            self._closed = reason
        waiters, self._waiters, self._abandoned = self._waiters, [], 0
        reason = self._closed.with_traceback(None)
        for _, _, future, _ in waiters:
            if not future.done():
                future.set_exception(reason)

    # --- internals ------------------------------------------------------------------------------------------

    def _follower(self, follower: int) -> FollowerProgress:
        state = self._followers.get(follower)
        if state is None:
            raise UnknownPartitionError(f"broker {follower} is not a follower of {self.name}")
        return state

    def _forget_abandoned(self) -> None:
        """Count a waiter that left before the HW reached it; drop such entries once they are most of the
        heap, so a stuck HW under a stream of timed-out produces holds no more than twice the live waiters."""
        self._abandoned += 1
        if self._abandoned > 64 and self._abandoned * 2 > len(self._waiters):
            self._waiters = [w for w in self._waiters if not w[2].done()]
            heapq.heapify(self._waiters)
            self._abandoned = 0

    def _maybe_advance(self) -> int | None:
        candidate = self._leo()
        for r in self.maximal_isr:
            if r == self.broker_id:
                continue
            state = self._followers.get(r)
            candidate = min(candidate, state.log_end_offset if state is not None else UNKNOWN_OFFSET)
        if candidate <= self.high_watermark:
            return None
        self.high_watermark = candidate
        self._wake()
        return candidate

    def _wake(self) -> None:
        while self._waiters and self._waiters[0][0] < self.high_watermark:
            offset, _, future, min_insync = heapq.heappop(self._waiters)
            if future.done():  # timed out or cancelled
                self._abandoned = max(self._abandoned - 1, 0)
                continue
            try:
                self._raise_if_too_few(offset, min_insync)
            except TierlogError as err:
                future.set_exception(err)
            else:
                future.set_result(None)

    def _raise_if_too_few(self, offset: int, min_insync: Callable[[], int]) -> None:
        wanted = min_insync()
        if len(self.maximal_isr) < wanted:
            raise NotEnoughReplicasAfterAppendError(
                f"offset {offset} of {self.name} is stored, but the ISR {list(self.maximal_isr)} shrank "
                f"below min.insync.replicas {wanted}"
            )
