"""Readers, appenders, retention and rolls on one partition from several threads."""

from __future__ import annotations

import threading
from pathlib import Path

from tests.unit.tiering.log.support import NOW, decode, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog
from tierlog.wire.errors import OffsetOutOfRangeError


def test_concurrent_appends_reads_and_retention_stay_consistent(tmp_path: Path) -> None:
    log = PartitionLog.open(
        tmp_path / "p", LogConfig(segment_bytes=2000, index_interval_bytes=200), clock=ManualClock(NOW)
    )
    writers, per_writer = 3, 60
    errors: list[BaseException] = []
    done = threading.Event()
    checked = [0]

    def writer(w: int) -> None:
        try:
            for i in range(per_writer):
                log.append(make_batch([b"%d:%d" % (w, i), b"%d:%d!" % (w, i)]))
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    def reader() -> None:
        try:
            while not done.is_set():
                start, end = log.log_start_offset, log.log_end_offset
                for offset in range(start, end, 7):
                    try:
                        records = decode(log.read(offset, 500).data)
                    except OffsetOutOfRangeError:
                        continue
                    assert records and records[0][0] <= offset <= records[-1][0]
                    assert [r[0] for r in records] == list(range(records[0][0], records[-1][0] + 1))
                    assert all(r[1] is not None and r[1].split(b":")[0].isdigit() for r in records)
                    checked[0] += 1
                try:
                    piece = log.read_slice(end, 100)
                except OffsetOutOfRangeError as err:
                    assert err.log_start_offset > end
                    continue
                with piece:
                    assert piece.size == 0 or piece.log_end_offset > end
        except BaseException as err:
            errors.append(err)

    def janitor() -> None:
        try:
            while not done.is_set():
                log.apply_retention(retention_bytes=6000)
        except BaseException as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(writers)]
    helpers = [
        threading.Thread(target=reader),
        threading.Thread(target=reader),
        threading.Thread(target=janitor),
    ]
    for thread in threads + helpers:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    done.set()
    for thread in helpers:
        thread.join(timeout=120)
    assert not errors, errors
    assert log.log_end_offset == writers * per_writer * 2
    assert checked[0] > 0
    tail = decode(log.read(log.log_start_offset, 1 << 20).data)
    per_writer_seen: dict[bytes, list[int]] = {}
    for _, value, _ in tail:
        assert value is not None
        w, i = value.rstrip(b"!").split(b":")
        per_writer_seen.setdefault(w, []).append(int(i))
    assert all(seq == sorted(seq) for seq in per_writer_seen.values())
