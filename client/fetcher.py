"""The consumer's read-ahead: one prefetch task per assigned partition, a bounded buffer each.

Each task long-polls the native fetch route of its partition's leader (as the
:class:`~tierlog.client.router.Router` knows it; a leadership error refreshes that, a NOT_LEADER hint naming
a newer leader is followed at once) from its partition's fetch offset and queues decoded records,
keeping at most ``prefetch_batches`` fetch answers buffered, so the broker (local or remote tier) is read
while the application processes the previous answer. ``poll`` takes records from the buffers round-robin and
moves each partition's *position* (the next offset it will hand out); the fetch offset runs ahead of it.

A partition whose fetches keep failing with retriable errors (its broker unreachable, no leader) is retried
with backoff; until one succeeds, :meth:`Fetcher.fetch_problems` names it with the broker it last tried and
the error (the CLI reports them; the library only logs at debug level).

A seek, a reset or a revoke bumps the partition's epoch and restarts its task; answers of an older epoch are
dropped. An out-of-range fetch applies ``auto_offset_reset`` (earliest: the log start, latest: the log end;
none: the error is raised by the next ``poll``). Everything runs on the consumer's loop; not thread-safe.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import ConsumerConfig
from tierlog.client.errors import NoOffsetForPartitionError
from tierlog.client.router import Router
from tierlog.client.transport import BrokerClient
from tierlog.client.types import CREATE_TIME, LOG_APPEND_TIME, ConsumerRecord, TopicPartition
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.batch import iter_decoded_batches
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import OffsetOutOfRangeError, TierlogError
from tierlog.wire.native import EARLIEST, LATEST

__all__ = ["EARLIEST", "LATEST", "FetchProblem", "Fetcher", "PartitionState", "decode_records"]

log = logging.getLogger("tierlog.client.consumer")
COMMITTED = -3
_new_tuple = tuple.__new__
CommittedLookup = Callable[[list[TopicPartition]], Awaitable[dict[TopicPartition, int]]]


def decode_records(
    tp: TopicPartition, data: bytes, offset: int, *, verify: bool
) -> tuple[list[ConsumerRecord], int]:
    """Records of a fetch answer at or after ``offset``, and the next offset to fetch.

    Control batches are skipped; with ``verify`` every batch's CRC-32C is checked. Pure.

    Raises:
        CorruptRecordError: a batch fails validation.
    """
    records: list[ConsumerRecord] = []
    append = records.append
    next_offset = offset
    topic, partition = tp
    for _, batch in iter_decoded_batches(data, verify=verify):
        header = batch.header
        next_offset = max(next_offset, header.base_offset + header.last_offset_delta + 1)
        if header.is_control:
            continue
        kind = LOG_APPEND_TIME if header.log_append_time else CREATE_TIME
        native = _accel.native
        if native is not None:  # built in C, and untracked by the garbage collector (see there)
            records.extend(
                native.consumer_records(batch.records, ConsumerRecord, topic, partition, kind, offset)
            )
            continue
        for r in batch.records:
            if r.offset >= offset:  # the tuple's own constructor, without the named tuple's Python __new__
                fields = (topic, partition, r.offset, r.timestamp, kind, r.key, r.value, r.headers)
                append(_new_tuple(ConsumerRecord, fields))
    return records, next_offset


async def _list_offset(leader: BrokerClient, *, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
    return await leader.list_offset(tp.topic, tp.partition, timestamp)


@dataclass(frozen=True, slots=True)
class FetchProblem:
    """Why a partition is not being read now: its fetches fail with a retriable ``error`` since ``since``
    (the consumer loop's clock), last tried against ``url`` (the last leader known; None before any)."""

    url: str | None
    error: TierlogError
    since: float


@dataclass(eq=False)
class PartitionState:
    """What the consumer knows about one assigned partition."""

    tp: TopicPartition
    position: int | None = None
    reset: int | None = None
    fetch_offset: int | None = None
    buffer: deque[list[ConsumerRecord]] = field(default_factory=deque)
    head_index: int = 0
    epoch: int = 0
    task: asyncio.Task[None] | None = None
    space: asyncio.Event = field(default_factory=asyncio.Event)
    error: TierlogError | None = None
    high_watermark: int = -1
    paused: bool = False
    leader_url: str | None = None
    problem: FetchProblem | None = None


class Fetcher:
    """Prefetch tasks and buffers of the assigned partitions."""

    def __init__(self, router: Router, config: ConsumerConfig, committed: CommittedLookup | None) -> None:
        self._router = router
        self._config = config
        self._committed = committed
        self.states: dict[TopicPartition, PartitionState] = {}
        self.data_ready = asyncio.Event()
        self._retiring: set[asyncio.Task[None]] = set()
        self._rotation = 0

    # -- assignment -------------------------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Make ``partitions`` the assigned set: stop tasks of removed ones, start new ones.

        New partitions start at their committed offset (when a lookup is configured), else at
        ``auto_offset_reset``; both are resolved by the partition's task (or by :meth:`resolve`).
        """
        wanted = set(partitions)
        for tp in [tp for tp in self.states if tp not in wanted]:
            self._stop(self.states.pop(tp))
        for tp in sorted(wanted - set(self.states)):
            state = PartitionState(
                tp, reset=COMMITTED if self._committed is not None else self._default_reset()
            )
            self.states[tp] = state
            self._start(state)

    def _default_reset(self) -> int | None:
        return {"earliest": EARLIEST, "latest": LATEST}.get(self._config.auto_offset_reset)

    def seek(self, tp: TopicPartition, offset: int | None, reset: int | None = None) -> None:
        """Set the next position of ``tp`` to ``offset``, or to a reset (EARLIEST/LATEST) resolved lazily."""
        state = self.states[tp]
        self._stop(state)
        state.position = offset
        state.reset = reset
        state.error = None
        self._start(state)

    def pause(self, tps: Iterable[TopicPartition], paused: bool) -> None:
        """Stop (or resume) handing out records of ``tps``; their prefetch stays bounded meanwhile."""
        for tp in tps:
            self.states[tp].paused = paused
        self.data_ready.set()

    def _start(self, state: PartitionState) -> None:
        state.epoch += 1
        state.buffer.clear()
        state.head_index = 0
        state.fetch_offset = None
        state.task = asyncio.create_task(self._prefetch(state, state.epoch), name=f"prefetch {state.tp}")

    def _stop(self, state: PartitionState) -> None:
        state.epoch += 1
        state.buffer.clear()
        state.head_index = 0
        task, state.task = state.task, None
        if task is not None and not task.done():
            task.cancel()
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def close(self) -> None:
        """Cancel and await every prefetch task. Idempotent."""
        for state in self.states.values():
            self._stop(state)
        self.states.clear()
        tasks = list(self._retiring)
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- positions --------------------------------------------------------------------------------

    async def resolve(self, state: PartitionState) -> int:
        """The position of ``state``, resolving a pending reset with a list-offsets call.

        Raises:
            NoOffsetForPartitionError: no position and ``auto_offset_reset`` is none.
        """
        while state.position is None:
            epoch = state.epoch
            if state.reset == COMMITTED and self._committed is not None:
                committed = await self._committed([state.tp])
                if epoch == state.epoch and state.position is None:
                    state.position = committed.get(state.tp)
                    state.reset = None if state.position is not None else self._default_reset()
                    if state.position is None and state.reset is None:
                        raise NoOffsetForPartitionError(
                            f"no committed offset for {state.tp.topic}-{state.tp.partition} "
                            "and auto_offset_reset=none"
                        )
                continue
            if state.reset is None:
                raise NoOffsetForPartitionError(
                    f"no offset for {state.tp.topic}-{state.tp.partition} and auto_offset_reset=none"
                )
            offset, _ = await self._router.on_leader(
                state.tp, functools.partial(_list_offset, tp=state.tp, timestamp=state.reset)
            )
            if epoch == state.epoch and state.position is None:
                state.position = offset
                state.reset = None
        return state.position

    # -- the prefetch loop --------------------------------------------------------------------------

    async def _prefetch(self, state: PartitionState, epoch: int) -> None:
        attempt = 0
        config = self._config
        while epoch == state.epoch:
            if len(state.buffer) >= config.prefetch_batches:
                state.space.clear()
                await state.space.wait()
                continue
            url: str | None = None
            try:
                # the leader first: a partition without one fails here at once (and is reported as such)
                # rather than inside the list-offsets retries of resolve()
                leader = await self._router.leader_for(state.tp)
                url = state.leader_url = leader.base_url
                if state.fetch_offset is None:
                    state.fetch_offset = await self.resolve(state)
                offset = state.fetch_offset
                answer = await leader.fetch(
                    state.tp.topic,
                    state.tp.partition,
                    offset,
                    max_bytes=config.partition_fetch_bytes,
                    max_wait_ms=config.fetch_max_wait_ms,
                    min_bytes=config.fetch_min_bytes,
                )
                records, next_offset = decode_records(state.tp, answer.data, offset, verify=config.check_crcs)
            except OffsetOutOfRangeError as err:
                if epoch != state.epoch:
                    return
                if not self._reset_out_of_range(state, err):
                    return
                continue
            except TierlogError as err:
                if epoch != state.epoch:
                    return
                if not err.retriable or isinstance(err, NoOffsetForPartitionError):
                    self._fail(state, err)
                    return
                self._note_problem(state, err)
                hinted = self._router.note_error(state.tp, err, url)
                wait = (
                    0.0
                    if hinted
                    else backoff_seconds(attempt, config.retry_backoff_ms, config.retry_backoff_max_ms)
                )
                attempt += 1
                log.debug("fetch %s failed (%s); retrying in %.3f s", state.tp, err, wait)
                await asyncio.sleep(wait)
                continue
            if epoch != state.epoch:
                return
            attempt = 0
            state.problem = None
            state.high_watermark = answer.high_watermark
            state.fetch_offset = next_offset
            if records:
                state.buffer.append(records)
                self.data_ready.set()

    @staticmethod
    def _note_problem(state: PartitionState, err: TierlogError) -> None:
        since = state.problem.since if state.problem is not None else asyncio.get_running_loop().time()
        state.problem = FetchProblem(state.leader_url, err, since)

    def fetch_problems(self) -> dict[TopicPartition, FetchProblem]:
        """The assigned partitions whose fetches fail now (retrying), and why. Pure read; no I/O."""
        return {
            tp: s.problem for tp, s in self.states.items() if s.problem is not None and s.task is not None
        }

    def _reset_out_of_range(self, state: PartitionState, err: OffsetOutOfRangeError) -> bool:
        policy = self._config.auto_offset_reset
        if policy == "none" or err.log_start_offset < 0:
            self._fail(state, err)
            return False
        target = err.log_start_offset if policy == "earliest" else err.log_end_offset
        log.info(
            "offset %s out of range for %s; resetting to %d (%s)",
            state.fetch_offset,
            state.tp,
            target,
            policy,
        )
        state.position = state.fetch_offset = target
        return True

    def _fail(self, state: PartitionState, err: TierlogError) -> None:
        state.error = err
        self.data_ready.set()

    # -- handing records to poll -----------------------------------------------------------------

    def raise_error(self) -> None:
        """Raise (once) the error a partition's fetch ended with, if any."""
        for state in self.states.values():
            if state.error is not None:
                err, state.error = state.error, None
                raise err

    def take(self, max_records: int) -> list[ConsumerRecord]:
        """Up to ``max_records`` buffered records, partitions taken round-robin; moves their positions."""
        out: list[ConsumerRecord] = []
        states = [s for s in self.states.values() if s.buffer and not s.paused]
        if not states:
            self.data_ready.clear()
            return out
        self._rotation = (self._rotation + 1) % len(states)
        for state in states[self._rotation :] + states[: self._rotation]:
            while state.buffer and len(out) < max_records:
                chunk = state.buffer[0]
                start = state.head_index
                stop = min(len(chunk), start + max_records - len(out))
                if state.position is not None:
                    while start < stop and chunk[start].offset < state.position:
                        start += 1
                out.extend(chunk[start:stop])
                if stop > start:
                    state.position = chunk[stop - 1].offset + 1
                if stop >= len(chunk):
                    state.buffer.popleft()
                    state.head_index = 0
                    state.space.set()
                else:
                    state.head_index = stop
            if len(out) >= max_records:
                break
        if not any(s.buffer and not s.paused for s in self.states.values()):
            self.data_ready.clear()
        return out

    async def wait(self, timeout: float) -> None:  # noqa: ASYNC109 - a poll-style bound, not a deadline
        """Wait up to ``timeout`` seconds for records or a fetch error."""
        await wait_signalled(self.data_ready, timeout)
