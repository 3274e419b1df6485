"""The broker's voice about its object store: a check names the cause once, upload failures of every
partition make one line per interval, and the first clean pass after an outage says ``uploads resumed``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from botocore import exceptions as bce

from tierlog.service.remote.store_health import StoreHealth
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.translate import translate


def _no_such_bucket() -> Exception:
    vendor = bce.ClientError(
        {"Error": {"Code": "NoSuchBucket"}, "ResponseMetadata": {"HTTPStatusCode": 404}}, "ListObjectsV2"
    )
    kind = translate(vendor, op="list")
    kind.__cause__ = vendor
    return kind


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "tierlog.remote" and text in r.getMessage()]


async def test_a_check_names_the_cause_once_and_says_when_it_is_gone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = FaultInjectingStore(LocalObjectStore(tmp_path))
    health = StoreHealth("s3://b/p")
    store.fail_next("list", 2, _no_such_bucket)
    with caplog.at_level(logging.INFO, logger="tierlog.remote"):
        assert await health.check(store) == "the bucket does not exist (NoSuchBucket)"
        assert await health.check(store) == "the bucket does not exist (NoSuchBucket)"
        assert health.problem == "the bucket does not exist (NoSuchBucket)"
        assert await health.check(store) is None
    errors = _lines(caplog, "cannot be used")
    assert len(errors) == 1 and errors[0].levelno == logging.ERROR
    assert "s3://b/p" in errors[0].getMessage() and "NoSuchBucket" in errors[0].getMessage()
    assert len(_lines(caplog, "usable again")) == 1
    assert health.problem is None


async def test_upload_failures_make_one_line_per_interval_then_uploads_resumed_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    health = StoreHealth("s3://b/p", interval_s=60, clock=lambda: now[0])
    with caplog.at_level(logging.INFO, logger="tierlog.remote"):
        for second in range(0, 50, 2):  # two partitions failing every 2 s
            now[0] = second
            health.upload_failed("t-0", _no_such_bucket())
            health.upload_failed("t-1", _no_such_bucket())
        assert health.failing and health.problem == "the bucket does not exist (NoSuchBucket)"
        now[0] = 70
        health.upload_failed("t-0", _no_such_bucket())
        health.pass_succeeded()
        health.pass_succeeded()
    failing = _lines(caplog, "uploads failing")
    assert len(failing) == 2
    assert "NoSuchBucket" in failing[0].getMessage()
    assert "49 more failures held back" in failing[1].getMessage()
    resumed = _lines(caplog, "uploads resumed")
    assert len(resumed) == 1 and resumed[0].levelno == logging.INFO
    assert not health.failing and health.problem is None
