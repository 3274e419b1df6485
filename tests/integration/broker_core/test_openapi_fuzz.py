"""A bounded, derandomized schemathesis run of the OpenAPI document against a real broker on 127.0.0.1.

Every operation gets a few generated requests, valid and invalid; no answer may be a server error, each
must conform to the document (status code, content type, headers, response schema), an invalid request
must be refused with a 4xx, and a valid one must be accepted (2xx), or refused only for the state of the
broker (404 not found, 409 conflict, 416 offset out of range), except for the operations of
:data:`STATE_OR_VALUE_RULES`, whose other refusals depend on what a schema cannot say. The document is built
in-process (the one ``/openapi.json`` serves); ``{cluster_id}`` is the broker's real one, so the v3 routes
reach their input checks instead of answering 404.

The native produce body (raw record batches) is fuzzed as arbitrary bytes; valid batches are covered by
tests/integration/broker_data/test_native.py. Valid values of two kinds of input are lowered (documented
as they are, but too slow to fuzz within the budget): a ``partitions_count`` (up to 10000 directories per
request) and long-poll waits; each join goes to a group of its own (see :func:`_join_alone`).
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import Case, GenerationMode
from schemathesis.checks import (
    CheckContext,
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from schemathesis.config import PositiveDataAcceptanceConfig

from tests.integration.broker import BrokerThread, broker_settings
from tierlog.service.groups.consumer_config import MAX_REQUEST_TIMEOUT_MS
from tierlog.service.native_api.routes import BATCHES_TYPE, MAX_PRODUCE_TIMEOUT_MS, MAX_WAIT_MS
from tierlog.service.openapi import build_document


@schemathesis.serializer(BATCHES_TYPE)
def _raw_batches(ctx: Any, value: Any) -> bytes:
    """The native produce body is raw bytes: generated ones are garbage batches the broker must refuse
    with a documented 4xx (and append nothing)."""
    if isinstance(value, bytes):
        return value
    return value.encode("utf-8", "surrogatepass") if isinstance(value, str) else repr(value).encode()


SCHEMA = schemathesis.openapi.from_dict(build_document())
# Valid and invalid requests (wrong types, out-of-range integers, illegal topic names): an invalid one
# must be refused with a documented 4xx, never accepted or answered with a 5xx.
SCHEMA.config.generation.update(
    modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], deterministic=True, no_shrink=True
)
# The coverage phase (every boundary value and every unexpected method of every operation, about 130 s here)
# runs only with TIERLOG_FUZZ_DEEP=1, so the suite's share stays near a minute; it passed with 0 failures too.
DEEP = os.environ.get("TIERLOG_FUZZ_DEEP") == "1"
SCHEMA.config.phases.coverage.enabled = DEEP
SCHEMA.config.checks.positive_data_acceptance = PositiveDataAcceptanceConfig(
    expected_statuses=["2xx", "404", "409", "416"]
)
# operationId -> why a schema-valid request may still be refused with 400/422 (documented answers).
STATE_OR_VALUE_RULES = {
    "createTopic": "the name exists, or a config value breaks its config's rule or a combination rule",
    "updatePartitionCount": "fewer partitions than the topic has now",
    "alterTopicConfigs": "a value breaks its config's rule or a combination rule",
    "updateTopicConfig": "a value breaks its config's rule or a combination rule",
    "nativeProduceBatches": "the body must be Kafka v2 record batches (CRC-checked): no schema says so",
    "nativeJoinGroup": "a topic pattern must be a valid regular expression",
    "v2Subscribe": "a topic pattern must be a valid regular expression",
    "v2CreateConsumer": "the instance name is taken in its group",
    "nativeCommitOffsets": "a committed partition must exist (422 names it)",
}


def _accepted_unless_state(ctx: CheckContext, response: Any, case: Case[Any]) -> bool | None:
    """``positive_data_acceptance``, except for the operations of :data:`STATE_OR_VALUE_RULES`."""
    if case.operation.definition.raw.get("operationId") in STATE_OR_VALUE_RULES:
        return None
    accepted: bool | None = positive_data_acceptance(ctx, response, case)
    return accepted


CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    _accepted_unless_state,
]
# Clamped inputs: (where, name) -> (the value sent instead, the documented maximum). Only valid values are
# lowered (to another valid one); one over the maximum is sent as it is, to be refused.
_CLAMPS = {
    ("body", "partitions_count"): (3, 10_000),
    ("body", "rebalance_timeout_ms"): (50, 2**63),
    ("body", "consumer.request.timeout.ms"): (50, MAX_REQUEST_TIMEOUT_MS),
    ("query", "timeout"): (50, MAX_REQUEST_TIMEOUT_MS),
    ("query", "max_wait_ms"): (50, MAX_WAIT_MS),
    ("query", "timeout_ms"): (50, MAX_PRODUCE_TIMEOUT_MS),
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The broker's URL and cluster id."""
    data_dir = tmp_path_factory.mktemp("fuzz")
    broker = BrokerThread(broker_settings(data_dir, {"num.partitions": "1"}))
    try:
        cluster = requests.get(f"{broker.url}/v3/clusters", timeout=10).json()["data"][0]["cluster_id"]
        yield broker.url, cluster
    finally:
        broker.close()


_INSTANCE = {"group": "fuzz", "instance": "fuzz"}


def _on_live_instance(case: Case[Any], broker_url: str) -> None:
    """Point a consumer-instance operation at a live instance (recreated if a fuzzed DELETE removed it), so
    its generated bodies reach the body checks instead of a 404."""
    if case.path_parameters is None or "instance" not in case.path_parameters:
        return
    case.path_parameters.update(_INSTANCE)
    created = requests.post(
        f"{broker_url}/consumers/fuzz",
        json={"name": "fuzz", "format": "binary", "consumer.request.timeout.ms": 10},
        headers={"Content-Type": "application/vnd.kafka.v2+json"},
        timeout=10,
    )
    assert created.status_code in (200, 409), created.text


_JOINS = itertools.count()


def _join_alone(case: Case[Any]) -> None:
    """Send each join with a valid group id to a group of its own: a join into a group whose earlier
    (generated) members never rejoin waits out their rebalance timeout, Kafka's rule, not a fault."""
    group = (case.path_parameters or {}).get("group")
    if (
        case.path.endswith("/join")
        and isinstance(group, str)
        and re.fullmatch(r"[^\x00-\x1f\x7f]{1,255}", group)
    ):
        case.path_parameters = {**(case.path_parameters or {}), "group": f"join-{next(_JOINS)}"}


def _clamp(case: Case[Any]) -> None:
    for (where, name), (low, high) in _CLAMPS.items():
        container: Any = case.body if where == "body" else case.query
        if isinstance(container, dict):
            value = container.get(name)
            if isinstance(value, str) and value.isdigit():  # query values may come as text
                value = int(value)
            if isinstance(value, int) and not isinstance(value, bool) and low < value <= high:
                container[name] = low


@SCHEMA.parametrize()
@settings(
    max_examples=2,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
)
def test_every_operation_conforms(case: Case[Any], broker: tuple[str, str]) -> None:
    url, cluster = broker
    if case.path_parameters is not None and "cluster_id" in case.path_parameters:
        case.path_parameters["cluster_id"] = cluster
    _clamp(case)
    _join_alone(case)
    _on_live_instance(case, url)
    case.call_and_validate(base_url=url, checks=CHECKS, timeout=10)
