"""The loop's ``socket.accept()`` failures are counted every time and logged once per interval."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tierlog.service.metrics import Metrics
from tierlog.service.web.connections import install_accept_error_handler


def test_accept_errors_are_counted_and_logged_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    loop = asyncio.new_event_loop()
    others: list[str] = []
    loop.set_exception_handler(lambda _loop, context: others.append(str(context["message"])))
    now = [100.0]
    metrics = Metrics()
    try:
        install_accept_error_handler(loop, metrics, 10_000, clock=lambda: now[0])
        error = OSError(24, "Too many open files")
        with caplog.at_level(logging.WARNING, logger="tierlog.connections"):
            for _ in range(500):
                loop.call_exception_handler(
                    {"message": "socket.accept() out of system resource", "exception": error}
                )
            now[0] += 10.5
            loop.call_exception_handler(
                {"message": "socket.accept() out of system resource", "exception": error}
            )
            loop.call_exception_handler({"message": "Task exception was never retrieved"})
    finally:
        loop.close()
    lines = [r for r in caplog.records if r.name == "tierlog.connections"]
    assert len(lines) == 2
    assert all(r.exc_info is None for r in lines)
    assert "499 more" in lines[1].getMessage()
    assert metrics.value("tierlog_accept_errors_total") == 501
    assert others == ["Task exception was never retrieved"]
