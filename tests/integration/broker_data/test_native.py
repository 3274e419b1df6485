"""The native binary path: raw batches in and out, validation, acks, long polling, offsets."""

from __future__ import annotations

import asyncio

import pytest

from tests.integration.broker import Client
from tests.integration.broker_data.helpers import BATCHES, as_stored, expect_error
from tierlog.service.web.keys import BROKER
from tierlog.tiering.codec.batch import build_batch, decode_batch
from tierlog.tiering.codec.compression import Compression
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record

BASE = "/native/v1/topics/t/partitions/0"
CONTENT = {"Content-Type": BATCHES}


def records(count: int, *, start: int = 0, size: int = 1024, timestamp: int = -1) -> list[Record]:
    return [
        Record(f"key-{start + i}".encode(), bytes([(start + i) % 251]) * size, timestamp=timestamp)
        for i in range(count)
    ]


async def post(client: Client, body: bytes, *, acks: str = "1", path: str = BASE) -> dict[str, object]:
    response = await client.post(f"{path}/batches", data=body, params={"acks": acks}, headers=CONTENT)
    assert response.status in (200, 202), await response.text()
    answer: dict[str, object] = await response.json()
    return answer


async def high_watermark(client: Client, topic: str = "t", partition: int = 0) -> int:
    meta = await (await client.get(f"/native/v1/topics/{topic}")).json()
    return int(meta["partitions"][partition]["high_watermark"])


@pytest.mark.parametrize("codec", list(Compression))
async def test_round_trip_is_byte_exact_for_every_codec(client: Client, codec: Compression) -> None:
    first = build_batch(records(50), base_offset=0, compression=codec)
    second = build_batch(records(30, start=50), base_offset=50, compression=codec)
    answer = await post(client, first + second)
    assert answer["base_offset"] == 0
    assert answer["last_offset"] == 79
    assert answer["record_count"] == 80
    assert answer["batch_base_offsets"] == [0, 50]

    response = await client.get(f"{BASE}/batches", params={"offset": "0"})
    assert response.status == 200
    assert response.content_type == BATCHES
    assert response.headers["Tierlog-High-Watermark"] == "80"
    assert response.headers["Tierlog-Log-Start-Offset"] == "0"
    assert response.headers["Tierlog-Log-End-Offset"] == "80"
    data = await response.read()
    assert data == as_stored(first + second)
    decoded = [decode_batch(data, position) for position, _ in iter_batches(data)]
    assert decoded[1].header.compression == codec
    assert [r.value for r in decoded[1].records] == [r.value for r in records(30, start=50)]


async def test_fetch_from_inside_a_batch_returns_that_whole_batch(client: Client) -> None:
    batches = [build_batch(records(10, start=i * 10), base_offset=i * 10) for i in range(3)]
    await post(client, b"".join(batches))
    response = await client.get(f"{BASE}/batches", params={"offset": "15", "max_bytes": "1"})
    assert await response.read() == as_stored(batches[1])


async def test_offsets_are_assigned_by_the_broker(client: Client) -> None:
    await post(client, build_batch(records(3), base_offset=0))
    answer = await post(client, build_batch(records(2), base_offset=999))
    assert answer["batch_base_offsets"] == [3]
    data = await (await client.get(f"{BASE}/batches", params={"offset": "3"})).read()
    assert [r.offset for r in decode_batch(data).records] == [3, 4]


@pytest.mark.parametrize("acks", ["1", "all", "0"])
async def test_corrupt_batch_is_rejected_whole(client: Client, acks: str) -> None:
    good = build_batch(records(5), base_offset=0)
    bad = bytearray(build_batch(records(5, start=5), base_offset=5))
    bad[len(bad) // 2] ^= 0x01
    response = await client.post(
        f"{BASE}/batches", data=good + bytes(bad), params={"acks": acks}, headers=CONTENT
    )
    body = await expect_error(response, 400, 40003)
    assert "CRC" in body["message"]
    assert await high_watermark(client) == 0


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"\x00" * 30,
        build_batch([Record(None, b"v")])[:-3],
        build_batch([Record(None, b"v")], is_control=True),
    ],
    ids=["empty", "short-header", "truncated", "control"],
)
async def test_malformed_bodies_are_rejected(client: Client, body: bytes) -> None:
    await post(client, build_batch(records(1)))
    await expect_error(await client.post(f"{BASE}/batches", data=body, headers=CONTENT), 400, 40003)
    assert await high_watermark(client) == 1


@pytest.mark.parametrize("acks", ["1", "0"])
async def test_batch_over_max_message_bytes_is_413(client: Client, acks: str) -> None:
    await client.app[BROKER].create_topic("small", 1, {"max.message.bytes": "2000"})
    body = build_batch(records(1, size=100)) + build_batch(records(3, size=1024), base_offset=1)
    response = await client.post(
        "/native/v1/topics/small/partitions/0/batches", data=body, params={"acks": acks}, headers=CONTENT
    )
    await expect_error(response, 413, 41301)
    assert await high_watermark(client, "small") == 0


async def test_wrong_content_type_and_acks(client: Client) -> None:
    body = build_batch(records(1))
    response = await client.post(
        f"{BASE}/batches", data=body, headers={"Content-Type": "application/octet-stream"}
    )
    await expect_error(response, 415, 41501)
    response = await client.post(f"{BASE}/batches", data=body, params={"acks": "2"}, headers=CONTENT)
    await expect_error(response, 400, 40001)
    response = await client.post(f"{BASE}/batches", data=body, headers={**CONTENT, "Accept": "text/html"})
    await expect_error(response, 406, 40601)


async def test_acks_all_answers_after_the_append(client: Client) -> None:
    answer = await post(client, build_batch(records(4)), acks="all")
    assert answer["acks"] == -1 and answer["last_offset"] == 3
    assert await high_watermark(client) == 4


async def test_acks_zero_answers_before_the_append(client: Client) -> None:
    await post(client, build_batch(records(1)))
    batch = build_batch(records(7, start=1), base_offset=1)
    answer = await post(client, batch, acks="0")
    assert answer == {"topic": "t", "partition": 0, "batch_count": 1, "record_count": 7, "acks": 0}
    response = await client.get(
        f"{BASE}/batches", params={"offset": "1", "max_wait_ms": "300000", "min_bytes": "1"}
    )
    assert await response.read() == as_stored(batch)


async def test_long_poll_wakes_up_on_produce(client: Client) -> None:
    """The fetch may wait up to 5 minutes: only the produce can end it before pytest's timeout does."""
    await post(client, build_batch(records(1)))
    waiting = asyncio.create_task(
        client.get(f"{BASE}/batches", params={"offset": "1", "max_wait_ms": "300000"})
    )
    batch = build_batch(records(2, start=1), base_offset=1)
    await post(client, batch)
    response = await waiting
    assert await response.read() == as_stored(batch)
    assert response.headers["Tierlog-High-Watermark"] == "3"


async def test_expired_wait_answers_an_empty_body_with_the_watermarks(client: Client) -> None:
    await post(client, build_batch(records(2)))
    response = await client.get(f"{BASE}/batches", params={"offset": "2", "max_wait_ms": "0"})
    assert response.status == 200
    assert await response.read() == b""
    assert response.headers["Tierlog-High-Watermark"] == "2"


async def test_offset_out_of_range_reports_the_range(client: Client) -> None:
    await post(client, build_batch(records(4)))
    response = await client.get(f"{BASE}/batches", params={"offset": "10"})
    body = await expect_error(response, 416, 41601)
    assert (body["log_start_offset"], body["log_end_offset"]) == (0, 4)
    assert response.headers["Tierlog-Log-Start-Offset"] == "0"
    assert response.headers["Tierlog-Log-End-Offset"] == "4"


async def test_fetch_errors(client: Client) -> None:
    await expect_error(await client.get(f"{BASE}/batches", params={"offset": "0"}), 404, 40401)
    await post(client, build_batch(records(1)))
    await expect_error(await client.get(f"{BASE}/batches"), 400, 40001)
    response = await client.get(
        f"{BASE}/batches", params={"offset": "0"}, headers={"Accept": "application/json"}
    )
    await expect_error(response, 406, 40601)
    await expect_error(
        await client.get("/native/v1/topics/t/partitions/9/batches", params={"offset": "0"}), 404, 40402
    )


async def test_list_offsets(client: Client) -> None:
    await post(client, build_batch(records(3, timestamp=1_000), base_offset=0))
    await post(client, build_batch(records(2, timestamp=5_000), base_offset=3))

    async def lookup(timestamp: int) -> tuple[int, int]:
        answer = await (await client.get(f"{BASE}/offsets", params={"timestamp": str(timestamp)})).json()
        return answer["offset"], answer["timestamp"]

    assert await lookup(-2) == (0, -1)
    assert await lookup(-1) == (5, -1)
    assert await lookup(500) == (0, 1_000)
    assert await lookup(2_000) == (3, 5_000)
    assert await lookup(9_000) == (-1, -1)
    await expect_error(await client.get(f"{BASE}/offsets", params={"timestamp": "-3"}), 400, 40001)


async def test_topic_metadata(client: Client) -> None:
    await post(client, build_batch(records(2)), path="/native/v1/topics/t/partitions/2")
    meta = await (await client.get("/native/v1/topics/t")).json()
    assert meta["topic"] == "t" and meta["partition_count"] == 3
    assert meta["partitions"][2] == {
        "partition": 2,
        "log_start_offset": 0,
        "high_watermark": 2,
        "log_end_offset": 2,
    }
    assert meta["partitions"][0]["high_watermark"] == 0
    await expect_error(await client.get("/native/v1/topics/none"), 404, 40401)
