"""npm ``kafka-rest`` 0.0.5, Confluent's Node.js wrapper for REST Proxy v1, unchanged, against a real broker:
100 records produced through ``Topic.produce`` and read back through its consumer API (a consumer instance
joined to a group, a stream subscribed to the topic), committed, and the instance shut down.

What the library sends (lib/client.js, lib/topics.js, lib/consumers.js):

* every request: ``Accept: application/vnd.kafka.v1+json, application/vnd.kafka+json; q=0.9,
  application/json; q=0.8`` unless said otherwise;
* produce: ``POST /topics/{topic}``, ``Content-Type: application/vnd.kafka.v1+json``, base64 keys and values;
* consumer instance: ``POST /consumers/{group}``, ``Content-Type: application/vnd.kafka.v1+json``, the
  configuration as the body;
* reads: the v1 route ``GET {base_uri}/topics/{topic}``, ``Accept: application/vnd.kafka.binary.v1+json``;
* commit: ``POST {base_uri}/offsets`` without a body; shutdown: ``DELETE {base_uri}``.
"""

from __future__ import annotations

import json

import pytest

from tests.compat.clients import committed_offsets, run_node
from tests.compat.install import NodeEnv

pytestmark = pytest.mark.integration

COUNT = 100


def test_produces_and_consumes_100_records(node_env: NodeEnv, broker_url: str) -> None:
    topic, group = "node-kafka-rest", "node-kafka-rest-group"
    run = run_node(node_env, "roundtrip.js", broker_url, topic, group, str(COUNT))
    assert run.returncode == 0 and run.report["error"] is None, run.explain()

    produced = run.report["produced"]
    assert len(produced) == COUNT, run.explain()
    assert all(p["error_code"] is None and p["partition"] == 0 for p in produced), produced
    assert [p["offset"] for p in produced] == list(range(COUNT))

    consumed = run.report["consumed"]
    assert len(consumed) == COUNT, run.explain()
    for n, record in enumerate(consumed):
        assert record["key"] == f"key-{n}"
        assert json.loads(record["value"]) == {"n": n, "text": f"record {n}"}
        assert (record["partition"], record["offset"]) == (0, n)

    assert run.report["shutdown"] == "ok"
    assert committed_offsets(broker_url, group) == {(topic, 0): COUNT}

    # The library spoke v1 throughout, as documented above: these are the requests the broker accepted.
    create = next(ex for ex in run.trace if ex["method"] == "POST" and ex["path"] == f"/consumers/{group}")
    assert create["headers"]["Content-Type"] == "application/vnd.kafka.v1+json"
    assert create["status"] == 200 and create["content_type"].startswith("application/vnd.kafka.v1+json")
    instance = json.loads(create["response"])
    reads = [ex for ex in run.trace if ex["method"] == "GET"]
    assert reads and all(
        ex["path"].endswith(f"/instances/{instance['instance_id']}/topics/{topic}") for ex in reads
    )
    assert all(ex["headers"]["Accept"] == "application/vnd.kafka.binary.v1+json" for ex in reads)
    assert all(ex["status"] == 200 for ex in reads), run.explain()
    assert [ex["method"] for ex in run.trace][-1] == "DELETE" and run.trace[-1]["status"] == 204
