"""One partition as the web layer sees it: an async face over the synchronous partition log.

Every engine call runs in a worker thread. Appends wake long-polling readers through a per-partition
``asyncio.Event`` that is replaced on every append, so a reader that took the event before reading
cannot miss an append that lands between its read and its wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tierlog.tiering.errors import OffsetOutOfRangeError, TierlogError, UnavailableError, UnknownTopicError

if TYPE_CHECKING:
    from tierlog.service.metrics import Metrics
    from tierlog.service.remote.partition import RemotePartition
    from tierlog.tiering.log import AppendInfo, FileSlice, LogConfig, PartitionLog, ReadResult

__all__ = ["Partition"]

log = logging.getLogger("tierlog.partition")

Spawn = Callable[[Coroutine[Any, Any, None], str], object]
T = TypeVar("T")


class Partition:
    """An open partition of a topic.

    All methods are safe to call concurrently from the event loop. Once the topic is deleted (or the
    broker closes) every call raises :class:`UnknownTopicError` (40401) and pending long polls return early.
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
        self._idle = asyncio.Event()
        self._idle.set()
        self._background = asyncio.Lock()
        self.config = config  # the live log's config: an immutable snapshot, replaced by update_config
        self.remote: RemotePartition | None = None

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

    async def append(self, batches: bytes, *, acks: int = 1) -> AppendInfo:
        """Validate and append whole v2 batches, assigning offsets; wake long-polling readers.

        ``acks`` 1 and -1 (all) both answer after the append and the flush the topic's policy requires
        (a single broker has no other replica); 0 behaves as 1 here (see :meth:`append_in_background`).
        Not idempotent: a retried call appends again. Raises:
            CorruptRecordError: a batch fails validation (nothing is appended).
            RecordTooLargeError: a batch exceeds ``max.message.bytes`` (nothing is appended).
            UnknownTopicError: the topic was deleted.
        """
        remote = self.remote
        if remote is not None:
            remote.check_budget(len(batches))
        async with self._operation():
            if remote is None:
                info = await self._run(self._log.append, batches)
            else:
                info, size, end = await self._run(self._append_and_measure, batches)
                remote.note_append(info.base_offset, size, end)
        self._metrics.inc("tierlog_bytes_in_total", len(batches), topic=self.topic)
        self._metrics.inc("tierlog_records_in_total", info.record_count, topic=self.topic)
        self._wake()
        return info

    def append_in_background(self, batches: bytes, on_done: Callable[[], None] | None = None) -> None:
        """Append ``batches`` in a task owned by the broker (acks=0); returns at once.

        Background appends to one partition run in the order of these calls. Failures are logged and
        counted in ``tierlog_background_append_errors_total``. ``on_done`` is called when the append
        ends, whatever its outcome (a byte budget gives its bytes back there). Raises UnknownTopicError
        if the topic is gone (then ``on_done`` is not called).
        """
        self._check_open()
        self._spawn(self._append_later(batches, on_done), f"tierlog-append-{self.label}")

    async def read(
        self, offset: int, max_bytes: int, *, max_wait_ms: int = 0, min_bytes: int = 1
    ) -> ReadResult:
        """Whole batches from the one holding ``offset``; long-polls until ``min_bytes`` are available.

        Returns as soon as at least ``min(min_bytes, max_bytes)`` bytes are available past ``offset`` or
        ``max_wait_ms`` has elapsed (then possibly with no data). Woken by appends, no polling.
        Idempotent. Raises:
            OffsetOutOfRangeError: ``offset`` is outside ``[log_start_offset, log_end_offset]``.
            UnknownTopicError: the topic was deleted.
            CorruptRecordError, UnavailableError: a remote read failed (the bytes or the store).
        """
        result: ReadResult = await self._local_or_remote(
            offset,
            lambda: self._poll(
                lambda: self._log.read(offset, max_bytes),
                lambda r: len(r.data),
                max_wait_ms,
                min(min_bytes, max_bytes),
            ),
            lambda remote: remote.read(offset, max_bytes, self._ranges),
        )
        self._metrics.inc("tierlog_bytes_out_total", len(result.data), topic=self.topic)
        return result

    async def read_slice(
        self, offset: int, max_bytes: int, *, max_wait_ms: int = 0, min_bytes: int = 1
    ) -> FileSlice:
        """As :meth:`read`, but the bytes as a file region for ``sendfile``; the caller closes the slice.

        Remote bytes come in an anonymous memory file. Raises: as :meth:`read`.
        """
        result: FileSlice = await self._local_or_remote(
            offset,
            lambda: self._poll(
                lambda: _warm(self._log.read_slice(offset, max_bytes)),
                lambda s: int(s.size),
                max_wait_ms,
                min(min_bytes, max_bytes),
                discard=lambda s: s.close(),
            ),
            lambda remote: remote.read_slice(offset, max_bytes, self._ranges),
        )
        self._metrics.inc("tierlog_bytes_out_total", result.size, topic=self.topic)
        return result

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
        return len(deleted)

    def interrupt(self) -> None:
        """End pending long polls now, with whatever data they have, and stop waiting from now on.

        Used at shutdown so open fetches answer at once. Idempotent.
        """
        self._interrupted = True
        self._wake()

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

    def _append_and_measure(self, batches: bytes) -> tuple[AppendInfo, int, int]:
        info = self._log.append(batches)
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
            log.warning("acks=0 append to %s failed: %s (%d)", self.label, err.message, err.code)
            self._count_background_error(str(err.code))
        except Exception:
            log.exception("acks=0 append to %s failed", self.label)
            self._count_background_error("50001")
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
    ) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(max_wait_ms, 0) / 1000
        while True:
            wake = self._data
            async with self._operation():
                result = await self._run(fetch)
            remaining = deadline - loop.time()
            if size(result) >= min_bytes or remaining <= 0 or self._closed or self._interrupted:
                return result
            if discard is not None:
                discard(result)
            try:
                await asyncio.wait_for(wake.wait(), remaining)
            except TimeoutError:
                return await self._final(fetch)

    async def _final(self, fetch: Callable[[], Any]) -> Any:
        async with self._operation():
            return await self._run(fetch)

    def _wake(self) -> None:
        event, self._data = self._data, asyncio.Event()
        event.set()

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


_WARM_CHUNK = 1 << 20
_warm_buffers = threading.local()


def _warm(region: FileSlice) -> FileSlice:
    """Read ``region`` once in this worker thread so its pages are cached when the event loop
    ``sendfile``s it: a cold segment then costs a disk read here, never a stall of the loop (Kafka's
    KAFKA-7504). Warm pages cost one memory copy. Returns ``region``; read errors are left to sendfile."""
    buffer = getattr(_warm_buffers, "buffer", None)
    if buffer is None:
        buffer = _warm_buffers.buffer = memoryview(bytearray(_WARM_CHUNK))
    position, left = region.position, region.size
    try:
        while left > 0:
            got = os.preadv(region.fd, [buffer[: min(left, _WARM_CHUNK)]], position)
            if got <= 0:
                break
            position, left = position + got, left - got
    except OSError:
        pass
    return region
