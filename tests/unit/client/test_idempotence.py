"""The idempotent producer's pure state: sequences per partition and epoch, bumps, fencing, drain groups."""

from __future__ import annotations

import asyncio

import pytest

from tierlog.client.accumulator import MAX_IDEMPOTENT_BATCHES, PendingRecord, RecordAccumulator, record_size
from tierlog.client.errors import DeliveryTimeoutError
from tierlog.client.idempotence import MAX_SEQUENCE, IdempotenceState, Stamp, increment_sequence
from tierlog.client.types import TopicPartition
from tierlog.tiering.codec.records import Record
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)

A = TopicPartition("t", 0)
B = TopicPartition("t", 1)


def started(producer_id: int = 7, epoch: int = 0) -> IdempotenceState:
    state = IdempotenceState()
    assert state.needs_identity() and state.request_body() is None
    state.set_identity(producer_id, epoch)
    assert not state.needs_identity()
    return state


def test_sequences_advance_per_partition_by_record_count() -> None:
    state = started()
    assert state.stamp(A, 3) == Stamp(7, 0, 0)
    assert state.stamp(A, 2) == Stamp(7, 0, 3)
    assert state.stamp(B, 1) == Stamp(7, 0, 0)
    assert state.stamp(A, 1) == Stamp(7, 0, 5)
    assert (state.next_sequence(A), state.next_sequence(B)) == (6, 1)


def test_sequences_wrap_after_the_largest_int32_to_zero() -> None:
    assert increment_sequence(MAX_SEQUENCE, 1) == 0
    assert increment_sequence(MAX_SEQUENCE - 1, 3) == 1
    assert increment_sequence(5, 3) == 8
    state = started()
    state._sequences[A] = (0, MAX_SEQUENCE - 1)
    assert state.stamp(A, 4).base_sequence == MAX_SEQUENCE - 1
    assert state.stamp(A, 1).base_sequence == 2


def test_no_stamp_before_the_identity_or_while_a_bump_is_pending() -> None:
    with pytest.raises(InvalidRequestError):
        IdempotenceState().stamp(A, 1)
    state = started()
    state.request_bump(state.stamp(A, 1))
    with pytest.raises(InvalidRequestError):
        state.stamp(A, 1)


def test_a_new_epoch_restarts_every_partition_at_zero() -> None:
    state = started()
    first = state.stamp(A, 4)
    state.stamp(B, 2)
    state.on_failure(first, OutOfOrderSequenceError("gap"))
    assert state.bump_pending and state.needs_identity()
    assert state.request_body() == {"producer_id": 7, "producer_epoch": 0}
    state.set_identity(7, 1)
    assert state.bumps == 1 and not state.needs_identity()
    assert state.stamp(A, 1) == Stamp(7, 1, 0)
    assert state.stamp(B, 1) == Stamp(7, 1, 0)


def test_failures_of_an_older_identity_or_unstamped_batches_do_not_bump_again() -> None:
    state = started()
    old = state.stamp(A, 1)
    state.on_failure(old, DeliveryTimeoutError("expired"))
    state.set_identity(7, 1)
    state.on_failure(old, DeliveryTimeoutError("expired too"))
    state.on_failure(None, DeliveryTimeoutError("never sent"))
    assert not state.bump_pending
    state.on_failure(state.stamp(A, 1), DuplicateSequenceError("stored"))
    assert not state.bump_pending


def test_an_unknown_producer_id_on_a_bump_asks_for_a_new_id() -> None:
    state = started()
    state.request_bump(state.stamp(A, 1))
    state.unknown_producer()
    assert state.identity is None and state.needs_identity() and state.request_body() is None
    state.set_identity(9, 0)
    assert state.stamp(A, 1) == Stamp(9, 0, 0)


def test_fencing_is_fatal_and_stays() -> None:
    state = started()
    fenced = ProducerFencedError("newer epoch")
    state.on_failure(state.stamp(A, 1), fenced)
    assert state.fatal is fenced and not state.needs_identity()
    state.on_failure(None, ProducerFencedError("another"))
    assert state.fatal is fenced
    with pytest.raises(ProducerFencedError):
        state.stamp(B, 1)


def test_identity_answers_out_of_range_are_refused() -> None:
    state = IdempotenceState()
    with pytest.raises(InvalidRequestError):
        state.set_identity(1, 40_000)
    assert state.identity is None


def _accumulator() -> RecordAccumulator:
    return RecordAccumulator(
        batch_size=64, linger_ms=0, buffer_memory=1 << 20, delivery_timeout_ms=60_000, clock=lambda: 0.0
    )


def _add(acc: RecordAccumulator, tp: TopicPartition, count: int) -> None:
    loop = asyncio.get_running_loop()
    for i in range(count):
        record = Record(None, b"v%03d" % i + b"x" * 40, (), 0)
        acc.append(tp, PendingRecord(record, record_size(record), loop.create_future()))


async def test_a_retried_request_is_resent_as_the_same_stamped_batches() -> None:
    acc = _accumulator()
    state = started()
    _add(acc, A, 8)  # one record per batch (batch_size 64)
    first = acc.drain(A, 1 << 20, idempotent=True)
    assert len(first) == MAX_IDEMPOTENT_BATCHES
    for batch in first:
        batch.stamp = state.stamp(A, len(batch.records))
    stamps = [b.stamp for b in first]
    for batch in first:
        batch.attempts += 1
    acc.requeue(first)
    again = acc.drain(A, 1 << 20, idempotent=True)
    assert again == first and [b.stamp for b in again] == stamps
    assert [s.base_sequence for s in stamps if s] == [0, 1, 2, 3, 4]
    rest = acc.drain(A, 1 << 20, idempotent=True)
    assert len(rest) == 3 and all(b.stamp is None for b in rest)


async def test_a_retried_group_is_not_mixed_with_new_batches() -> None:
    acc = _accumulator()
    state = started()
    _add(acc, A, 2)
    first = acc.drain(A, 1 << 20, idempotent=True)
    for batch in first:
        batch.stamp = state.stamp(A, len(batch.records))
        batch.attempts = 1
    _add(acc, A, 2)
    acc.requeue(first)
    assert acc.drain(A, 1 << 20, idempotent=True) == first
    assert all(b.stamp is None for b in acc.drain(A, 1 << 20, idempotent=True))
