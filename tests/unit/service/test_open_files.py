"""The broker's open-file limit (:mod:`tierlog.service.open_files`): raised to the hard limit at start."""

from __future__ import annotations

import logging
import resource
from collections.abc import Iterator

import pytest

from tierlog.service import open_files


@pytest.fixture
def lowered() -> Iterator[int]:
    """The soft limit lowered to 256 for the test (restored after); yields the hard limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        yield hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_limit_goes_up_to_the_hard_one(lowered: int) -> None:
    expected = lowered if lowered != resource.RLIM_INFINITY else open_files._ceiling(lowered)
    assert open_files.raise_limit() == expected
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (expected, lowered)
    assert open_files.raise_limit() == expected  # idempotent


def test_too_low_a_limit_for_max_connections_is_named(lowered: int, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tierlog.open_files"):
        assert not open_files.warn_if_short(10_000)
    assert "max.connections" in caplog.text and "256" in caplog.text
    assert not open_files.warn_if_short(0)  # 256 descriptors do not even cover the logs' share
