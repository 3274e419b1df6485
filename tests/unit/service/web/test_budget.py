"""ByteBudget: bytes in flight are bounded, a full budget refuses (503, retriable) instead of waiting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.web.budget import ByteBudget
from tierlog.wire.errors import UnavailableError


def test_full_budget_refuses_with_a_retriable_503() -> None:
    budget = ByteBudget("queued.max.request.bytes", 100)
    budget.acquire(60)
    with pytest.raises(UnavailableError) as info:
        budget.acquire(41)
    assert info.value.code == 50301 and info.value.retriable
    assert "queued.max.request.bytes is full" in info.value.message
    budget.acquire(40)
    assert (budget.in_use, budget.peak, budget.refused) == (100, 100, 1)
    budget.release(60)
    budget.release(40)
    assert budget.in_use == 0


def test_a_body_over_the_whole_budget_goes_alone() -> None:
    budget = ByteBudget("b", 100)
    with budget.hold(500):
        assert budget.in_use == 500
        with pytest.raises(UnavailableError):
            budget.acquire(1)
    assert budget.in_use == 0
    with pytest.raises(ValueError):
        budget.release(1)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 60)), max_size=40))
def test_in_use_matches_a_model_and_never_passes_the_limit(steps: list[tuple[bool, int]]) -> None:
    budget = ByteBudget("b", 100)
    held: list[int] = []
    for take, size in steps:
        if take:
            fits = not held or sum(held) + size <= 100
            try:
                budget.acquire(size)
                held.append(size)
                assert fits
            except UnavailableError:
                assert not fits
        elif held:
            budget.release(held.pop())
        assert budget.in_use == sum(held) <= 100
    assert budget.peak <= 100


def test_a_hold_grows_within_the_limit_and_keeps_its_bytes_when_refused() -> None:
    budget = ByteBudget("rest.produce.conversion.max.bytes", 100)
    other = budget.hold(30)
    other.__enter__()
    with budget.hold(20) as held:
        held.resize(70)
        assert (budget.in_use, held.size) == (100, 70)
        with pytest.raises(UnavailableError) as info:
            held.resize(71)
        assert info.value.code == 50301 and info.value.retriable
        assert (budget.in_use, held.size, budget.refused) == (100, 70, 1)
        held.resize(10)  # shrinking always succeeds
        assert budget.in_use == 40
    assert budget.in_use == 30
    other.__exit__(None, None, None)
    assert (budget.in_use, budget.peak) == (0, 100)


def test_a_hold_grows_past_the_whole_budget_alone_or_as_the_oldest() -> None:
    budget = ByteBudget("b", 100)
    with budget.hold(50) as held:
        held.resize(500)
        assert budget.in_use == 500
        with pytest.raises(UnavailableError):
            budget.acquire(0)
    assert budget.in_use == 0
    with budget.hold(40) as first, budget.hold(40) as second:
        with pytest.raises(UnavailableError):
            second.resize(61)  # the younger hold waits for the older one: refused, not queued
        first.resize(300)  # the oldest always progresses, so two holds never refuse each other forever
        assert budget.in_use == 340
        with pytest.raises(UnavailableError):
            second.resize(41)
        second.resize(0)
        assert (budget.in_use, budget.refused) == (300, 3)
    assert budget.in_use == 0
    with pytest.raises(ValueError):
        budget.resize(2, 1)


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 150)), max_size=40))
def test_resized_holds_match_a_model(steps: list[tuple[int, int]]) -> None:
    budget = ByteBudget("b", 100)
    holds = [0, 0, 0, 0]
    for which, size in steps:
        others = sum(holds) - holds[which]
        fits = size <= holds[which] or not others or others + size <= 100
        try:
            budget.resize(holds[which], size)
            holds[which] = size
            assert fits
        except UnavailableError:
            assert not fits
        assert budget.in_use == sum(holds)
        assert budget.in_use <= 100 or sum(1 for h in holds if h) == 1


def test_bytes_taken_outside_holds_count_as_older_than_every_hold() -> None:
    budget = ByteBudget("b", 100)
    budget.acquire(60)  # an acquire without a hold (an acks=0 body, a test): its age is unknown
    with budget.hold(40) as held, pytest.raises(UnavailableError):
        held.resize(41)
    budget.release(60)
    assert budget.in_use == 0
