"""Opening a partition directory after clean and unclean shutdowns, torn tails and broken indexes."""

from __future__ import annotations

import os
import random
import shutil
import struct
from pathlib import Path

import pytest

from tests.unit.tiering.log.support import NOW, Model, decode, make_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog, naming

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=100)


def filled(path: Path, count: int = 30, config: LogConfig = CONFIG) -> tuple[PartitionLog, Model]:
    log = PartitionLog.open(path, config, clock=ManualClock(NOW))
    model = Model()
    for i in range(count):
        values = [b"value-%d" % i, b"x" * (i % 7)]
        stamps = [NOW + i, NOW + i + 1]
        log.append(make_batch(values, stamps))
        model.append(values, stamps)
    return log, model


def crash_image(log: PartitionLog, dest: Path) -> Path:
    """What the disk holds if the process dies now (the page cache survives a process kill)."""
    shutil.copytree(log.path, dest)
    return dest


def everything(log: PartitionLog) -> list[tuple[int, bytes | None, int]]:
    out: list[tuple[int, bytes | None, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).data
        records = decode(data)
        out.extend(r for r in records if r[0] >= offset)
        offset = records[-1][0] + 1
    return out


def as_model(model: Model) -> list[tuple[int, bytes | None, int]]:
    return [(model.start + i, v, t) for i, (v, t) in enumerate(model.records)]


def test_clean_reopen_keeps_everything_and_skips_rescans(tmp_path: Path) -> None:
    log, model = filled(tmp_path / "p")
    before = log.segments()
    log.close()
    assert (tmp_path / "p" / naming.CLEAN_SHUTDOWN_FILE).exists()
    for info in before:
        assert info.index_path.stat().st_size % 8 == 0
    again = PartitionLog.open(tmp_path / "p", CONFIG, clock=ManualClock(NOW))
    assert not (tmp_path / "p" / naming.CLEAN_SHUTDOWN_FILE).exists()
    assert again.segments() == before
    assert everything(again) == as_model(model)
    assert again.recovery_point == again.log_end_offset == 60
    assert again.offset_for_timestamp(NOW + 20) == (38, NOW + 20)
    values = [b"after"]
    again.append(make_batch(values, [NOW + 99]))
    model.append(values, [NOW + 99])
    assert everything(again) == as_model(model)


def test_unclean_image_with_preallocated_indexes_recovers(tmp_path: Path) -> None:
    log, model = filled(tmp_path / "p")
    image = crash_image(log, tmp_path / "img")
    active = log.segments()[-1]
    assert (image / active.index_path.name).stat().st_size == CONFIG.segment_index_bytes // 8 * 8
    again = PartitionLog.open(image, CONFIG, clock=ManualClock(NOW))
    assert everything(again) == as_model(model)
    assert [s.next_offset for s in again.segments()] == [s.next_offset for s in log.segments()]


@pytest.mark.parametrize("seed", range(12))
def test_torn_tail_is_cut_at_the_last_whole_batch(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    log, model = filled(tmp_path / "p")
    image = crash_image(log, tmp_path / "img")
    active_log = image / log.segments()[-1].log_path.name
    raw = active_log.read_bytes()
    cut = rng.randrange(0, len(raw))
    if seed % 2:
        os.truncate(active_log, cut)
    else:
        flipped = bytearray(raw)
        flipped[cut] ^= 1 << rng.randrange(8)
        active_log.write_bytes(bytes(flipped))
    whole = sum(1 for pos, h in iter_batches(raw) if pos + h.size <= cut)
    base = log.segments()[-1].base_offset
    again = PartitionLog.open(image, CONFIG, clock=ManualClock(NOW))
    expected_end = base + 2 * whole
    assert again.log_end_offset == expected_end
    model.truncate_to(expected_end)
    assert everything(again) == as_model(model)
    again.append(make_batch([b"more"], [NOW]))
    model.append([b"more"], [NOW])
    assert everything(again) == as_model(model)


def test_torn_middle_segment_drops_later_segments(tmp_path: Path) -> None:
    log, model = filled(tmp_path / "p")
    image = crash_image(log, tmp_path / "img")
    (image / naming.RECOVERY_POINT_FILE).unlink(missing_ok=True)  # never flushed: maybe never written
    second = log.segments()[1]
    os.truncate(image / second.log_path.name, second.size_bytes - 3)
    again = PartitionLog.open(image, CONFIG, clock=ManualClock(NOW))
    assert again.log_end_offset == second.next_offset - 2
    assert len(again.segments()) == 2
    model.truncate_to(second.next_offset - 2)
    assert everything(again) == as_model(model)


@pytest.mark.parametrize("damage", ["delete", "garbage", "past-end", "partial", "zero-padded"])
def test_broken_sealed_and_active_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    log, model = filled(tmp_path / "p")
    infos = log.segments()
    log.close()
    originals = {p: p.read_bytes() for i in (infos[0], infos[-1]) for p in (i.index_path, i.timeindex_path)}
    assert any(originals.values())
    for info in (infos[0], infos[-1]):
        for path in (info.index_path, info.timeindex_path):
            if damage == "delete":
                path.unlink()
            elif damage == "garbage":
                path.write_bytes(struct.pack(">iiii", 9, 9, 3, 3) + bytes(4))
            elif damage == "past-end":
                path.write_bytes(struct.pack(">ii", 2**30, 2**30) * 3)
            elif damage == "partial":
                path.write_bytes(path.read_bytes() + b"\x01")
            else:
                path.write_bytes(path.read_bytes() + bytes(240))
    again = PartitionLog.open(tmp_path / "p", CONFIG, clock=ManualClock(NOW))
    assert everything(again) == as_model(model)
    for offset in range(0, 60, 7):
        assert decode(again.read(offset, 1).data)[0][0] in (offset, offset - 1)
    rebuilt = again.segments()
    assert [(s.base_offset, s.next_offset, s.max_timestamp) for s in rebuilt] == [
        (s.base_offset, s.next_offset, s.max_timestamp) for s in infos
    ]
    again.close()
    for path, original in originals.items():
        assert path.read_bytes() == original, path.name


def test_leftovers_are_removed_and_empty_segments_handled(tmp_path: Path) -> None:
    log, model = filled(tmp_path / "p")
    last = log.roll()
    assert last is not None
    image = crash_image(log, tmp_path / "img")
    for name in (
        "00000000000000000003.log.deleted",
        "00000000000000000003.index.swap",
        "00000000000000000004.log.cleaned",
        "log-start-offset-checkpoint.tmp",
        "00000000000000000099.index",
    ):
        (image / name).write_bytes(b"junk")
    again = PartitionLog.open(image, CONFIG, clock=ManualClock(NOW))
    names = sorted(os.listdir(image))
    assert not [n for n in names if n.endswith((".deleted", ".swap", ".cleaned", ".tmp"))]
    assert "00000000000000000099.index" not in names
    infos = again.segments()
    assert infos[-1].base_offset == 60 and infos[-1].size_bytes == 0
    assert everything(again) == as_model(model)


def test_empty_segment_in_the_middle_is_removed(tmp_path: Path) -> None:
    log, _ = filled(tmp_path / "p", count=3)
    log.close()
    directory = tmp_path / "p"
    (directory / "00000000000000000002.log").write_bytes(b"")
    (directory / naming.CLEAN_SHUTDOWN_FILE).unlink()
    (directory / naming.RECOVERY_POINT_FILE).unlink()
    again = PartitionLog.open(directory, CONFIG, clock=ManualClock(NOW))
    assert [s.base_offset for s in again.segments()] == [0]
    assert again.log_end_offset == 6


def test_start_offset_and_log_start_checkpoint_survive_restart(tmp_path: Path) -> None:
    clock = ManualClock(NOW)
    log = PartitionLog.open(tmp_path / "r", CONFIG, clock=clock, start_offset=1000)
    assert (log.log_start_offset, log.log_end_offset) == (1000, 1000)
    assert log.segments()[0].log_path.name == "00000000000000001000.log"
    info = log.append(make_batch([b"a"]))
    assert info.base_offset == 1000
    log.close()
    again = PartitionLog.open(tmp_path / "r", CONFIG, clock=clock, start_offset=5)
    assert (again.log_start_offset, again.log_end_offset) == (1000, 1001)
    for i in range(20):
        again.append(make_batch([b"%d" % i * 30]))
    again.roll()
    deleted = again.apply_retention(retention_bytes=0)
    assert deleted
    start = again.log_start_offset
    assert start == again.segments()[0].base_offset > 1000
    again.close()
    third = PartitionLog.open(tmp_path / "r", CONFIG, clock=clock)
    assert third.log_start_offset == start
    third.truncate_fully_and_start_at(5000)
    third.close()
    fourth = PartitionLog.open(tmp_path / "r", CONFIG, clock=clock)
    assert (fourth.log_start_offset, fourth.log_end_offset) == (5000, 5000)


def test_kafka_side_files_are_left_alone_and_a_kafka_style_index_is_read(tmp_path: Path) -> None:
    log, model = filled(tmp_path / "p", count=12)
    log.roll()
    first = log.segments()[0]
    log.close()
    directory = tmp_path / "p"
    side_files = {
        "leader-epoch-checkpoint": b"0\n1\n0 0\n",
        "partition.metadata": b"version: 0\n",
        "00000000000000000000.snapshot": b"\x00\x01",
    }
    for name, body in side_files.items():
        (directory / name).write_bytes(body)
    # Kafka's append path indexes a whole produce request by its last offset at its first position;
    # any strictly increasing entries that point inside the log are valid for lookups
    raw = first.log_path.read_bytes()
    positions = [pos for pos, _ in iter_batches(raw)]
    first.index_path.write_bytes(struct.pack(">ii", 5, positions[2]) + struct.pack(">ii", 9, positions[4]))
    again = PartitionLog.open(directory, CONFIG, clock=ManualClock(NOW))
    assert everything(again) == as_model(model)
    for offset in range(0, 24):
        assert decode(again.read(offset, 1).data)[0][0] in (offset, offset - 1)
    again.close()
    for name, body in side_files.items():
        assert (directory / name).read_bytes() == body


def test_segments_below_the_recovery_point_are_not_rescanned(tmp_path: Path) -> None:
    log, _ = filled(tmp_path / "p")
    log.flush()
    infos = log.segments()
    checkpoint = (tmp_path / "p" / naming.RECOVERY_POINT_FILE).read_text().split()
    assert int(checkpoint[-1]) >= infos[-1].base_offset
    image = crash_image(log, tmp_path / "img")
    second = infos[1]
    os.truncate(image / second.log_path.name, second.size_bytes - 3)
    again = PartitionLog.open(image, CONFIG, clock=ManualClock(NOW))
    # trusted as fsynced: a full rescan would have cut the segment and dropped every later one
    assert len(again.segments()) == len(infos)
    assert again.log_end_offset == log.log_end_offset
