"""ByteBudget: bytes in flight are bounded, a full budget refuses (503, retriable) instead of waiting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.budget import ByteBudget
from tierlog.tiering.errors import UnavailableError


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
