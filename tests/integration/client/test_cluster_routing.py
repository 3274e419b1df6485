"""The Python client against a cluster: three in-process brokers sharing one metadata store.

The client is given one broker only; it learns the others from ``GET /native/v1/metadata`` and sends each
partition's produce and fetch requests to that partition's leader. When a leader's broker stops and comes
back (on a new port, with a higher leader epoch), producer and consumer carry on without user action and
lose nothing acknowledged. A broker older than cluster mode (no metadata route) leads everything, as before.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from tests.integration.broker import RunningBroker
from tests.integration.cluster.inproc import InprocCluster
from tierlog.client import (
    AsyncAdmin,
    AsyncConsumer,
    AsyncProducer,
    ConsumerRecord,
    RecordMetadata,
    TopicPartition,
)
from tierlog.client.errors import BrokerUnavailableError, DeliveryTimeoutError
from tierlog.client.router import Router
from tierlog.tiering.codec.batch import iter_decoded_batches
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.partitioner import partition_for_key
from tierlog.wire.errors import (
    BadRequestError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    UnknownTopicError,
)

TOPIC = "orders"
PARTITIONS = 6
BATCHES = "application/vnd.tierlog.batches"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[InprocCluster]:
    async with InprocCluster(tmp_path / "cluster", defaults={"logging.level": "WARNING"}) as started:
        brokers = await started.start(3)
        await brokers[0].broker.create_topic(TOPIC, PARTITIONS)
        await started.wait_for(lambda: started.converged(TOPIC))
        yield started


def leader_urls(cluster: InprocCluster) -> dict[int, str]:
    """Partition -> URL of its leader, as the brokers' caches show it."""
    return {p: cluster.brokers[leader].url for p, leader in enumerate(cluster.leaders(TOPIC))}


async def stored_values(url: str, partition: int) -> list[bytes]:
    """Every record value of one partition, read from ``url`` over the native fetch route (a broker that
    does not lead the partition refuses with 503)."""
    async with aiohttp.ClientSession() as session:
        path = f"{url}/native/v1/topics/{TOPIC}/partitions/{partition}/batches"
        params = {"offset": "0", "max_bytes": str(64 << 20)}
        async with session.get(path, params=params, headers={"Accept": BATCHES}) as response:
            assert response.status == 200, await response.text()
            data = await response.read()
    assert sum(1 for _ in iter_batches(data, verify=True)) > 0
    return [r.value or b"" for _, batch in iter_decoded_batches(data, verify=True) for r in batch.records]


async def produce(producer: AsyncProducer, values: range) -> list[RecordMetadata]:
    futures = [await producer.send(TOPIC, f"{i}".encode(), key=f"key-{i % 97}".encode()) for i in values]
    return list(await asyncio.gather(*futures))


async def read(consumer: AsyncConsumer, into: list[ConsumerRecord], count: int) -> None:
    """Poll until ``into`` holds ``count`` records (the test's own timeout bounds it)."""
    while len(into) < count:
        into += await consumer.poll(timeout=1.0)


def check_order(records: list[ConsumerRecord]) -> None:
    """Per partition, offsets grow by one and each key's values in send order."""
    last_value: dict[bytes, int] = {}
    last_offset: dict[int, int] = {}
    for r in records:
        assert r.offset == last_offset.get(r.partition, -1) + 1
        last_offset[r.partition] = r.offset
        value = int(r.value)
        assert value > last_value.get(r.key, -1)
        last_value[r.key] = value


async def test_records_land_once_on_their_partitions_leader_in_order(cluster: InprocCluster) -> None:
    first = cluster.brokers[1].url
    leaders = leader_urls(cluster)
    assert len(set(leaders.values())) == 3, leaders
    async with AsyncProducer(first, linger_ms=5, batch_size=4096, acks="all") as producer:
        acked = await produce(producer, range(2000))
        routed = producer._router.snapshot
    assert routed is not None and not routed.legacy
    assert {routed.leader(TopicPartition(TOPIC, p)).url for p in range(PARTITIONS)} == set(  # type: ignore[union-attr]
        leaders.values()
    )
    for i, meta in enumerate(acked):
        assert meta.partition == partition_for_key(f"key-{i % 97}".encode(), PARTITIONS)
    by_partition: dict[int, list[bytes]] = {}
    for i, meta in enumerate(acked):
        by_partition.setdefault(meta.partition, []).append(f"{i}".encode())
        assert meta.offset == len(by_partition[meta.partition]) - 1
    for partition, url in leaders.items():
        assert await stored_values(url, partition) == by_partition[partition]

    consumer = AsyncConsumer(bootstrap_servers=[first], auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        records: list[ConsumerRecord] = []
        await asyncio.wait_for(read(consumer, records, 2000), 60)
    finally:
        await consumer.close()
    assert sorted(int(r.value) for r in records) == list(range(2000))
    check_order(records)


async def test_producer_and_consumer_recover_when_a_leader_broker_restarts(cluster: InprocCluster) -> None:
    bootstrap = cluster.brokers[1].url
    before = cluster.brokers[1].broker.cluster_view().partitions[TOPIC]
    moved = [p.partition for p in before if p.leader == 2]
    assert moved, "broker 2 leads no partition"
    producer = AsyncProducer(bootstrap, linger_ms=5, acks="all", delivery_timeout_ms=60_000)
    consumer = AsyncConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    records: list[ConsumerRecord] = []
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        acked = await produce(producer, range(600))
        await asyncio.wait_for(read(consumer, records, 600), 60)

        await cluster.stop_broker(2)
        # Sent while partitions led by broker 2 have no leader: they wait (retrying) for it.
        pending = asyncio.ensure_future(produce(producer, range(600, 1200)))
        await cluster.start_broker(2)
        await cluster.wait_for(lambda: cluster.converged(TOPIC))
        acked += await asyncio.wait_for(pending, 90)
        await asyncio.wait_for(read(consumer, records, 1200), 60)
        routed = producer._router.snapshot
        assert routed is not None
    finally:
        await producer.close()
        await consumer.close()

    after = cluster.brokers[1].broker.cluster_view().partitions[TOPIC]
    for p in moved:
        assert after[p].leader == 2 and after[p].leader_epoch > before[p].leader_epoch
        hint = routed.leader(TopicPartition(TOPIC, p))
        assert hint is not None and hint.url == cluster.brokers[2].url
    assert sorted(int(r.value) for r in records) == list(range(1200))
    check_order(records)
    # Nothing acknowledged is lost, nothing stored twice: each leader holds exactly its acknowledged values.
    by_partition: dict[int, dict[int, bytes]] = {}
    for i, meta in enumerate(acked):
        by_partition.setdefault(meta.partition, {})[meta.offset] = f"{i}".encode()
    for partition, url in leader_urls(cluster).items():
        stored = await stored_values(url, partition)
        assert stored == [by_partition[partition][o] for o in range(len(stored))]
        assert len(stored) == len(by_partition[partition])


async def test_concurrent_requests_share_one_metadata_refresh(cluster: InprocCluster) -> None:
    router = Router([cluster.brokers[3].url])
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        clients = await asyncio.gather(*(router.leader_for(tp) for tp in tps))
        assert router.refreshes == 1
        assert {c.base_url for c in clients} == set(leader_urls(cluster).values())
        for tp in tps:
            router.note_error(tp, BrokerUnavailableError("connection reset"))
        await asyncio.gather(*(router.leader_for(tp) for tp in tps))
        assert router.refreshes == 2
    finally:
        await router.close()


async def test_a_leader_hint_is_followed_at_once_and_a_stale_one_refreshes(cluster: InprocCluster) -> None:
    router = Router([cluster.brokers[1].url])
    leaders = leader_urls(cluster)
    tp = TopicPartition(TOPIC, 0)
    other = next(u for u in leaders.values() if u != leaders[0])
    try:
        await router.leader_for(tp)
        before = router.refreshes
        hint = NotLeaderOrFollowerError("moved", leader_id=9, leader_url=other + "/", leader_epoch=5)
        assert router.note_error(tp, hint)
        assert (await router.leader_for(tp)).base_url == other
        assert router.refreshes == before
        # The hinted broker does not lead the partition: it answers 50310 naming the real leader at a lower
        # epoch than the hint's, so the router refreshes and the call lands on the leader.
        offset, _ = await router.on_leader(tp, lambda leader: leader.list_offset(TOPIC, 0, -1))
        assert offset == 0
        assert router.refreshes == before + 1
        assert (await router.leader_for(tp)).base_url == leaders[0]
    finally:
        await router.close()


@pytest.fixture
async def old_broker(broker: RunningBroker) -> AsyncIterator[str]:
    """A broker older than cluster mode: the real broker behind a proxy of ours that answers the metadata
    route as an unknown path (404, 40400) and passes everything else through unchanged."""
    session = aiohttp.ClientSession()

    async def forward(request: web.Request) -> web.StreamResponse:
        if request.path == "/native/v1/metadata":
            return web.json_response({"error_code": 40400, "message": "HTTP 404 Not Found"}, status=404)
        headers = {k: v for k, v in request.headers.items() if k in ("Content-Type", "Accept")}
        async with session.request(
            request.method, broker.url + request.path_qs, data=await request.read(), headers=headers
        ) as answer:
            body = await answer.read()
            passed = {
                k: v for k, v in answer.headers.items() if k.startswith("Tierlog-") or k == "Content-Type"
            }
            return web.Response(status=answer.status, body=body, headers=passed)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", forward)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        await server.close()
        await session.close()


async def test_a_broker_without_the_metadata_route_leads_everything(old_broker: str) -> None:
    async with AsyncProducer(old_broker, linger_ms=2) as producer:
        futures = [await producer.send("legacy", f"{i}".encode(), key=f"k{i}".encode()) for i in range(60)]
        acked = list(await asyncio.gather(*futures))
        routed = producer._router.snapshot
    assert routed is not None and routed.legacy
    count = routed.partition_count("legacy")
    assert count is not None and count > 1
    assert {routed.leader(TopicPartition("legacy", p)).url for p in range(count)} == {old_broker}  # type: ignore[union-attr]
    assert {m.partition for m in acked} == {partition_for_key(f"k{i}".encode(), count) for i in range(60)}
    consumer = AsyncConsumer(bootstrap_servers=old_broker, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition("legacy", p) for p in await consumer.partitions_for_topic("legacy")])
        records: list[ConsumerRecord] = []
        await asyncio.wait_for(read(consumer, records, 60), 60)
    finally:
        await consumer.close()
    assert sorted(int(r.value) for r in records) == list(range(60))


def closed_port_url() -> str:
    """A loopback URL nobody listens on (a port bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


async def test_a_dead_bootstrap_server_is_skipped_and_admin_reads_offsets_from_leaders(
    cluster: InprocCluster,
) -> None:
    servers = f"{closed_port_url()},{cluster.brokers[2].url}"
    async with AsyncProducer(servers, linger_ms=2) as producer:
        acked = await produce(producer, range(300))
    counts = {p: sum(1 for m in acked if m.partition == p) for p in range(PARTITIONS)}
    async with AsyncAdmin([closed_port_url(), cluster.brokers[3].url]) as admin:
        described = await admin.describe_topic(TOPIC)
    assert described.partition_count == PARTITIONS
    assert {p.partition: p.log_end_offset for p in described.partitions} == counts


async def test_metadata_older_than_its_max_age_is_refreshed_in_the_background(cluster: InprocCluster) -> None:
    now = [0.0]
    router = Router([cluster.brokers[1].url], metadata_max_age_ms=1_000, clock=lambda: now[0])
    tp = TopicPartition(TOPIC, 0)
    try:
        await router.leader_for(tp)
        now[0] += 0.5
        await router.leader_for(tp)
        assert router.refreshes == 1
        now[0] += 1.0
        await router.leader_for(tp)  # answers from the old snapshot and starts a refresh
        await router.refresh()  # joins that refresh
        assert router.refreshes == 2
        assert router.snapshot is not None and router.snapshot.fetched_at == now[0]
    finally:
        await router.close()


async def test_a_partition_without_a_leader_fails_its_records_at_the_delivery_timeout(
    cluster: InprocCluster,
) -> None:
    views = cluster.brokers[1].broker.cluster_view().partitions[TOPIC]
    partition = next(p.partition for p in views if p.leader == 3)
    await cluster.stop_broker(3)
    await cluster.wait_for(lambda: cluster.leaders(TOPIC)[partition] == -1, "partition without a leader")
    async with AsyncProducer(cluster.brokers[1].url, delivery_timeout_ms=1_500, linger_ms=0) as producer:
        future = await producer.send(TOPIC, b"lost", partition=partition)
        with pytest.raises(DeliveryTimeoutError) as caught:
            await future
    assert isinstance(caught.value.__cause__, LeaderNotAvailableError | BrokerUnavailableError)


async def test_a_group_consumer_reads_every_leader_and_resumes_from_its_commit(
    cluster: InprocCluster,
) -> None:
    bootstrap = cluster.brokers[2].url
    async with AsyncProducer(bootstrap, linger_ms=2) as producer:
        await produce(producer, range(400))
    first = AsyncConsumer(
        TOPIC, bootstrap_servers=bootstrap, group_id="billing", auto_offset_reset="earliest",
        enable_auto_commit=False,
    )  # fmt: skip
    records: list[ConsumerRecord] = []
    try:
        await asyncio.wait_for(read(first, records, 400), 60)
        await first.commit()
    finally:
        await first.close()
    assert sorted(int(r.value) for r in records) == list(range(400))
    async with AsyncProducer(bootstrap, linger_ms=2) as producer:
        await produce(producer, range(400, 500))
    second = AsyncConsumer(TOPIC, bootstrap_servers=cluster.brokers[3].url, group_id="billing")
    more: list[ConsumerRecord] = []
    try:
        await asyncio.wait_for(read(second, more, 100), 60)
    finally:
        await second.close()
    assert sorted(int(r.value) for r in more) == list(range(400, 500))


async def test_an_illegal_topic_name_is_refused_and_leaves_routing_working(cluster: InprocCluster) -> None:
    async with AsyncProducer(cluster.brokers[1].url) as producer:
        with pytest.raises(BadRequestError):
            await producer.send("a/b", b"x")
        with pytest.raises(BadRequestError):
            await producer.send("x" * 250, b"x")
        acked = await produce(producer, range(10))
    assert len(acked) == 10


async def test_more_topic_names_than_fit_one_request_ask_for_every_topic(cluster: InprocCluster) -> None:
    router = Router([cluster.brokers[1].url])
    try:
        for i in range(20):
            with pytest.raises(UnknownTopicError):
                await router.partition_count(f"{i:03d}" + "n" * 240)
        assert await router.partition_count(TOPIC) == PARTITIONS
        assert (await router.leader_for(TopicPartition(TOPIC, 0))).base_url == leader_urls(cluster)[0]
        with pytest.raises(UnknownTopicError):
            await router.partition_count("019" + "n" * 240)
    finally:
        await router.close()


async def test_without_any_broker_the_last_metadata_stays_in_use_and_routing_errors_are_retriable(
    cluster: InprocCluster,
) -> None:
    now = [0.0]
    router = Router([cluster.brokers[1].url], metadata_max_age_ms=1_000, clock=lambda: now[0])
    tp = TopicPartition(TOPIC, 0)
    try:
        leader = (await router.leader_for(tp)).base_url
        for broker_id in list(cluster.brokers):
            await cluster.stop_broker(broker_id)
        now[0] += 5.0
        assert (await router.leader_for(tp)).base_url == leader  # the old snapshot; a refresh starts
        with pytest.raises(BrokerUnavailableError) as caught:
            await router.refresh()
        assert caught.value.retriable
        assert (await router.leader_for(tp)).base_url == leader
        router.note_error(tp, BrokerUnavailableError("refused"), leader)
        with pytest.raises(BrokerUnavailableError):
            await router.leader_for(tp)  # stale now: it must refresh, and nobody answers
    finally:
        await router.close()
    nobody = Router([closed_port_url()])
    try:
        with pytest.raises(BrokerUnavailableError):
            await nobody.refresh()
    finally:
        await nobody.close()
