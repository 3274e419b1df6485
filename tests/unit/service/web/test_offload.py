"""offload: CPU work over 64 KiB (a large native body's batch scan and validation, a REST conversion) runs
in a worker thread, so the event loop keeps serving; small work runs inline, without a thread hop."""

from __future__ import annotations

import threading

import pytest

from tierlog.service.web.requests import OFFLOAD_BYTES, offload


async def test_large_work_runs_off_the_loop_and_small_work_inline() -> None:
    loop_thread = threading.get_ident()
    assert await offload(OFFLOAD_BYTES + 1, threading.get_ident) != loop_thread
    assert await offload(OFFLOAD_BYTES, threading.get_ident) == loop_thread


async def test_errors_cross_the_thread_unchanged() -> None:
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await offload(10 * OFFLOAD_BYTES, fail)
