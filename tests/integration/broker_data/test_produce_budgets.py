"""Bounded memory under hostile produce load: REST conversion and acks=0 byte budgets, early REST limits.

Every assertion is on the budget's answers and accounting, never on timing or RSS.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
from collections.abc import AsyncIterator

import pytest

from tests.integration.broker import Client
from tests.integration.broker_data.conftest import MakeClient
from tests.integration.broker_data.helpers import BATCHES, BINARY, JSON, as_stored, b64, expect_error
from tierlog.service.rest_v2.convert import CONVERSION_BYTES_PER_RECORD, conversion_estimate
from tierlog.service.web.budget import ACKS0_BUDGET, CONVERSION_BUDGET
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record

KiB = 1024
TOPIC_PATH = "/topics/t/partitions/0"
NATIVE = "/native/v1/topics/t/partitions/0/batches"


def rest_body(count: int, value_size: int) -> bytes:
    value = b64(b"x" * value_size)
    return json.dumps({"records": [{"value": value} for _ in range(count)]}).encode()


async def post_rest(client: Client, body: bytes) -> tuple[int, dict[str, object]]:
    response = await client.post(TOPIC_PATH, data=io.BytesIO(body), headers={"Content-Type": BINARY})
    return response.status, await response.json(content_type=None)


async def test_a_full_conversion_budget_answers_503_then_admits_again(make_client: MakeClient) -> None:
    client = await make_client(**{"rest.produce.conversion.max.bytes": str(256 * KiB)})
    budget = client.app[CONVERSION_BUDGET]
    body = rest_body(10, 1000)
    budget.acquire(256 * KiB)
    await expect_error(await client.post(TOPIC_PATH, data=body, headers={"Content-Type": BINARY}), 503, 50301)
    assert budget.refused == 1
    budget.release(256 * KiB)
    status, answer = await post_rest(client, body)
    assert status == 200, answer
    assert budget.in_use == 0


async def test_concurrent_large_bodies_are_refused_not_queued(make_client: MakeClient) -> None:
    body = rest_body(300, 1000)  # about 400 KiB of JSON each
    estimate = conversion_estimate(body, 100_000)  # what one conversion holds once its body is read
    limit = 2 * estimate
    client = await make_client(**{"rest.produce.conversion.max.bytes": str(limit)})
    budget = client.app[CONVERSION_BUDGET]
    answers = await asyncio.gather(*(post_rest(client, body) for _ in range(8)))
    statuses = [status for status, _ in answers]
    assert set(statuses) <= {200, 503}, answers
    assert all(a["error_code"] == 50301 for s, a in answers if s == 503)
    assert 200 in statuses
    assert budget.refused == statuses.count(503)
    assert budget.peak <= limit + estimate  # the oldest request may grow past the limit, one at a time
    assert budget.in_use == 0


async def test_record_count_and_batch_size_are_refused_before_conversion(make_client: MakeClient) -> None:
    client = await make_client(**{"rest.produce.max.records": "1000"})
    status, answer = await post_rest(client, json.dumps({"records": [{}] * 1001}).encode())
    assert (status, answer["error_code"]) == (422, 422), answer
    assert "rest.produce.max.records=1000" in str(answer["message"])
    status, answer = await post_rest(client, rest_body(600, 2000))  # about 1.2 MB of values for 1 partition
    assert (status, answer["error_code"]) == (413, 41301), answer
    assert "need at least" in str(answer["message"])
    assert client.app[CONVERSION_BUDGET].in_use == 0


async def test_acks0_budget_refuses_when_full_and_gives_bytes_back(make_client: MakeClient) -> None:
    client = await make_client(**{"queued.max.request.bytes": str(64 * KiB)})
    budget = client.app[ACKS0_BUDGET]
    body = build_batch([Record(None, b"v" * 100)] * 10)
    budget.acquire(64 * KiB)
    response = await client.post(NATIVE, data=body, params={"acks": "0"}, headers={"Content-Type": BATCHES})
    await expect_error(response, 503, 50301)
    budget.release(64 * KiB)

    response = await client.post(NATIVE, data=body, params={"acks": "0"}, headers={"Content-Type": BATCHES})
    assert response.status == 202, await response.text()
    fetched = await client.get(NATIVE, params={"offset": "0", "max_wait_ms": "30000", "min_bytes": "1"})
    assert await fetched.read() == as_stored(body)  # only the second body was appended
    assert budget.in_use == 0
    assert budget.peak == 64 * KiB


def null_records(count: int) -> bytes:
    return b'{"records":[' + b",".join([b'{"value":null}'] * count) + b"]}"


async def test_600k_records_are_refused_at_the_limit_within_a_bounded_hold(make_client: MakeClient) -> None:
    """Issue 11: the walk stops at record 100001, and the hold never counts the records past it."""
    client = await make_client()
    budget = client.app[CONVERSION_BUDGET]
    body = null_records(600_000)  # about 9 MB, under max.request.size
    status, answer = await post_rest(client, body)
    assert (status, answer["error_code"]) == (422, 422), answer
    assert "more than rest.produce.max.records=100000" in str(answer["message"])
    assert budget.peak <= 2 * len(body) + 100_001 * CONVERSION_BYTES_PER_RECORD
    assert budget.in_use == 0


async def test_health_answers_while_a_large_body_converts(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The conversion runs in a worker thread that gives the GIL up between records: a /health request
    sent once the conversion has begun is answered before the produce request."""
    client = await make_client(**{"rest.produce.max.records": "1000000", "max.request.size": str(32 << 20)})
    budget = client.app[CONVERSION_BUDGET]
    body = null_records(600_000)
    converting = asyncio.Event()
    resize = budget.resize

    def resize_and_tell(held: int, size: int, *, oldest: bool = False) -> None:
        resize(held, size, oldest=oldest)
        if size > len(body):  # the hold grew to the estimate: the body is read, conversion begins
            converting.set()

    monkeypatch.setattr(budget, "resize", resize_and_tell)
    produce = asyncio.ensure_future(
        client.post(TOPIC_PATH, data=io.BytesIO(body), headers={"Content-Type": JSON})
    )
    began = asyncio.ensure_future(converting.wait())
    await asyncio.wait([produce, began], return_when=asyncio.FIRST_COMPLETED)
    assert converting.is_set() and not produce.done()
    health = await client.get("/health")
    assert health.status == 200
    assert not produce.done()  # /health did not wait for the conversion
    response = await produce
    assert response.status == 413, await response.text()  # 600k records cannot fit max.message.bytes
    assert budget.in_use == 0


async def test_a_chunked_body_is_held_chunk_by_chunk(make_client: MakeClient) -> None:
    client = await make_client(**{"max.request.size": str(64 * KiB)})
    budget = client.app[CONVERSION_BUDGET]
    body = rest_body(20, 1000)

    async def chunks(data: bytes) -> AsyncIterator[bytes]:
        for start in range(0, len(data), 4096):
            yield data[start : start + 4096]

    response = await client.post(TOPIC_PATH, data=chunks(body), headers={"Content-Type": BINARY})
    assert response.status == 200, await response.text()
    assert budget.peak >= len(body) and budget.in_use == 0
    too_large = chunks(rest_body(100, 1000))  # over max.request.size: cut off while it arrives
    await expect_error(
        await client.post(TOPIC_PATH, data=too_large, headers={"Content-Type": BINARY}), 413, 41301
    )
    assert budget.in_use == 0


async def test_a_compressed_body_is_held_and_limited_as_it_decompresses(make_client: MakeClient) -> None:
    """A body sent with Content-Encoding: gzip arrives decompressed, larger than its Content-Length: the
    budget holds what arrives and max.request.size applies to it, as to any body."""
    client = await make_client(**{"max.request.size": str(64 * KiB)})
    budget = client.app[CONVERSION_BUDGET]
    body = rest_body(20, 1000)  # about 27 KB of text, a few hundred bytes gzipped
    gzipped = gzip.compress(body)
    headers = {"Content-Type": BINARY, "Content-Encoding": "gzip"}
    response = await client.post(TOPIC_PATH, data=gzipped, headers=headers)
    assert response.status == 200, await response.text()
    assert len((await response.json(content_type=None))["offsets"]) == 20
    assert budget.peak >= len(body) > len(gzipped) and budget.in_use == 0
    bomb = gzip.compress(rest_body(100, 1000))  # about 135 KB once decompressed, over the limit
    await expect_error(await client.post(TOPIC_PATH, data=bomb, headers=headers), 413, 41301)
    assert budget.in_use == 0
    assert (await client.get("/health")).status == 200
