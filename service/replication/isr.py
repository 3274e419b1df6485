"""Sending a led partition's ISR changes to the controller (Kafka's AlterPartition, KIP-497 and KIP-841).

One :class:`IsrManager` per led partition runs one task: it wakes on :meth:`IsrManager.poke` (a follower
fetched: an expansion may be due) or every ``check_interval_s`` (``replica.lag.time.max.ms / 2``: a shrink
may be due), and when no proposal is pending it removes the followers that fell out of sync and adds those
that caught up (both in one request), proposes the result to its
:class:`~tierlog.service.replication.leader.LeaderState` and sends it to the controller. One request is in
flight at a time.

Outcomes:

- success: the controller's state is confirmed into the ``LeaderState`` and ``on_change`` gets the new HW
  (None when it did not move); the change is logged at INFO.
- :class:`FencedLeaderEpochError` / :class:`InvalidUpdateVersionError`: the leader acted on stale metadata.
  The proposal is dropped and nothing more is proposed until :meth:`IsrManager.refresh` brings the newer state
  (the replica manager calls it; a new leader epoch replaces the manager instead).
- any other :class:`TierlogError` (unavailable, not the controller, ineligible replica, ...): the proposal is
  dropped and the decision is made again after a backoff of 100 ms doubling to 5 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence

from tierlog.service.cluster.model import AlterPartitionRequest, PartitionState
from tierlog.service.replication.leader import LeaderState
from tierlog.tiering.log.clock import Clock
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import FencedLeaderEpochError, InvalidUpdateVersionError, TierlogError

__all__ = ["AlterPartition", "IsrManager"]

log = logging.getLogger("tierlog.replication.isr")

AlterPartition = Callable[[AlterPartitionRequest], Awaitable[PartitionState]]

BACKOFF_INITIAL_S = 0.1
BACKOFF_MAX_S = 5.0


class IsrManager:
    """Keeps one led partition's ISR in step with its followers' progress.

    ``alter`` sends a request to the active controller and returns the state it committed. ``on_change`` is
    called (on the event loop) after every ISR change this manager applied, with the new HW or None.
    ``clock`` is the one the ``LeaderState`` decides lag with; the wait between checks is event-loop time.
    ``eligible(broker)`` says whether a caught-up follower may join the ISR: only a registered (live) broker
    may, as Kafka's KIP-841 keeps fenced brokers out; a dead follower whose last fetch reached the high
    watermark is not proposed (the controller would refuse it, and while pending it holds the HW back).

    ``stalled`` is True after a fenced or stale-version answer (or an answer for another leader or leader
    epoch) until :meth:`refresh`: nothing is proposed meanwhile.

    Event-loop only. :meth:`start` once, :meth:`close` when leadership ends (idempotent).
    """

    def __init__(
        self,
        state: LeaderState,
        *,
        topic: str,
        partition: int,
        broker_id: int,
        alter: AlterPartition,
        clock: Clock,
        check_interval_s: float,
        on_change: Callable[[int | None], None],
        eligible: Callable[[int], bool] = lambda _broker: True,
    ) -> None:
        self._state = state
        self._eligible = eligible
        self._topic = topic
        self._partition = partition
        self._broker_id = broker_id
        self._alter = alter
        self._clock = clock
        self._interval = check_interval_s
        self._on_change = on_change
        self._poked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.stalled = False

    @property
    def name(self) -> str:
        return f"{self._topic}-{self._partition}"

    def start(self) -> None:
        """Start the task. Needs a running loop.

        Raises:
            RuntimeError: already started, or closed.
        """
        if self._task is not None or self._closed:
            raise RuntimeError(f"ISR manager of {self.name} already started or closed")
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"isr-{self.name}")

    async def close(self) -> None:
        """Cancel the task and wait for it to end; an in-flight request is abandoned (its proposal aborted).
        Idempotent."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def poke(self) -> None:
        """Ask for a decision now (after a follower fetch: an expansion may be due). Never blocks."""
        self._poked.set()

    def refresh(self, isr: Sequence[int], partition_epoch: int) -> None:
        """The metadata brought a state of this partition for the same leader epoch: apply it to the
        ``LeaderState`` (ignored unless ``partition_epoch`` is newer than the one held) and resume proposing
        after a fenced or stale-version answer. Calls ``on_change`` when the state changed. Idempotent."""
        state = self._state
        before_isr, before_epoch = state.isr, state.partition_epoch
        new_hw = state.confirm(isr, partition_epoch)
        if state.partition_epoch != before_epoch:
            self._log_change(before_isr, state.isr, new_hw)
            self._on_change(new_hw)
        self.stalled = False
        self.poke()

    # --- the task -------------------------------------------------------------------------------------------

    async def _run(self) -> None:
        while True:
            try:
                await self._decide_and_send()
            except Exception:  # a bug or a failing on_change must not end the partition's ISR upkeep
                self._state.abort()  # not _abort(): on_change may be what failed
                log.exception("ISR upkeep of %s failed; deciding again at the next check", self.name)
            await wait_signalled(self._poked, self._interval)
            self._poked.clear()

    async def _decide_and_send(self) -> None:
        """Send changes until none is due, the leader is stalled, or the controller's answer differs from
        what was asked (then the next poke or check decides again)."""
        delay = BACKOFF_INITIAL_S
        while (request := self._next_request()) is not None:
            try:
                new = await self._alter(request)
            except asyncio.CancelledError:
                self._state.abort()
                raise
            except (FencedLeaderEpochError, InvalidUpdateVersionError) as err:
                self._abort()
                if self._state.partition_epoch == request.partition_epoch:  # nothing newer came meanwhile
                    self.stalled = True
                    log.warning("ISR change of %s refused (%s); waiting for newer metadata", self.name, err)
                    return
                continue
            except Exception as err:
                self._abort()
                if isinstance(err, TierlogError):
                    log.warning("ISR change of %s failed (%s); retrying in %g s", self.name, err, delay)
                else:
                    log.exception("ISR change of %s failed; retrying in %g s", self.name, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            if not self._apply(request, new):
                return
            delay = BACKOFF_INITIAL_S

    def _next_request(self) -> AlterPartitionRequest | None:
        state = self._state
        if self.stalled or state.pending:
            return None
        out = state.out_of_sync()
        joining = tuple(r for r in state.catching_up_done() if self._eligible(r))
        if not out and not joining:
            return None
        new_isr = tuple(r for r in state.isr if r not in out) + joining
        if new_isr == state.isr:
            return None
        state.propose(new_isr)
        log.info(
            "proposing ISR of %s: %s (out of sync: %s, caught up: %s, high watermark %d)",
            self.name,
            _ids(new_isr),
            _ids(out),
            _ids(joining),
            state.high_watermark,
        )
        return AlterPartitionRequest(
            topic=self._topic,
            partition=self._partition,
            broker_id=self._broker_id,
            leader_epoch=state.leader_epoch,
            partition_epoch=state.partition_epoch,
            new_isr=new_isr,
        )

    def _apply(self, request: AlterPartitionRequest, new: PartitionState) -> bool:
        """Confirm the controller's answer; True when it committed what was asked."""
        state = self._state
        if new.leader != self._broker_id or new.leader_epoch != state.leader_epoch:
            self._abort()
            self.stalled = True
            log.warning(
                "ISR change of %s answered with leader %d epoch %d; waiting for newer metadata",
                self.name,
                new.leader,
                new.leader_epoch,
            )
            return False
        before = state.isr
        before_epoch = state.partition_epoch
        new_hw = state.confirm(new.isr, new.partition_epoch)
        state.abort()  # an answer not newer than what a refresh brought leaves nothing pending either
        if state.partition_epoch != before_epoch:
            self._log_change(before, state.isr, new_hw)
            self._on_change(new_hw)
        return tuple(new.isr) == request.new_isr

    def _abort(self) -> None:
        """End the pending proposal; publish the HW when dropping its added members lets it move."""
        new_hw = self._state.abort()
        if new_hw is not None:
            self._on_change(new_hw)

    def _log_change(self, before: tuple[int, ...], after: tuple[int, ...], new_hw: int | None) -> None:
        removed = [r for r in before if r not in after]
        added = [r for r in after if r not in before]
        verb = "shrinks" if removed and not added else "expands" if added and not removed else "changes"
        log.info(
            "ISR of %s %s from %s to %s (partition epoch %d, high watermark %d%s)",
            self.name,
            verb,
            _ids(before),
            _ids(after),
            self._state.partition_epoch,
            self._state.high_watermark,
            ", advanced" if new_hw is not None else "",
        )


def _ids(brokers: Sequence[int]) -> str:
    return "[" + ",".join(str(b) for b in brokers) + "]"
