"""Remote whole-log retention as a pure decision, checked against a straightforward model."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.plans import remote_retention_plan


def segments(sizes: list[int], timestamps: list[int]) -> tuple[mf.RemoteSegment, ...]:
    out = []
    base = 0
    for size, ts in zip(sizes, timestamps, strict=False):
        out.append(mf.RemoteSegment(base, base + 9, ts, size, uuid.uuid4(), mf.SegmentState.COPY_FINISHED, 1))
        base += 10
    return tuple(out)


def test_by_size_counts_local_only_bytes() -> None:
    segs = segments([100, 100, 100], [5, 6, 7])
    plan = remote_retention_plan(segs, now_ms=10, retention_ms=-1, retention_bytes=250, local_only_bytes=50)
    assert [s.base_offset for s in plan] == [0]  # 350 total: dropping 100 leaves 250 >= 250
    none = remote_retention_plan(segs, now_ms=10, retention_ms=-1, retention_bytes=-1, local_only_bytes=10**9)
    assert none == []


def test_by_time_stops_at_the_first_young_segment() -> None:
    segs = segments([1, 1, 1], [0, 50, 0])
    plan = remote_retention_plan(segs, now_ms=100, retention_ms=60, retention_bytes=-1, local_only_bytes=0)
    assert [s.base_offset for s in plan] == [0]  # the third is old too, but retention deletes a prefix


@given(
    st.lists(st.integers(1, 1000), min_size=0, max_size=12),
    st.integers(-1, 5000),
    st.integers(0, 3000),
)
def test_size_retention_matches_a_model(sizes: list[int], limit: int, local_only: int) -> None:
    segs = segments(sizes, [10**12] * len(sizes))
    plan = remote_retention_plan(
        segs, now_ms=0, retention_ms=-1, retention_bytes=limit, local_only_bytes=local_only
    )
    expected = 0
    total = sum(sizes) + local_only
    while limit >= 0 and expected < len(sizes) and total - sizes[expected] >= limit:
        total -= sizes[expected]
        expected += 1
    assert len(plan) == expected
    assert list(plan) == list(segs[:expected])
    if limit >= 0:
        assert sum(sizes[expected:]) + local_only >= min(limit, sum(sizes) + local_only)
