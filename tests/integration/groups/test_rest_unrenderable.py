"""A REST v2 json consumer meeting a record it cannot render (a value that is not JSON), on a real broker:
the 422 names the record, the position stays on it, a commit covers only delivered records, and a seek
gets past it."""

from __future__ import annotations

import base64
import json
from typing import Any

from tests.integration.broker import Client
from tests.integration.groups.helpers import BINARY, JSON, call, create_topic, rest_consumer

GOOD = ['{"n":0}', '{"n":1}', '{"n":2}']


async def produce_raw(client: Client, partition: int, values: list[bytes]) -> None:
    records = [{"value": base64.b64encode(v).decode()} for v in values]
    await call(
        client,
        "POST",
        f"/topics/t/partitions/{partition}",
        {"records": records},
        headers={"Content-Type": BINARY},
    )


async def fetch(client: Client, base: str) -> tuple[int, Any]:
    response = await client.get(f"{base}/records?timeout=0", headers={"Accept": JSON})
    return response.status, json.loads(await response.text())


async def poll_until_error(client: Client, base: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Poll (at most six times) until a 422; returns the records delivered before it and the error."""
    delivered: list[dict[str, Any]] = []
    for _ in range(6):
        status, body = await fetch(client, base)
        if status == 422:
            return delivered, body
        assert status == 200, body
        delivered.extend(body)
    raise AssertionError(f"no 422 after six polls; delivered {delivered}")


async def committed(client: Client, base: str) -> dict[int, int]:
    partitions = [{"topic": "t", "partition": p} for p in (0, 1)]
    got = await call(client, "GET", f"{base}/offsets", {"partitions": partitions})
    return {o["partition"]: o["offset"] for o in got["offsets"]}


async def test_unrenderable_record_is_never_committed_and_a_seek_passes_it(client: Client) -> None:
    await create_topic(client, "t", 2)
    await produce_raw(client, 0, [v.encode() for v in GOOD])
    await produce_raw(client, 1, [b'{"n":10}', b"\xffnot json", b'{"n":12}'])
    base = await rest_consumer(
        client, "g", "c", format="json", **{"auto.commit.enable": "false", "auto.offset.reset": "earliest"}
    )
    partitions = [{"topic": "t", "partition": p} for p in (0, 1)]
    await call(client, "POST", f"{base}/assignments", {"partitions": partitions}, status=204)

    delivered, error = await poll_until_error(client, base)
    # every renderable record before the bad one was delivered, from both partitions
    assert sorted((r["partition"], r["offset"]) for r in delivered) == [(0, 0), (0, 1), (0, 2), (1, 0)]
    assert error["error_code"] == 42202
    assert "t-1" in error["message"] and "offset 1" in error["message"], error
    # the position stays on the record: the next poll answers the same 422
    status, again = await fetch(client, base)
    assert (status, again) == (422, error)

    # an empty-body commit covers only what was delivered: partition 1 stops at the bad record
    answer = await call(client, "POST", f"{base}/offsets", status=200)
    assert sorted((c["partition"], c["committed"]) for c in answer) == [(0, 3), (1, 1)]
    assert await committed(client, base) == {0: 3, 1: 1}

    # the documented way past it: seek (positions) to the next offset
    await call(
        client,
        "POST",
        f"{base}/positions",
        {"offsets": [{"topic": "t", "partition": 1, "offset": 2}]},
        status=204,
    )
    status, records = await fetch(client, base)
    assert status == 200
    assert [(r["partition"], r["offset"], r["value"]) for r in records] == [(1, 2, {"n": 12})]
    await call(client, "POST", f"{base}/offsets", status=200)
    assert await committed(client, base) == {0: 3, 1: 3}


async def test_records_before_the_bad_one_in_the_same_partition_are_delivered(client: Client) -> None:
    await create_topic(client, "t", 1)
    await produce_raw(client, 0, [b"1", b"2", b"not json", b"4"])
    base = await rest_consumer(
        client, "g", "c", format="json", **{"auto.commit.enable": "false", "auto.offset.reset": "earliest"}
    )
    await call(client, "POST", f"{base}/subscription", {"topics": ["t"]}, status=204)
    delivered, error = await poll_until_error(client, base)
    assert [(r["offset"], r["value"]) for r in delivered] == [(0, 1), (1, 2)]
    assert error["error_code"] == 42202 and "t-0" in error["message"] and "offset 2" in error["message"]
    answer = await call(client, "POST", f"{base}/offsets", status=200)
    assert answer == [{"topic": "t", "partition": 0, "consumed": 1, "committed": 2}]


async def test_positions_refuse_badly_typed_fields(client: Client) -> None:
    """The body types the OpenAPI document states are enforced: a timestamp given as an object, or commit
    metadata that is not a string, is 422 / 42204 and changes nothing."""
    await create_topic(client, "t", 1)
    base = await rest_consumer(client, "g", "c", **{"auto.commit.enable": "false"})
    await call(
        client, "POST", f"{base}/assignments", {"partitions": [{"topic": "t", "partition": 0}]}, status=204
    )
    bad_seek = {"timestamps": [{"topic": "t", "partition": 0, "timestamp": {"ms": 1}}]}
    answer = await call(client, "POST", f"{base}/positions", bad_seek, status=422)
    assert answer["error_code"] == 42204 and "timestamp" in answer["message"]
    bad_commit = {"offsets": [{"topic": "t", "partition": 0, "offset": 0, "metadata": {"x": 1}}]}
    answer = await call(client, "POST", f"{base}/offsets", bad_commit, status=422)
    assert answer["error_code"] == 42204 and "metadata" in answer["message"]
    got = await call(client, "GET", f"{base}/offsets", {"partitions": [{"topic": "t", "partition": 0}]})
    assert got["offsets"][0]["offset"] == -1, got
