"""REST v2 produce: partitioning, conversion, whole-request validation, and the bytes on disk."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.integration.broker import Client
from tests.integration.broker_data.conftest import MakeClient
from tests.integration.broker_data.helpers import (
    BINARY,
    JSON,
    b64,
    end_offset,
    expect_error,
    produce,
    segment_records,
)
from tierlog.service.web.keys import BROKER
from tierlog.tiering.codec.partitioner import partition_for_key


async def test_binary_produce_keyed_records_land_where_kafka_puts_them(client: Client) -> None:
    keys = [f"user-{i}".encode() for i in range(12)]
    answer = await produce(client, "/topics/keyed", [{"key": b64(k), "value": b64(b"v" + k)} for k in keys])
    assert answer["key_schema_id"] is None and answer["value_schema_id"] is None
    offsets = answer["offsets"]
    assert len(offsets) == len(keys)
    next_offset = {0: 0, 1: 0, 2: 0}
    for key, entry in zip(keys, offsets, strict=True):
        partition = partition_for_key(key, 3)
        assert entry == {
            "partition": partition,
            "offset": next_offset[partition],
            "error_code": None,
            "error": None,
        }
        next_offset[partition] += 1
    for partition, expected in next_offset.items():
        assert await end_offset(client, "keyed", partition) == expected


async def test_json_produce_writes_valid_v2_batches_one_per_partition(client: Client, data_dir: Path) -> None:
    records: list[dict[str, Any]] = [
        {"key": {"id": 1}, "value": {"name": "ada", "tags": ["x", None]}, "partition": 2},
        {"key": None, "value": [1, 2.5, "é"], "partition": 2},
        {"key": "k", "value": None, "partition": 0},
    ]
    answer = await produce(client, "/topics/docs", records, content_type=JSON)
    assert [(o["partition"], o["offset"]) for o in answer["offsets"]] == [(2, 0), (2, 1), (0, 0)]
    on_disk = segment_records(data_dir, "docs", 2)
    assert len(on_disk) == 1
    assert [(r.key, r.value, r.offset) for r in on_disk[0]] == [
        (b'{"id":1}', b'{"name":"ada","tags":["x",null]}', 0),
        (None, '[1,2.5,"é"]'.encode(), 1),
    ]
    assert [(r.key, r.value) for r in segment_records(data_dir, "docs", 0)[0]] == [(b'"k"', None)]


async def test_keyless_records_stick_to_one_partition_per_request(client: Client) -> None:
    seen = []
    for _ in range(4):
        answer = await produce(client, "/topics/sticky", [{"value": b64(bytes([i]))} for i in range(5)])
        partitions = {entry["partition"] for entry in answer["offsets"]}
        assert len(partitions) == 1
        seen.append(partitions.pop())
    assert all(a != b for a, b in itertools.pairwise(seen))


async def test_partition_route_and_topic_auto_creation(client: Client, data_dir: Path) -> None:
    answer = await produce(client, "/topics/direct/partitions/1", [{"value": b64(b"a")}, {"key": b64(b"k")}])
    assert [(o["partition"], o["offset"]) for o in answer["offsets"]] == [(1, 0), (1, 1)]
    assert [(r.key, r.value) for r in segment_records(data_dir, "direct", 1)[0]] == [
        (None, b"a"),
        (b"k", None),
    ]


async def test_unsupported_content_type_is_415(client: Client) -> None:
    # application/json is accepted as binary since issue 12, as the v1 API and Karapace read it
    for content_type in ("text/plain", "application/octet-stream", "application/vnd.kafka.binary.v3+json"):
        response = await client.post(
            "/topics/t", data='{"records":[{"value":null}]}', headers={"Content-Type": content_type}
        )
        await expect_error(response, 415, 41501)
    assert await (await client.get("/topics")).json(content_type=None) == []


async def test_unacceptable_accept_on_produce_is_406(client: Client) -> None:
    response = await client.post(
        "/topics/t",
        data='{"records":[{"value":null}]}',
        headers={"Content-Type": BINARY, "Accept": "text/html"},
    )
    await expect_error(response, 406, 40601)


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        '{"records": [{"value": "YQ=="}, {"value": "%%%"}]}',
        '{"records": [{"value": "YQ=="}, {"value": "YQ==", "partition": "0"}]}',
    ],
)
async def test_malformed_requests_are_400_and_append_nothing(client: Client, body: str) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"first")}])
    response = await client.post("/topics/t/partitions/0", data=body, headers={"Content-Type": BINARY})
    await expect_error(response, 400, 40001)
    assert await end_offset(client, "t", 0) == 1


async def test_unknown_partition_rejects_the_whole_request(client: Client) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"first")}])
    body = json.dumps(
        {"records": [{"value": b64(b"ok"), "partition": 0}, {"value": b64(b"no"), "partition": 3}]}
    )
    await expect_error(
        await client.post("/topics/t", data=body, headers={"Content-Type": BINARY}), 404, 40402
    )
    await expect_error(
        await client.post("/topics/t/partitions/9", data=body, headers={"Content-Type": BINARY}), 404, 40402
    )
    assert await end_offset(client, "t", 0) == 1


async def test_schema_formats_answer_42201_and_42202(client: Client) -> None:
    avro = {"Content-Type": "application/vnd.kafka.avro.v2+json"}
    keyed = json.dumps({"records": [{"key": 1, "value": {"a": 1}}]})
    await expect_error(await client.post("/topics/t", data=keyed, headers=avro), 422, 42201)
    with_key_schema = json.dumps({"key_schema_id": 1, "records": [{"key": 1, "value": {"a": 1}}]})
    await expect_error(await client.post("/topics/t", data=with_key_schema, headers=avro), 422, 42202)
    both = json.dumps({"key_schema_id": 1, "value_schema_id": 2, "records": [{"key": 1, "value": {"a": 1}}]})
    # issue 12: Confluent's status and code for "Schema Registry must be configured" (was 415/41501)
    await expect_error(await client.post("/topics/t", data=both, headers=avro), 422, 42206)


async def test_body_over_max_request_size_is_413(make_client: MakeClient) -> None:
    client = await make_client(**{"max.request.size": "2048"})
    records = [{"value": b64(b"x" * 3000)}]
    response = await client.post(
        "/topics/t", data=json.dumps({"records": records}), headers={"Content-Type": BINARY}
    )
    await expect_error(response, 413, 41301)
    assert await (await client.get("/topics")).json(content_type=None) == []


async def test_chunked_body_over_max_request_size_is_413(make_client: MakeClient) -> None:
    client = await make_client(**{"max.request.size": "2048"})
    body = json.dumps({"records": [{"value": b64(b"x" * 3000)}]}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 500):
            yield body[start : start + 500]

    response = await client.post("/topics/t", data=chunks(), headers={"Content-Type": BINARY})
    assert response.request_info.headers.get("Transfer-Encoding") == "chunked"
    await expect_error(response, 413, 41301)
    assert await (await client.get("/topics")).json(content_type=None) == []


async def test_batch_over_max_message_bytes_is_413_and_appends_nothing(client: Client) -> None:
    await client.app[BROKER].create_topic("small", 2, {"max.message.bytes": "1000"})
    records = [{"value": b64(b"tiny"), "partition": 0}, {"value": b64(b"x" * 2000), "partition": 1}]
    response = await client.post(
        "/topics/small", data=json.dumps({"records": records}), headers={"Content-Type": BINARY}
    )
    await expect_error(response, 413, 41301)
    assert await end_offset(client, "small", 0) == 0


async def test_auto_create_disabled_is_40401(make_client: MakeClient) -> None:
    client = await make_client(**{"auto.create.topics.enable": "false"})
    response = await client.post(
        "/topics/t", data='{"records":[{"value":null}]}', headers={"Content-Type": BINARY}
    )
    await expect_error(response, 404, 40401)


async def test_a_bad_body_is_400_before_a_missing_topic_is_404(make_client: MakeClient) -> None:
    client = await make_client(**{"auto.create.topics.enable": "false"})
    response = await client.post("/topics/missing", data="{not json", headers={"Content-Type": BINARY})
    await expect_error(response, 400, 40001)
    assert await (await client.get("/topics")).json(content_type=None) == []


async def test_a_large_body_for_an_existing_topic_takes_one_worker_hand_over(client: Client) -> None:
    """A body over OFFLOAD_BYTES for a topic that exists is parsed and converted in one job of the
    default executor (the log append has its own pool); two before, as a new topic still takes."""
    jobs: list[str] = []

    class Counting(ThreadPoolExecutor):
        def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
            jobs.append(getattr(fn, "__name__", repr(fn)))
            return super().submit(fn, *args, **kwargs)

    # the loop's default executor from now on (the loop shuts it down when it closes)
    asyncio.get_running_loop().set_default_executor(Counting(max_workers=2))
    records = [{"value": b64(b"v" * 1024)} for _ in range(100)]  # a body over OFFLOAD_BYTES
    await client.app[BROKER].create_topic("existing", 1)
    jobs.clear()
    answer = await produce(client, "/topics/existing/partitions/0", records)
    assert [o["offset"] for o in answer["offsets"]] == list(range(100))
    assert len(jobs) == 1, jobs
