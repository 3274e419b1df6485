"""What ``tierlog consume`` writes to stderr about partitions it cannot read, on a manual clock."""

from __future__ import annotations

import io

from tierlog.client.cli.health import REPEAT_EVERY_S, REPORT_AFTER_S, FetchReporter, skipped_line
from tierlog.client.errors import BrokerUnavailableError
from tierlog.client.fetcher import FetchProblem
from tierlog.client.types import TopicPartition
from tierlog.wire.errors import LeaderNotAvailableError

URL = "http://127.0.0.1:8082"
T0, T1, T3 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 3)
DOWN = BrokerUnavailableError(f"broker {URL} unreachable: connection refused")
NO_LEADER = LeaderNotAvailableError("partition t-3 has no live leader (leader epoch 4)")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def reporter() -> tuple[FetchReporter, io.StringIO, Clock]:
    out, clock = io.StringIO(), Clock()
    return FetchReporter(out, "tierlog consume", clock), out, clock


def take(out: io.StringIO) -> list[str]:
    lines = out.getvalue().splitlines()
    out.seek(0)
    out.truncate()
    return lines


def test_a_lost_broker_is_named_once_after_the_grace_again_later_and_its_return() -> None:
    report, out, clock = reporter()
    problems = {T0: FetchProblem(URL, DOWN, 100.0), T1: FetchProblem(URL, DOWN, 100.5)}
    report.check(problems)
    assert take(out) == []  # a blip shorter than the grace stays quiet
    clock.now += REPORT_AFTER_S + 0.5
    report.check(problems)
    assert take(out) == [
        f"tierlog consume: broker {URL} unreachable: {DOWN.message}; retrying (partitions t-0, t-1)"
    ]
    clock.now += 1
    report.check(problems)
    assert take(out) == []  # rate-limited
    clock.now += REPEAT_EVERY_S
    report.check(problems)
    (again,) = take(out)
    assert again.startswith(f"tierlog consume: broker {URL} unreachable for 34 s: ")
    report.check({T1: FetchProblem(URL, DOWN, 100.5)})
    assert take(out) == []  # still failing for one partition: not back yet
    report.check({})
    assert take(out) == [f"tierlog consume: reconnected to broker {URL}"]


def test_leaderless_partitions_are_named_and_their_return() -> None:
    report, out, clock = reporter()
    clock.now += REPORT_AFTER_S
    problems = {T3: FetchProblem(URL, NO_LEADER, 100.0), T1: FetchProblem(None, NO_LEADER, 100.0)}
    report.check(problems)
    assert take(out) == ["tierlog consume: partitions t-1, t-3 have no leader; retrying"]
    report.check(problems)
    assert take(out) == []
    report.check({T3: problems[T3]})
    assert take(out) == ["tierlog consume: partitions t-1 are readable again"]
    problems = {T3: problems[T3], T0: FetchProblem(URL, DOWN, 100.0)}
    assert skipped_line("tierlog consume", problems) == (
        "tierlog consume: skipped 2 partition(s) that could not be read: "
        f"t-0 (broker {URL} unreachable), t-3 (no leader)\n"
    )
