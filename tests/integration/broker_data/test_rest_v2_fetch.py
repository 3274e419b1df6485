"""Pandaproxy-style records fetch: formats, offsets, bounds, long polling and errors."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.integration.broker import Client
from tests.integration.broker_data.helpers import (
    BATCHES,
    BINARY,
    JSON,
    b64,
    expect_error,
    produce,
)

RECORDS = "/topics/t/partitions/0/records"


async def fetch(client: Client, accept: str, **params: int) -> list[dict[str, object]]:
    response = await client.get(
        RECORDS, params={k: str(v) for k, v in params.items()}, headers={"Accept": accept}
    )
    assert response.status == 200, await response.text()
    assert response.content_type == (JSON if accept == JSON else BINARY)
    records: list[dict[str, object]] = await response.json(content_type=None)
    return records


async def test_json_and_binary_formats(client: Client) -> None:
    values = [{"n": 1}, [1, "two"], None]
    await produce(
        client, "/topics/t/partitions/0", [{"key": "k", "value": v} for v in values], content_type=JSON
    )
    as_json = await fetch(client, JSON, offset=0, timeout=0)
    assert as_json == [
        {"topic": "t", "key": "k", "value": v, "partition": 0, "offset": i} for i, v in enumerate(values)
    ]
    as_binary = await fetch(client, BINARY, offset=0, timeout=0)
    assert [(r["key"], r["value"]) for r in as_binary] == [
        (b64(b'"k"'), b64(b'{"n":1}')),
        (b64(b'"k"'), b64(b'[1,"two"]')),
        (b64(b'"k"'), None),
    ]


async def test_records_before_the_offset_are_skipped(client: Client) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(bytes([i]))} for i in range(5)])
    records = await fetch(client, BINARY, offset=3, timeout=0)
    assert [r["offset"] for r in records] == [3, 4]
    assert await fetch(client, BINARY, offset=5, timeout=0) == []


async def test_max_bytes_bounds_the_batches_read(client: Client) -> None:
    for request in range(3):
        await produce(client, "/topics/t/partitions/0", [{"value": b64(bytes([request]) * 100)}] * 4)
    first = await fetch(client, BINARY, offset=0, timeout=0, max_bytes=1)
    assert [r["offset"] for r in first] == [0, 1, 2, 3]
    everything = await fetch(client, BINARY, offset=0, timeout=0, max_bytes=1 << 20)
    assert [r["offset"] for r in everything] == list(range(12))


async def test_long_poll_wakes_up_on_produce(client: Client) -> None:
    """The fetch may wait up to 5 minutes: only the produce can end it before pytest's timeout does."""
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"old")}])
    waiting = asyncio.create_task(fetch(client, BINARY, offset=1, timeout=300_000))
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"new")}])
    records = await waiting
    assert [(r["offset"], r["value"]) for r in records] == [(1, b64(b"new"))]


async def test_offset_out_of_range_reports_the_range(client: Client) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"a")}, {"value": b64(b"b")}])
    response = await client.get(RECORDS, params={"offset": "7", "timeout": "0"}, headers={"Accept": BINARY})
    body = await expect_error(response, 416, 41601)
    assert (body["log_start_offset"], body["log_end_offset"]) == (0, 2)


async def test_record_that_is_not_json_fails_a_json_fetch(client: Client) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"plain text")}])
    response = await client.get(RECORDS, params={"offset": "0", "timeout": "0"}, headers={"Accept": JSON})
    await expect_error(response, 422, 42202)
    await produce(client, "/topics/t/partitions/0", [{"key": b64(b"\xff"), "value": b64(b"1")}])
    response = await client.get(RECORDS, params={"offset": "1", "timeout": "0"}, headers={"Accept": JSON})
    await expect_error(response, 422, 42201)


@pytest.mark.parametrize("accept", ["application/vnd.kafka.avro.v2+json", "text/html", BATCHES])
async def test_unservable_accept_is_406(client: Client, accept: str) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"a")}])
    response = await client.get(RECORDS, params={"offset": "0"}, headers={"Accept": accept})
    await expect_error(response, 406, 40601)


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"offset": "x"},
        {"offset": "-1"},
        {"offset": "0", "timeout": "-5"},
        {"offset": "0", "max_bytes": "0"},
    ],
)
async def test_bad_query_parameters_are_400(client: Client, params: dict[str, str]) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"a")}])
    await expect_error(await client.get(RECORDS, params=params, headers={"Accept": BINARY}), 400, 40001)


async def test_unknown_topic_and_partition(client: Client) -> None:
    response = await client.get("/topics/nope/partitions/0/records", params={"offset": "0"})
    await expect_error(response, 404, 40401)
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"a")}])
    response = await client.get("/topics/t/partitions/5/records", params={"offset": "0"})
    await expect_error(response, 404, 40402)


async def test_fetch_counts_records_out(client: Client) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"a")}, {"value": b64(b"b")}])
    await fetch(client, BINARY, offset=0, timeout=0)
    metrics = await (await client.get("/metrics")).text()
    line = next(x for x in metrics.splitlines() if x.startswith("tierlog_records_out_total{"))
    assert 'topic="t"' in line and line.endswith(" 2")


async def test_corrupt_data_on_disk_is_50002(client: Client, data_dir: Path) -> None:
    await produce(client, "/topics/t/partitions/0", [{"value": b64(b"v" * 200)}])
    segment = data_dir / "t-0" / f"{0:020d}.log"
    data = bytearray(segment.read_bytes())
    data[-50] ^= 0xFF
    segment.write_bytes(bytes(data))
    response = await client.get(RECORDS, params={"offset": "0", "timeout": "0"}, headers={"Accept": BINARY})
    await expect_error(response, 500, 50002)
