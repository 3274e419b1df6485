"""The producer's background sender: drains ready batches into native produce requests.

One :class:`Sender` task per producer. Each request goes to its partition's leader, as the
:class:`~tierlog.client.router.Router` knows it. At most ``max_in_flight_requests_per_connection`` requests
are in flight to each broker (as the metadata names the leaders when they are sent), and at most one per
partition, so a partition's records are appended in send order even when a
request is retried or its partition's leader moves. Retriable errors (connection failures, 503, 500, and the
leadership errors 50310/50311, which also refresh the router's metadata) are retried with capped, jittered
backoff while the batch's ``delivery_timeout_ms`` and ``retries`` allow; a NOT_LEADER answer naming a newer
leader is retried on that leader at once, and so is a request its leader left unanswered while the cluster
moved the partition to another (:meth:`~tierlog.client.router.Router.unless_moved`). Anything else fails
the batch's records at once with the typed
error.

An idempotent producer (design note 0011) first gets its producer id (``POST /native/v1/producers``, any
broker) and stamps each batch with the id, the epoch and the partition's next sequence when the batch is
first drained; a retry resends the same bytes, so the leader stores it once. A duplicate answer completes the
batch with its original offsets, ``DuplicateSequenceError`` with offset -1. Any other final failure of a
stamped batch bumps the epoch (``POST`` with the current id and epoch) before a new batch is stamped, so no
later batch continues a sequence whose last batch may be missing; ``UnknownProducerIdError`` on a bump asks
for a new id. ``ProducerFencedError`` is fatal: the batch, every queued batch and every later ``send`` fail
with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable

from tierlog.client.accumulator import ProducerBatch, RecordAccumulator
from tierlog.client.backoff import backoff_seconds
from tierlog.client.config import ProducerConfig
from tierlog.client.errors import DeliveryTimeoutError
from tierlog.client.idempotence import IdempotenceState
from tierlog.client.router import LeaderMovedError, Requester, Router
from tierlog.client.types import TopicPartition
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.log.waits import wait_signalled
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    NoSuchRouteError,
    TierlogError,
    UnknownProducerIdError,
)
from tierlog.wire.native import PRODUCERS_PATH

__all__ = ["Sender"]

log = logging.getLogger("tierlog.client.producer")
# Batches this large or compressed are encoded off the loop: zstd, lz4 and gzip release the GIL.
_ENCODE_IN_THREAD_BYTES = 64 * 1024
# How long the loop sleeps on its own while only the end of the id request (which wakes it) can unblock it.
_IDLE_SECONDS = 3600.0


class Sender:
    """Owns the send loop and its request tasks; ``run`` until ``accumulator.closing`` and drained."""

    def __init__(
        self,
        router: Router,
        accumulator: RecordAccumulator,
        config: ProducerConfig,
        clock: Callable[[], float],
        *,
        idempotence: IdempotenceState | None = None,
        id_requester: Requester | None = None,
        idempotence_required: bool = True,
    ) -> None:
        self._router = router
        self.idempotence = idempotence
        self._id_requester: Requester = id_requester if id_requester is not None else router.any
        self._idempotence_required = idempotence_required
        self._id_task: asyncio.Task[None] | None = None
        self._id_attempts = 0
        self._id_retry_at = 0.0
        self._acc = accumulator
        self._config = config
        self._clock = clock
        self._compression = config.compression()
        self._acks = config.acks_param
        self._in_flight: set[TopicPartition] = set()
        self._per_broker: dict[str, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # records whose delivery failed (expired, aborted, refused), counted once each; read by close()
        self.failed_records = 0

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
                if self.idempotence is not None:
                    self.idempotence.on_failure(batch.stamp, expired)
            if self.fatal is not None:
                self._count_queued_failures()
                for batch in acc.abort_all(self.fatal):
                    await self._finish(batch, self.fatal)
            ready, delay = acc.ready(now, self._in_flight)
            wait = self._identity_step(now)
            if wait is not None:  # no new batch before the id request: wake for expiries meanwhile
                ready = []
                first_deadline = min((b.deadline for b in acc), default=now + wait)
                delay = min(wait, max(first_deadline - now, 0.0), *(() if delay is None else (delay,)))
            for tp in ready:
                broker = self._router.cached_leader(tp)
                if self._per_broker.get(broker, 0) >= limit:
                    continue  # the end of a request to that broker sets the wakeup
                batches = acc.drain(
                    tp, self._config.max_request_size, idempotent=self.idempotence is not None
                )
                self._stamp(tp, batches)
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
                await wait_signalled(acc.wakeup, delay)

    @property
    def fatal(self) -> TierlogError | None:
        """The error every send now fails with (the producer was fenced), or None."""
        return self.idempotence.fatal if self.idempotence is not None else None

    def _identity_step(self, now: float) -> float | None:
        """Start the id request when one is due; answer None when new batches may be drained, else how
        long until the loop should look again (it is also woken when the request ends)."""
        state = self.idempotence
        if state is None:
            return None
        if state.fatal is not None:
            return _IDLE_SECONDS
        if not state.needs_identity():
            return None
        if self._id_task is None and now >= self._id_retry_at:
            self._id_task = asyncio.create_task(self._request_identity(), name="tierlog producer id")
        return _IDLE_SECONDS if self._id_task is not None else max(self._id_retry_at - now, 0.0)

    async def _request_identity(self) -> None:
        """One ``POST /native/v1/producers``: a new id, or the bump of the current one."""
        state = self.idempotence
        assert state is not None
        body = state.request_body()
        try:
            answer = await self._id_requester.json("POST", PRODUCERS_PATH, body=body)
            state.set_identity(int(answer["producer_id"]), int(answer["producer_epoch"]))
            self._id_attempts = 0
            log.debug("producer identity %s (bump: %s)", state.identity, body is not None)
        except UnknownProducerIdError:
            log.info("the broker does not know producer id %s: asking for a new id", state.identity)
            state.unknown_producer()
        except NoSuchRouteError as err:
            if self._idempotence_required or body is not None:
                state.fail_fatally(err)
            else:
                log.warning("the broker has no producer id route: the producer is not idempotent")
                self.idempotence = None
        except TierlogError as err:
            if not err.retriable:
                state.fail_fatally(err)
            else:
                wait = backoff_seconds(
                    self._id_attempts, self._config.retry_backoff_ms, self._config.retry_backoff_max_ms
                )
                self._id_attempts += 1
                self._id_retry_at = self._clock() + wait
                log.debug("producer id request failed, retrying in %.3f s: %s", wait, err)
                for batch in self._acc:
                    batch.last_error = err
        except (KeyError, TypeError, ValueError) as err:
            state.fail_fatally(InvalidRequestError(f"bad producer id answer: {err!r}"))
        finally:
            self._id_task = None
            self._acc.wakeup.set()

    def _stamp(self, tp: TopicPartition, batches: list[ProducerBatch]) -> None:
        state = self.idempotence
        if state is None:
            return
        for batch in batches:
            if batch.stamp is None:
                batch.stamp = state.stamp(tp, len(batch.records))

    async def abort(self, error: TierlogError) -> None:
        """Cancel in-flight requests and fail their records and every queued one with ``error``."""
        if self._id_task is not None:
            self._id_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._id_task
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._count_queued_failures()
        for batch in self._acc.abort_all(error):
            await self._finish(batch, error)
        for batch in list(self._acc.incomplete):
            await self._finish(batch, error)

    def _expiry_message(self, batch: ProducerBatch) -> str:
        return (
            f"{len(batch.records)} record(s) for {batch.tp.topic}-{batch.tp.partition} expired: "
            f"not acknowledged within delivery_timeout_ms={self._config.delivery_timeout_ms}"
        )

    def _count_queued_failures(self) -> None:
        """Count the queued batches' records as failed before ``abort_all`` settles them."""
        self.failed_records += sum(len(b.records) for b in self._acc if not b.settled)

    async def _finish(self, batch: ProducerBatch, error: Exception | None = None) -> None:
        if batch not in self._acc.incomplete:
            return
        self._acc.incomplete.discard(batch)
        if error is not None:
            if not batch.settled:
                self.failed_records += len(batch.records)
            batch.fail(error)
        await self._acc.release(batch.size)

    async def _encode(self, batches: list[ProducerBatch]) -> bytes:
        parts: list[bytes] = []
        for batch in batches:
            if batch.encoded is None:
                encode = functools.partial(
                    build_batch,
                    batch.records,
                    compression=self._compression,
                    producer_id=batch.stamp.producer_id if batch.stamp else -1,
                    producer_epoch=batch.stamp.producer_epoch if batch.stamp else -1,
                    base_sequence=batch.stamp.base_sequence if batch.stamp else -1,
                )
                if self._compression != Compression.NONE or batch.size >= _ENCODE_IN_THREAD_BYTES:
                    try:
                        batch.encoded = await asyncio.to_thread(encode)
                    except RuntimeError:  # no new threads once the interpreter exits (a close at exit)
                        batch.encoded = encode()
                else:
                    batch.encoded = encode()
            parts.append(batch.encoded)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def _send(self, tp: TopicPartition, batches: list[ProducerBatch], broker: str) -> None:
        url: str | None = None
        try:
            body = await self._encode(batches)
            leader = await self._router.leader_for(tp)
            url = leader.base_url
            answer = await self._router.unless_moved(
                tp, leader.base_url, leader.produce(tp.topic, tp.partition, body, self._acks)
            )
        except DuplicateSequenceError:
            # Stored before, older than the offsets the leader remembers: delivered, offsets unknown.
            for batch in batches:
                batch.complete(-1, -1)
                await self._finish(batch)
        except LeaderMovedError as err:
            await self._failed(batches, err, retry_now=True)  # the snapshot names the new leader already
        except TierlogError as err:
            hinted = self._router.note_error(tp, err, url)
            await self._failed(batches, err, retry_now=hinted)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # a bug or a user value the codec refused: never leave futures hanging
            log.exception("produce to %s-%d failed", tp.topic, tp.partition)
            await self._fail_all(batches, err)
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
            await self._fail_all(batches, timeout)
            return
        await self._fail_all(batches, err)

    async def _fail_all(self, batches: list[ProducerBatch], err: Exception) -> None:
        """Fail ``batches`` for good; a stamped one marks an epoch bump (or makes a fencing fatal)."""
        for batch in batches:
            await self._finish(batch, err)
            if self.idempotence is not None:
                self.idempotence.on_failure(batch.stamp, err)
        if self.fatal is not None:
            self._acc.wakeup.set()
