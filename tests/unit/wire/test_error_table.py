"""The error table is complete: every class that registers a code declares its Kafka error, answers a real
HTTP status and belongs to a kind, and docs/errors.md is what the classes generate."""

from __future__ import annotations

import importlib
import os
import pkgutil
import re
import runpy
import subprocess
import sys
from http import HTTPStatus
from pathlib import Path

import pytest

import tierlog.client
import tierlog.service
import tierlog.tiering
from tierlog.wire import errors
from tierlog.wire.errors_doc import REGENERATE, meaning, render_markdown

ROOT = Path(__file__).resolve().parents[3]
TOOL = ROOT / "infra" / "error_docs.py"
KINDS = {
    "invalid request",
    "not found",
    "conflict",
    "unavailable",
    "corrupt data",
    "unauthorized",
    "throttled",
    "internal",
}
# The newest code of Kafka's Errors enum this table was checked against (SHARE_SESSION_LIMIT_REACHED).
KAFKA_MAX_CODE = 133


def every_registered_class() -> list[type[errors.TierlogError]]:
    """The registry after importing every module of the broker, the storage engine and the client."""
    for package in (tierlog.service, tierlog.tiering, tierlog.client):
        for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            try:
                importlib.import_module(module.name)
            except ModuleNotFoundError as err:  # an optional extra (pyspark) that is not installed
                if (err.name or "").startswith("tierlog"):
                    raise
    return list(errors.registered_errors().values())


def test_every_registered_class_declares_its_kafka_error_and_a_real_http_status() -> None:
    classes = every_registered_class()
    assert len(classes) > 40
    for cls in classes:
        assert "kafka" in cls.__dict__, f"{cls.__qualname__} declares no kafka error"
        kafka = cls.kafka
        assert -1 <= kafka.code <= KAFKA_MAX_CODE and kafka.code != 0, cls
        assert re.fullmatch(r"[A-Z][A-Z_]*", kafka.name), cls
        assert kafka.exact or kafka.code != -1 or kafka == errors.NO_KAFKA_EQUIVALENT, cls
        status = errors.http_status(cls.code)
        assert 400 <= HTTPStatus(status) < 600, cls
        assert cls.kind in KINDS, cls
        assert meaning(cls), f"{cls.__qualname__} has no docstring"


def test_one_kafka_name_per_kafka_code() -> None:
    names: dict[int, set[str]] = {}
    for cls in every_registered_class():
        names.setdefault(cls.kafka.code, set()).add(cls.kafka.name)
    names.setdefault(-1, set()).add(errors.UNKNOWN_SERVER_ERROR.name)
    for kafka in errors.AuthorizationError.KAFKA_BY_RESOURCE.values():
        names.setdefault(kafka.code, set()).add(kafka.name)
    assert {code: n for code, n in names.items() if len(n) > 1} == {}


@pytest.mark.parametrize(
    ("raised", "code", "name"),
    [
        (errors.UnknownTopicError("t"), 3, "UNKNOWN_TOPIC_OR_PARTITION"),
        (errors.NotLeaderOrFollowerError("m"), 6, "NOT_LEADER_OR_FOLLOWER"),
        (errors.OffsetOutOfRangeError("m", log_start_offset=0, log_end_offset=1), 1, "OFFSET_OUT_OF_RANGE"),
        (errors.ProducerFencedError("m"), 47, "INVALID_PRODUCER_EPOCH"),
        (errors.AuthorizationError("m", resource_type="TOPIC"), 29, "TOPIC_AUTHORIZATION_FAILED"),
        (errors.AuthorizationError("m", resource_type="GROUP"), 30, "GROUP_AUTHORIZATION_FAILED"),
        (errors.AuthorizationError("m", resource_type="CLUSTER"), 31, "CLUSTER_AUTHORIZATION_FAILED"),
        (errors.AuthorizationError("m"), 31, "CLUSTER_AUTHORIZATION_FAILED"),
        (errors.InternalError("m"), -1, "UNKNOWN_SERVER_ERROR"),
        (errors.TierlogError("m"), -1, "UNKNOWN_SERVER_ERROR"),
    ],
)
def test_an_instance_answers_its_kafka_error(raised: errors.TierlogError, code: int, name: str) -> None:
    kafka = raised.kafka_error()
    assert (kafka.code, kafka.name) == (code, name)


def test_only_the_listed_modules_declare_codes() -> None:
    declaring: tuple[str, ...] = runpy.run_path(str(TOOL))["DECLARING_MODULES"]
    modules = {cls.__module__ for cls in every_registered_class()}
    assert modules == {errors.__name__, *declaring}


def test_docs_errors_md_is_what_the_classes_generate() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(TOOL)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    checked_in = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert done.stdout == checked_in, f"docs/errors.md is stale: run {REGENERATE}"


def test_the_rendering_has_one_row_per_class_sorted_by_code() -> None:
    rows = render_markdown([errors.UnknownTopicError, errors.NotFoundError, errors.UnknownTopicError])
    body = [line for line in rows.splitlines() if line.startswith("| 4")]
    assert body == [
        "| 404 | 404 | not found | no | 91 | `RESOURCE_NOT_FOUND` | `NotFoundError` | Something does not"
        " exist (a cluster, broker, config, object). |",
        "| 40401 | 404 | not found | no | 3 | `UNKNOWN_TOPIC_OR_PARTITION` | `UnknownTopicError` | The topic"
        " does not exist (or was deleted). |",
    ]
