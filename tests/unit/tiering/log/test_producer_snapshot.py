"""Producer state of a real partition log (design note 0011, "Durable state"): checks at append, the
``.snapshot`` files at roll and close, recovery, truncation, retention and expiry."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from tests.unit.tiering.log.test_failures import file_size_limit
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import crc32c
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import EpochEntry, LogConfig, ManualClock, PartitionLog, ProducerInfo
from tierlog.tiering.tools import dump_log
from tierlog.wire.errors import (
    DuplicateSequenceError,
    InvalidRequestError,
    OutOfOrderSequenceError,
    ProducerFencedError,
    UnavailableError,
)

NOW = 1_700_000_000_000
PID = 4242


def batch(
    seq: int, n: int = 1, *, pid: int = PID, epoch: int = 0, ts: int = NOW, base: int = 0, txn: bool = False
) -> bytes:
    records = [Record(None, b"v" * 50, timestamp=ts) for _ in range(n)]
    return build_batch(
        records,
        base_offset=base,
        now_ms=NOW,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


ONE = len(batch(0))  # every one-record batch has this size


def open_log(path: Path, clock: ManualClock | None = None, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(**config), clock=clock or ManualClock(NOW))  # type: ignore[arg-type]


def snapshots(log_dir: Path) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in log_dir.glob("*.snapshot"))


def read_snapshot(path: Path) -> list[tuple[int, ...]]:
    """Parse a snapshot file field by field, as Kafka's reader does."""
    data = path.read_bytes()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert version == 1
    assert crc == crc32c(data[6:])
    assert len(data) == 10 + 46 * count
    return [struct.unpack_from(">qhiqiqiq", data, 10 + 46 * i) for i in range(count)]


def test_snapshot_at_every_roll_covers_exactly_the_offsets_below(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=ONE + 10)  # one batch per segment
    info = log.append(batch(0) + batch(1) + batch(2, ts=NOW + 5))  # rolls twice inside one append
    assert info.batch_base_offsets == [0, 1, 2]
    assert snapshots(log.path) == [1, 2]
    # pid, epoch, last seq, last offset, offset delta, timestamp, coordinator epoch, txn first offset
    assert read_snapshot(log.path / "00000000000000000001.snapshot") == [(PID, 0, 0, 0, 0, NOW, -1, -1)]
    assert read_snapshot(log.path / "00000000000000000002.snapshot") == [(PID, 0, 1, 1, 0, NOW, -1, -1)]
    log.append(batch(3, 4, ts=NOW + 9))  # rolls at 3; the batch covers sequences 3..6, offsets 3..6
    assert read_snapshot(log.path / "00000000000000000003.snapshot") == [(PID, 0, 2, 2, 0, NOW + 5, -1, -1)]
    log.close()
    assert snapshots(log.path) == [1, 2, 3, 7]
    assert read_snapshot(log.path / "00000000000000000007.snapshot") == [(PID, 0, 6, 6, 3, NOW + 9, -1, -1)]


def test_no_producer_snapshot_is_empty(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(-1, pid=-1, epoch=-1))
    log.close()
    assert read_snapshot(log.path / "00000000000000000001.snapshot") == []


def test_duplicate_answers_original_offsets_and_writes_nothing(tmp_path: Path) -> None:
    fsyncs: list[int] = []
    log = PartitionLog.open(
        tmp_path / "t-0", LogConfig(flush_messages=1), clock=ManualClock(NOW), fsync=fsyncs.append
    )
    first = log.append(batch(0, 3), leader_epoch=1)
    log.append(batch(3), leader_epoch=1)
    size, calls, epochs = log.size_bytes, len(fsyncs), log.epochs.entries()
    dup = log.append(batch(0, 3), leader_epoch=2)
    assert dup.duplicate and not first.duplicate
    assert (dup.base_offset, dup.last_offset, dup.batch_base_offsets) == (0, 2, [0])
    assert (dup.log_append_time, dup.leader_epoch) == (-1, -1)
    assert (log.size_bytes, len(fsyncs), log.epochs.entries()) == (size, calls, epochs)
    assert log.log_end_offset == 4


def test_a_refused_append_changes_neither_log_nor_state(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(0))
    before = (log.size_bytes, log.log_end_offset, log.producers())
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(1) + batch(5))
    assert (log.size_bytes, log.log_end_offset, log.producers()) == before
    log.append(batch(0, epoch=1))
    with pytest.raises(ProducerFencedError):
        log.append(batch(1, epoch=0))
    before = (log.size_bytes, log.log_end_offset, log.producers())
    with pytest.raises(InvalidRequestError):
        log.append(batch(1, epoch=1, txn=True))
    with pytest.raises(InvalidRequestError):
        log.append(batch(-1, epoch=1))
    with pytest.raises(InvalidRequestError):
        log.append(batch(1, epoch=1) + batch(0, epoch=1))  # a duplicate after a new batch
    assert (log.size_bytes, log.log_end_offset, log.producers()) == before


def test_a_retry_whose_first_batches_are_stored_appends_only_the_rest(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(batch(0, 2))
    log.append(batch(0, pid=7))  # another producer in between
    info = log.append(batch(0, 2) + batch(2, 3))  # a new leader had copied only the first batch
    assert not info.duplicate
    assert info.batch_base_offsets == [first.base_offset, 3]
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 5, 5)
    assert log.log_end_offset == 6
    again = log.append(batch(0, 2) + batch(2, 3))
    assert again.duplicate and again.batch_base_offsets == [0, 3]
    assert log.log_end_offset == 6
    log.close()


def test_restart_restores_dedup_from_the_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for seq in range(0, 10, 2):
        log.append(batch(seq, 2))
    log.close()
    log = open_log(tmp_path)
    assert log.producers() == [ProducerInfo(PID, 0, 9, 9, NOW)]
    dup = log.append(batch(8, 2))
    assert dup.duplicate and dup.batch_base_offsets == [8]
    with pytest.raises(DuplicateSequenceError):  # only the last batch is in a snapshot (as in Kafka)
        log.append(batch(6, 2))
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(11))
    assert log.append(batch(10)).base_offset == 10


@pytest.mark.parametrize("clean", [True, False])
def test_every_snapshot_deleted_replays_the_whole_log(tmp_path: Path, clean: bool) -> None:
    log = open_log(tmp_path, segment_bytes=2 * ONE + 10)
    for seq in range(6):
        log.append(batch(seq))
    log.append(batch(0, pid=7, epoch=3))
    if clean:
        log.close()
    else:
        log._unlock_directory()  # a crash: no close, no marker
    for path in (tmp_path / "t-0").glob("*.snapshot"):
        path.unlink()
    log = open_log(tmp_path)
    assert [(p.producer_id, p.epoch, p.last_sequence) for p in log.producers()] == [(7, 3, 0), (PID, 0, 5)]
    for seq in range(1, 6):  # the replay refilled the five-batch cache
        assert log.append(batch(seq)).batch_base_offsets == [seq]


def test_corrupt_snapshot_is_deleted_and_the_state_rebuilt(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=ONE + 10)
    for seq in range(4):
        log.append(batch(seq))
    log.close()
    newest = log.path / "00000000000000000004.snapshot"
    data = bytearray(newest.read_bytes())
    data[-12] ^= 0xFF
    newest.write_bytes(bytes(data))
    log = open_log(tmp_path, segment_bytes=ONE + 10)
    assert not newest.exists()
    assert log.producers() == [ProducerInfo(PID, 0, 3, 3, NOW)]
    assert log.append(batch(3)).duplicate


def test_truncate_to_reloads_and_reset_to_clears(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=ONE + 10)
    for seq in range(6):
        log.append(batch(seq))
    assert snapshots(log.path) == [1, 2, 3, 4, 5]
    log.truncate_to(3)
    assert snapshots(log.path) == [1, 2, 3]
    assert log.producers() == [ProducerInfo(PID, 0, 2, 2, NOW)]
    with pytest.raises(OutOfOrderSequenceError):
        log.append(batch(4))
    assert log.append(batch(3)).base_offset == 3
    log.reset_to(100, [EpochEntry(0, 0)])
    assert log.producers() == []
    assert snapshots(log.path) == []
    assert log.append(batch(77)).base_offset == 100  # unknown again


def test_retention_deletes_the_segment_snapshots_but_keeps_the_newest(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, segment_bytes=ONE + 10, retention_ms=1000)
    for seq in range(4):
        log.append(batch(seq))
    assert snapshots(log.path) == [1, 2, 3]
    clock.advance(5000)
    assert [s.base_offset for s in log.apply_retention()] == [0, 1, 2]
    assert snapshots(log.path) == [3]
    assert log.producers() == [ProducerInfo(PID, 0, 3, 3, NOW)]
    log.close()
    log = open_log(tmp_path, clock, segment_bytes=ONE + 10, retention_ms=1000)
    assert log.producers() == [ProducerInfo(PID, 0, 3, 3, NOW)]


def test_follower_append_records_without_checks(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(10, base=0), assign_offsets=False)
    log.append(batch(50, 2, base=1) + batch(0, pid=9, base=3), assign_offsets=False)  # a gap: no check
    log.append(batch(0, epoch=-1, pid=-1, base=4), assign_offsets=False)
    assert [(p.producer_id, p.last_sequence, p.last_offset) for p in log.producers()] == [
        (9, 0, 3),
        (PID, 51, 2),
    ]
    log.append(batch(3, epoch=0, pid=9, base=5) + batch(1, epoch=5, pid=9, base=6), assign_offsets=False)
    log.append(batch(9, epoch=2, pid=9, base=7), assign_offsets=False)  # lower epoch: ignored
    assert log.producers()[0] == ProducerInfo(9, 5, 1, 6, NOW)


def test_expiry_with_an_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock)
    log.append(batch(0, pid=1, ts=NOW))
    log.append(batch(0, pid=2, ts=NOW + 2000))
    clock.advance(3000)
    assert log.remove_expired_producers(clock.now_ms(), 3000) == 1
    assert [p.producer_id for p in log.producers()] == [2]
    assert log.remove_expired_producers(clock.now_ms(), 3000) == 0
    assert log.append(batch(55, pid=1)).base_offset == 2  # unknown again: any sequence


def test_a_failed_snapshot_write_keeps_the_log_online(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=ONE + 10)
    log.append(batch(0))
    blocker = log.path / "00000000000000000001.snapshot.tmp"
    blocker.mkdir()  # the temp file cannot be created
    log.append(batch(1))  # rolls at 1
    assert snapshots(log.path) == []
    assert log.offline_reason is None
    blocker.rmdir()
    log.append(batch(2))
    assert snapshots(log.path) == [2]
    log.close()
    log = open_log(tmp_path, segment_bytes=ONE + 10)
    assert log.producers() == [ProducerInfo(PID, 0, 2, 2, NOW)]


def test_dump_log_prints_and_checks_a_snapshot(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(batch(0, 2) + batch(5, pid=9, epoch=2))
    log.close()
    path = log.path / "00000000000000000003.snapshot"
    out = io.StringIO()
    assert dump_log.main([str(path)], out=out) == 0
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("Snapshot version: 1") and "crcValid: true entries: 2" in lines[0]
    assert "producerId: 9 producerEpoch: 2" in lines[1] and "lastSequence: 5 lastOffset: 2" in lines[1]
    assert f"producerId: {PID} producerEpoch: 0" in lines[2] and "offsetDelta: 1" in lines[2]
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    out = io.StringIO()
    assert dump_log.main([str(path)], out=out) == 1
    assert "crcValid: false" in out.getvalue()


def test_an_undone_append_leaves_the_state_and_drops_its_snapshots(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=ONE + 10, segment_index_bytes=4096)
    log.append(batch(0))
    big = build_batch(
        [Record(None, b"x" * 200_000, timestamp=NOW)],
        now_ms=NOW,
        producer_id=PID,
        producer_epoch=0,
        base_sequence=3,
    )
    with file_size_limit(100_000), pytest.raises(UnavailableError):
        log.append(batch(1) + batch(2) + big)  # rolls at 1, 2 and 3, then the big write fails
    assert log.log_end_offset == 1
    assert log.producers() == [ProducerInfo(PID, 0, 0, 0, NOW)]
    assert snapshots(log.path) == [1]
    assert read_snapshot(log.path / "00000000000000000001.snapshot") == [(PID, 0, 0, 0, 0, NOW, -1, -1)]
    assert log.append(batch(1)).base_offset == 1


def test_a_retry_starting_with_batches_older_than_the_cache_appends_only_what_is_missing(
    tmp_path: Path,
) -> None:
    """A request of three batches whose first two were stored before a restart: the snapshot remembers
    only the last of them, so the first is "stored, offsets unknown" (-1), the second a known duplicate,
    and only the third is appended. The whole request is never answered as delivered unless all of it is
    stored."""
    log = open_log(tmp_path)
    log.append(batch(0) + batch(1))
    log.close()
    log = open_log(tmp_path)
    assert [p.last_sequence for p in log.producers()] == [1]
    info = log.append(batch(0) + batch(1) + batch(2))
    assert not info.duplicate
    assert info.batch_base_offsets == [-1, 1, 2]
    assert (info.base_offset, info.last_offset, info.record_count, log.log_end_offset) == (1, 2, 3, 3)
    again = log.append(batch(0) + batch(1) + batch(2))
    assert again.duplicate and again.batch_base_offsets == [-1, 1, 2]
    with pytest.raises(DuplicateSequenceError):
        log.append(batch(0))
    assert log.log_end_offset == 3
    log.close()


def test_a_snapshot_below_the_log_start_is_not_used(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    log = open_log(tmp_path)
    log.append(batch(0))
    log.close()  # snapshot at 1
    stale = (directory / "00000000000000000001.snapshot").read_bytes()
    log = open_log(tmp_path)
    log.truncate_fully_and_start_at(5)  # the log now starts above that snapshot
    log.close()
    for path in directory.glob("*.snapshot"):
        path.unlink()
    (directory / "00000000000000000001.snapshot").write_bytes(stale)
    log = open_log(tmp_path)
    assert log.log_start_offset == 5
    assert log.producers() == []  # the stale snapshot is not loaded: the state starts empty
    assert not (directory / "00000000000000000001.snapshot").exists()
    log.append(batch(7))  # an unknown producer: accepted at any sequence
    log.close()
