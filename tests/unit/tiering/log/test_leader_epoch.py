"""The leader epoch cache (Kafka's LeaderEpochFileCache semantics and file format) and the partition log's
epoch stamping (leader path) and learning (follower path)."""

from __future__ import annotations

import itertools
import logging
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.tiering.log.support import NOW, make_batch
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.header import iter_batches, set_partition_leader_epoch, verify_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log import EpochEntry, LeaderEpochCache, LogConfig, ManualClock, PartitionLog, naming
from tierlog.wire.errors import InvalidRequestError, UnavailableError

E = EpochEntry


def cache_at(tmp_path: Path) -> LeaderEpochCache:
    return LeaderEpochCache(tmp_path / naming.LEADER_EPOCH_FILE, topic="t", partition=0)


def open_log(path: Path, **config: object) -> PartitionLog:
    return PartitionLog.open(path / "t-0", LogConfig(**config), clock=ManualClock(NOW), topic="t")  # type: ignore[arg-type]


def epoch_batch(values: list[bytes], *, base_offset: int, epoch: int) -> bytes:
    records = [Record(None, value, timestamp=NOW) for value in values]
    return build_batch(records, base_offset=base_offset, now_ms=NOW, partition_leader_epoch=epoch)


def stored_epochs(log: PartitionLog) -> list[tuple[int, int]]:
    """``(base offset, partition_leader_epoch)`` of every stored batch, each CRC-checked."""
    out: list[tuple[int, int]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:  # a read returns batches of one segment
        data = log.read(offset, 1 << 24).data
        for position, header in iter_batches(data, verify=True):
            verify_batch(data, position)
            out.append((header.base_offset, header.partition_leader_epoch))
            offset = header.next_offset
    return out


# ------------------------------------------------------------------ the cache


def test_empty_cache(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    assert cache.entries() == () and cache.latest_epoch is None
    assert cache.end_offset_for(0, 10) == (-1, -1)
    assert cache.epoch_for(5) is None
    assert not cache.path.exists()


def test_assign_appends_and_persists_in_kafka_format(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    assert cache.assign(0, 0)
    assert cache.assign(2, 10)
    assert not cache.assign(2, 15)  # same epoch: its start does not move forward
    assert cache.entries() == (E(0, 0), E(2, 10)) and cache.latest_epoch == 2
    assert cache.path.read_text() == "0\n2\n0 0\n2 10\n"
    assert not (tmp_path / (naming.LEADER_EPOCH_FILE + naming.TMP_SUFFIX)).exists()
    assert cache_at(tmp_path).entries() == (E(0, 0), E(2, 10))


def test_assign_ignores_older_epochs_and_lower_offsets(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(3, 100)
    before = cache.path.stat().st_mtime_ns
    assert not cache.assign(2, 200)  # older epoch
    assert not cache.assign(4, 50)  # start below the latest entry's
    assert not cache.assign(3, 99)  # same epoch, lower start
    assert cache.entries() == (E(3, 100),)
    assert cache.path.stat().st_mtime_ns == before


def test_assign_replaces_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(1, 0)
    cache.assign(2, 5)
    assert cache.assign(3, 5)  # epoch 2 starts where 3 does: it wrote nothing
    assert cache.entries() == (E(1, 0), E(3, 5))


def test_assign_rejects_negative_values(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    with pytest.raises(ValueError):
        cache.assign(-1, 0)
    with pytest.raises(ValueError):
        cache.assign(0, -1)


def test_end_offset_for_follows_kafka(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    for epoch, start in ((2, 10), (4, 20), (7, 35)):
        cache.assign(epoch, start)
    assert cache.end_offset_for(7, 50) == (7, 50)  # the latest: the log end offset
    assert cache.end_offset_for(4, 50) == (4, 35)  # an older one: the next epoch's start
    assert cache.end_offset_for(2, 50) == (2, 20)
    assert cache.end_offset_for(5, 50) == (4, 35)  # between entries: the largest epoch <= 5
    assert cache.end_offset_for(3, 50) == (2, 20)
    assert cache.end_offset_for(1, 50) == (1, 10)  # below the first: the first entry's start (Kafka)
    assert cache.end_offset_for(8, 50) == (-1, -1)  # above the latest: undefined
    assert cache.end_offset_for(-1, 50) == (-1, -1)


def test_epoch_for(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(2, 10)
    cache.assign(4, 20)
    assert [cache.epoch_for(o) for o in (9, 10, 19, 20, 1000)] == [None, 2, 2, 4, 4]


def test_truncate_from_end(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    for epoch, start in ((1, 0), (2, 10), (3, 20)):
        cache.assign(epoch, start)
    cache.truncate_from_end(21)
    assert cache.entries() == (E(1, 0), E(2, 10), E(3, 20))
    cache.truncate_from_end(20)  # an epoch starting at the new end wrote nothing that is left
    assert cache.entries() == (E(1, 0), E(2, 10))
    cache.truncate_from_end(5)
    assert cache.entries() == (E(1, 0),)
    assert cache_at(tmp_path).entries() == (E(1, 0),)
    cache.truncate_from_end(0)
    assert cache.entries() == () and cache_at(tmp_path).entries() == ()


def test_truncate_from_start(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    for epoch, start in ((1, 0), (2, 10), (3, 20)):
        cache.assign(epoch, start)
    cache.truncate_from_start(0)
    assert cache.entries() == (E(1, 0), E(2, 10), E(3, 20))
    cache.truncate_from_start(15)  # epoch 2 still holds 15..19: it stays, starting at 15
    assert cache.entries() == (E(2, 15), E(3, 20))
    cache.truncate_from_start(20)
    assert cache.entries() == (E(3, 20),)
    cache.truncate_from_start(40)
    assert cache.entries() == (E(3, 40),)
    assert cache_at(tmp_path).entries() == (E(3, 40),)


def test_replace_checks_order_and_persists(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(9, 90)
    cache.replace([E(1, 0), E(4, 30)])
    assert cache_at(tmp_path).entries() == (E(1, 0), E(4, 30))
    with pytest.raises(ValueError):
        cache.replace([E(4, 0), E(1, 30)])
    with pytest.raises(ValueError):
        cache.replace([E(1, 30), E(4, 30)])
    assert cache.entries() == (E(1, 0), E(4, 30))
    cache.replace([])
    assert cache_at(tmp_path).entries() == ()


@pytest.mark.parametrize(
    "text",
    [
        "1\n1\n0 0\n",  # unknown version
        "0\n2\n0 0\n",  # count disagrees
        "0\n1\n0\n",  # short line
        "0\n1\nzero 0\n",
        "0\n2\n3 10\n2 20\n",  # epochs decrease
        "0\n2\n2 10\n3 10\n",  # offsets do not increase
        "0\n1\n-1 0\n",
        "",
        "\xff\xfe",
    ],
)
def test_malformed_file_starts_empty_with_a_warning(
    tmp_path: Path, text: str, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / naming.LEADER_EPOCH_FILE).write_bytes(text.encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        cache = cache_at(tmp_path)
    assert cache.entries() == ()
    assert "malformed" in caplog.text
    assert cache.assign(1, 0)
    assert cache_at(tmp_path).entries() == (E(1, 0),)


def test_a_failed_write_leaves_the_cache_unchanged(tmp_path: Path) -> None:
    cache = cache_at(tmp_path)
    cache.assign(1, 0)
    os.mkdir(tmp_path / (naming.LEADER_EPOCH_FILE + naming.TMP_SUFFIX))  # the tmp file cannot be created
    with pytest.raises(OSError):
        cache.assign(2, 10)
    with pytest.raises(OSError):
        cache.replace([E(5, 5)])
    assert cache.entries() == (E(1, 0),)
    assert cache_at(tmp_path).entries() == (E(1, 0),)
    # a truncation follows a log that already changed: memory follows it, the file catches up later
    with pytest.raises(OSError):
        cache.truncate_from_end(0)
    assert cache.entries() == ()
    assert cache_at(tmp_path).entries() == (E(1, 0),)
    os.rmdir(tmp_path / (naming.LEADER_EPOCH_FILE + naming.TMP_SUFFIX))
    cache.truncate_from_end(0)  # unchanged in memory, but the stale file is rewritten
    assert cache_at(tmp_path).entries() == ()


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("assign"), st.integers(0, 8), st.integers(0, 60)),
            st.tuples(st.just("end"), st.integers(0, 60), st.just(0)),
            st.tuples(st.just("start"), st.integers(0, 60), st.just(0)),
        ),
        max_size=25,
    )
)
def test_entries_stay_strictly_increasing_and_survive_reopen(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    directory = tmp_path_factory.mktemp("epochs")
    cache = cache_at(directory)
    for op, a, b in ops:
        if op == "assign":
            latest = cache.entries()[-1] if cache.entries() else None
            changed = cache.assign(a, b)
            expected = latest is None or (a > latest.epoch and b >= latest.start_offset)
            assert changed == expected
            if changed:
                assert cache.entries()[-1] == E(a, b)
        elif op == "end":
            cache.truncate_from_end(a)
            assert all(e.start_offset < a for e in cache.entries())
        else:
            cache.truncate_from_start(a)
            assert all(e.start_offset >= a for e in cache.entries())
        entries = cache.entries()
        assert all(
            x.epoch < y.epoch and x.start_offset < y.start_offset for x, y in itertools.pairwise(entries)
        )
    assert cache_at(directory).entries() == cache.entries()


# ------------------------------------------------------------------ the partition log


def test_leader_append_stamps_every_batch_and_keeps_the_crc(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    first = log.append(make_batch([b"a", b"b"], base_offset=40) + make_batch([b"c"]), leader_epoch=3)
    log.append(make_batch([b"d"]), leader_epoch=3)
    log.append(make_batch([b"e"]), leader_epoch=5)
    assert first.batch_base_offsets == [0, 2]
    assert stored_epochs(log) == [(0, 3), (2, 3), (3, 3), (4, 5)]
    assert log.epochs.entries() == (E(3, 0), E(5, 4))
    assert log.epoch_end_offset(3) == (3, 4)
    assert log.epoch_end_offset(5) == (5, 5)
    log.close()
    reopened = open_log(tmp_path)
    assert reopened.epochs.entries() == (E(3, 0), E(5, 4))
    assert stored_epochs(reopened) == [(0, 3), (2, 3), (3, 3), (4, 5)]
    reopened.close()


def test_stamping_with_log_append_time_rewrites_in_place(tmp_path: Path) -> None:
    log = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(make_batch([b"a"], base_offset=9) + make_batch([b"b"]), leader_epoch=7)
    assert stored_epochs(log) == [(0, 7), (1, 7)]
    log.close()


def test_stamping_does_not_touch_the_callers_buffer(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    data = make_batch([b"a"], base_offset=9)
    log.append(data, leader_epoch=2)
    assert data == make_batch([b"a"], base_offset=9)
    assert stored_epochs(log) == [(0, 2)]
    log.close()


def test_an_epoch_file_is_written_once_per_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a"]), leader_epoch=1)
    path = log.epochs.path
    inode = path.stat().st_ino
    for _ in range(5):
        log.append(make_batch([b"x"]), leader_epoch=1)
    assert path.stat().st_ino == inode  # never replaced (a rewrite renames a new file over it)
    log.append(make_batch([b"y"]), leader_epoch=2)
    assert path.stat().st_ino != inode
    log.close()


def test_negative_leader_epoch_is_refused_before_writing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(InvalidRequestError):
        log.append(make_batch([b"a"]), leader_epoch=-1)
    assert log.log_end_offset == 0
    log.close()


def test_a_clients_epoch_is_not_learned_on_the_leader_path(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(epoch_batch([b"a"], base_offset=0, epoch=9))
    assert log.epochs.entries() == ()
    log.close()


def test_follower_append_learns_epochs_and_keeps_bytes(tmp_path: Path) -> None:
    leader = open_log(tmp_path / "leader", message_timestamp_type="LogAppendTime")
    leader.append(make_batch([b"a", b"b"]), leader_epoch=1)
    leader.append(make_batch([b"c"]), leader_epoch=1)
    leader.append(make_batch([b"d"]), leader_epoch=4)
    fetched = leader.read(0, 1 << 20).data
    follower = open_log(tmp_path / "follower", message_timestamp_type="LogAppendTime")
    info = follower.append(fetched, assign_offsets=False)
    assert info.batch_base_offsets == [0, 2, 3]
    assert follower.read(0, 1 << 20).data == fetched  # byte-identical: no restamped append time
    assert follower.epochs.entries() == leader.epochs.entries() == (E(1, 0), E(4, 3))
    # unstamped batches (a restore of old data) are kept without learning anything
    follower.append(make_batch([b"e"], base_offset=4), assign_offsets=False)
    assert follower.epochs.entries() == (E(1, 0), E(4, 3))
    leader.close()
    follower.close()


def test_failed_follower_append_learns_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    with pytest.raises(InvalidRequestError):
        log.append(epoch_batch([b"a"], base_offset=5, epoch=2), assign_offsets=False)
    assert log.epochs.entries() == ()
    log.close()


def test_truncation_drops_the_epochs_past_the_end(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a", b"b"]), leader_epoch=1)
    log.append(make_batch([b"c"]), leader_epoch=2)
    log.append(make_batch([b"d"]), leader_epoch=3)
    log.truncate_to(3)
    assert log.epochs.entries() == (E(1, 0), E(2, 2))
    log.truncate_to(2)
    assert log.epochs.entries() == (E(1, 0),)
    log.append(make_batch([b"x"]), leader_epoch=5)
    assert log.epochs.entries() == (E(1, 0), E(5, 2))
    log.close()
    assert open_log(tmp_path).epochs.entries() == (E(1, 0), E(5, 2))


def test_retention_moves_the_first_epoch(tmp_path: Path) -> None:
    log = open_log(tmp_path, segment_bytes=200, retention_bytes=0)
    log.append(make_batch([b"a" * 60]), leader_epoch=1)
    log.append(make_batch([b"b" * 60]), leader_epoch=1)
    log.append(make_batch([b"c" * 60]), leader_epoch=2)
    log.append(make_batch([b"d" * 60]), leader_epoch=2)
    assert len(log.segments()) > 2
    deleted = log.apply_retention()
    assert deleted
    start = log.log_start_offset
    assert start > 0
    assert log.epochs.entries()[0].start_offset == start
    assert log.epochs.entries()[-1].epoch == 2
    log.close()


def test_truncate_fully_keeps_the_epoch_of_the_last_offset_before(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a", b"b"]), leader_epoch=1)
    log.append(make_batch([b"c"]), leader_epoch=2)
    log.truncate_fully_and_start_at(2)
    assert log.epochs.entries() == (E(1, 2),)
    log.truncate_fully_and_start_at(50)
    assert log.epochs.entries() == (E(1, 50),)
    log.close()


def test_reset_to_replaces_the_epochs_below_the_offset(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a", b"b"]), leader_epoch=1)
    log.update_high_watermark(2)
    log.reset_to(100, [E(3, 10), E(6, 90), E(8, 100), E(9, 120)])
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (100, 100, 100)
    assert log.epochs.entries() == (E(3, 10), E(6, 90))
    assert log.epoch_end_offset(6) == (6, 100)
    log.append(epoch_batch([b"x"], base_offset=100, epoch=8), assign_offsets=False)
    assert log.epochs.entries() == (E(3, 10), E(6, 90), E(8, 100))
    with pytest.raises(InvalidRequestError):
        log.reset_to(200, [E(6, 10), E(3, 90)])
    assert log.log_end_offset == 101  # checked before anything changed
    log.close()
    assert open_log(tmp_path).epochs.entries() == (E(3, 10), E(6, 90), E(8, 100))


def test_recovery_of_a_torn_tail_drops_its_epochs(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(make_batch([b"a"]), leader_epoch=1)
    log.append(make_batch([b"b"]), leader_epoch=2)
    segment = log.segments()[-1].log_path
    size = segment.stat().st_size
    epochs = log.epochs.path.read_bytes()
    log.close()
    # a crash: the epoch-2 batch never reached the disk, the epoch file did
    os.truncate(segment, size - 10)
    (tmp_path / "t-0" / naming.CLEAN_SHUTDOWN_FILE).unlink()
    log.epochs.path.write_bytes(epochs)
    reopened = open_log(tmp_path)
    assert reopened.log_end_offset == 1
    assert reopened.epochs.entries() == (E(1, 0),)
    assert LeaderEpochCache(reopened.epochs.path).entries() == (E(1, 0),)
    reopened.close()


def test_a_failed_data_write_drops_the_new_epoch(tmp_path: Path) -> None:
    calls = {"n": 0}

    log = open_log(tmp_path)
    log.append(make_batch([b"a"]), leader_epoch=1)
    segment = log._segments[-1]  # inject a write failure into the active segment
    real_write = segment.write

    def failing_write(*args: object, **kwargs: object) -> None:
        calls["n"] += 1
        raise OSError(5, "Input/output error")

    segment.write = failing_write  # type: ignore[method-assign]
    with pytest.raises(UnavailableError):
        log.append(make_batch([b"b"]), leader_epoch=2)
    segment.write = real_write  # type: ignore[method-assign]
    assert calls["n"] == 1
    assert log.epochs.entries() == (E(1, 0),)
    log.close()


def test_set_partition_leader_epoch_keeps_the_crc() -> None:
    data = bytearray(make_batch([b"a", b"b"]))
    set_partition_leader_epoch(data, 0, 123)
    header = verify_batch(data, 0)
    assert header.partition_leader_epoch == 123


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.integers(0, 2), st.integers(1, 3)),  # epoch bump, batches
            st.tuples(st.just("truncate"), st.integers(0, 6), st.just(0)),  # how far back
            st.tuples(st.just("reopen"), st.just(0), st.just(0)),
        ),
        min_size=1,
        max_size=15,
    )
)
def test_epochs_describe_the_stored_batches(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, int, int]]
) -> None:
    directory = tmp_path_factory.mktemp("log")
    log = open_log(directory, segment_bytes=300)
    epoch = 0
    try:
        for op, a, b in ops:
            if op == "append":
                epoch += a
                log.append(b"".join(make_batch([b"x" * 20]) for _ in range(b)), leader_epoch=epoch)
            elif op == "truncate":
                log.truncate_to(max(log.log_end_offset - a, 0))
            else:
                log.close()
                log = open_log(directory, segment_bytes=300)
            stored = stored_epochs(log)
            assert all(log.epochs.epoch_for(base) == stamped for base, stamped in stored)
            assert all(e.start_offset < log.log_end_offset for e in log.epochs.entries())
            if stored:
                assert log.epoch_end_offset(stored[-1][1]) == (stored[-1][1], log.log_end_offset)
    finally:
        log.close()


def test_truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    log = open_log(tmp_path)
    log.append(epoch_batch([b"a", b"b"], base_offset=0, epoch=2), assign_offsets=False)
    log.epochs.assign(3, log.log_end_offset)  # led epoch 3 briefly, wrote nothing
    log.truncate_to(log.log_end_offset)
    assert [(e.epoch, e.start_offset) for e in log.epochs.entries()] == [(2, 0)]
    log.append(epoch_batch([b"c"], base_offset=2, epoch=2), assign_offsets=False)
    assert log.epochs.epoch_for(2) == 2  # the fetched batch counts in the epoch that wrote it
    log.close()
