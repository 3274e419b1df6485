"""Producer ids for idempotent producers (design note 0011, "Producer ids").

A broker hands out producer ids from blocks of :data:`BLOCK_SIZE` (Kafka's block size, KIP-730). It takes
a block with one durable write of the next block's start, made before any id of the block is answered, so
an id is never handed out twice: not by two brokers of one cluster, not by one broker across restarts (a
restarted broker takes a new block; the rest of its old one is never used).

The next block's start lives in the metadata store key :data:`NEXT_BLOCK_KEY`, JSON ``{"next": N}``,
written with a compare on its ``mod_revision`` and retried when another broker wrote it in between (a
``tierlog-state.json`` of an older single broker brings its ``next_producer_id_block`` there when it is
imported, see :mod:`tierlog.service.cluster.legacy_state`).

Every id below the stored start was possibly issued (:meth:`ProducerIdManager.issued_below`); an epoch
bump of an id at or above it is refused with UnknownProducerIdError (40404).
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Protocol

from tierlog.service.cluster.metadata_store import Compare, Put
from tierlog.wire.errors import (
    BadRequestError,
    CorruptRecordError,
    InvalidValueError,
    UnavailableError,
    UnknownProducerIdError,
)

if TYPE_CHECKING:
    from tierlog.service.cluster.metadata_store import MetadataStore

__all__ = [
    "BLOCK_SIZE",
    "MAX_EPOCH",
    "MAX_PRODUCER_ID",
    "NEXT_BLOCK_KEY",
    "ProducerIdManager",
    "check_producer_id",
]

log = logging.getLogger("tierlog.producers")

BLOCK_SIZE = 1000
MAX_EPOCH = 32767  # int16 in the batch header
MAX_PRODUCER_ID = 2**63 - 1  # int64 in the batch header
NEXT_BLOCK_KEY = "producer-ids/next-block"
MAX_COMMIT_ATTEMPTS = 100  # conflicting writers: one of them wins every round, so this is never reached


class _Blocks(Protocol):
    """Where the next block's start is stored."""

    async def take(self) -> int:
        """Durably move the next block's start up by :data:`BLOCK_SIZE`; return the block taken."""

    async def latest(self) -> int:
        """The stored start of the next block (every id below it was possibly issued)."""


class _StoreBlocks:
    """The key :data:`NEXT_BLOCK_KEY` in the cluster's metadata store."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store

    async def take(self) -> int:
        for _ in range(MAX_COMMIT_ATTEMPTS):
            start, revision = await self._read()
            value = json.dumps({"next": start + BLOCK_SIZE}).encode()
            if await self._store.commit([Compare(NEXT_BLOCK_KEY, revision)], [Put(NEXT_BLOCK_KEY, value)]):
                return start
            log.debug("producer id block at %d taken by another broker, reading again", start)
        raise UnavailableError(f"could not take a producer id block in {MAX_COMMIT_ATTEMPTS} attempts")

    async def latest(self) -> int:
        return (await self._read())[0]

    async def _read(self) -> tuple[int, int]:
        kv = await self._store.get(NEXT_BLOCK_KEY)
        if kv is None:
            return 0, 0
        try:
            start = json.loads(kv.value)["next"]
        except (ValueError, TypeError, KeyError) as err:
            raise CorruptRecordError(f"malformed {NEXT_BLOCK_KEY}: {kv.value[:100]!r}") from err
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise CorruptRecordError(f"malformed {NEXT_BLOCK_KEY}: {kv.value[:100]!r}")
        return start, kv.mod_revision


class ProducerIdManager:
    """Hands out producer ids and bumps their epochs (``POST /native/v1/producers``).

    Build one with :meth:`cluster`. Every coroutine must run on the broker's event loop
    and is safe to call concurrently: ids are handed out under one lock, in order, each exactly once.
    """

    def __init__(self, blocks: _Blocks) -> None:
        self._blocks = blocks
        self._lock = asyncio.Lock()
        self._next = 0
        self._end = 0  # the current block is [_next, _end); empty until the first id is asked for
        self._issued_below = 0  # highest stored next-block start seen

    @classmethod
    def cluster(cls, store: MetadataStore) -> ProducerIdManager:
        """Blocks recorded in the cluster's metadata store (key :data:`NEXT_BLOCK_KEY`)."""
        return cls(_StoreBlocks(store))

    def issued_below(self) -> int:
        """Every id below this was possibly issued: the start of the next block as last seen by this
        broker (0 before it took or read one). Pure."""
        return self._issued_below

    async def new_id(self) -> tuple[int, int]:
        """A producer id never handed out before, at epoch 0.

        Takes a new block (one durable write) when the current one is used up. Not idempotent.
        Raises: UnavailableError (the metadata store cannot be reached), CorruptRecordError (the stored
        value is not a block start).
        """
        async with self._lock:
            if self._next >= self._end:
                start = await self._blocks.take()
                self._next, self._end = start, start + BLOCK_SIZE
                self._issued_below = max(self._issued_below, self._end)
                log.info("took producer ids %d..%d", start, self._end - 1)
            producer_id = self._next
            self._next += 1
            return producer_id, 0

    async def bump(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """The epoch bump of KIP-360: ``(producer_id, epoch + 1)``, or a new id at epoch 0 when ``epoch``
        is 32767.

        The new epoch fences the producer's older instances on every partition it then writes to. Not
        idempotent: bumping twice gives two epochs.

        Raises:
            BadRequestError: (40001) ``producer_id`` or ``epoch`` is not an integer.
            InvalidValueError: (42202) ``producer_id`` outside 0..2**63-1 or ``epoch`` outside 0..32767.
            UnknownProducerIdError: (404, 40404) ``producer_id`` was never issued by this cluster.
            UnavailableError, CorruptRecordError: as :meth:`new_id`.
        """
        check_producer_id(producer_id, epoch)
        if producer_id >= self._issued_below:
            latest = await self._blocks.latest()
            self._issued_below = max(self._issued_below, latest)
        if producer_id >= self._issued_below:
            raise UnknownProducerIdError(f"Producer id {producer_id} was never issued by this cluster.")
        if epoch == MAX_EPOCH:
            return await self.new_id()
        return producer_id, epoch + 1


def check_producer_id(producer_id: object, epoch: object) -> None:
    """Check an id and epoch as a client sends them. Pure.

    Raises BadRequestError (40001: not integers), InvalidValueError (42202: out of range).
    """
    checks = (("producer_id", producer_id, MAX_PRODUCER_ID), ("producer_epoch", epoch, MAX_EPOCH))
    for name, value, high in checks:
        if isinstance(value, bool) or not isinstance(value, int):
            raise BadRequestError(f"{name} must be an integer, got {value!r}")
        if not 0 <= value <= high:
            raise InvalidValueError(f"{name} must be between 0 and {high}, got {value}")
