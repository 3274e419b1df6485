"""The rate limit of repeated log lines: one per interval, with the count held back."""

from __future__ import annotations

from tierlog.service.log_limit import LogLimiter


def test_one_line_per_interval_with_the_count_held_back() -> None:
    now = [100.0]
    limiter = LogLimiter(10.0, clock=lambda: now[0])
    assert limiter.admit() == 0
    for _ in range(4):
        now[0] += 2
        assert limiter.admit() is None
    now[0] += 2  # 10 s after the first line
    assert limiter.admit() == 4
    now[0] += 9.5
    assert limiter.admit() is None
    now[0] += 60
    assert limiter.admit() == 1
