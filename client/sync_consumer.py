"""The synchronous consumer: :class:`~tierlog.client.consumer.AsyncConsumer` on a loop thread it owns.

Group membership, heartbeats and prefetching run on that thread, so a slow record handler does not miss
heartbeats. Rebalance listener methods run on a worker thread while the I/O thread waits for them, so they
may call this consumer's blocking methods (``commit`` in ``on_partitions_revoked`` is the usual one).
``commit_async`` callbacks run on the I/O thread and must not block.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from tierlog.client.consumer import AsyncConsumer, CommitCallback, ConsumerRebalanceListener, OffsetsArg
from tierlog.client.errors import ClientClosedError
from tierlog.client.loop_thread import LoopThread
from tierlog.client.types import ConsumerRecord, OffsetAndMetadata, OffsetAndTimestamp, TopicPartition
from tierlog.wire.errors import IllegalStateError

__all__ = ["Consumer"]


class _ThreadedListener(ConsumerRebalanceListener):
    """Runs a synchronous listener's methods off the I/O thread."""

    def __init__(self, inner: ConsumerRebalanceListener) -> None:
        self._inner = inner

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await asyncio.to_thread(self._inner.on_partitions_revoked, revoked)

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await asyncio.to_thread(self._inner.on_partitions_assigned, assigned)


class Consumer:
    """Reads records from tierlog in synchronous code; the options are :class:`AsyncConsumer`'s.

    Like Kafka's consumer it is meant for one thread; the methods are nonetheless safe to call from
    several threads (each call runs on the I/O thread). ``close`` commits (with auto-commit), leaves the
    group, stops the I/O thread and joins it; it is idempotent.

    Raises (from the constructor): InvalidRequestError for an unknown option or a bad value.
    """

    def __init__(
        self, *topics: str, bootstrap_servers: str | list[str] | None = None, **configs: Any
    ) -> None:
        self._core = AsyncConsumer(*topics, bootstrap_servers=bootstrap_servers, **configs)
        self.config = self._core.config
        self._thread = LoopThread("tierlog-consumer")
        try:
            self._thread.run(self._core.start())
        except BaseException:
            self._thread.close()
            raise

    def _run(self, coro: Any) -> Any:
        return self._thread.run(coro)

    def _do(self, fn: Any, *args: Any) -> Any:
        async def call() -> Any:
            return fn(*args)

        return self._thread.run(call())

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while not self._core._closed:
            yield from self.poll(timeout=1.0)

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | None = None,
        listener: ConsumerRebalanceListener | None = None,
    ) -> None:
        """See :meth:`AsyncConsumer.subscribe`; ``listener`` methods run on a worker thread."""
        wrapped = _ThreadedListener(listener) if listener is not None else None
        self._do(
            self._core.subscribe, list(topics) if not isinstance(topics, str) else [topics], pattern, wrapped
        )

    def unsubscribe(self) -> None:
        """See :meth:`AsyncConsumer.unsubscribe`."""
        self._run(self._core.unsubscribe())

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """See :meth:`AsyncConsumer.assign`."""
        self._do(self._core.assign, list(partitions))

    def assignment(self) -> set[TopicPartition]:
        """The partitions currently assigned (empty while a rebalance is under way)."""
        result: set[TopicPartition] = self._do(self._core.assignment)
        return result

    def subscription(self) -> set[str]:
        """The subscribed topic names."""
        result: set[str] = self._do(self._core.subscription)
        return result

    def poll(
        self, timeout: float = 0.0, max_records: int | None = None, *, timeout_ms: int | None = None
    ) -> list[ConsumerRecord]:
        """See :meth:`AsyncConsumer.poll`."""
        records: list[ConsumerRecord] = self._run(
            self._core.poll(timeout, max_records, timeout_ms=timeout_ms)
        )
        return records

    def pause(self, *partitions: TopicPartition) -> None:
        """See :meth:`AsyncConsumer.pause`. Idempotent."""
        self._do(self._core.pause, *partitions)

    def resume(self, *partitions: TopicPartition) -> None:
        """See :meth:`AsyncConsumer.resume`. Idempotent."""
        self._do(self._core.resume, *partitions)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """See :meth:`AsyncConsumer.seek`."""
        self._do(self._core.seek, partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """See :meth:`AsyncConsumer.seek_to_beginning`. Raises IllegalStateError."""
        self._do(self._core.seek_to_beginning, *partitions)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """See :meth:`AsyncConsumer.seek_to_end`. Raises IllegalStateError."""
        self._do(self._core.seek_to_end, *partitions)

    def position(self, partition: TopicPartition) -> int:
        """See :meth:`AsyncConsumer.position`. Raises IllegalStateError."""
        result: int = self._run(self._core.position(partition))
        return result

    def committed(self, partition: TopicPartition) -> int | None:
        """See :meth:`AsyncConsumer.committed`. Idempotent."""
        result: int | None = self._run(self._core.committed(partition))
        return result

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """See :meth:`AsyncConsumer.offsets_for_times`. Idempotent."""
        result: dict[TopicPartition, OffsetAndTimestamp | None] = self._run(
            self._core.offsets_for_times(timestamps)
        )
        return result

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """See :meth:`AsyncConsumer.beginning_offsets`. Idempotent."""
        result: dict[TopicPartition, int] = self._run(self._core.beginning_offsets(list(partitions)))
        return result

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """See :meth:`AsyncConsumer.end_offsets`. Idempotent."""
        result: dict[TopicPartition, int] = self._run(self._core.end_offsets(list(partitions)))
        return result

    def partitions_for_topic(self, topic: str) -> set[int]:
        """See :meth:`AsyncConsumer.partitions_for_topic`. Raises UnknownTopicError."""
        result: set[int] = self._run(self._core.partitions_for_topic(topic))
        return result

    def commit(self, offsets: OffsetsArg = None) -> None:
        """See :meth:`AsyncConsumer.commit`; blocks until the broker stored the offsets."""
        self._run(self._core.commit(offsets))

    def commit_async(
        self, offsets: OffsetsArg = None, callback: CommitCallback | None = None
    ) -> concurrent.futures.Future[dict[TopicPartition, OffsetAndMetadata]]:
        """Start a commit and return a future of the committed offsets; ``callback(offsets, error)`` runs on
        the I/O thread and must not block.

        Raises:
            IllegalStateError: no ``group_id``.
        """
        if self.config.group_id is None:
            raise IllegalStateError("committed offsets need a group_id")

        async def run() -> dict[TopicPartition, OffsetAndMetadata]:
            return await self._core.commit_async(offsets, callback)

        return self._thread.submit(run())

    def close(self, autocommit: bool = True) -> None:
        """Commit (with auto-commit), leave the group, stop the I/O thread and join it. Idempotent."""
        if not self._thread.in_loop_thread:
            with contextlib.suppress(ClientClosedError):
                self._run(self._core.close(autocommit))
        self._thread.close()
