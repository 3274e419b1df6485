"""A broker child with a lowered open-files limit refuses creates and growths it cannot open, before it
writes anything, on the v3 API, REST v2's auto-create and the Kafka listener (issue 34)."""

from __future__ import annotations

import asyncio
import resource
from pathlib import Path
from typing import Any

import aiohttp
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewPartitions, NewTopic

from tests.integration.broker_core.test_process import serve
from tierlog.wire.errors import ResourceLimitError

WAIT_S = 30
LIMIT = 1000  # a few hundred partitions fit, thousands do not


async def post(session: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    async with session.post(url, json=body) as resp:
        return resp.status, await resp.json()


def kafka_error(call: Any) -> KafkaError:
    try:
        call()
    except KafkaException as err:
        error: KafkaError = err.args[0]
        return error
    raise AssertionError("the Kafka admin call succeeded")


async def test_creates_and_growths_past_the_fd_limit_are_refused_before_writing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with serve("--data-dir", str(data), "--num-partitions", "5000") as (child, url):
        kafka_port = (await child.wait_for_line(r"Kafka protocol listener on 127\.0\.0\.1:(\d+)")).group(1)
        soft, hard = resource.prlimit(child.proc.pid, resource.RLIMIT_NOFILE)
        resource.prlimit(child.proc.pid, resource.RLIMIT_NOFILE, (LIMIT, hard))
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/v3/clusters") as resp:
                cluster = (await resp.json())["data"][0]["cluster_id"]
            topics = f"{url}/v3/clusters/{cluster}/topics"

            status, answer = await post(session, topics, {"topic_name": "big", "partitions_count": 10_000})
            assert status == 400, answer
            assert answer["error_code"] == ResourceLimitError.code
            assert "RLIMIT_NOFILE" in answer["message"] and f"is {LIMIT}" in answer["message"]

            # REST v2's auto-create (num.partitions 5000 here) is refused the same way
            produce = {"records": [{"value": 1}]}
            headers = {"Content-Type": "application/vnd.kafka.json.v2+json"}
            async with session.post(f"{url}/topics/auto", json=produce, headers=headers) as resp:
                assert resp.status == 400
                assert (await resp.json())["error_code"] == ResourceLimitError.code

            status, answer = await post(session, topics, {"topic_name": "small", "partitions_count": 2})
            assert status == 201, answer
            async with session.patch(f"{topics}/small", json={"partitions_count": 5289}) as resp:
                grown = await resp.json()
                assert resp.status == 400, grown
            assert grown["error_code"] == ResourceLimitError.code
            assert "from 2 to 5289 partitions" in grown["message"]

            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "socket.timeout.ms": 10_000})

            def create() -> None:
                futures = admin.create_topics([NewTopic("kbig", 10_000)], request_timeout=WAIT_S)
                futures["kbig"].result(timeout=WAIT_S)

            def grow() -> None:
                futures = admin.create_partitions([NewPartitions("small", 5289)], request_timeout=WAIT_S)
                futures["small"].result(timeout=WAIT_S)

            for call in (create, grow):
                error = await asyncio.to_thread(kafka_error, call)
                assert error.code() == KafkaError.POLICY_VIOLATION, error
                assert "RLIMIT_NOFILE" in error.str()

            async with session.get(topics) as resp:
                names = {t["topic_name"] for t in (await resp.json())["data"]}
            async with session.get(f"{topics}/small/partitions") as resp:
                assert len((await resp.json())["data"]) == 2
        resource.prlimit(child.proc.pid, resource.RLIMIT_NOFILE, (soft, hard))
    assert "small" in names and not names & {"big", "auto", "kbig"}
    left = sorted(p.name for p in data.iterdir() if p.name.split("-")[0] in {"big", "auto", "kbig"})
    assert left == []  # nothing written for a refused create
    assert sorted(p.name for p in data.glob("small-*")) == ["small-0", "small-1"]
