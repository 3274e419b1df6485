"""``tierlog dump-log`` on a segment written with the codec and hand-made Kafka-layout indexes."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from tierlog.tiering.codec import Compression, Record, build_batch, decode_header
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.tiering.tools.dump_log import main

T0 = 1_700_000_000_000
BASE = 100


@pytest.fixture
def segment(tmp_path: Path) -> Path:
    """Three batches at offsets 100-102, 103-104 (gzip), 105 (LogAppendTime), and their indexes."""
    batches = [
        build_batch(
            [
                Record(b"k0", b"v0", (("h", b"x"),), T0),
                Record(None, b"v1", (), T0 + 5),
                Record(b"k2", None, (), T0 + 2),
            ],
            base_offset=100,
            producer_id=7,
            producer_epoch=1,
            base_sequence=0,
            partition_leader_epoch=3,
        ),
        build_batch(
            [Record(b"\xff\x00", b"v3", (("n", None),), T0 + 9), Record(b"k4", b"v4", (), T0 + 20)],
            base_offset=103,
            compression=Compression.GZIP,
        ),
        build_batch([Record(b"k5", b"v5", (), T0)], base_offset=105, now_ms=T0 + 500, log_append_time=True),
    ]
    log = tmp_path / "00000000000000000100.log"
    log.write_bytes(b"".join(batches))
    second = len(batches[0])
    third = second + len(batches[1])
    # Preallocation padding (all-zero entries) follows the real entries, as in an active segment.
    (tmp_path / "00000000000000000100.index").write_bytes(
        struct.pack(">ii", 4, second) + struct.pack(">ii", 5, third) + bytes(8 * 3)
    )
    (tmp_path / "00000000000000000100.timeindex").write_bytes(
        struct.pack(">qi", T0 + 5, 2)
        + struct.pack(">qi", T0 + 20, 4)
        + struct.pack(">qi", T0 + 500, 5)
        + bytes(24)
    )
    return log


def run(*argv: str | Path) -> tuple[int, list[str]]:
    out = io.StringIO()
    status = main([str(a) for a in argv], out=out)
    return status, out.getvalue().splitlines()


def test_batches(segment: Path) -> None:
    status, lines = run(segment)
    assert status == 0
    assert lines[:2] == [f"Dumping {segment}", "Log starting offset: 100"]
    batch_lines = [line for line in lines if line.startswith("baseOffset:")]
    assert len(batch_lines) == 3
    first, second, third = batch_lines
    crc = decode_header(segment.read_bytes()).crc
    assert first.startswith("baseOffset: 100 lastOffset: 102 count: 3 position: 0 size: ")
    assert f"crc: {crc:#010x} crcValid: true compression: none timestampType: CreateTime" in first
    assert f"baseTimestamp: {T0} maxTimestamp: {T0 + 5}" in first
    assert "producerId: 7 producerEpoch: 1 baseSequence: 0 isTransactional: false" in first
    assert "partitionLeaderEpoch: 3" in first
    assert "compression: gzip" in second and "lastOffset: 104 count: 2" in second
    assert "timestampType: LogAppendTime" in third and f"maxTimestamp: {T0 + 500}" in third
    assert not any(line.startswith("|") for line in lines)


def test_print_data(segment: Path) -> None:
    status, lines = run(segment, "--print-data")
    records = [line for line in lines if line.startswith("| ")]
    assert status == 0
    assert (
        records[0]
        == f"| offset: 100 CreateTime: {T0} keySize: 2 valueSize: 2 key: k0 value: v0 headers: [h=x]"
    )
    assert records[2].endswith("keySize: 2 valueSize: -1 key: k2 value: null headers: []")
    assert "key: 0xff00 value: v3 headers: [n=null]" in records[3]
    assert records[5].startswith(f"| offset: 105 LogAppendTime: {T0 + 500} ")
    assert [r.split()[2] for r in records] == [str(o) for o in range(100, 106)]


def test_indexes_and_verify(segment: Path) -> None:
    index = segment.with_suffix(".index")
    timeindex = segment.with_suffix(".timeindex")
    status, lines = run(index, timeindex, segment, "--verify")
    assert status == 0, lines
    assert lines[1:3] == [
        "offset: 104 position: " + lines[1].split()[-1],
        "offset: 105 position: " + lines[2].split()[-1],
    ]
    assert f"timestamp: {T0 + 5} offset: 102" in lines
    assert f"timestamp: {T0 + 500} offset: 105" in lines
    assert not any(line.startswith("ERROR") for line in lines)
    assert sum(line.startswith("offset:") for line in lines) == 2  # padding is not printed


def test_verify_reports_a_wrong_offset_index_entry(segment: Path) -> None:
    index = segment.with_suffix(".index")
    data = bytearray(index.read_bytes())
    struct.pack_into(">i", data, 0, 3)  # the batch at that position ends at 104, not 103
    struct.pack_into(">i", data, 12, 77)  # no batch starts at 77
    index.write_bytes(bytes(data))
    status, lines = run(index, "--verify")
    errors = [line for line in lines if line.startswith("ERROR")]
    assert status == 1
    assert any("index offset 103" in e and "ends at offset 104" in e for e in errors)
    assert any("no batch starts at position 77" in e for e in errors)
    assert any("(105, 77) does not increase" in e for e in errors)  # 77 is below the entry before
    assert lines[-1] == "3 problem(s) found"
    assert run(index)[0] == 0  # without --verify the entries are only printed


def test_verify_reports_a_wrong_time_index_entry(segment: Path) -> None:
    timeindex = segment.with_suffix(".timeindex")
    data = bytearray(timeindex.read_bytes())
    struct.pack_into(">q", data, 12, T0 + 21)  # batch 103-104 has max timestamp T0 + 20
    timeindex.write_bytes(bytes(data))
    status, lines = run(timeindex, "--verify")
    assert status == 1
    assert any(line.startswith("ERROR") and f"timestamp {T0 + 21} at offset 104" in line for line in lines)


def test_verify_reports_out_of_order_time_index(segment: Path) -> None:
    timeindex = segment.with_suffix(".timeindex")
    data = timeindex.read_bytes()
    timeindex.write_bytes(data[12:24] + data[:12] + data[24:])
    status, lines = run(timeindex, "--verify")
    assert status == 1
    assert any("out of order" in line for line in lines)


def test_bad_crc_and_torn_tail(segment: Path) -> None:
    data = bytearray(segment.read_bytes())
    data[70] ^= 0x01  # inside the first batch's records
    segment.write_bytes(bytes(data[:-3]))
    status, lines = run(segment, "--verify")
    assert status == 1
    assert "crcValid: false" in lines[2]
    errors = [line for line in lines if line.startswith("ERROR")]
    assert any("CRC mismatch" in e for e in errors)
    assert any("truncated batch" in e for e in errors)
    assert sum(line.startswith("baseOffset:") for line in lines) == 2


def test_missing_log_beside_an_index(segment: Path) -> None:
    segment.unlink()
    status, lines = run(segment.with_suffix(".index"), "--verify")
    assert status == 1
    assert any("cannot check against 00000000000000000100.log" in line for line in lines)


def test_unreadable_file_and_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(tmp_path / "00000000000000000000.log")[0] == 2
    assert run(tmp_path / "notes.txt")[0] == 2
    assert run()[0] == 2
    assert "usage:" in capsys.readouterr().err


@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
def test_verify_agrees_with_the_log_engine(tmp_path: Path, timestamp_type: str) -> None:
    """Segments and indexes written by tierlog.tiering.log pass --verify, and every record is printed once."""
    config = LogConfig(segment_bytes=4096, index_interval_bytes=300, message_timestamp_type=timestamp_type)
    directory = tmp_path / "topic-0"
    log = PartitionLog.open(directory, config, clock=ManualClock(T0))
    codecs = list(Compression)
    total = 0
    for i in range(60):
        records = [
            Record(b"k%d" % i, b"v" * (i * 7 % 150), (), T0 + (i * 37 % 50) + j) for j in range(1 + i % 3)
        ]
        log.append(build_batch(records, compression=codecs[i % len(codecs)], now_ms=T0))
        total += len(records)
    log.close()
    files = sorted(directory.glob("*.*index")) + sorted(directory.glob("*.log"))
    assert len(files) >= 6  # at least two segments: the roll sealed one
    status, lines = run(*files, "--verify", "--print-data")
    assert status == 0, [line for line in lines if line.startswith("ERROR")]
    printed = [int(line.split()[2]) for line in lines if line.startswith("| offset:")]
    assert sorted(printed) == list(range(total))
    assert sum(line.startswith("offset:") for line in lines) > 0
    assert sum(line.startswith("timestamp:") for line in lines) > 0
