"""The asyncio consumer: ``subscribe`` with a group or ``assign`` without one, then ``poll`` and ``commit``.

::

    consumer = AsyncConsumer("events", bootstrap_servers="http://127.0.0.1:8082", group_id="billing")
    async for record in consumer:          # or: records = await consumer.poll(timeout=1.0)
        handle(record)

Records come from per-partition prefetch tasks (:mod:`tierlog.client.fetcher`) that read from each
partition's leader (:mod:`tierlog.client.router`); group membership runs in a background task
(:mod:`tierlog.client.group`) against any broker (a cluster forwards group requests to the coordinator).
With ``enable_auto_commit`` the consumer commits, every ``auto_commit_interval_ms``, the positions as they
were when ``poll`` was last called: asking for more records acknowledges the previous ones, so a crash
redelivers at most what was being processed (at-least-once).

All methods must run on one event loop and are not safe to call from several tasks at once, except
``commit_async`` and ``position``-style reads. ``close`` is idempotent. TLS and credentials are the
``security_protocol``, ``ssl_*`` and ``sasl_*`` options (:mod:`tierlog.client.security`), as for the producer.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any

from tierlog.client.config import ConsumerConfig
from tierlog.client.errors import ClientClosedError, CommitFailedError
from tierlog.client.fetcher import EARLIEST, LATEST, Fetcher, FetchProblem
from tierlog.client.group import GroupMembership, Subscription
from tierlog.client.router import Router
from tierlog.client.types import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from tierlog.wire.errors import IllegalGenerationError, IllegalStateError, TierlogError, UnknownMemberError
from tierlog.wire.native import group_path

__all__ = ["AsyncConsumer", "ConsumerRebalanceListener", "CommitCallback"]

log = logging.getLogger("tierlog.client.consumer")
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], Exception | None], object]
OffsetsArg = Mapping[TopicPartition, int | OffsetAndMetadata] | None


class ConsumerRebalanceListener:
    """Override either method (plain or ``async def``) to act when a group rebalance moves partitions.

    ``on_partitions_revoked`` runs before the member rejoins (after the auto-commit, when enabled): commit
    what was processed here. ``on_partitions_assigned`` runs once the new generation is formed.
    """

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        return None

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        return None


async def _call(hook: Callable[[set[TopicPartition]], Any], partitions: set[TopicPartition]) -> None:
    """Run a listener method; its errors are logged, never allowed to stop group membership."""
    try:
        result = hook(partitions)
        if inspect.isawaitable(result):
            await result
    except Exception:
        log.exception("rebalance listener %s raised", getattr(hook, "__qualname__", hook))


class AsyncConsumer:
    """Reads records from tierlog in asyncio code.

    ``topics`` given here are subscribed at once (a ``group_id`` is then required). Keyword options are
    Kafka's consumer configs with dots as underscores (:class:`~tierlog.client.config.ConsumerConfig`).

    Raises (from the constructor): InvalidRequestError for an unknown option or a bad value.
    """

    def __init__(
        self, *topics: str, bootstrap_servers: str | list[str] | None = None, **configs: Any
    ) -> None:
        if bootstrap_servers is not None:
            configs["bootstrap_servers"] = bootstrap_servers
        self.config = ConsumerConfig.from_kwargs(configs)
        self._router = Router.from_config(self.config)
        self._broker = self._router.any
        self._group_path = group_path(self.config.group_id) if self.config.group_id else ""
        self._fetcher: Fetcher | None = None
        self._membership: GroupMembership | None = None
        self._group_task: asyncio.Task[None] | None = None
        self._auto_commit_task: asyncio.Task[None] | None = None
        self._commit_tasks: set[asyncio.Task[Any]] = set()
        self._listener: ConsumerRebalanceListener = ConsumerRebalanceListener()
        self._manual: set[TopicPartition] | None = None
        self._acked: dict[TopicPartition, int] = {}
        self._last_auto_commit: dict[TopicPartition, int] = {}
        self._closed = False
        self._initial_topics = list(topics)

    async def __aenter__(self) -> AsyncConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        """Open connections and apply the constructor's subscription. Idempotent; other methods call it."""
        self._started()

    def _started(self) -> Fetcher:
        if self._closed:
            raise ClientClosedError("the consumer is closed")
        if self._fetcher is None:
            lookup = self._committed_map if self.config.group_id else None
            self._fetcher = Fetcher(self._router, self.config, lookup)
            if self.config.group_id and self.config.enable_auto_commit:
                self._auto_commit_task = asyncio.create_task(self._auto_commit(), name="tierlog auto-commit")
            if self._initial_topics:
                topics, self._initial_topics = self._initial_topics, []
                self.subscribe(topics)
        return self._fetcher

    # -- subscription and assignment ------------------------------------------------------------

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """Join ``group_id`` for ``topics`` or a regex ``pattern``; partitions arrive in the background.

        Calling it again replaces the subscription (the member rejoins). Idempotent for the same arguments.

        Raises:
            IllegalStateError: no ``group_id``, both or neither of topics and pattern, or ``assign`` in use.
        """
        topic_list = [topics] if isinstance(topics, str) else list(topics)
        if self.config.group_id is None:
            raise IllegalStateError("subscribe needs a group_id; use assign() without one")
        if bool(topic_list) == (pattern is not None):
            raise IllegalStateError("subscribe takes topics or a pattern, exactly one of them")
        if self._manual is not None:
            raise IllegalStateError("subscribe and assign cannot be mixed; unsubscribe first")
        self._started()
        if listener is not None:
            self._listener = listener
        subscription = Subscription(topic_list, pattern)
        if self._membership is not None and self._group_task is not None and not self._group_task.done():
            self._membership.resubscribe(subscription)
            return
        self._membership = GroupMembership(
            self._broker, self.config, subscription, self._on_assigned, self._on_revoked
        )
        self._group_task = asyncio.create_task(self._membership.run(), name="tierlog group membership")

    async def unsubscribe(self) -> None:
        """Leave the group (or drop the manual assignment). Idempotent."""
        await self._stop_group(commit=True)
        self._manual = None
        if self._fetcher is not None:
            self._fetcher.assign(())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly ``partitions``, without group management (commits then carry no member id).

        Raises:
            IllegalStateError: the consumer is subscribed.
        """
        if self._membership is not None:
            raise IllegalStateError("assign and subscribe cannot be mixed; unsubscribe first")
        fetcher = self._started()
        self._manual = {TopicPartition(tp[0], tp[1]) for tp in partitions}
        fetcher.assign(self._manual)

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned (empty while a rebalance is under way)."""
        return set(self._fetcher.states) if self._fetcher is not None else set()

    def fetch_problems(self) -> dict[TopicPartition, FetchProblem]:
        """The assigned partitions not being read now because their fetches fail with retriable errors
        (broker unreachable, no leader), each with the broker last tried, the error and since when. The
        consumer keeps retrying them; a fetch that succeeds removes its partition. No I/O."""
        return self._fetcher.fetch_problems() if self._fetcher is not None else {}

    def subscription(self) -> set[str]:
        """The subscribed topic names (empty for a pattern subscription or manual assignment)."""
        return set(self._membership.subscription.topics) if self._membership is not None else set()

    async def _on_assigned(self, partitions: set[TopicPartition]) -> None:
        self._started().assign(partitions)
        await _call(self._listener.on_partitions_assigned, partitions)

    async def _on_revoked(self, partitions: set[TopicPartition]) -> None:
        fetcher = self._started()
        for tp in partitions:
            if tp in fetcher.states:
                fetcher.pause([tp], True)
        if self.config.enable_auto_commit:
            acked = {tp: self._acked[tp] for tp in partitions if tp in self._acked}
            await self._try_commit(acked)
        await _call(self._listener.on_partitions_revoked, partitions)
        fetcher.assign(set(fetcher.states) - partitions)
        for tp in partitions:
            self._acked.pop(tp, None)

    # -- reading --------------------------------------------------------------------------------

    async def poll(
        self,
        timeout: float = 0.0,  # noqa: ASYNC109 - Kafka's poll(timeout) signature
        max_records: int | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> list[ConsumerRecord]:
        """Records of the assigned partitions, waiting up to ``timeout`` seconds (or ``timeout_ms``) for some.

        Answers at most ``max_records`` (default ``max_poll_records``), in offset order per partition; an
        empty list when none arrived in time. Calling ``poll`` acknowledges the records of the previous call
        for auto-commit.

        Raises:
            OffsetOutOfRangeError / NoOffsetForPartitionError: with ``auto_offset_reset="none"``.
            CorruptRecordError: a fetched batch failed its CRC check.
            TierlogError: a non-retriable fetch or group error (unknown topic, invalid group ...).
        """
        fetcher = self._started()
        if timeout_ms is not None:
            timeout = timeout_ms / 1000
        limit = max_records or self.config.max_poll_records
        self._acked = {tp: s.position for tp, s in fetcher.states.items() if s.position is not None}
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            if self._membership is not None and self._membership.error is not None:
                err, self._membership.error = self._membership.error, None
                raise err
            fetcher.raise_error()
            records = fetcher.take(limit)
            remaining = deadline - loop.time()
            if records or remaining <= 0:
                break
            await fetcher.wait(remaining)
        if records and (self.config.key_deserializer or self.config.value_deserializer):
            records = [self._deserialize(r) for r in records]
        return records

    def _deserialize(self, record: ConsumerRecord) -> ConsumerRecord:
        key = self.config.key_deserializer(record.key) if self.config.key_deserializer else record.key
        value = (
            self.config.value_deserializer(record.value) if self.config.value_deserializer else record.value
        )
        return record._replace(key=key, value=value)

    def __aiter__(self) -> AsyncIterator[ConsumerRecord]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ConsumerRecord]:
        while not self._closed:
            for record in await self.poll(timeout=1.0):
                yield record

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop returning records of ``partitions`` from ``poll`` (prefetch stays bounded). Idempotent."""
        self._started().pause(partitions, True)

    def resume(self, *partitions: TopicPartition) -> None:
        """Undo :meth:`pause`. Idempotent."""
        self._started().pause(partitions, False)

    # -- positions ------------------------------------------------------------------------------

    def _state_of(self, tp: TopicPartition) -> TopicPartition:
        if tp not in self._started().states:
            raise IllegalStateError(f"partition {tp.topic}-{tp.partition} is not assigned to this consumer")
        return tp

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Make ``offset`` the next record ``poll`` returns for ``partition``. Raises IllegalStateError."""
        if offset < 0:
            raise IllegalStateError(f"cannot seek to a negative offset {offset}")
        self._started().seek(self._state_of(partition), offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Seek to the log start of ``partitions`` (default: all assigned). Raises IllegalStateError."""
        for tp in partitions or tuple(self.assignment()):
            self._started().seek(self._state_of(tp), None, EARLIEST)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Seek past the last record (the high watermark) of ``partitions`` (default: all assigned)."""
        for tp in partitions or tuple(self.assignment()):
            self._started().seek(self._state_of(tp), None, LATEST)

    async def position(self, partition: TopicPartition) -> int:
        """The offset of the next record ``poll`` will return for ``partition``. Raises IllegalStateError."""
        fetcher = self._started()
        return await fetcher.resolve(fetcher.states[self._state_of(partition)])

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose batch time is at or after the timestamp (ms), or None.

        Idempotent. Raises UnknownTopicError / UnknownPartitionError.
        """
        self._started()
        items = list(timestamps.items())
        answers = await asyncio.gather(*(self._list_offset(TopicPartition(*tp), ts) for tp, ts in items))
        return {
            TopicPartition(*tp): (OffsetAndTimestamp(offset, at) if offset >= 0 else None)
            for (tp, _), (offset, at) in zip(items, answers, strict=True)
        }

    async def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The log start offset of each partition. Idempotent."""
        return await self._list_offsets(partitions, EARLIEST)

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The high watermark (offset after the last readable record) of each partition. Idempotent."""
        return await self._list_offsets(partitions, LATEST)

    async def _list_offsets(
        self, partitions: Iterable[TopicPartition], which: int
    ) -> dict[TopicPartition, int]:
        self._started()
        tps = [TopicPartition(*tp) for tp in partitions]
        answers = await asyncio.gather(*(self._list_offset(tp, which) for tp in tps))
        return {tp: offset for tp, (offset, _) in zip(tps, answers, strict=True)}

    async def _list_offset(self, tp: TopicPartition, timestamp: int) -> tuple[int, int]:
        return await self._router.on_leader(
            tp, lambda leader: leader.list_offset(tp.topic, tp.partition, timestamp)
        )

    async def partitions_for_topic(self, topic: str) -> set[int]:
        """Partition ids of ``topic``, from the cluster metadata. Raises UnknownTopicError."""
        self._started()
        return set(range(await self._router.partition_count(topic)))

    # -- committing -----------------------------------------------------------------------------

    def _require_group(self) -> str:
        if not self._group_path:
            raise IllegalStateError("committed offsets need a group_id")
        return self._group_path

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset (next offset to read) for ``partition``, or None. Idempotent."""
        return (await self._committed_map([TopicPartition(*partition)])).get(TopicPartition(*partition))

    async def _committed_map(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        body = {"partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in partitions]}
        answer = await self._broker.json("POST", self._require_group() + "/offsets/fetch", body=body)
        return {
            TopicPartition(e["topic"], int(e["partition"])): int(e["offset"])
            for e in answer["offsets"]
            if int(e["offset"]) >= 0
        }

    def _commit_offsets(self, offsets: OffsetsArg) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            fetcher = self._started()
            return {
                tp: OffsetAndMetadata(s.position, "")
                for tp, s in fetcher.states.items()
                if s.position is not None
            }
        return {
            TopicPartition(*tp): (v if isinstance(v, OffsetAndMetadata) else OffsetAndMetadata(int(v), ""))
            for tp, v in offsets.items()
        }

    async def commit(self, offsets: OffsetsArg = None) -> None:
        """Commit ``offsets`` (next offsets to read), by default the positions of every assigned partition.

        Idempotent for the same offsets. Raises:
            CommitFailedError: the group rebalanced and this member's generation is stale.
            IllegalStateError: no ``group_id``.
        """
        self._require_group()
        await self._send_commit(self._commit_offsets(offsets))

    def commit_async(
        self, offsets: OffsetsArg = None, callback: CommitCallback | None = None
    ) -> asyncio.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Start a commit and return a future of the committed offsets; ``callback(offsets, error)`` runs
        on the loop when it completes. The consumer owns the task (``close`` awaits it).
        """
        self._require_group()
        chosen = self._commit_offsets(offsets)

        async def run() -> dict[TopicPartition, OffsetAndMetadata]:
            try:
                await self._send_commit(chosen)
            except TierlogError as err:
                if callback is not None:
                    callback(chosen, err)
                raise
            if callback is not None:
                callback(chosen, None)
            return chosen

        task = asyncio.create_task(run(), name="tierlog commit")
        self._own(task)
        return task

    async def _send_commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        if not offsets:
            return
        body: dict[str, Any] = {
            "offsets": [
                {"topic": tp.topic, "partition": tp.partition, "offset": om.offset, "metadata": om.metadata}
                for tp, om in sorted(offsets.items())
            ]
        }
        if self._membership is not None:
            body["member_id"] = self._membership.member_id
            body["generation"] = self._membership.generation
        try:
            await self._broker.call("POST", self._require_group() + "/offsets/commit", body=body)
        except (UnknownMemberError, IllegalGenerationError) as err:
            raise CommitFailedError(f"commit refused, the group has rebalanced: {err}") from err

    async def _try_commit(self, offsets: Mapping[TopicPartition, int]) -> bool:
        try:
            await self._send_commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
            return True
        except TierlogError as err:
            log.warning("group %s: auto-commit failed: %s", self.config.group_id, err)
            return False

    async def _auto_commit(self) -> None:
        interval = self.config.auto_commit_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            acked = {tp: o for tp, o in self._acked.items() if self._last_auto_commit.get(tp) != o}
            if acked and await self._try_commit(acked):
                self._last_auto_commit.update(acked)

    def _own(self, task: asyncio.Task[Any]) -> None:
        self._commit_tasks.add(task)
        task.add_done_callback(self._commit_tasks.discard)

    # -- closing --------------------------------------------------------------------------------

    async def _stop_group(self, *, commit: bool) -> None:
        task, self._group_task = self._group_task, None
        membership = self._membership
        if task is None or membership is None:
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if membership.assignment:
            if commit and self.config.enable_auto_commit and self._fetcher is not None:
                await self._try_commit(
                    {tp: s.position for tp, s in self._fetcher.states.items() if s.position is not None}
                )
            await _call(self._listener.on_partitions_revoked, set(membership.assignment))
        await membership.leave()
        self._membership = None

    async def close(self, autocommit: bool = True) -> None:
        """Commit positions (with auto-commit on), leave the group, stop prefetching, close connections.

        Idempotent. Never raises for broker errors (they are logged).
        """
        if self._closed:
            return
        auto, self._auto_commit_task = self._auto_commit_task, None
        if auto is not None:
            auto.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await auto
        await self._stop_group(commit=autocommit)
        self._closed = True
        if self._commit_tasks:
            await asyncio.gather(*self._commit_tasks, return_exceptions=True)
        if self._fetcher is not None:
            await self._fetcher.close()
        await self._router.close()
