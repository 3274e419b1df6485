"""The asyncio producer: Kafka's ``send`` / ``flush`` / ``close`` over tierlog's native batch path.

::

    async with AsyncProducer(bootstrap_servers="http://127.0.0.1:8082", linger_ms=5) as producer:
        future = await producer.send("events", b"payload", key=b"user-1")   # fire and forget, or
        metadata = await future                                             # wait for the offset

``send`` picks the partition exactly as the broker and Kafka's Java producer do (murmur2 of the key, sticky
for keyless records), appends the record to its partition's batch and returns a future of its
:class:`~tierlog.client.types.RecordMetadata` (a :class:`~tierlog.client.delivery.FutureRecordMetadata`,
resolved from the batch: see that module). It waits only for metadata and for room in ``buffer_memory``,
both at most ``max_block_ms``. A background :class:`~tierlog.client.sender.Sender` builds v2 batches with the
shared codec and sends each to its partition's leader (:class:`~tierlog.client.router.Router`).

With ``enable_idempotence`` (the default) the producer gets a producer id from the cluster when it starts and
stamps every batch with it and a per-partition sequence, so retries never store a record twice (design note
0011). Once another instance fences the id (``ProducerFencedError``), every later ``send`` raises that error.

A secured broker takes aiokafka's options (:mod:`tierlog.client.security`)::

    AsyncProducer(bootstrap_servers="broker:8443", security_protocol="SASL_SSL", ssl_cafile="ca.pem",
                  sasl_plain_username="alice", sasl_plain_password=password)
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import warnings
from collections.abc import Iterable
from typing import Any

from tierlog.client.accumulator import (
    RECORD_OVERHEAD,
    Callback,
    DeliveryFuture,
    PendingRecord,
    ProducerBatch,
    RecordAccumulator,
    record_size,
)
from tierlog.client.admin import AsyncAdmin
from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import ProducerConfig
from tierlog.client.delivery import FutureRecordMetadata
from tierlog.client.errors import BufferExhaustedError, ClientClosedError
from tierlog.client.exit_close import UnclosedProducerWarning
from tierlog.client.idempotence import IdempotenceState
from tierlog.client.router import Router
from tierlog.client.sender import Sender
from tierlog.client.types import RecordMetadata, TopicPartition
from tierlog.tiering.codec import _accel
from tierlog.tiering.codec.partitioner import StickyPartitioner, partition_for_key
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import (
    InvalidConfigError,
    LeaderNotAvailableError,
    RecordTooLargeError,
    TierlogError,
    UnknownPartitionError,
    UnknownTopicError,
)

try:  # send's common case in C; absent only where the compiled codec is absent too (no compiler)
    from tierlog.client import _sendlane
except ImportError:  # pragma: no cover - the pure codec's fallback already warned
    _sendlane = None  # type: ignore[assignment]

__all__ = ["AsyncProducer", "to_bytes", "to_headers"]

HeadersArg = Iterable[tuple[str, bytes | str | None]] | dict[str, bytes | str | None] | None
# Sender tasks of started producers, held until done: a producer dropped without close() must not leave a
# pending task for the garbage collector (asyncio's "Task was destroyed but it is pending!").
_SENDERS: set[asyncio.Task[None]] = set()


class _Lifecycle:
    """Whether the producer's owner called close(); shared with its sender task, which outlives a producer
    dropped without close()."""

    __slots__ = ("closed",)

    def __init__(self) -> None:
        self.closed = False


async def _run_sender(sender: Sender, router: Router, life: _Lifecycle) -> None:
    """The sender task: ``sender.run()``, and, for a producer its owner never closed, the close it missed.

    Cancelled while the producer is open (its event loop is stopping: ``asyncio.run`` cancels every task),
    it fails what is unsent with ClientClosedError, closes the connections and warns how many records were
    lost (:class:`UnclosedProducerWarning`). After a dropped producer's flush (``__del__``) it closes the
    connections and leaves a ResourceWarning.
    """
    try:
        await sender.run()
    except asyncio.CancelledError:
        if not life.closed:
            before = sender.failed_records
            await sender.abort(ClientClosedError("the event loop stopped before the producer was closed"))
            await router.close()
            _warn_unclosed(sender.failed_records - before)
        raise
    if not life.closed:
        await router.close()
        _warn_unclosed(0)


def _warn_unclosed(lost: int) -> None:
    advice = "await producer.close(), or use `async with AsyncProducer(...) as producer:`"
    if lost:
        message = f"a tierlog AsyncProducer was not closed: {lost} record(s) were not delivered ({advice})"
        warnings.warn(message, UnclosedProducerWarning, stacklevel=1)
    else:
        warnings.warn(f"a tierlog AsyncProducer was not closed ({advice})", ResourceWarning, stacklevel=1)


def _flush_abandoned(acc: RecordAccumulator) -> None:
    acc.closing = True
    acc.wakeup.set()


def to_bytes(value: Any, what: str) -> bytes | None:
    """``value`` as bytes: bytes-like as is, ``str`` as UTF-8, None as None.

    Raises:
        TypeError: any other type (configure a serializer).
    """
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes or str (or set {what}_serializer), not {type(value).__name__}")


def to_headers(headers: HeadersArg) -> tuple[tuple[str, bytes | None], ...]:
    """Headers as the codec's tuple of ``(str key, bytes value)``. Raises TypeError for other types."""
    if headers is None:
        return ()
    items = headers.items() if isinstance(headers, dict) else headers
    return tuple((str(k), to_bytes(v, "header value")) for k, v in items)


class AsyncProducer:
    """Sends records to tierlog from asyncio code.

    Keyword options are Kafka's producer configs with dots as underscores (see
    :class:`~tierlog.client.config.ProducerConfig`). Methods must be called on one event loop; ``send`` may be
    called concurrently from many tasks. ``close`` is idempotent.

    Raises (from the constructor): InvalidRequestError for an unknown option or a bad value.
    """

    def __init__(self, bootstrap_servers: str | list[str] | None = None, **configs: Any) -> None:
        if bootstrap_servers is not None:
            configs["bootstrap_servers"] = bootstrap_servers
        self.config = ProducerConfig.from_kwargs(configs)
        self._idempotence_explicit = bool(configs.get("enable_idempotence", False))
        self._router = Router.from_config(self.config)
        self._admin = AsyncAdmin.over(self._router.any)
        self._sticky = StickyPartitioner()
        self._sticky_current: dict[str, TopicPartition] = {}
        # every TopicPartition this producer sent to, by topic and index: one object per partition, not per
        # record (a record's enqueue looks its partition up here)
        self._partitions: dict[str, list[TopicPartition]] = {}
        self._max_block = self.config.max_block_ms / 1000
        self._record_limit = min(self.config.max_request_size, self.config.buffer_memory)
        self._metadata_locks: dict[str, asyncio.Lock] = {}
        self._acc: RecordAccumulator | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sender: Sender | None = None
        self._sender_task: asyncio.Task[None] | None = None
        # send's common case in C once started (None before, after close, and with the pure codec)
        self._lane: _sendlane.SendLane | None = None
        self._closed = False
        self._life = _Lifecycle()
        # topics this producer created because they did not exist (``allow_auto_create_topics``), so a
        # caller can say so (the CLI does: a typo'd topic name would otherwise be created silently)
        self.auto_created_topics: set[str] = set()

    async def __aenter__(self) -> AsyncProducer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __del__(self) -> None:
        # Dropped while open: the sender task (held by _SENDERS) sends what is queued, then closes the
        # connections and warns; if the loop stops first, it fails the rest and warns with their count.
        life = getattr(self, "_life", None)  # absent when the constructor raised
        if life is None or life.closed or self._acc is None or self._loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closed: nothing can be sent any more
            self._loop.call_soon_threadsafe(_flush_abandoned, self._acc)

    async def start(self) -> None:
        """Open the connection pool and start the sender task. Idempotent; ``send`` calls it."""
        if self._sender_task is not None:
            return
        if self._closed:
            raise ClientClosedError("the producer is closed")
        self._loop = asyncio.get_running_loop()
        clock = self._loop.time
        self._acc = RecordAccumulator(
            batch_size=self.config.batch_size,
            linger_ms=self.config.linger_ms,
            buffer_memory=self.config.buffer_memory,
            delivery_timeout_ms=self.config.delivery_timeout_ms,
            clock=clock,
        )
        self._sender = Sender(
            self._router,
            self._acc,
            self.config,
            clock,
            idempotence=IdempotenceState() if self.config.enable_idempotence else None,
            idempotence_required=self._idempotence_explicit,
        )
        self._sender_task = asyncio.create_task(
            _run_sender(self._sender, self._router, self._life), name="tierlog producer sender"
        )
        _SENDERS.add(self._sender_task)
        self._sender_task.add_done_callback(_SENDERS.discard)
        native = _accel.native
        config = self.config
        if (
            _sendlane is not None
            and native is not None
            and config.key_serializer is None
            and config.value_serializer is None
        ):
            self._lane = _sendlane.SendLane(
                self._acc,
                self._router,
                self._sender.idempotence,
                FutureRecordMetadata,
                native.make_record,
                batch_size=config.batch_size,
                buffer_memory=config.buffer_memory,
                record_limit=self._record_limit,
                overhead=RECORD_OVERHEAD,
            )

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        headers: HeadersArg = None,
        timestamp: int | None = None,
        *,
        callback: Callback | None = None,
    ) -> FutureRecordMetadata:
        """Queue one record; answer a future of its :class:`RecordMetadata` (an asyncio future in all but
        its class; cancelling it never takes the record back: :mod:`tierlog.client.delivery`).

        ``timestamp`` defaults to now (ms). ``callback(metadata, error)`` runs on the loop when the record is
        acknowledged (error None) or fails (metadata None). Waits at most ``max_block_ms`` for metadata and
        buffer room. Not idempotent: every call sends a record.

        Raises:
            ClientClosedError: the producer is closed.
            ProducerFencedError: another instance took over this idempotent producer's id (fatal).
            RecordTooLargeError: the record alone exceeds ``max_request_size`` or ``buffer_memory``.
            BufferExhaustedError: no buffer room or no metadata within ``max_block_ms``.
            UnknownTopicError / UnknownPartitionError: the topic (with auto-creation off) or partition does
                not exist.
            TypeError: key, value or a header value is neither bytes nor str and no serializer is set.
        """
        lane = self._lane
        if lane is not None:  # a keyless record of bytes to the sticky partition's open batch, in C
            handle = lane.send(topic, value, key, partition, headers, timestamp, callback)
            if handle is not None:
                return handle
        if self._closed:
            raise ClientClosedError("the producer is closed")
        record, size = self.build_record(value, key, headers, timestamp)
        if self._loop is None:
            await self.start()
        queued = self._enqueue_now(topic, record, size, partition, callback)
        if queued is None:
            queued = await self._enqueue(topic, record, size, None, partition, callback)
        return FutureRecordMetadata(*queued)

    def _enqueue_now(
        self, topic: str, record: Record, size: int, partition: int | None, callback: Callback | None
    ) -> tuple[ProducerBatch, int] | None:
        """:meth:`enqueue` when nothing needs a wait or an error: the topic's partition count is known,
        the partition (if given) valid, buffer room free, the producer healthy. Answers the batch and the
        record's index in it, or None having changed nothing (:meth:`_enqueue` then does the whole work).
        The common case of every send, without a coroutine of its own. A keyless record arms the send lane
        with its batch while the batch is open: the lane appends the next such records itself."""
        acc, sender, meta = self._acc, self._sender, self._router.snapshot
        if acc is None or meta is None or (sender is not None and sender.fatal is not None):
            return None
        count = meta.partition_count(topic)
        if count is None or (partition is not None and not 0 <= partition < count):
            return None
        if not acc.try_reserve(size):
            return None
        if partition is None:
            tp = self._choose_partition(topic, record.key, count, size)
        else:
            tp = self._partition(topic, partition, count)
        batch, index = acc.append_record(tp, record, size, None, callback)
        if partition is None and record.key is None and not batch.full and self._lane is not None:
            self._lane.arm(topic, batch, meta)
        return batch, index

    def build_record(
        self, value: Any, key: Any = None, headers: HeadersArg = None, timestamp: int | None = None
    ) -> tuple[Record, int]:
        """Serialize one record and check its size; answer the record and its size estimate.

        Pure apart from reading the wall clock; runs the configured serializers, so it may be called from any
        thread. Raises TypeError (unserializable key, value or header) and RecordTooLargeError.
        """
        config = self.config
        stamp = int(time.time() * 1000) if timestamp is None else timestamp
        if (
            headers is None
            and type(value) is bytes
            and (key is None or type(key) is bytes)
            and config.key_serializer is None
            and config.value_serializer is None
        ):  # the common case, without the general conversions: the same record and size
            native = _accel.native
            record = (
                Record(key, value, (), stamp) if native is None else native.make_record(key, value, (), stamp)
            )
            size = RECORD_OVERHEAD + len(value) + (0 if key is None else len(key))
        else:
            key_bytes = to_bytes(config.key_serializer(key) if config.key_serializer else key, "key")
            value_bytes = to_bytes(
                config.value_serializer(value) if config.value_serializer else value, "value"
            )
            record = Record(key_bytes, value_bytes, to_headers(headers), stamp)
            size = record_size(record)
        if size > self._record_limit:
            raise RecordTooLargeError(
                f"a record of about {size} bytes exceeds max_request_size={self.config.max_request_size} "
                f"or buffer_memory={self.config.buffer_memory}"
            )
        return record, size

    async def enqueue(
        self,
        topic: str,
        record: Record,
        size: int,
        future: DeliveryFuture,
        partition: int | None = None,
        callback: Callback | None = None,
    ) -> None:
        """Queue a record made by :meth:`build_record`, to complete ``future`` (an asyncio or a
        ``concurrent.futures`` future). Waits and raises as :meth:`send`.
        """
        await self._enqueue(topic, record, size, future, partition, callback)

    async def _enqueue(
        self,
        topic: str,
        record: Record,
        size: int,
        future: DeliveryFuture | None,
        partition: int | None,
        callback: Callback | None,
    ) -> tuple[ProducerBatch, int]:
        if self._closed:
            raise ClientClosedError("the producer is closed")
        if self._acc is None or self._loop is None:
            await self.start()
        self._raise_fatal()
        assert self._acc is not None and self._loop is not None
        deadline = self._loop.time() + self._max_block
        meta = self._router.snapshot
        count = meta.partition_count(topic) if meta is not None else None
        if count is None:
            count = await self._partition_count(topic, deadline)
        if partition is None:
            tp = self._choose_partition(topic, record.key, count, size)
        elif not 0 <= partition < count:
            raise UnknownPartitionError(
                f"topic {topic} has {count} partitions; partition {partition} is invalid"
            )
        else:
            tp = self._partition(topic, partition, count)
        if not self._acc.try_reserve(size):
            await self._acc.reserve(size, deadline)
        if self._closed:
            await self._acc.release(size)
            raise ClientClosedError("the producer was closed while send waited")
        if self._sender is not None and self._sender.fatal is not None:
            await self._acc.release(size)
            raise self._sender.fatal
        return self._acc.append(tp, PendingRecord(record, size, future, callback))

    @property
    def producer_identity(self) -> tuple[int, int] | None:
        """``(producer_id, producer_epoch)`` of an idempotent producer once the cluster answered, or None."""
        state = self._sender.idempotence if self._sender is not None else None
        return state.identity if state is not None else None

    @property
    def failed_records(self) -> int:
        """How many records this producer failed to deliver so far (expired, refused or aborted by close)."""
        return self._sender.failed_records if self._sender is not None else 0

    @property
    def fatal_error(self) -> TierlogError | None:
        """The error every send fails with once the producer was fenced, or None. Safe from any thread."""
        return self._sender.fatal if self._sender is not None else None

    def _raise_fatal(self) -> None:
        """Raise the producer's fatal error (ProducerFencedError) if it has one."""
        fatal = self.fatal_error
        if fatal is not None:
            raise fatal

    async def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
    ) -> RecordMetadata:
        """``send`` and wait for the record's metadata. Raises what ``send`` and the delivery raise."""
        future = await self.send(topic, value, key, **kwargs)
        return await future

    def _partition(self, topic: str, index: int, count: int) -> TopicPartition:
        """The one TopicPartition object of ``topic``'s partition ``index`` (of ``count``)."""
        known = self._partitions.get(topic)
        if known is None or len(known) < count:  # new, or the topic grew
            known = self._partitions[topic] = [TopicPartition(topic, i) for i in range(count)]
        return known[index]

    def _choose_partition(self, topic: str, key: bytes | None, count: int, size: int) -> TopicPartition:
        """murmur2 of the key; a keyless record of ``size`` bytes stays on the topic's sticky partition while
        its open batch has room, and moves to another once that batch is sent or cannot take the record
        (which seals it, as Kafka's producer does: KIP-480)."""
        if key is not None:
            return self._partition(topic, partition_for_key(key, count), count)
        assert self._acc is not None
        current = self._sticky_current.get(topic)
        if current is None or current.partition >= count or not self._acc.open_batch_takes(current, size):
            current = self._partition(topic, self._sticky.next_partition(topic, count), count)
            self._sticky_current[topic] = current
        return current

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (creating it if allowed). Raises as ``send``'s metadata step."""
        await self.start()
        loop = asyncio.get_running_loop()
        count = await self._partition_count(topic, loop.time() + self.config.max_block_ms / 1000)
        return set(range(count))

    async def _partition_count(self, topic: str, deadline: float) -> int:
        """The partition count of ``topic`` from the router's metadata, creating the topic if allowed."""
        meta = self._router.snapshot
        count = meta.partition_count(topic) if meta is not None else None
        if count is not None:
            return count
        lock = self._metadata_locks.setdefault(topic, asyncio.Lock())
        async with lock:
            return await self._fetch_partition_count(topic, deadline)

    async def _fetch_partition_count(self, topic: str, deadline: float) -> int:
        loop = asyncio.get_running_loop()
        attempt = 0
        created = False
        while True:
            try:
                try:
                    return await self._router.partition_count(topic)
                except UnknownTopicError:
                    if not self.config.allow_auto_create_topics:
                        raise
                    if created:
                        raise LeaderNotAvailableError(
                            f"topic {topic} was created but the metadata does not show it yet"
                        ) from None
                try:
                    await self._admin.create_topic(topic)
                except InvalidConfigError:
                    pass  # created meanwhile by another client (or an illegal name: the lookup says which)
                else:
                    self.auto_created_topics.add(topic)
                created = True
                continue
            except TierlogError as err:
                if not err.retriable:
                    raise
                wait = backoff_seconds(
                    attempt, self.config.retry_backoff_ms, self.config.retry_backoff_max_ms
                )
                if loop.time() + wait >= deadline:
                    raise BufferExhaustedError(
                        f"no metadata for topic {topic} within max_block_ms={self.config.max_block_ms}: {err}"
                    ) from err
                attempt += 1
                await asyncio.sleep(wait)

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - Kafka's signature
        """Send everything queued now, linger or not, and wait until each of those records completes.

        Records that fail do so through their futures; flush itself raises only TimeoutError (``timeout``
        seconds passed). Safe to call concurrently with ``send``.
        """
        if self._acc is None:
            return
        pending = [b.done.wait() for b in self._acc.incomplete]
        if not pending:
            return
        self._acc.flushing += 1
        self._acc.wakeup.set()
        try:
            await asyncio.wait_for(asyncio.gather(*pending), timeout)
        finally:
            self._acc.flushing -= 1

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 - Kafka's signature
        """Send what is queued (up to ``timeout`` seconds), then stop the sender and close connections.

        Records still unsent after the timeout fail with ClientClosedError. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        self._life.closed = True
        lane, self._lane = self._lane, None
        if lane is not None:
            lane.close()
        task, self._sender_task = self._sender_task, None
        if task is not None and self._acc is not None and self._sender is not None:
            self._acc.closing = True
            self._acc.wakeup.set()
            try:
                await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                pass
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                await self._sender.abort(ClientClosedError("the producer closed before the record was sent"))
        await self._router.close()
