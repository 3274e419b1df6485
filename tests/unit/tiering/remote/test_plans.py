"""The remote tier's pure plans: which sealed segments go up together, and a segment's leader epochs."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from tierlog.tiering.log import PartitionLog, SegmentInfo
from tierlog.tiering.log.leader_epoch import EpochEntry
from tierlog.tiering.remote.plans import segment_epochs, upload_batches


def seg(base: int, end: int, size: int) -> SegmentInfo:
    path = Path(f"{base:020d}.log")
    return SegmentInfo(base, end, size, -1, True, path, path, path)


def spans(batches: list[list[SegmentInfo]]) -> list[list[tuple[int, int]]]:
    return [[(s.base_offset, s.next_offset) for s in batch] for batch in batches]


def test_segments_are_grouped_by_bytes_and_count_and_empty_ones_skipped() -> None:
    sealed = [
        seg(0, 10, 40),
        seg(10, 20, 40),
        seg(20, 20, 0),
        seg(20, 30, 40),
        seg(30, 40, 100),
        seg(40, 50, 10),
    ]
    plan = upload_batches(sealed, done=None, limit=1000, max_bytes=100, max_segments=5)
    assert spans(plan) == [[(0, 10), (10, 20)], [(20, 30)], [(30, 40)], [(40, 50)]]
    by_count = upload_batches(sealed, done=None, limit=1000, max_bytes=10**6, max_segments=2)
    assert spans(by_count) == [[(0, 10), (10, 20)], [(20, 30), (30, 40)], [(40, 50)]]


def test_uploaded_segments_are_skipped_and_one_straddling_the_remote_end_goes_alone() -> None:
    sealed = [seg(0, 10, 10), seg(10, 20, 10), seg(20, 30, 10), seg(30, 40, 10)]
    plan = upload_batches(sealed, done=15, limit=1000, max_bytes=100, max_segments=10)
    assert spans(plan) == [[(10, 20)], [(20, 30), (30, 40)]]


def test_planning_stops_at_the_first_segment_past_the_limit() -> None:
    sealed = [seg(0, 10, 10), seg(10, 20, 10), seg(20, 30, 10)]
    assert spans(upload_batches(sealed, done=None, limit=20, max_bytes=100, max_segments=10)) == [
        [(0, 10), (10, 20)]
    ]
    assert upload_batches(sealed, done=None, limit=5, max_bytes=100, max_segments=10) == []


def log_with_epochs(*entries: tuple[int, int]) -> PartitionLog:
    cache = SimpleNamespace(entries=lambda: [EpochEntry(e, start) for e, start in entries])
    return cast(PartitionLog, SimpleNamespace(epochs=cache))


def test_a_segment_carries_the_epochs_in_force_over_its_offsets() -> None:
    log = log_with_epochs((0, 0), (3, 100), (5, 250))
    assert segment_epochs(log, 0, 99) == ((0, 0),)
    assert segment_epochs(log, 50, 120) == ((0, 50), (3, 100))
    assert segment_epochs(log, 120, 300) == ((3, 120), (5, 250))
    assert segment_epochs(log, 260, 270) == ((5, 260),)


def test_a_log_without_an_epoch_cache_gives_no_epochs() -> None:
    assert segment_epochs(cast(Any, SimpleNamespace()), 0, 10) == ()
