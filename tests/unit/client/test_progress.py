"""The CLI's progress bar, driven by a fake clock."""

from __future__ import annotations

import io

from tierlog.client.progress import Progress, format_bytes


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_format_bytes() -> None:
    assert [format_bytes(n) for n in (5, 2048, 3 * 2**20, 5 * 2**30)] == [
        "5 B",
        "2.0 KiB",
        "3.0 MiB",
        "5.0 GiB",
    ]


def test_bar_with_a_total_shows_percent_and_rates() -> None:
    clock = Clock()
    out = io.StringIO()
    progress = Progress(out, total_bytes=4 * 2**20, clock=clock)
    clock.now = 2.0
    progress.update(1000, 2 * 2**20)
    line = progress.line()
    assert "[##########----------]  50.0%" in line
    assert "2.0 MiB" in line and "1,000 rec" in line and "500 rec/s" in line and "1.0 MiB/s" in line
    assert out.getvalue().startswith("\r[")


def test_redraws_are_rate_limited() -> None:
    clock = Clock()
    out = io.StringIO()
    progress = Progress(out, interval=1.0, clock=clock)
    for step in range(10):
        clock.now = step * 0.25
        progress.update(1, 10)
    assert progress.drawn == 3
    progress.finish()
    assert progress.drawn == 4 and out.getvalue().endswith("\n")
    assert "%" not in progress.line() and "10 rec" in progress.line()
