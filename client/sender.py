"""The producer's background sender: drains ready batches into native produce requests.

One :class:`Sender` task per producer. Each request goes to its partition's leader, as the
:class:`~tierlog.client.router.Router` knows it. At most ``max_in_flight_requests_per_connection`` requests
are in flight to each broker (as the metadata names the leaders when they are sent), and at most one per
partition, so a partition's records are appended in send order even when a
request is retried or its partition's leader moves. Retriable errors (connection failures, 503, 500, and the
leadership errors 50310/50311, which also refresh the router's metadata) are retried with capped, jittered
backoff while the batch's ``delivery_timeout_ms`` and ``retries`` allow; a NOT_LEADER answer naming a newer
leader is retried on that leader at once. Anything else fails the batch's records at once with the typed
error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from tierlog.client.accumulator import ProducerBatch, RecordAccumulator
from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import ProducerConfig
from tierlog.client.errors import DeliveryTimeoutError
from tierlog.client.router import Router
from tierlog.client.types import TopicPartition
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.errors import TierlogError

__all__ = ["Sender"]

log = logging.getLogger("tierlog.client.producer")
# Batches this large or compressed are encoded off the loop: zstd, lz4 and gzip release the GIL.
_ENCODE_IN_THREAD_BYTES = 64 * 1024


class Sender:
    """Owns the send loop and its request tasks; ``run`` until ``accumulator.closing`` and drained."""

    def __init__(
        self,
        router: Router,
        accumulator: RecordAccumulator,
        config: ProducerConfig,
        clock: Callable[[], float],
    ) -> None:
        self._router = router
        self._acc = accumulator
        self._config = config
        self._clock = clock
        self._compression = config.compression()
        self._acks = config.acks_param
        self._in_flight: set[TopicPartition] = set()
        self._per_broker: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        """Send until the accumulator is closing and empty. Cancel to stop at once (see :meth:`abort`)."""
        acc = self._acc
        limit = self._config.max_in_flight_requests_per_connection
        while True:
            acc.wakeup.clear()
            now = self._clock()
            for batch in acc.expired(now):
                expired = DeliveryTimeoutError(self._expiry_message(batch))
                expired.__cause__ = batch.last_error
                await self._finish(batch, expired)
            ready, delay = acc.ready(now, self._in_flight)
            for tp in ready:
                broker = self._router.cached_leader(tp)
                if self._per_broker.get(broker, 0) >= limit:
                    continue  # the end of a request to that broker sets the wakeup
                batches = acc.drain(tp, self._config.max_request_size)
                self._in_flight.add(tp)
                self._per_broker[broker] = self._per_broker.get(broker, 0) + 1
                task = asyncio.create_task(
                    self._send(tp, batches, broker), name=f"produce {tp.topic}-{tp.partition}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            if acc.closing and acc.empty() and not self._in_flight:
                return
            if delay is None:
                await acc.wakeup.wait()
            else:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(acc.wakeup.wait(), delay)

    async def abort(self, error: TierlogError) -> None:
        """Cancel in-flight requests and fail their records and every queued one with ``error``."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for batch in self._acc.abort_all(error):
            await self._finish(batch, error)
        for batch in list(self._acc.incomplete):
            await self._finish(batch, error)

    def _expiry_message(self, batch: ProducerBatch) -> str:
        return (
            f"{len(batch.records)} record(s) for {batch.tp.topic}-{batch.tp.partition} expired: "
            f"not acknowledged within delivery_timeout_ms={self._config.delivery_timeout_ms}"
        )

    async def _finish(self, batch: ProducerBatch, error: Exception | None = None) -> None:
        if batch not in self._acc.incomplete:
            return
        self._acc.incomplete.discard(batch)
        if error is not None:
            batch.fail(error)
        await self._acc.release(batch.size)

    async def _encode(self, batches: list[ProducerBatch]) -> bytes:
        parts: list[bytes] = []
        for batch in batches:
            if batch.encoded is None:
                records = [p.record for p in batch.records]
                if self._compression != Compression.NONE or batch.size >= _ENCODE_IN_THREAD_BYTES:
                    batch.encoded = await asyncio.to_thread(
                        build_batch, records, compression=self._compression
                    )
                else:
                    batch.encoded = build_batch(records, compression=self._compression)
            parts.append(batch.encoded)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _send(self, tp: TopicPartition, batches: list[ProducerBatch], broker: str) -> None:
        url: str | None = None
        try:
            body = await self._encode(batches)
            leader = await self._router.leader_for(tp)
            url = leader.base_url
            answer = await leader.produce(tp.topic, tp.partition, body, self._acks)
        except TierlogError as err:
            hinted = self._router.note_error(tp, err, url)
            await self._failed(batches, err, retry_now=hinted)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug or a user value the codec refused: never leave futures hanging
            log.exception("produce to %s-%d failed", tp.topic, tp.partition)
            for batch in batches:
                await self._finish(batch, err)
        else:
            bases = answer.get("batch_base_offsets") or [-1] * len(batches)
            append_time = int(answer.get("log_append_time", -1))
            for batch, base in zip(batches, bases, strict=False):
                batch.complete(int(base), append_time)
                await self._finish(batch)
        finally:
            self._in_flight.discard(tp)
            self._per_broker[broker] -= 1
            self._acc.wakeup.set()

    async def _failed(
        self, batches: list[ProducerBatch], err: TierlogError, *, retry_now: bool = False
    ) -> None:
        now = self._clock()
        attempts = max(b.attempts for b in batches)
        deadline = min(b.deadline for b in batches)
        if err.retriable and attempts < self._config.retries:
            wait = (
                0.0
                if retry_now
                else backoff_seconds(
                    attempts, self._config.retry_backoff_ms, self._config.retry_backoff_max_ms
                )
            )
            if now + wait < deadline:
                log.debug(
                    "retrying %s-%d in %.3f s: %s", batches[0].tp.topic, batches[0].tp.partition, wait, err
                )
                for batch in batches:
                    batch.attempts += 1
                    batch.retry_at = now + wait
                    batch.last_error = err
                self._acc.requeue(batches)
                return
            timeout = DeliveryTimeoutError(f"{self._expiry_message(batches[0])}; last error: {err}")
            timeout.__cause__ = err
            for batch in batches:
                await self._finish(batch, timeout)
            return
        for batch in batches:
            await self._finish(batch, err)
