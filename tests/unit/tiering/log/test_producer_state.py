"""The idempotent producer rules of design note 0011 on the pure state manager (no files written)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tierlog.tiering.codec.header import BatchHeader
from tierlog.tiering.log.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerEntry,
    ProducerStateManager,
    decode_snapshot,
    encode_snapshot,
    last_sequence,
)
from tierlog.tiering.log.segment import BatchMeta
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    ProducerFencedError,
)

NOW = 1_700_000_000_000
PID = 1000


def hdr(pid: int = PID, epoch: int = 0, seq: int = 0, count: int = 1, ts: int = NOW) -> BatchHeader:
    return BatchHeader(0, 100, -1, 2, 0, 0, count - 1, ts, ts, pid, epoch, seq, count)


class Log:
    """A log of headers only: offsets assigned from 0, the manager checked and updated as the partition
    log does (validate, then record what was "written")."""

    def __init__(self, tmp_path: Path) -> None:
        self.state = ProducerStateManager(tmp_path)
        self.end = 0

    def metas(self, headers: list[BatchHeader]) -> list[BatchMeta]:
        metas, offset = [], self.end
        for h in headers:
            metas.append((h.size, offset, offset + h.last_offset_delta, h.max_timestamp))
            offset += h.last_offset_delta + 1
        return metas

    def append(self, *headers: BatchHeader) -> list[BatchMetadata] | list[BatchMeta]:
        batches = [(0, h) for h in headers]
        metas = self.metas(list(headers))
        duplicates = self.state.validate(batches, metas)
        if duplicates is not None:
            return duplicates
        self.state.record(batches, metas)
        self.end = metas[-1][2] + 1
        return metas

    def follow(self, *headers: BatchHeader) -> None:
        metas = self.metas(list(headers))
        self.state.record([(0, h) for h in headers], metas)
        self.end = metas[-1][2] + 1


@pytest.fixture
def log(tmp_path: Path) -> Log:
    return Log(tmp_path)


def test_unknown_producer_is_accepted_at_any_sequence_and_epoch(log: Log) -> None:
    log.append(hdr(epoch=3, seq=12345, count=2))
    (info,) = log.state.producers()
    assert (info.producer_id, info.epoch, info.last_sequence, info.last_offset) == (PID, 3, 12346, 1)
    assert info.last_timestamp == NOW


def test_sequence_must_continue(log: Log) -> None:
    log.append(hdr(seq=0, count=3))
    log.append(hdr(seq=3))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(hdr(seq=5))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(hdr(seq=2, count=3))  # overlaps, not a cached batch
    assert log.state.producers()[0].last_sequence == 3
    assert log.end == 4


def test_sequence_wraps_after_int32_max(log: Log, tmp_path: Path) -> None:
    log.append(hdr(seq=INT32_MAX - 1, count=3))  # covers INT32_MAX - 1, INT32_MAX, 0
    assert log.state.producers()[0].last_sequence == 0
    log.append(hdr(seq=1))
    log.append(hdr(seq=2))
    assert last_sequence(INT32_MAX, 0) == INT32_MAX
    assert last_sequence(INT32_MAX, 1) == 0
    other = Log(tmp_path)
    other.append(hdr(seq=INT32_MAX - 1, count=2))
    other.append(hdr(seq=0))  # INT32_MAX is followed by 0
    with pytest.raises(OutOfOrderSequenceError):
        other.append(hdr(seq=INT32_MAX + 0 - 5))


def test_epoch_bump_starts_at_zero(log: Log) -> None:
    log.append(hdr(epoch=0, seq=0, count=5))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(hdr(epoch=1, seq=5))
    log.append(hdr(epoch=1, seq=0))
    (info,) = log.state.producers()
    assert (info.epoch, info.last_sequence) == (1, 0)
    with pytest.raises(ProducerFencedError):
        log.append(hdr(epoch=0, seq=5))


def test_duplicates_of_the_last_five_batches_answer_their_offsets(log: Log) -> None:
    for i in range(7):
        log.append(hdr(seq=2 * i, count=2))
    for i in range(2, 7):
        (dup,) = log.append(hdr(seq=2 * i, count=2))
        assert isinstance(dup, BatchMetadata)
        assert (dup.first_offset, dup.last_offset) == (2 * i, 2 * i + 1)
    assert log.end == 14
    for i in range(2):  # older than the cache
        with pytest.raises(DuplicateSequenceError):
            log.append(hdr(seq=2 * i, count=2))
    with pytest.raises(DuplicateSequenceError):
        log.append(hdr(seq=1, count=2))
    with pytest.raises(OutOfOrderSequenceError):  # inside the cache but not one of its batches
        log.append(hdr(seq=5))


def test_duplicate_needs_the_same_epoch(log: Log) -> None:
    log.append(hdr(epoch=0, seq=0))
    log.append(hdr(epoch=1, seq=0))
    with pytest.raises(ProducerFencedError):
        log.append(hdr(epoch=0, seq=0))


def test_several_batches_of_one_producer_in_one_append(log: Log) -> None:
    metas = log.append(hdr(seq=0, count=2), hdr(seq=2, count=3), hdr(pid=-1, epoch=-1, seq=-1))
    assert [m[1] for m in metas] == [0, 2, 5]  # type: ignore[index]
    assert log.state.producers()[0].last_sequence == 4
    with pytest.raises(OutOfOrderSequenceError):
        log.append(hdr(seq=5), hdr(seq=7))
    assert log.state.producers()[0].last_sequence == 4  # the refused append changed nothing
    dups = log.append(hdr(seq=0, count=2), hdr(seq=2, count=3))
    assert [d.first_offset for d in dups] == [0, 2]  # type: ignore[union-attr]


def test_a_duplicate_prefix_is_answered_and_a_duplicate_after_new_batches_refused(log: Log) -> None:
    log.append(hdr(seq=0))
    prefix = log.state.validate([(0, hdr(seq=0)), (0, hdr(seq=1))], log.metas([hdr(seq=0), hdr(seq=1)]))
    assert [(d.first_seq, d.first_offset) for d in prefix or []] == [(0, 0)]  # only the rest is appended
    with pytest.raises(InvalidRequestError):
        log.append(hdr(seq=1), hdr(seq=0))
    with pytest.raises(InvalidRequestError):
        log.append(hdr(pid=-1, epoch=-1, seq=-1), hdr(seq=0))
    assert log.end == 1


def test_producers_are_independent(log: Log) -> None:
    log.append(hdr(pid=1, seq=0), hdr(pid=2, seq=7))
    log.append(hdr(pid=2, seq=8), hdr(pid=1, seq=1))
    assert [(p.producer_id, p.last_sequence) for p in log.state.producers()] == [(1, 1), (2, 8)]


def test_follower_records_without_checks_and_ignores_lower_epochs(log: Log) -> None:
    log.follow(hdr(epoch=2, seq=10))
    log.follow(hdr(epoch=2, seq=50))  # a gap: a follower copies what its leader stored
    log.follow(hdr(epoch=1, seq=0))  # lower epoch: replaces nothing
    (info,) = log.state.producers()
    assert (info.epoch, info.last_sequence, info.last_offset) == (2, 50, 1)


def test_expiry_uses_the_last_batch_timestamp(log: Log) -> None:
    log.append(hdr(pid=1, ts=NOW))
    log.append(hdr(pid=2, ts=NOW + 500))
    assert log.state.remove_expired(NOW + 999, 1000) == 0
    assert log.state.remove_expired(NOW + 1000, 1000) == 1
    assert [p.producer_id for p in log.state.producers()] == [2]
    log.append(hdr(pid=1, seq=99))  # unknown again: any sequence
    assert log.state.producers()[0].last_sequence == 99


def test_snapshot_codec_round_trips_and_checks_the_crc() -> None:
    entries = [
        ProducerEntry(5, 1, [BatchMetadata(0, 4, 10, 14, NOW)]),
        ProducerEntry(7, 0, [BatchMetadata(INT32_MAX, 1, 20, 22, NOW + 1)]),
    ]
    data = encode_snapshot(entries)
    assert len(data) == 10 + 2 * 46
    back = decode_snapshot(data)
    assert [(e.producer_id, e.epoch, e.last) for e in back] == [
        (e.producer_id, e.epoch, e.last) for e in entries
    ]
    broken = bytearray(data)
    broken[-1] ^= 1
    with pytest.raises(ValueError, match="CRC"):
        decode_snapshot(bytes(broken))
    with pytest.raises(ValueError):
        decode_snapshot(data[:-1])
