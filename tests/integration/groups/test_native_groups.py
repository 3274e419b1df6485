"""The native group API: generations, eviction, fencing, inspection, against a real broker on loopback."""

from __future__ import annotations

import asyncio
from typing import Any

from tests.integration.broker import Client
from tierlog.service.groups.state import COORDINATOR
from tierlog.tiering.log import ManualClock

from .helpers import call, create_topic, join

TIMEOUT = 30.0


async def wait_for_state(client: Client, group: str, state: str) -> None:
    """Wait until the broker reports ``state`` for the group (a condition, bounded by a deadline)."""
    async with asyncio.timeout(TIMEOUT):
        # the state lives in the server under test, observable only over HTTP
        while (await call(client, "GET", f"/native/v1/groups/{group}"))["state"] != state:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


async def grow(client: Client, group: str, members: list[str], new: int) -> list[dict[str, Any]]:
    """Add ``new`` members; the existing ones find out through their heartbeat and rejoin."""
    joins = [asyncio.ensure_future(join(client, group)) for _ in range(new)]
    if members:
        await wait_for_state(client, group, "PreparingRebalance")
    rejoins = []
    for member_id in members:
        beat = await call(
            client,
            "POST",
            f"/native/v1/groups/{group}/heartbeat",
            {"member_id": member_id, "generation": 0},
            status=409,
        )
        assert beat["error_code"] == 40910
        rejoins.append(asyncio.ensure_future(join(client, group, member_id)))
    return list(await asyncio.gather(*joins, *rejoins))


def check_exclusive(results: list[dict[str, Any]], partitions: int) -> None:
    generations = {r["generation"] for r in results}
    assert len(generations) == 1
    owned = [(a["topic"], a["partition"]) for r in results for a in r["assignment"]]
    assert sorted(owned) == [("t", p) for p in range(partitions)]


async def test_two_then_five_members_on_four_partitions(client: Client) -> None:
    await create_topic(client, "t", 4)
    results = await grow(client, "g", [], 1)
    results = await grow(client, "g", [r["member_id"] for r in results], 1)
    check_exclusive(results, 4)
    assert sorted(len(r["assignment"]) for r in results) == [2, 2]
    results = await grow(client, "g", [r["member_id"] for r in results], 3)
    check_exclusive(results, 4)
    assert sorted(len(r["assignment"]) for r in results) == [0, 1, 1, 1, 1]
    described = await call(client, "GET", "/native/v1/groups/g")
    assert described["state"] == "Stable" and len(described["members"]) == 5


async def test_silent_member_is_evicted(client: Client, clock: ManualClock) -> None:
    await create_topic(client, "t", 4)
    first = await grow(client, "g", [], 1)
    a, b = await grow(client, "g", [first[0]["member_id"]], 1)
    beat = {"member_id": b["member_id"], "generation": b["generation"]}
    clock.advance(30_000)
    await call(client, "POST", "/native/v1/groups/g/heartbeat", beat, status=204)
    clock.advance(20_000)  # a has been silent 50 s > the 45 s default session timeout; b only 20 s
    await client.app[COORDINATOR].tick()
    gone = await call(
        client,
        "POST",
        "/native/v1/groups/g/heartbeat",
        {"member_id": a["member_id"], "generation": a["generation"]},
        status=404,
    )
    assert gone["error_code"] == 40410
    assert (await call(client, "POST", "/native/v1/groups/g/heartbeat", beat, status=409))[
        "error_code"
    ] == 40910
    alone = await join(client, "g", b["member_id"])
    assert alone["generation"] == b["generation"] + 1
    assert sorted(p["partition"] for p in alone["assignment"]) == [0, 1, 2, 3]


async def test_stale_generation_commit_is_refused(client: Client) -> None:
    await create_topic(client, "t", 4)
    first = await grow(client, "g", [], 1)
    stale = first[0]
    await grow(client, "g", [stale["member_id"]], 1)
    commit = {
        "member_id": stale["member_id"],
        "generation": stale["generation"],
        "offsets": [{"topic": "t", "partition": 0, "offset": 5}],
    }
    refused = await call(client, "POST", "/native/v1/groups/g/offsets/commit", commit, status=409)
    assert refused["error_code"] == 40911
    fetched = await call(
        client, "POST", "/native/v1/groups/g/offsets/fetch", {"partitions": [{"topic": "t", "partition": 0}]}
    )
    assert fetched["offsets"][0]["offset"] == -1


async def test_lag_and_listing(client: Client) -> None:
    await create_topic(client, "t", 1)
    await call(
        client,
        "POST",
        "/topics/t/partitions/0",
        {"records": [{"value": "YQ=="}, {"value": "Yg=="}, {"value": "Yw=="}]},
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    await call(
        client,
        "POST",
        "/native/v1/groups/solo/offsets/commit",
        {"offsets": [{"topic": "t", "partition": 0, "offset": 1}]},
        status=204,
    )
    listed = await call(client, "GET", "/native/v1/groups")
    assert {"group_id": "solo", "state": "Empty"} in listed["groups"]
    described = await call(client, "GET", "/native/v1/groups/solo")
    assert described["lag"] == [
        {"topic": "t", "partition": 0, "committed_offset": 1, "log_end_offset": 3, "lag": 2, "member_id": ""}
    ]


async def test_v3_consumer_group_admin(client: Client) -> None:
    await create_topic(client, "t", 2)
    member = (await grow(client, "g", [], 1))[0]
    await call(
        client,
        "POST",
        "/topics/t/partitions/1",
        {"records": [{"value": "YQ=="}, {"value": "Yg=="}]},
        headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
    )
    commit = {
        "member_id": member["member_id"],
        "generation": member["generation"],
        "offsets": [{"topic": "t", "partition": 1, "offset": 1}],
    }
    await call(client, "POST", "/native/v1/groups/g/offsets/commit", commit, status=204)
    cluster = (await call(client, "GET", "/v3/clusters"))["data"][0]["cluster_id"]
    base = f"/v3/clusters/{cluster}/consumer-groups"
    groups = await call(client, "GET", base)
    assert [g["consumer_group_id"] for g in groups["data"]] == ["g"]
    assert groups["data"][0]["state"] == "STABLE"
    consumers = await call(client, "GET", f"{base}/g/consumers")
    assert consumers["data"][0]["consumer_id"] == member["member_id"]
    assert len(consumers["data"][0]["assignments"]) == 2
    lags = await call(client, "GET", f"{base}/g/lags")
    by_partition = {row["partition_id"]: row for row in lags["data"]}
    assert by_partition[1]["current_offset"] == 1 and by_partition[1]["lag"] == 1
    assert by_partition[0]["current_offset"] == -1 and by_partition[0]["lag"] == 0
    summary = await call(client, "GET", f"{base}/g/lag-summary")
    assert summary["total_lag"] == 1 and summary["max_lag_partition_id"] == 1
    missing = await call(client, "GET", f"{base}/nope", status=404)
    assert missing["error_code"] == 40411
