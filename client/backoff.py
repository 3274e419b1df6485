"""Capped, jittered exponential backoff shared by the producer's retries and the consumer's loops."""

from __future__ import annotations

import random

__all__ = ["backoff_seconds"]


def backoff_seconds(attempt: int, base_ms: int, max_ms: int, rng: random.Random | None = None) -> float:
    """The wait before retry number ``attempt`` (0 for the first retry): ``base * 2**attempt`` capped at
    ``max_ms``, then scaled by a random factor in [0.8, 1.2] so clients do not retry in lockstep.

    Thread-safe when ``rng`` is not shared between threads (the default uses the module's generator).
    """
    raw = min(max_ms, base_ms << min(attempt, 30))
    jitter: float = (rng or random).uniform(0.8, 1.2)
    return max(0.0, raw * jitter / 1000)
