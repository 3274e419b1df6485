"""Consumer instance semantics of Confluent's v2 API reference: commit answers, ``max_bytes``, seeking by
timestamp, exclusive subscriptions, and the fields of a consumed record."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.integration.broker import RunningBroker
from tests.integration.rest_compat.helpers import (
    BINARY_V2,
    assign,
    b64,
    consumer,
    produce_binary,
    send,
    unb64,
)
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record


async def read(node: RunningBroker, base: str, query: str = "timeout=0") -> list[dict[str, object]]:
    answer = await send(node.client, "GET", f"{base}/records?{query}", content_type=None, accept=BINARY_V2)
    assert answer.status == 200, answer.body
    records: list[dict[str, object]] = answer.body
    return records


async def test_commit_answers_the_committed_offsets(node: RunningBroker) -> None:
    client = node.client
    await produce_binary(client, "t", [b"a", b"b", b"c"])
    base = await consumer(client, "g", "c", **{"auto.commit.enable": "false"})
    await assign(client, base, "t")
    assert len(await read(node, base)) == 3
    everything = await send(client, "POST", f"{base}/offsets")
    assert (everything.status, everything.body) == (
        200,
        [{"topic": "t", "partition": 0, "consumed": 2, "committed": 3}],
    )
    explicit = await send(
        client, "POST", f"{base}/offsets", {"offsets": [{"topic": "t", "partition": 0, "offset": 0}]}
    )
    assert explicit.body == [{"topic": "t", "partition": 0, "consumed": 0, "committed": 1}]
    committed = await send(client, "GET", f"{base}/offsets", {"partitions": [{"topic": "t", "partition": 0}]})
    assert committed.body == {"offsets": [{"topic": "t", "partition": 0, "offset": 1, "metadata": ""}]}


async def test_max_bytes_counts_keys_and_values_per_record(node: RunningBroker) -> None:
    client = node.client
    await produce_binary(client, "t", [f"v{i}".encode() for i in range(10)])  # one batch, 2 bytes each
    base = await consumer(client, "g", "c")
    await assign(client, base, "t")
    first = await read(node, base, "timeout=0&max_bytes=10")
    assert [unb64(str(r["value"])) for r in first] == [b"v0", b"v1", b"v2", b"v3", b"v4"]
    second = await read(node, base, "timeout=0&max_bytes=5")
    assert [unb64(str(r["value"])) for r in second] == [b"v5", b"v6"]
    third = await read(node, base, "timeout=0&max_bytes=1")  # the first record always comes
    assert [unb64(str(r["value"])) for r in third] == [b"v7"]
    rest = await read(node, base)
    assert [unb64(str(r["value"])) for r in rest] == [b"v8", b"v9"]


async def test_positions_seek_by_timestamp(node: RunningBroker) -> None:
    client = node.client
    partition = (await node.broker.ensure_topic("t")).partition(0)
    moments = [datetime(2024, 1, d, tzinfo=UTC) for d in (1, 2, 3)]
    for day, moment in enumerate(moments, start=1):
        ms = int(moment.timestamp() * 1000)
        await partition.append(build_batch([Record(None, f"day{day}".encode(), timestamp=ms)]))
    base = await consumer(client, "g", "c")
    await assign(client, base, "t")
    body = {"timestamps": [{"topic": "t", "partition": 0, "timestamp": "2024-01-01T12:00:00Z"}]}
    assert (await send(client, "POST", f"{base}/positions", body)).status == 204
    assert [unb64(str(r["value"])) for r in await read(node, base)] == [b"day2", b"day3"]
    later = {"timestamps": [{"topic": "t", "partition": 0, "timestamp": "2030-01-01T00:00:00Z"}]}
    assert (await send(client, "POST", f"{base}/positions", later)).status == 204
    assert await read(node, base) == []
    by_ms = {"timestamps": [{"topic": "t", "partition": 0, "timestamp": int(moments[2].timestamp() * 1000)}]}
    assert (await send(client, "POST", f"{base}/positions", by_ms)).status == 204
    assert [unb64(str(r["value"])) for r in await read(node, base)] == [b"day3"]
    # inside one batch, the first record at or after the time, not the batch's first record
    hours = [int(datetime(2024, 2, 1, h, tzinfo=UTC).timestamp() * 1000) for h in (1, 2, 3)]
    await partition.append(
        build_batch([Record(None, f"h{i}".encode(), timestamp=t) for i, t in enumerate(hours)])
    )
    in_batch = {"timestamps": [{"topic": "t", "partition": 0, "timestamp": "2024-02-01T01:30:00+00:00"}]}
    assert (await send(client, "POST", f"{base}/positions", in_batch)).status == 204
    assert [unb64(str(r["value"])) for r in await read(node, base)] == [b"h1", b"h2"]
    bad = {"timestamps": [{"topic": "t", "partition": 0, "timestamp": "yesterday"}]}
    (await send(client, "POST", f"{base}/positions", bad)).error(
        422, 42204, "Invalid consumer configuration: "
    )


async def test_topics_and_a_pattern_together_are_409(node: RunningBroker) -> None:
    client = node.client
    base = await consumer(client, "g", "c")
    both = await send(client, "POST", f"{base}/subscription", {"topics": ["t"], "topic_pattern": "t.*"})
    both.error(409, 40903, "Illegal state: ")
    assert (await send(client, "POST", f"{base}/subscription", {"topic_pattern": "t.*"})).status == 204


async def test_consumed_records_carry_the_peers_fields(node: RunningBroker) -> None:
    client = node.client
    produced = await send(
        client,
        "POST",
        "/topics/t",
        {"records": [{"key": b64(b"k"), "value": b64(b"v")}]},
        content_type=BINARY_V2,
    )
    assert produced.status == 200
    base = await consumer(client, "g", "c")
    await assign(client, base, "t")
    [record] = await read(node, base)
    assert set(record) == {"topic", "key", "value", "partition", "offset", "timestamp"}
    assert (record["topic"], record["key"], record["value"], record["partition"], record["offset"]) == (
        "t",
        b64(b"k"),
        b64(b"v"),
        0,
        0,
    )
    assert isinstance(record["timestamp"], int) and record["timestamp"] > 0
