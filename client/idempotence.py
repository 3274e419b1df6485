"""The idempotent producer's identity and sequence state (design note 0011, Kafka's TransactionManager).

A producer with ``enable_idempotence`` writes every batch under its producer id and epoch with a sequence
number per partition; the partition leader stores a retried batch once. :class:`IdempotenceState` holds:

* the identity ``(producer_id, producer_epoch)``, ``None`` until the broker answered
  ``POST /native/v1/producers``;
* per partition, the epoch its sequences belong to and the next sequence; a partition's first batch under a
  new epoch starts at 0, and sequences wrap from 2**31-1 to 0;
* whether an epoch bump is pending (a batch that had a sequence failed: its outcome on the broker is unknown,
  so no later batch may continue its sequence) or a new id is needed (the broker did not know the id);
* the fatal error (``ProducerFencedError``) once another instance took the id over.

Pure logic: no I/O, no clock. The sender asks :meth:`needs_identity` before it drains new batches, performs
the request, and reports with :meth:`set_identity`. Runs on the producer's event loop; not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tierlog.client.types import TopicPartition
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    ProducerFencedError,
    TierlogError,
)

__all__ = ["MAX_SEQUENCE", "IdempotenceState", "Stamp", "increment_sequence", "identity_request"]

MAX_SEQUENCE = 2**31 - 1
MAX_EPOCH = 2**15 - 1


def increment_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping after 2**31-1 to 0 (Kafka's ``incrementSequence``). Pure."""
    return (sequence + increment) % (MAX_SEQUENCE + 1)


@dataclass(frozen=True, slots=True)
class Stamp:
    """What a batch carries in its header once it is first encoded."""

    producer_id: int
    producer_epoch: int
    base_sequence: int


def identity_request(identity: tuple[int, int] | None) -> dict[str, Any] | None:
    """The JSON body of ``POST /native/v1/producers``: None for a new id, else the current id and epoch
    (the broker answers the bumped epoch). Pure."""
    if identity is None:
        return None
    return {"producer_id": identity[0], "producer_epoch": identity[1]}


class IdempotenceState:
    """Producer id, epoch and per-partition sequences of one idempotent producer. See the module docstring."""

    def __init__(self) -> None:
        self.identity: tuple[int, int] | None = None
        self._bump_pending = False
        self._sequences: dict[TopicPartition, tuple[int, int]] = {}  # tp -> (epoch, next sequence)
        self.fatal: TierlogError | None = None
        self.bumps = 0

    # -- identity ---------------------------------------------------------------------------------------

    def needs_identity(self) -> bool:
        """Whether an id request (first id, bump or new id) must complete before a new batch is stamped."""
        return self.fatal is None and (self.identity is None or self._bump_pending)

    def request_body(self) -> dict[str, Any] | None:
        """The body of the next id request: a bump of the current identity, or None for a new id."""
        return identity_request(self.identity if self._bump_pending else None)

    def set_identity(self, producer_id: int, producer_epoch: int) -> None:
        """Adopt the broker's answer. A new id or epoch restarts every partition's sequence at 0.

        Raises:
            InvalidRequestError: the answer is out of range (a broker bug); nothing changes.
        """
        if not (producer_id >= 0 and 0 <= producer_epoch <= MAX_EPOCH):
            raise InvalidRequestError(f"producer id answer out of range: {producer_id}/{producer_epoch}")
        if self.identity is not None and self.identity != (producer_id, producer_epoch):
            self.bumps += 1
        self.identity = (producer_id, producer_epoch)
        self._bump_pending = False
        self._sequences.clear()

    def unknown_producer(self) -> None:
        """The broker did not know the id being bumped (UnknownProducerIdError): ask for a new id next."""
        self.identity = None
        self._bump_pending = False
        self._sequences.clear()

    def request_bump(self, stamp: Stamp | None) -> bool:
        """A batch stamped with ``stamp`` failed with an outcome other than success or duplicate: bump the
        epoch before the next new batch. Ignored for unstamped batches and for stamps of an older identity
        (a bump already happened since). Answers whether a bump is now pending. Idempotent."""
        if stamp is None or self.identity != (stamp.producer_id, stamp.producer_epoch):
            return self._bump_pending
        self._bump_pending = True
        return True

    @property
    def bump_pending(self) -> bool:
        return self._bump_pending

    # -- sequences --------------------------------------------------------------------------------------

    def stamp(self, tp: TopicPartition, record_count: int) -> Stamp:
        """The identity and base sequence of ``tp``'s next batch of ``record_count`` records, and advance.

        Raises:
            ProducerFencedError: the producer is fenced (its fatal error).
            InvalidRequestError: no identity yet or a bump is pending (a sender bug: call after the id
                request).
        """
        if self.fatal is not None:
            raise self.fatal
        if self.identity is None or self._bump_pending:
            raise InvalidRequestError("no current producer identity: the id request must complete first")
        if record_count <= 0:
            raise InvalidRequestError("a batch has at least one record")
        producer_id, epoch = self.identity
        entry = self._sequences.get(tp)
        base = entry[1] if entry is not None and entry[0] == epoch else 0
        self._sequences[tp] = (epoch, increment_sequence(base, record_count))
        return Stamp(producer_id, epoch, base)

    def next_sequence(self, tp: TopicPartition) -> int:
        """The base sequence ``tp``'s next batch would get under the current identity (0 if none yet)."""
        entry = self._sequences.get(tp)
        if self.identity is None or entry is None or entry[0] != self.identity[1]:
            return 0
        return entry[1]

    # -- outcomes ---------------------------------------------------------------------------------------

    def on_failure(self, stamp: Stamp | None, error: BaseException) -> None:
        """Record the final failure of a batch stamped ``stamp`` (not retried any more).

        ``ProducerFencedError`` makes the producer fatal; ``DuplicateSequenceError`` is a delivery, not a
        failure (the sender completes the batch with offset -1 and does not call this); anything else marks
        a bump when the stamp is of the current identity.
        """
        if isinstance(error, ProducerFencedError):
            self.fail_fatally(error)
            return
        if isinstance(error, DuplicateSequenceError):
            return
        self.request_bump(stamp)

    def fail_fatally(self, error: TierlogError) -> None:
        """Make ``error`` the producer's fatal error: every later send fails with it. First one wins."""
        if self.fatal is None:
            self.fatal = error
