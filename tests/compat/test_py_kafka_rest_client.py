"""PyPI ``kafka-rest-client`` 0.8.0 (``proofpoint.kafka.KafkaRestConsumer``), a REST Proxy v1 consumer,
unchanged but for the Python 3 shims of ``python/compat_shims.py``, reading back 100 records produced over v2.

What the library sends (proofpoint/kafka/KafkaRestConsumer.py): ``POST /consumers/{group}`` with
``Content-Type: application/vnd.kafka.json.v1+json``, ``Accept: application/json`` and ``{"name", "format",
"auto.offset.reset": "smallest", "auto.commit.enable": "false"}``; reads with the v1 route ``GET
/consumers/{group}/instances/{name}/topics/{topic}?max_bytes=N`` and ``Accept:
application/vnd.kafka.{format}.v1+json``; ``POST .../offsets`` with no body and ``Accept:
application/vnd.kafka.v1+json, application/vnd.kafka+json, application/json``; ``DELETE`` the instance. Every
request carries an OAuth2 bearer token the broker must ignore.
"""

from __future__ import annotations

import pytest

from tests.compat.clients import committed_offsets, http_json, run_python
from tests.compat.install import PythonEnv

pytestmark = pytest.mark.integration

COUNT = 100


def produce_v2(url: str, topic: str) -> list[dict[str, object]]:
    """``COUNT`` JSON values produced with plain REST Proxy v2 (embedded format json); returns them."""
    values: list[dict[str, object]] = [{"n": n, "label": f"reading-{n}"} for n in range(COUNT)]
    status, _, body = http_json(
        "POST",
        f"{url}/topics/{topic}",
        {"records": [{"value": value} for value in values]},
        content_type="application/vnd.kafka.json.v2+json",
        accept="application/vnd.kafka.v2+json",
    )
    assert status == 200, body
    assert [o["offset"] for o in body["offsets"]] == list(range(COUNT))
    return values


@pytest.mark.parametrize("fmt", ["binary", "json"])
def test_reads_back_100_records_produced_over_v2(python_env: PythonEnv, broker_url: str, fmt: str) -> None:
    topic, group, name = f"krc-{fmt}", f"krc-{fmt}-group", f"krc-{fmt}-instance"
    values = produce_v2(broker_url, topic)

    run = run_python(
        python_env,
        "krc_consume.py",
        *("--url", broker_url, "--group", group, "--name", name, "--topic", topic),
        *("--format", fmt, "--count", str(COUNT)),
    )
    assert run.returncode == 0 and run.report["error"] is None, run.explain()
    assert run.report["values"] == values, run.explain()
    assert committed_offsets(broker_url, group) == {(topic, 0): COUNT}

    # The exchanges were the v1 ones documented above, each answered with success.
    create, *rest = run.trace
    assert (create["method"], create["url"]) == ("POST", f"{broker_url}/consumers/{group}")
    assert create["headers"]["content-type"] == "application/vnd.kafka.json.v1+json"
    assert create["status"] == 200, run.explain()
    reads = [ex for ex in rest if ex["method"] == "GET"]
    read_url = f"{broker_url}/consumers/{group}/instances/{name}/topics/{topic}?max_bytes={1 << 20}"
    assert reads and all(ex["url"] == read_url and ex["status"] == 200 for ex in reads), run.explain()
    assert all(ex["headers"]["Accept"] == f"application/vnd.kafka.{fmt}.v1+json" for ex in reads)
    assert [(ex["method"], ex["status"]) for ex in rest if ex["method"] != "GET"] == [
        ("POST", 200),
        ("DELETE", 204),
    ]
