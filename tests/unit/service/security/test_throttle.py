"""The failed-authentication throttle: the window, attempts in flight counting toward its limits, and the
per-(user, host) limit apart from the per-host ceiling."""

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
    throttle.failed("u", "10.0.0.1")
    clock.now += 1_000
    throttle.failed("u", "10.0.0.1")
    throttle.check("u", "10.0.0.2")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.check("u", "10.0.0.1")
    assert refused.value.retry_after_s == 9
    clock.now += 9_000
    throttle.check("u", "10.0.0.1")


def test_attempts_in_flight_count_toward_the_limit() -> None:
    throttle = FailureThrottle(3, 60_000, clock=Clock())
    for _ in range(3):
        throttle.reserve("u", "h")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.reserve("u", "h")
    assert refused.value.retry_after_s == 1
    throttle.check("u", "h")  # a request with nothing to verify is not held back by attempts in flight
    throttle.reserve("u", "other")


def test_a_settled_attempt_frees_its_place_or_becomes_a_failure() -> None:
    throttle = FailureThrottle(2, 60_000, clock=Clock())
    throttle.reserve("u", "h")
    throttle.reserve("u", "h")
    throttle.settle("u", "h", failed=False)
    throttle.reserve("u", "h")
    throttle.settle("u", "h", failed=True)
    throttle.settle("u", "h", failed=False)
    throttle.check("u", "h")
    throttle.reserve("u", "h")
    with pytest.raises(TooManyFailuresError):
        throttle.reserve("u", "h")  # one failure and one in flight
    throttle.settle("u", "h", failed=True)
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.check("u", "h")
    assert refused.value.retry_after_s == 60


def test_one_user_failing_does_not_lock_out_another_from_the_same_host() -> None:
    clock = Clock()
    throttle = FailureThrottle(3, 60_000, clock=clock)
    for _ in range(3):
        clock.now += 1_000
        throttle.failed("alice", "10.0.0.1")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.check("alice", "10.0.0.1")
    assert refused.value.retry_after_s == 58
    throttle.check("bob", "10.0.0.1")
    throttle.reserve("bob", "10.0.0.1")
    throttle.settle("bob", "10.0.0.1", failed=False)
    throttle.check("alice", "10.0.0.2")


def test_failures_across_names_from_one_host_reach_the_address_ceiling() -> None:
    clock = Clock()
    throttle = FailureThrottle(3, 60_000, clock=clock)  # the ceiling: 5 x 3
    for n in range(14):
        throttle.failed(f"user-{n}", "10.0.0.1")
    throttle.check("someone", "10.0.0.1")
    clock.now += 10_000
    throttle.failed("user-14", "10.0.0.1")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.check("someone", "10.0.0.1")
    assert refused.value.retry_after_s == 50  # the first failure leaves the window 50 s from now
    throttle.check("someone", "10.0.0.2")
    clock.now += 50_000
    throttle.check("someone", "10.0.0.1")


def test_the_address_ceiling_counts_attempts_in_flight_and_can_be_set() -> None:
    throttle = FailureThrottle(2, 60_000, address_limit=3, clock=Clock())
    for name in ("a", "b", "c"):
        throttle.reserve(name, "h")
    with pytest.raises(TooManyFailuresError) as refused:
        throttle.reserve("d", "h")
    assert refused.value.retry_after_s == 1
    throttle.settle("a", "h", failed=False)
    throttle.reserve("d", "h")
