"""PyPI ``kafka-rest`` 0.0.12 (``kafka_rest.client.KafkaRESTClient``), an asynchronous Avro-only producer for
REST Proxy v1, unchanged but for the Python 3 shims of ``python/compat_shims.py``.

It sends ``POST /topics/{topic}`` with ``Content-Type: application/vnd.kafka.avro.v1+json``, ``Accept:
application/vnd.kafka.v1+json`` and ``{"records": [{"value", "key": null, "partition": null}, ...],
"value_schema": "<schema JSON>"}``. Until tierlog has a schema registry the broker answers what Confluent REST
Proxy 7.x answers without one: 422 with error code 42206, "Payload error. Schema Registry must be configured
when using schemas." The library treats that code as final, so it drops the messages instead of retrying them.
"""

from __future__ import annotations

import json

import pytest

from tests.compat.clients import http_json, run_python
from tests.compat.install import PythonEnv

pytestmark = pytest.mark.integration

COUNT = 5
SCHEMA_REGISTRY_REQUIRED = "Payload error. Schema Registry must be configured when using schemas."


def test_avro_produce_gets_the_schema_registry_error(python_env: PythonEnv, broker_url: str) -> None:
    topic = "kafka-rest-avro"
    run = run_python(
        python_env, "kafka_rest_produce.py", "--url", broker_url, "--topic", topic, "--count", str(COUNT)
    )
    assert run.returncode == 0 and run.report["error"] is None, run.explain()

    # One request carrying every message, refused whole with Confluent's status, code, message and media type.
    assert len(run.trace) == 1, run.explain()
    (exchange,) = run.trace
    assert (exchange["method"], exchange["url"]) == ("POST", f"{broker_url}/topics/{topic}")
    assert exchange["headers"]["Content-Type"] == "application/vnd.kafka.avro.v1+json"
    assert json.loads(exchange["body"])["value_schema"], "the library sent its schema"
    assert exchange["status"] == 422, run.explain()
    assert exchange["content_type"].startswith("application/vnd.kafka.v1+json"), run.explain()
    error = json.loads(exchange["response"])
    assert error["error_code"] == 42206
    assert error["message"].startswith(SCHEMA_REGISTRY_REQUIRED)

    # The library took the answer as final: every message dropped as non-retriable, none retried or sent.
    events = run.report["events"]
    assert {e["event"] for e in events} == {"drop_message"}, events
    assert all(e["args"] == [topic, "nonretriable"] for e in events), events
    assert sorted(v["n"] for e in events for v in e["values"]) == list(range(COUNT))

    # Nothing was stored.
    status, _, body = http_json("GET", f"{broker_url}/topics/{topic}/partitions/0/offsets")
    assert status == 404 or (status == 200 and body["end_offset"] == 0), body
