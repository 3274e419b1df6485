"""The failed-authentication throttle: the window, and attempts in flight counting toward its limit."""

from __future__ import annotations

import pytest

from tierlog.service.security.throttle import FailureThrottle, TooManyFailuresError


class Clock:
    """Milliseconds, moved by the test."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_failures_in_the_window_refuse_the_host_until_the_oldest_leaves() -> None:
    clock = Clock()
    throttle = FailureThrottle(2, 10_000, clock=clock)
    throttle.failed("10.0.0.1")
    clock.now += 1_000
    throttle.failed("10.0.0.1")
    throttle.check("10.0.0.2")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.check("10.0.0.1")
    assert refused.value.retry_after_s == 9
    clock.now += 9_000
    throttle.check("10.0.0.1")


def test_attempts_in_flight_count_toward_the_limit() -> None:
    throttle = FailureThrottle(3, 60_000, clock=Clock())
    for _ in range(3):
        throttle.reserve("h")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.reserve("h")
    assert refused.value.retry_after_s == 1
    throttle.check("h")  # a request with nothing to verify is not held back by attempts in flight
    throttle.reserve("other")


def test_a_settled_attempt_frees_its_place_or_becomes_a_failure() -> None:
    throttle = FailureThrottle(2, 60_000, clock=Clock())
    throttle.reserve("h")
    throttle.reserve("h")
    throttle.settle("h", failed=False)
    throttle.reserve("h")
    throttle.settle("h", failed=True)
    throttle.settle("h", failed=False)
    throttle.check("h")
    throttle.reserve("h")
    with pytest.raises(TooManyFailuresError):
        throttle.reserve("h")  # one failure and one in flight
    throttle.settle("h", failed=True)
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.check("h")
    assert refused.value.retry_after_s == 60
