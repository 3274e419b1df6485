"""``tierlog dump-log``: print and check segment files, as Kafka's ``kafka-dump-log`` does.

* a ``.log`` file: one line per batch (offsets, count, position, size, CRC, codec, timestamp type,
  producer fields); with ``--print-data`` one line per record (offset, timestamp, key, value, headers);
* a ``.index`` or ``.timeindex`` file: one line per entry (preallocation padding is not printed);
* a ``.snapshot`` file (producer state, design note 0011): one line per producer; a bad CRC or length
  is a problem.

``--verify`` also decodes every record, and checks every index entry against the segment's ``.log`` file
beside it: an offset-index entry must name the position of a batch and that batch's last offset; a
time-index entry must name the last offset of a batch whose max timestamp it holds, with no earlier batch
later in time. The exit status is 1 when anything found was wrong (a bad CRC, a torn tail, a bad entry),
2 when a file cannot be read or the arguments are wrong, else 0.

The service's CLI (``service/serve.py``) dispatches ``tierlog dump-log`` here; it also runs as
``python -m tierlog.tiering.tools.dump_log``.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tierlog.tiering.codec.batch import decode_batch
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.header import ATTRIBUTES_OFFSET, HEADER_SIZE, BatchHeader, crc32c, decode_header
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import offset_index, time_index
from tierlog.tiering.log.naming import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SNAPSHOT_SUFFIX,
    TIMEINDEX_SUFFIX,
    parse_segment_file,
)
from tierlog.wire.errors import CorruptRecordError

__all__ = ["main", "dump_file", "dump_snapshot", "Report"]


class Report:
    """Where a dump writes, and how many problems it found. Not thread-safe."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.problems = 0

    def line(self, text: str) -> None:
        self.out.write(text + "\n")

    def problem(self, text: str) -> None:
        self.problems += 1
        self.out.write(f"ERROR: {text}\n")


@dataclass(frozen=True, slots=True)
class _Batch:
    position: int
    header: BatchHeader
    data: bytes  # the whole batch


@dataclass(frozen=True, slots=True)
class _BadTail:
    position: int
    reason: str


def _walk(fd: int) -> Iterator[_Batch | _BadTail]:
    """Every batch of a log file in order; a ``_BadTail`` last if the file does not end on a batch end."""
    size = os.fstat(fd).st_size
    position = 0
    while position < size:
        head = os.pread(fd, HEADER_SIZE, position)
        try:
            header = decode_header(head)
        except CorruptRecordError as err:
            yield _BadTail(position, str(err))
            return
        if position + header.size > size:
            yield _BadTail(position, f"truncated batch: needs {header.size} bytes, {size - position} left")
            return
        yield _Batch(position, header, os.pread(fd, header.size, position))
        position += header.size


def _segment_base(path: Path) -> int | None:
    parsed = parse_segment_file(path.name)
    return None if parsed is None else parsed[0]


def _show(data: bytes | None) -> str:
    if data is None:
        return "null"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "0x" + data.hex()
    return text if text.isprintable() else "0x" + data.hex()


def _codec_name(codec: int) -> str:
    try:
        return Compression(codec).kafka_name
    except ValueError:
        return f"unknown({codec})"


def _timestamp_type(header: BatchHeader) -> str:
    return "LogAppendTime" if header.log_append_time else "CreateTime"


def _batch_line(batch: _Batch, crc_valid: bool) -> str:
    h = batch.header
    return (
        f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
        f"position: {batch.position} size: {h.size} crc: {h.crc:#010x} crcValid: {str(crc_valid).lower()} "
        f"compression: {_codec_name(h.compression)} timestampType: {_timestamp_type(h)} "
        f"baseTimestamp: {h.base_timestamp} maxTimestamp: {h.max_timestamp} producerId: {h.producer_id} "
        f"producerEpoch: {h.producer_epoch} baseSequence: {h.base_sequence} "
        f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
        f"partitionLeaderEpoch: {h.partition_leader_epoch}"
    )


def _record_line(header: BatchHeader, record: Record) -> str:
    headers = ", ".join(f"{key}={_show(value)}" for key, value in record.headers)
    return (
        f"| offset: {record.offset} {_timestamp_type(header)}: {record.timestamp} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)} "
        f"key: {_show(record.key)} value: {_show(record.value)} headers: [{headers}]"
    )


def dump_log(path: Path, report: Report, *, print_data: bool = False, verify: bool = False) -> None:
    """Print every batch of the log file ``path`` (and its records with ``print_data``).

    Bad CRCs, a torn tail and offsets that go backwards are reported as problems; with ``verify`` or
    ``print_data`` every batch's records are decoded too and decoding errors are reported.

    Raises:
        OSError: the file cannot be opened or read.
    """
    base = _segment_base(path)
    report.line(f"Dumping {path}")
    report.line(f"Log starting offset: {base if base is not None else 'unknown'}")
    next_offset = base if base is not None else 0
    fd = os.open(path, os.O_RDONLY)
    try:
        for item in _walk(fd):
            if isinstance(item, _BadTail):
                report.problem(f"{path.name}: position {item.position}: {item.reason}")
                break
            header = item.header
            crc_valid = crc32c(memoryview(item.data)[ATTRIBUTES_OFFSET:]) == header.crc
            report.line(_batch_line(item, crc_valid))
            if not crc_valid:
                report.problem(f"{path.name}: position {item.position}: CRC mismatch")
            if header.base_offset < next_offset:
                report.problem(
                    f"{path.name}: position {item.position}: base offset {header.base_offset} "
                    f"is below the expected {next_offset}"
                )
            next_offset = max(next_offset, header.next_offset)
            if print_data or verify:
                _dump_records(item, report, print_data=print_data, where=f"{path.name}: position")
    finally:
        os.close(fd)


def _dump_records(batch: _Batch, report: Report, *, print_data: bool, where: str) -> None:
    try:
        decoded = decode_batch(batch.data, verify=False)
    except CorruptRecordError as err:
        report.problem(f"{where} {batch.position}: records cannot be decoded: {err}")
        return
    if print_data:
        for record in decoded.records:
            report.line(_record_line(decoded.header, record))


def _index_entries(path: Path, report: Report, entry_size: int) -> bytes:
    data = path.read_bytes()
    if len(data) % entry_size:
        report.problem(f"{path.name}: size {len(data)} is not a whole number of {entry_size}-byte entries")
    usable = len(data) - len(data) % entry_size
    while usable and not any(data[usable - entry_size : usable]):
        usable -= entry_size  # preallocation padding
    return data[:usable]


def _sibling_log(path: Path, report: Report) -> dict[int, BatchHeader] | None:
    """Batch headers of the ``.log`` file beside the index ``path``, by position; None if unreadable."""
    parsed = parse_segment_file(path.name)
    log = path.with_name(path.name.split(".", 1)[0] + LOG_SUFFIX + (parsed[2] if parsed else ""))
    try:
        fd = os.open(log, os.O_RDONLY)
    except OSError as err:
        report.problem(f"{path.name}: cannot check against {log.name}: {err.strerror}")
        return None
    batches: dict[int, BatchHeader] = {}
    try:
        for item in _walk(fd):
            if isinstance(item, _Batch):
                batches[item.position] = item.header
    finally:
        os.close(fd)
    return batches


def dump_offset_index(path: Path, report: Report, *, verify: bool = False) -> None:
    """Print the entries of the offset index ``path``; with ``verify`` check each against the log.

    Raises:
        OSError: the index file cannot be read.
    """
    base = _segment_base(path) or 0
    report.line(f"Dumping {path}")
    data = _index_entries(path, report, offset_index.ENTRY_SIZE)
    batches = _sibling_log(path, report) if verify else None
    previous = (-1, -1)
    for relative, position in offset_index.ENTRY.iter_unpack(data):
        offset = base + relative
        report.line(f"offset: {offset} position: {position}")
        if not verify:
            continue
        if relative <= previous[0] or position <= previous[1]:
            report.problem(f"{path.name}: entry ({offset}, {position}) does not increase on the one before")
        previous = (relative, position)
        if batches is None:
            continue
        header = batches.get(position)
        if header is None:
            report.problem(f"{path.name}: offset {offset}: no batch starts at position {position}")
        elif header.last_offset != offset:
            report.problem(
                f"{path.name}: index offset {offset}, but the batch at position {position} "
                f"ends at offset {header.last_offset}"
            )


def dump_time_index(path: Path, report: Report, *, verify: bool = False) -> None:
    """Print the entries of the time index ``path``; with ``verify`` check each against the log.

    Raises:
        OSError: the index file cannot be read.
    """
    base = _segment_base(path) or 0
    report.line(f"Dumping {path}")
    data = _index_entries(path, report, time_index.ENTRY_SIZE)
    batches = _sibling_log(path, report) if verify else None
    by_last_offset: dict[int, tuple[BatchHeader, int]] = {}
    if batches is not None:
        running_max = -1
        for position in sorted(batches):
            header = batches[position]
            by_last_offset[header.last_offset] = (header, running_max)
            running_max = max(running_max, header.max_timestamp)
    previous = (-(2**63), -1)
    for timestamp, relative in time_index.ENTRY.iter_unpack(data):
        offset = base + relative
        report.line(f"timestamp: {timestamp} offset: {offset}")
        if not verify:
            continue
        if timestamp <= previous[0] or relative < previous[1]:
            report.problem(f"{path.name}: entry ({timestamp}, {offset}) is out of order")
        previous = (timestamp, relative)
        if batches is None:
            continue
        found = by_last_offset.get(offset)
        if found is None:
            report.problem(f"{path.name}: timestamp {timestamp}: no batch ends at offset {offset}")
            continue
        header, max_before = found
        if header.max_timestamp != timestamp or max_before > timestamp:
            report.problem(
                f"{path.name}: timestamp {timestamp} at offset {offset}, but that batch's max timestamp "
                f"is {header.max_timestamp} and the largest before it {max_before}"
            )


_SNAPSHOT_HEAD = struct.Struct(">hIi")
_SNAPSHOT_ENTRY = struct.Struct(">qhiqiqiq")


def dump_snapshot(path: Path, report: Report) -> None:
    """Print a producer snapshot: its version and CRC check, then one line per producer.

    Raises:
        OSError: the file cannot be read.
    """
    data = path.read_bytes()
    if len(data) < _SNAPSHOT_HEAD.size:
        report.problem(f"{path.name}: {len(data)} bytes cannot hold a snapshot header")
        return
    version, crc, count = _SNAPSHOT_HEAD.unpack_from(data)
    computed = crc32c(data[6:])
    report.line(
        f"Snapshot version: {version} crc: {crc} crcValid: {str(computed == crc).lower()} entries: {count}"
    )
    if version != 1:
        report.problem(f"{path.name}: unsupported snapshot version {version}")
    if computed != crc:
        report.problem(f"{path.name}: CRC {crc} stored, {computed} computed")
    if count < 0 or len(data) != _SNAPSHOT_HEAD.size + count * _SNAPSHOT_ENTRY.size:
        report.problem(f"{path.name}: {len(data)} bytes do not hold {count} entries")
    usable = (len(data) - _SNAPSHOT_HEAD.size) // _SNAPSHOT_ENTRY.size
    for i in range(min(max(count, 0), usable)):
        pid, epoch, last_seq, last_offset, delta, ts, coordinator, txn = _SNAPSHOT_ENTRY.unpack_from(
            data, _SNAPSHOT_HEAD.size + i * _SNAPSHOT_ENTRY.size
        )
        report.line(
            f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: {coordinator} "
            f"currentTxnFirstOffset: {txn} lastSequence: {last_seq} lastOffset: {last_offset} "
            f"offsetDelta: {delta} timestamp: {ts}"
        )


def dump_file(path: Path, report: Report, *, print_data: bool = False, verify: bool = False) -> None:
    """Dump one file, chosen by its suffix (``.log``, ``.index``, ``.timeindex``, ``.snapshot``).

    Raises:
        OSError: the file cannot be read.
        ValueError: the file name has none of those suffixes.
    """
    parsed = parse_segment_file(path.name)
    kind = parsed[1] if parsed else path.suffix
    if kind == LOG_SUFFIX:
        dump_log(path, report, print_data=print_data, verify=verify)
    elif kind == INDEX_SUFFIX:
        dump_offset_index(path, report, verify=verify)
    elif kind == TIMEINDEX_SUFFIX:
        dump_time_index(path, report, verify=verify)
    elif kind == SNAPSHOT_SUFFIX:
        dump_snapshot(path, report)
    else:
        raise ValueError(f"{path.name}: not a .log, .index, .timeindex or .snapshot file")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tierlog dump-log",
        description="Print the batches of segment files and the entries of their indexes.",
    )
    parser.add_argument(
        "paths", nargs="+", type=Path, metavar="PATH", help=".log, .index, .timeindex or .snapshot files"
    )
    parser.add_argument("--print-data", action="store_true", help="also print every record of a .log file")
    parser.add_argument(
        "--verify", action="store_true", help="decode every record and check index entries against the log"
    )
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run the tool; returns the exit status (0 fine, 1 problems found, 2 unreadable file or bad usage).

    Thread-safe only with distinct ``out`` streams. Read-only: never modifies a file.
    """
    try:
        args = _parser().parse_args(list(argv) if argv is not None else None)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    report = Report(out if out is not None else sys.stdout)
    status = 0
    for path in args.paths:
        try:
            dump_file(path, report, print_data=args.print_data, verify=args.verify)
        except (OSError, ValueError) as err:
            sys.stderr.write(f"tierlog dump-log: {path}: {err}\n")
            status = 2
    if report.problems:
        report.line(f"{report.problems} problem(s) found")
        status = max(status, 1)
    return status


if __name__ == "__main__":
    raise SystemExit(main())
