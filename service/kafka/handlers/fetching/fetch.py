"""Fetch (key 1), v4 to v12 (the versions that name topics): the stored record batches of several
partitions in one answer, with Kafka's long poll and byte limits.

Each partition is read with :meth:`Partition.read_slice`, the native fetch's call: committed records only
(below the high watermark), whole batches as stored, the remote tier below the local log start. The
limits are KIP-74's: at most ``partition_max_bytes`` per partition and ``max_bytes`` for the whole answer,
except that the first batch of the first partition with data is returned whole even when it is larger, so
a consumer always makes progress. A later partition whose first batch does not fit in what is left of
``max_bytes`` answers no records this time (Kafka would send the batch cut short, which clients drop).

The long poll: when the partitions hold fewer than ``min_bytes`` together, the request waits up to
``max_wait_ms`` on every requested partition's commit signal at once and reads again when any of them
advances (no polling); an error in any partition answers at once, as Kafka does.

Zero-copy: on a plaintext connection, a partition's region of at least :data:`ZERO_COPY_FROM` bytes is
not read here; the answer is a :class:`~tierlog.service.kafka.spliced.SplicedAnswer` and the listener sends
the region with ``sendfile`` straight from the segment file (or the anonymous memory file a remote-tier
read fills), after the headers before it. Smaller regions, and every region on a TLS connection, are read
in a worker thread and copied into the answer as before. The bytes are the same either way.

Differences from Kafka (docs/kafka-protocol.md): fetch sessions (KIP-227) are answered sessionless
(``session_id`` 0, which the KIP allows; a request naming a session gets FETCH_SESSION_ID_NOT_FOUND), so
every request lists its partitions in full; ``isolation_level`` read_committed reads what read_uncommitted
reads, the last stable offset being the high watermark while tierlog has no transactions (no aborted
transactions are ever listed); followers replicate over the HTTP path, so only consumers fetch here (a
``replica_id`` of 0 or more answers NOT_LEADER_OR_FOLLOWER, as Kafka answers a broker that is no replica).

KIP-392 (:mod:`.replicas`): a consumer's v11+ fetch may read a follower; with
``replica.selector.class=rack-aware`` the leader points a consumer in another rack to a follower in its
own (``preferred_read_replica``, with no records, answered at once as Kafka does).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tierlog.service.kafka.apis import api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.handlers.fetching.partitions import error_answer, milliseconds
from tierlog.service.kafka.handlers.fetching.replicas import (
    CLIENT_RACK_VERSION,
    RACK_AWARE,
    preferred_read_replica,
    serving_partition,
)
from tierlog.service.kafka.messages import ErrorCode
from tierlog.service.kafka.spliced import SplicedAnswer, marker
from tierlog.service.security.model import Operation, ResourceType
from tierlog.wire.errors import NotLeaderOrFollowerError, TierlogError, UnavailableError

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker
    from tierlog.service.topics.partition import Partition
    from tierlog.tiering.log.types import FileSlice

__all__ = ["FETCH_KEY", "ZERO_COPY_FROM", "Wanted", "fetch", "wait_any"]

FETCH_KEY = 1
MAX_WAIT_MS = 300_000  # a longer wait is cut to this (clients ask 500 ms by default)
READ_COMMITTED = 1
#: Regions from this size on are sent with sendfile on plaintext connections; a smaller one costs less to
#: copy than the reopen, the pause of the transport and the system calls of a sendfile.
ZERO_COPY_FROM = 64 * 1024


@dataclass(slots=True)
class Wanted:
    """One requested partition and, once read, its answer: a region of stored batches, or an error."""

    topic: str
    index: int
    offset: int
    limit: int  # partition_max_bytes
    leader_epoch: int  # current_leader_epoch (-1: not checked)
    last_fetched_epoch: int
    partition: Partition | None = None
    region: FileSlice | None = None
    error: TierlogError | None = None
    diverging: tuple[int, int] | None = None  # (epoch, end offset) when the client's log diverged
    preferred: int = -1  # the replica the consumer should read instead (KIP-392); -1: this one
    from_follower: bool = False  # the partition is a follower here (KIP-392)
    records: bytes = b""
    kept: FileSlice | None = None  # the region left to the listener to sendfile (zero-copy), if any

    @property
    def size(self) -> int:
        return self.region.size if self.region is not None else 0

    def drop_region(self) -> None:
        if self.region is not None:
            self.region.close()
            self.region = None

    def fail(self, err: TierlogError) -> None:
        self.drop_region()
        self.error = err


@api(FETCH_KEY, "Fetch", 4, 12)
async def handle(request: KafkaRequest, body: Any) -> Mapping[str, Any] | SplicedAnswer:
    if getattr(body, "session_id", 0) != 0:
        return {
            "throttle_time": 0,
            "error_code": ErrorCode.fetch_session_id_not_found,
            "session_id": 0,
            "responses": [],
        }
    wanted = [
        Wanted(
            topic.topic,
            p.partition,
            p.fetch_offset,
            max(p.partition_max_bytes, 0),
            getattr(p, "current_leader_epoch", -1),
            getattr(p, "last_fetched_epoch", -1),
        )
        for topic in body.topics
        for p in topic.partitions
    ]
    refused = {t.topic: request.refusal(Operation.READ, ResourceType.TOPIC, t.topic) for t in body.topics}
    for w in wanted:
        refusal = refused[w.topic]
        if refusal is not None:
            w.error = refusal
    replica_id = getattr(body, "replica_id", -1)
    if replica_id >= 0:
        for w in wanted:
            w.error = NotLeaderOrFollowerError(
                f"broker {replica_id} is no replica of {w.topic}-{w.index} on the Kafka listener: "
                "tierlog's followers replicate over HTTP"
            )
    else:
        rack: str | None = None  # None: no follower reads (a version without the client's rack)
        if request.version >= CLIENT_RACK_VERSION:
            rack = (body.rack_id or "") if request.settings.replica_selector_class == RACK_AWARE else ""
        await fetch(
            request.broker,
            wanted,
            max_wait_ms=min(max(milliseconds(body.max_wait), 0), MAX_WAIT_MS),
            min_bytes=body.min_bytes,
            max_bytes=max(getattr(body, "max_bytes", 2**31 - 1), 0),
            client_rack=rack,
            zero_copy_from=ZERO_COPY_FROM if request.zero_copy else None,
        )
    committed = getattr(body, "isolation_level", 0) == READ_COMMITTED
    regions = [w.kept for w in _encoding_order(wanted) if w.kept is not None]
    try:
        answer = {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "session_id": 0,
            "responses": _by_topic(wanted, committed),
        }
    except BaseException:
        for region in regions:
            region.close()
        raise
    return SplicedAnswer(answer, regions) if regions else answer


async def fetch(
    broker: Broker,
    wanted: Sequence[Wanted],
    *,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    client_rack: str | None = None,
    zero_copy_from: int | None = None,
) -> None:
    """Fill each of ``wanted`` with its records (``records``, the stored batches) or its error, within
    ``max_bytes`` (``limit`` each), waiting up to ``max_wait_ms`` for ``min_bytes`` across them all.
    ``client_rack``: None for a consumer that may read leaders only, else its rack (empty: none, or
    no replica selector), so that it may read followers too and be pointed to one (KIP-392). A region of
    ``zero_copy_from`` bytes or more is not read but handed over in ``kept`` (its records field then holds
    a marker of :mod:`.spliced`, numbered in encoding order): the caller owns and closes it.

    Never raises a TierlogError (each lands in its partition's ``error``). Safe to call concurrently."""
    for w in wanted:
        if w.error is not None:  # refused before reading (not authorized)
            continue
        try:
            w.partition, w.from_follower = serving_partition(
                broker, w.topic, w.index, w.leader_epoch, follower_reads=client_rack is not None
            )
            if client_rack:
                w.preferred = preferred_read_replica(broker, w.partition, client_rack, w.offset)
        except TierlogError as err:
            w.fail(err)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_ms / 1000
    try:
        while True:
            signals = [w.partition.committed_signal() for w in wanted if w.partition is not None]
            # a signal set already: its partition is closing or the broker stopping; answer now
            ending = any(s.is_set() for s in signals)
            await _read_all(wanted, max_bytes)
            remaining = deadline - loop.time()
            total = sum(w.size for w in wanted)
            if total >= min_bytes or remaining <= 0 or not signals or ending or _settled(wanted):
                break
            for w in wanted:
                w.drop_region()
            if not await wait_any(signals, remaining):
                await _read_all(wanted, max_bytes)
                break
        if zero_copy_from is not None:
            _keep_large(wanted, zero_copy_from)
        await _load_records(wanted)
    except BaseException:
        for w in wanted:
            if w.kept is not None:
                w.kept.close()
                w.kept = None
        raise
    finally:
        for w in wanted:
            w.drop_region()


def _settled(wanted: Sequence[Wanted]) -> bool:
    """Whether some partition answers now whatever the others hold: an error or a divergence."""
    return any(w.error is not None or w.diverging is not None or w.preferred >= 0 for w in wanted)


async def wait_any(signals: Sequence[asyncio.Event], timeout: float) -> bool:  # noqa: ASYNC109
    """Wait up to ``timeout`` seconds until any of ``signals`` is set; True if one was. The waiter tasks
    are cancelled and awaited before it returns (also when the caller is cancelled)."""
    if any(s.is_set() for s in signals):
        return True
    waiters = [asyncio.ensure_future(s.wait()) for s in {id(s): s for s in signals}.values()]
    try:
        done, _pending = await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        return bool(done)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def _read_all(wanted: Sequence[Wanted], max_bytes: int) -> None:
    """Read every partition without waiting (concurrently: a region costs no data read), then keep what
    ``max_bytes`` allows in request order, reading again the partition where the budget runs out."""
    readable = [w for w in wanted if w.partition is not None and w.error is None and w.preferred < 0]
    await asyncio.gather(*(_read_one(w, min(w.limit, max_bytes)) for w in readable))
    left = max_bytes
    first = True
    for w in readable:
        if not w.size:
            continue
        if first or w.size <= left:
            first = False
            left -= w.size
            continue
        w.drop_region()
        if left > 0:
            await _read_one(w, left)
            if w.size > left:
                w.drop_region()
            left -= w.size


async def _read_one(w: Wanted, limit: int) -> None:
    partition = w.partition
    assert partition is not None
    w.drop_region()
    try:
        if w.last_fetched_epoch >= 0:
            w.diverging = await _divergence(partition, w.last_fetched_epoch, w.offset)
            if w.diverging is not None:
                return
        w.region = await _region(partition, w.offset, max(limit, 1), w.from_follower)
    except TierlogError as err:
        w.fail(err)


async def _region(partition: Partition, offset: int, limit: int, from_follower: bool) -> FileSlice:
    """:meth:`Partition.read_slice` without waiting, whose region is closed even when the caller is
    cancelled meanwhile (the log I/O thread finishes the read regardless; the region would leak its
    descriptor). Raises: as ``read_slice``."""
    reading = partition.read_slice(offset, limit, from_follower=True) if from_follower else None
    read = asyncio.ensure_future(reading or partition.read_slice(offset, limit))
    try:
        return await asyncio.shield(read)
    except asyncio.CancelledError:
        read.add_done_callback(_close_region)
        raise


def _close_region(read: asyncio.Future[FileSlice]) -> None:
    if not read.cancelled() and read.exception() is None:
        read.result().close()


async def _divergence(partition: Partition, epoch: int, offset: int) -> tuple[int, int] | None:
    """KIP-595's check of a fetch's ``last_fetched_epoch``: ``(epoch, end offset)`` of the log's largest
    epoch at or below it when the client's records past that point diverge from this log, else None."""
    found_epoch, end_offset = await partition.epoch_end_offset(epoch)
    if found_epoch < epoch or end_offset < offset:
        return found_epoch, end_offset
    return None


def _keep_large(wanted: Sequence[Wanted], threshold: int) -> None:
    """Hand the regions of ``threshold`` bytes or more over to ``kept``, their records fields marked in the
    order the answer encodes them."""
    kept = 0
    for w in _encoding_order(wanted):
        if w.region is not None and w.region.size >= threshold and w.error is None:
            w.records = marker(kept)
            w.kept, w.region = w.region, None
            kept += 1


def _encoding_order(wanted: Sequence[Wanted]) -> list[Wanted]:
    """``wanted`` in the order :func:`_by_topic` encodes them: grouped by topic, topics in request order."""
    topics: dict[str, list[Wanted]] = {}
    for w in wanted:
        topics.setdefault(w.topic, []).append(w)
    return [w for group in topics.values() for w in group]


async def _load_records(wanted: Sequence[Wanted]) -> None:
    """The kept regions' bytes, read in one worker thread (never on the event loop)."""
    kept = [w for w in wanted if w.region is not None and w.region.size]
    if not kept:
        return
    try:
        data = await asyncio.to_thread(lambda: [w.region.read() for w in kept if w.region is not None])
    except OSError as err:
        for w in kept:
            w.fail(UnavailableError(f"reading {w.topic}-{w.index} failed: {err}"))
        return
    for w, records in zip(kept, data, strict=True):
        w.records = records


def _by_topic(wanted: Sequence[Wanted], committed: bool) -> list[dict[str, Any]]:
    """The ``responses`` entries: one per topic, in request order, each with its partitions."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for w in wanted:
        topics.setdefault(w.topic, []).append(_partition_answer(w, committed))
    return [{"topic": name, "partitions": partitions} for name, partitions in topics.items()]


def _partition_answer(w: Wanted, committed: bool) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "partition_index": w.index,
        "error_code": ErrorCode.none,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": [] if committed else None,
        "preferred_read_replica": w.preferred,
        "records": w.records,
    }
    if w.error is not None:
        answer.update(error_answer(w.error))
        return answer
    partition = w.partition
    assert partition is not None
    high_watermark = partition.high_watermark
    answer.update(
        high_watermark=high_watermark,
        last_stable_offset=high_watermark,  # no transactions: every committed record is stable
        log_start_offset=partition.log_start_offset,
    )
    if w.diverging is not None:
        answer["diverging_epoch"] = {"epoch": w.diverging[0], "end_offset": w.diverging[1]}
    return answer
