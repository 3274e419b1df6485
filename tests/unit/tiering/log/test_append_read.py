"""Appending and reading: offsets, validation before any write, byte limits, rolls, the file layout."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from tests.unit.tiering.log.support import NOW, Model, decode, make_batch
from tierlog.tiering.codec.header import crc32c, decode_header, iter_batches
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, SegmentInfo
from tierlog.wire.errors import (
    CorruptRecordError,
    InvalidRequestError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)


def open_log(path: Path, clock: ManualClock | None = None, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "topic-0", LogConfig(**config), clock=clock or ManualClock(NOW))  # type: ignore[arg-type]


def test_append_assigns_consecutive_offsets_whatever_the_client_wrote(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(make_batch([b"a", b"b"], base_offset=77) + make_batch([b"c"], base_offset=5))
    second = log.append(make_batch([b"d"]))
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 3)
    assert first.batch_base_offsets == [0, 2]
    assert second.batch_base_offsets == [3]
    assert first.log_append_time == -1
    assert log.log_end_offset == 4
    assert log.high_watermark == 0  # appends do not move it: the broker does (update_high_watermark)
    assert decode(log.read(0, 1 << 20).data) == [
        (0, b"a", NOW),
        (1, b"b", NOW),
        (2, b"c", NOW),
        (3, b"d", NOW),
    ]


def test_rejected_append_writes_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path, max_message_bytes=500)
    log.append(make_batch([b"x"]))
    good = make_batch([b"y"])
    bad = bytearray(make_batch([b"z"]))
    bad[-1] ^= 0xFF
    size_before = log.size_bytes
    with pytest.raises(CorruptRecordError):
        log.append(good + bytes(bad))
    with pytest.raises(CorruptRecordError):
        log.append(good + good[:40])
    with pytest.raises(RecordTooLargeError):
        log.append(good + make_batch([b"w" * 600]))
    with pytest.raises(InvalidRequestError):
        log.append(b"")
    assert log.size_bytes == size_before
    assert log.log_end_offset == 1
    assert os.path.getsize(log.segments()[-1].log_path) == size_before


def test_assign_offsets_false_requires_continuing_the_log(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a", b"b"]))
    with pytest.raises(InvalidRequestError):
        log.append(make_batch([b"c"], base_offset=5), assign_offsets=False)
    with pytest.raises(InvalidRequestError):
        log.append(
            make_batch([b"c"], base_offset=2) + make_batch([b"d"], base_offset=4), assign_offsets=False
        )
    info = log.append(
        make_batch([b"c"], base_offset=2) + make_batch([b"d"], base_offset=3), assign_offsets=False
    )
    assert info.batch_base_offsets == [2, 3]
    assert [r[0] for r in decode(log.read(0, 10_000).data)] == [0, 1, 2, 3]


def test_log_append_time_stamps_batches(tmp_path: Path) -> None:
    clock = ManualClock(NOW + 5_000)
    log = open_log(tmp_path, clock, message_timestamp_type="LogAppendTime")
    info = log.append(make_batch([b"a", b"b"], [NOW, NOW + 1]))
    assert info.log_append_time == NOW + 5_000
    data = log.read(0, 1000).data
    header = decode_header(data)
    assert header.log_append_time and header.max_timestamp == NOW + 5_000
    list(iter_batches(data))  # CRC was recomputed
    assert log.offset_for_timestamp(NOW + 4_000) == (0, NOW + 5_000)


def test_read_returns_whole_batches_within_the_byte_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=150)
    model = Model()
    for i in range(40):
        values = [bytes([i]) * (10 + i), b"v%d" % i]
        log.append(make_batch(values, [NOW + i, NOW + i]))
        model.append(values, [NOW + i, NOW + i])
    sizes = [h.size for _, h in iter_batches(log.read(0, 1 << 20).data)]
    for offset in (0, 1, 17, 40, 79):
        for max_bytes in (0, 1, sizes[0] + 1, 500, 2000, 1 << 20):
            data = log.read(offset, max_bytes).data
            got = decode(data)
            expected = model.expected_from(offset)
            assert got == expected[: len(got)]
            assert len(got) >= 2
            batch_sizes = [h.size for _, h in iter_batches(data)]
            assert len(data) <= max_bytes or len(batch_sizes) == 1
            if len(got) < len(expected):
                assert len(data) + sizes[(offset + len(got)) // 2] > max_bytes


def test_read_bounds_and_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(5):
        log.append(make_batch([b"a%d" % i, b"b%d" % i]))
    empty = log.read(10, 100)
    assert empty.data == b"" and empty.log_end_offset == 10 and empty.log_start_offset == 0
    with pytest.raises(OffsetOutOfRangeError) as err:
        log.read(11, 100)
    assert (err.value.log_start_offset, err.value.log_end_offset) == (0, 10)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 100)
    assert [r[0] for r in decode(log.read(3, 1 << 20, max_offset=6).data)] == [2, 3, 4, 5]
    assert [r[0] for r in decode(log.read(3, 1 << 20, max_offset=5).data)] == [2, 3, 4, 5]
    assert log.read(4, 1 << 20, max_offset=4).data == b""


def test_read_slice_is_the_same_bytes_and_survives_unlink(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=300, retention_bytes=0)
    for i in range(10):
        log.append(make_batch([b"%03d" % i * 20]))
    log.update_high_watermark(7)
    for offset in range(10):
        with log.read_slice(offset, 250) as piece:
            assert piece.read() == log.read(offset, 250).data
            assert (piece.high_watermark, piece.log_end_offset) == (7, 10)
    piece = log.read_slice(0, 1000)
    expected = log.read(0, 1000).data
    deleted = log.apply_retention()
    assert deleted and not deleted[0].log_path.exists()
    assert piece.read() == expected
    piece.close()
    piece.close()
    with log.read_slice(10, 100) as tail:
        assert tail.size == 0 and tail.read() == b""


def test_segment_bytes_roll_and_oversized_batch_alone(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=400)
    sealed: list[SegmentInfo] = []
    log.add_roll_listener(sealed.append)
    small = make_batch([b"s" * 50])
    big = make_batch([b"B" * 600])
    log.append(small + small + small)
    log.append(small + big + small)
    infos = log.segments()
    assert len(small) * 3 <= 400 < len(small) * 4
    assert [(s.base_offset, s.next_offset) for s in infos] == [(0, 3), (3, 4), (4, 5), (5, 6)]
    assert all(s.size_bytes <= 400 for s in infos if s.next_offset - s.base_offset > 1)
    assert [s.base_offset for s in sealed] == [0, 3, 4]
    assert sealed == log.sealed_segments()
    assert all(s.sealed for s in sealed) and not infos[-1].sealed
    assert [r[0] for r in decode(b"".join(log.read(o, 10_000).data for o in (0, 3, 4, 5)))] == list(range(6))


def test_segment_ms_roll_with_injected_clock(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = open_log(tmp_path, clock, segment_ms=1000)
    assert log.maybe_roll() is None
    log.append(make_batch([b"a"]))
    clock.advance(999)
    assert log.maybe_roll() is None
    clock.advance(1)
    info = log.maybe_roll()
    assert info is not None and (info.base_offset, info.next_offset) == (0, 1)
    log.append(make_batch([b"b"]))
    clock.advance(1000)
    log.append(make_batch([b"c"]))
    assert [s.base_offset for s in log.segments()] == [0, 1, 2]
    assert log.roll() is not None and log.roll() is None


def test_index_full_rolls(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=0, segment_index_bytes=8 * 3)
    for i in range(10):
        log.append(make_batch([b"%d" % i]))
    infos = log.segments()
    assert len(infos) > 2
    for info in infos[:-1]:
        assert info.index_path.stat().st_size <= 24
        assert info.timeindex_path.stat().st_size % 12 == 0


def test_files_are_kafka_layout(tmp_path: Path) -> None:
    log = open_log(tmp_path, index_interval_bytes=100)
    batches = [make_batch([b"x" * 40, b"y"], [NOW + i, NOW + 2 * i]) for i in range(6)]
    for batch in batches:
        log.append(batch)
    log.roll()
    info = log.sealed_segments()[0]
    assert info.log_path.name == "00000000000000000000.log"
    raw = info.log_path.read_bytes()
    positions = [pos for pos, _ in iter_batches(raw)]
    size = len(batches[0])
    assert size > 100 // 2
    index = info.index_path.read_bytes()
    entries = list(struct.iter_unpack(">ii", index))
    # an entry before every batch once more than 100 bytes were written since the previous one
    expected, since = [], 0
    for i, pos in enumerate(positions):
        if since > 100:
            expected.append((2 * i + 1, pos))
            since = 0
        since += size
    assert entries == expected
    times = list(struct.iter_unpack(">qi", info.timeindex_path.read_bytes()))
    assert times[-1] == (NOW + 10, 11)
    assert [t for t, _ in times] == sorted({t for t, _ in times})
    assert info.max_timestamp == NOW + 10


def test_offset_for_timestamp_against_model(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=500, index_interval_bytes=90)
    stamps = [NOW + s for s in (5, 3, 9, 9, 20, 15, 40, 41, 30, 60)]
    for i, ts in enumerate(stamps):
        log.append(make_batch([b"r%d" % i, b"q"], [ts - 1, ts]))
    for target in range(NOW, NOW + 65):
        first = next((i for i, ts in enumerate(stamps) if ts >= target), None)
        expected = None if first is None else (2 * first, stamps[first])
        assert log.offset_for_timestamp(target) == expected, target


def test_closed_log_refuses_calls(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a"]))
    log.close()
    log.close()
    with pytest.raises(Exception) as err:
        log.append(make_batch([b"b"]))
    assert getattr(err.value, "retriable", False)


def _with_offset_delta(batch: bytes, base_offset: int, last_offset_delta: int) -> bytes:
    """A replicated batch whose offsets have gaps (as after compaction): patch the delta, redo the CRC."""
    buf = bytearray(batch)
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 23, last_offset_delta)
    struct.pack_into(">I", buf, 17, crc32c(memoryview(buf)[21:]))
    return bytes(buf)


def test_roll_before_relative_offsets_overflow_int32(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a"]))
    wide = _with_offset_delta(make_batch([b"b"]), 1, 2**31 - 1)
    log.append(wide, assign_offsets=False)
    log.append(_with_offset_delta(make_batch([b"c"]), 2**31 + 1, 0), assign_offsets=False)
    assert [(s.base_offset, s.next_offset) for s in log.segments()] == [
        (0, 1),
        (1, 2**31 + 1),
        (2**31 + 1, 2**31 + 2),
    ]
    assert decode(log.read(2**31, 1000).data)[0][1] == b"b"
    assert decode(log.read(2**31 + 1, 1000).data)[0][1] == b"c"


def test_file_slice_outlives_the_log_and_honours_max_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    for i in range(6):
        log.append(make_batch([b"%d" % i, b"%d'" % i]))
    piece = log.read_slice(2, 1 << 20, max_offset=8)
    assert [r[0] for r in decode(piece.read())] == list(range(2, 8))
    log.close()
    assert [r[0] for r in decode(piece.read())] == list(range(2, 8))
    piece.close()
