"""One contract for every MetadataStore: LocalMetadataStore in memory and persisted to a file, and
EtcdMetadataStore on a real etcd process.

Revisions are compared relative to what each test read first (the etcd server is shared by the session,
each test under a prefix of its own). Local stores run on a ManualClock, so their leases expire when the
test advances it; etcd leases expire on etcd's own clock and the test waits for the watch event.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from pathlib import Path
from typing import cast

import aetcd
import pytest

from tests.integration.cluster.etcd import EtcdServer
from tierlog.service.cluster.etcd_store import EtcdMetadataStore
from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    LeaseExpiredError,
    MetadataStore,
    MetadataStoreError,
    Op,
    Put,
    WatchEvent,
)
from tierlog.service.settings.config import parse_metadata_uri
from tierlog.tiering.log import ManualClock

EVENT_TIMEOUT_S = 20.0  # generous bound for an event that must come (etcd leases: about 2-3 s)
LEASE_TTL_S = 1  # etcd rounds this up to its minimum (2 s with default settings)


class Backend:
    """Opens stores of one kind on one backing (the same file, the same etcd prefix) and makes their
    leases expire."""

    def __init__(self, kind: str, make: Callable[[], MetadataStore], clock: ManualClock | None) -> None:
        self.kind = kind
        self._make = make
        self.clock = clock
        self.opened: list[MetadataStore] = []

    async def open(self) -> MetadataStore:
        store = self._make()
        self.opened.append(store)
        await store.start()
        return store

    def let_leases_expire(self, ttl_seconds: int) -> None:
        """Local stores: move the clock past the TTL and expire. etcd: nothing (its own clock runs; the test
        waits for the deletes)."""
        if self.clock is not None:
            self.clock.advance(ttl_seconds * 1000 + 1)
            for store in self.opened:
                if isinstance(store, LocalMetadataStore):
                    store.expire_leases()

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


@pytest.fixture(params=["memory", "file", pytest.param("etcd", marks=pytest.mark.integration)])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    kind: str = request.param
    clock = ManualClock(1_700_000_000_000)
    if kind == "memory":
        made = Backend(kind, lambda: LocalMetadataStore(clock=clock), clock)
    elif kind == "file":
        path = tmp_path / "metadata.json"
        made = Backend(kind, lambda: LocalMetadataStore(path, clock=clock), clock)
    else:
        uri = parse_metadata_uri(request.getfixturevalue("etcd_uri"))
        made = Backend(kind, lambda: EtcdMetadataStore(uri), None)
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def store(backend: Backend) -> MetadataStore:
    return await backend.open()


async def take(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    """The next ``count`` events; fails the test if they do not come within EVENT_TIMEOUT_S."""
    taken: list[WatchEvent] = []
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        while len(taken) < count:
            taken.append(await anext(events))
    return taken


async def stop(events: AsyncIterator[WatchEvent]) -> None:
    """Close a watch. The interface promises ``aclose`` (both stores return async generators) though its
    return type says only AsyncIterator."""
    await cast(AsyncGenerator[WatchEvent, None], events).aclose()


async def revision_of(store: MetadataStore) -> int:
    return (await store.range(""))[1]


# reads and commits


async def test_put_then_get_tracks_revisions_and_version(store: MetadataStore) -> None:
    assert await store.get("k") is None
    first = await store.commit([], [Put("k", b"one")])
    assert first is not None
    kv = await store.get("k")
    assert kv is not None
    assert (kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease) == (
        "k", b"one", first, first, 1, 0)  # fmt: skip
    second = await store.commit([], [Put("k", b"two")])
    assert second == first + 1
    kv = await store.get("k")
    assert kv is not None
    assert (kv.value, kv.create_revision, kv.mod_revision, kv.version) == (b"two", first, second, 2)


async def test_range_is_sorted_by_key_filtered_by_prefix_and_reports_the_revision(
    store: MetadataStore,
) -> None:
    await store.commit([], [Put("topics/b", b"2"), Put("topics/a", b"1"), Put("brokers/1", b"x")])
    last = await store.commit([], [Put("topics/c", b"3")])
    found, revision = await store.range("topics/")
    assert [(kv.key, kv.value) for kv in found] == [
        ("topics/a", b"1"),
        ("topics/b", b"2"),
        ("topics/c", b"3"),
    ]
    assert revision == last
    everything, _ = await store.range("")
    assert [kv.key for kv in everything] == ["brokers/1", "topics/a", "topics/b", "topics/c"]
    assert (await store.range("nothing/"))[0] == []


async def test_compare_on_absence_and_on_mod_revision(store: MetadataStore) -> None:
    created = await store.commit([Compare("controller", 0)], [Put("controller", b"1")])
    assert created is not None
    assert await store.commit([Compare("controller", 0)], [Put("controller", b"2")]) is None
    updated = await store.commit([Compare("controller", created)], [Put("controller", b"3")])
    assert updated == created + 1
    assert await store.commit([Compare("controller", created)], [Put("controller", b"4")]) is None
    kv = await store.get("controller")
    assert kv is not None and kv.value == b"3"


async def test_a_failed_compare_changes_nothing(store: MetadataStore) -> None:
    base = await store.commit([], [Put("a", b"1"), Put("b", b"1")])
    assert base is not None
    before = await store.range("")
    result = await store.commit(
        [Compare("a", base), Compare("b", base - 1)],
        [Put("a", b"2"), Delete("b"), Put("c", b"new")],
    )
    assert result is None
    assert await store.range("") == before


async def test_commit_without_a_change_keeps_the_revision(store: MetadataStore) -> None:
    current = await store.commit([], [Put("a", b"1")])
    assert await store.commit([Compare("a", current or 0)], []) == current
    assert await store.commit([], [Delete("absent"), Delete("none/", prefix=True)]) == current
    assert await revision_of(store) == current


async def test_a_commit_may_not_write_one_key_twice(store: MetadataStore) -> None:
    await store.commit([], [Put("a/1", b"1")])
    before = await store.range("")
    refused: list[list[Op]] = [
        [Put("k", b"1"), Put("k", b"2")],
        [Put("a/2", b"2"), Delete("a/", prefix=True)],
        [Delete("a/1"), Put("a/1", b"")],
    ]
    for ops in refused:
        with pytest.raises(MetadataStoreError):
            await store.commit([Compare("absent", 1)], ops)  # refused before the compares are looked at
    assert await store.range("") == before
    # deleting overlapping ranges is fine
    assert await store.commit([], [Delete("a/1"), Delete("a/", prefix=True)]) == before[1] + 1


async def test_delete_prefix_removes_only_its_keys_in_one_revision(store: MetadataStore) -> None:
    start = await revision_of(store)
    await store.commit(
        [], [Put("partitions/t/0", b""), Put("partitions/t/1", b""), Put("partitions/u/0", b"")]
    )
    events = store.watch("", start + 1)
    try:
        deleted = await store.commit([], [Delete("topics/t"), Delete("partitions/t/", prefix=True)])
        seen = await take(events, 3 + 2)
    finally:
        await stop(events)
    assert [kv.key for kv in (await store.range(""))[0]] == ["partitions/u/0"]
    assert [(e.kind, e.key, e.mod_revision) for e in seen[3:]] == [
        ("delete", "partitions/t/0", deleted), ("delete", "partitions/t/1", deleted)]  # fmt: skip


async def test_every_write_advances_the_revision_by_one(store: MetadataStore) -> None:
    previous = await revision_of(store)
    for i in range(10):
        op = Put(f"k{i % 3}", str(i).encode()) if i % 4 else Delete(f"k{(i + 1) % 3}")
        revision = await store.commit([], [op])
        if isinstance(op, Delete) and revision == previous:
            continue  # deleting an absent key writes nothing
        assert revision == previous + 1
        previous = revision


# leases


async def test_keep_alive_and_revoke(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    assert lease > 0
    written = await store.commit([], [Put("brokers/1", b"me", lease=lease)])
    kv = await store.get("brokers/1")
    assert kv is not None and kv.lease == lease
    await store.keep_alive(lease)
    events = store.watch("brokers/", (written or 0) + 1)
    try:
        await store.revoke_lease(lease)
        (gone,) = await take(events, 1)
    finally:
        await stop(events)
    assert (gone.kind, gone.key, gone.value) == ("delete", "brokers/1", b"")
    assert await store.get("brokers/1") is None
    await store.revoke_lease(lease)  # idempotent
    with pytest.raises(LeaseExpiredError):
        await store.keep_alive(lease)


async def test_lease_time_tells_the_granted_ttl_and_whole_seconds_left(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    told = await store.lease_time(lease)
    # just granted (or kept alive): 29 whole seconds left, or 30 on a store that rounds its clock up
    assert told.granted_s == 30 and 28 <= told.remaining_s <= 30, told
    assert told.silent_s <= 1, told
    await store.keep_alive(lease)
    assert (await store.lease_time(lease)).silent_s <= 1
    await store.revoke_lease(lease)
    with pytest.raises(LeaseExpiredError):
        await store.lease_time(lease)


async def test_expiry_deletes_the_lease_keys_and_watchers_see_it(
    backend: Backend, store: MetadataStore
) -> None:
    lease = await store.grant_lease(LEASE_TTL_S)
    written = await store.commit(
        [], [Put("brokers/1", b"a", lease=lease), Put("brokers/2", b"b", lease=lease), Put("topics/t", b"t")]
    )
    moved = await store.commit([], [Put("brokers/2", b"b")])  # a put without the lease detaches the key
    events = store.watch("", (moved or 0) + 1)
    try:
        backend.let_leases_expire(LEASE_TTL_S)
        (gone,) = await take(events, 1)
    finally:
        await stop(events)
    assert (gone.kind, gone.key) == ("delete", "brokers/1")
    assert gone.mod_revision > (written or 0)
    assert [kv.key for kv in (await store.range(""))[0]] == ["brokers/2", "topics/t"]
    with pytest.raises(LeaseExpiredError):
        await store.keep_alive(lease)


async def test_put_with_an_expired_lease_applies_nothing(backend: Backend, store: MetadataStore) -> None:
    lease = await store.grant_lease(LEASE_TTL_S)
    start = await store.commit([], [Put("marker", b"", lease=lease)])
    events = store.watch("marker", (start or 0) + 1)
    try:
        backend.let_leases_expire(LEASE_TTL_S)
        await take(events, 1)  # the marker's delete: the lease is gone
    finally:
        await stop(events)
    before = await store.range("")
    with pytest.raises(LeaseExpiredError):
        await store.commit([], [Put("plain", b"x"), Put("brokers/1", b"late", lease=lease)])
    assert await store.range("") == before


async def test_a_revoked_lease_cannot_be_attached(store: MetadataStore) -> None:
    lease = await store.grant_lease(30)
    await store.revoke_lease(lease)
    before = await store.range("")
    with pytest.raises(LeaseExpiredError):
        await store.commit([Compare("controller", 0)], [Put("controller", b"c", lease=lease)])
    assert await store.range("") == before
    # a failed compare is answered before the lease is looked at
    await store.commit([], [Put("controller", b"other")])
    assert await store.commit([Compare("controller", 0)], [Put("controller", b"c", lease=lease)]) is None


# watches


async def test_watch_from_a_past_revision_replays_in_order(store: MetadataStore) -> None:
    first = await store.commit([], [Put("topics/a", b"1")])
    assert first is not None
    await store.commit([], [Put("brokers/1", b"not watched")])
    await store.commit([], [Put("topics/b", b"2"), Put("topics/a", b"3")])
    last = await store.commit([], [Delete("topics/a")])
    events = store.watch("topics/", first)
    try:
        seen = await take(events, 4)
        after = await store.commit([], [Put("topics/c", b"4")])
        (live,) = await take(events, 1)
    finally:
        await stop(events)
    assert [(e.kind, e.key, e.value) for e in seen] == [
        ("put", "topics/a", b"1"),
        ("put", "topics/b", b"2"),
        ("put", "topics/a", b"3"),
        ("delete", "topics/a", b""),
    ]
    assert [e.mod_revision for e in seen] == [first, first + 2, first + 2, last]
    assert (live.key, live.mod_revision) == ("topics/c", after)


async def test_watch_from_a_future_revision_starts_there(store: MetadataStore) -> None:
    start = await revision_of(store)
    events = store.watch("", start + 3)
    try:
        written = [await store.commit([], [Put("k", str(i).encode())]) for i in range(3)]
        (first,) = await take(events, 1)
    finally:
        await stop(events)
    assert (first.value, first.mod_revision) == (b"2", written[2])


async def test_watch_sees_concurrent_writes_in_order(store: MetadataStore) -> None:
    start = await revision_of(store)
    events = store.watch("partitions/", start + 1)
    count = 25

    async def write() -> list[int]:
        written = []
        for i in range(count):
            revision = await store.commit([], [Put(f"partitions/t/{i % 5}", str(i).encode())])
            assert revision is not None
            written.append(revision)
        return written

    try:
        writer = asyncio.create_task(write())
        seen = await take(events, count)
        written = await writer
    finally:
        await stop(events)
    assert [e.mod_revision for e in seen] == written
    assert [e.value for e in seen] == [str(i).encode() for i in range(count)]


async def test_watches_of_several_stores_agree(backend: Backend, store: MetadataStore) -> None:
    if backend.kind != "etcd":
        other = store  # local stores are shared by in-process brokers; etcd clients are separate
    else:
        other = await backend.open()
    start = await revision_of(store)
    events = other.watch("", start + 1)
    try:
        written = [await store.commit([], [Put(f"k{i}", b"v")]) for i in range(3)]
        seen = await take(events, 3)
    finally:
        await stop(events)
    assert [e.mod_revision for e in seen] == written


async def test_close_ends_watches_and_later_calls_fail(store: MetadataStore) -> None:
    start = await revision_of(store)
    events = store.watch("", start + 1)
    await store.commit([], [Put("k", b"v")])
    await take(events, 1)

    async def drain() -> int:
        return len([event async for event in events])

    draining = asyncio.create_task(drain())
    await store.close()
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        assert await draining == 0
    await store.close()  # idempotent
    with pytest.raises(MetadataStoreError):
        await store.get("k")


# persistence


@pytest.mark.parametrize(
    "backend", ["file", pytest.param("etcd", marks=pytest.mark.integration)], indirect=True
)
async def test_state_survives_reopening(backend: Backend) -> None:
    store = await backend.open()
    lease = await store.grant_lease(30)
    await store.commit([], [Put("cluster/id", b"abc"), Put("brokers/1", b"live", lease=lease)])
    last = await store.commit([], [Put("topics/t", b"t")])
    kept = await store.get("topics/t")
    await store.close()
    reopened = await backend.open()
    found, revision = await reopened.range("")
    assert revision >= (last or 0)
    assert await reopened.get("topics/t") == kept
    if backend.kind == "file":
        assert [kv.key for kv in found] == ["cluster/id", "topics/t"]  # leases die with the process
    later = await reopened.commit([], [Put("topics/t", b"u")])
    assert later == revision + 1


# etcd only: endpoints, compaction, an unreachable or killed server


@pytest.mark.integration
async def test_endpoints_are_tried_in_order(etcd_server: EtcdServer, tmp_path: Path) -> None:
    closed = EtcdServer(tmp_path / "never")  # nothing listens on its ports
    uri = parse_metadata_uri(f"etcd://{closed.endpoint},{etcd_server.endpoint}/t{uuid.uuid4().hex[:8]}")
    store = EtcdMetadataStore(uri, connect_timeout_s=2.0)
    await store.start()
    try:
        assert await store.commit([], [Put("k", b"v")]) is not None
    finally:
        await store.close()


@pytest.mark.integration
async def test_watch_from_a_compacted_revision_fails(tmp_path: Path) -> None:
    # a server of its own: compaction is server-wide and would break other tests' watches
    with EtcdServer(tmp_path / "etcd") as server:
        store = EtcdMetadataStore(parse_metadata_uri(server.uri("compacted")))
        await store.start()
        try:
            first = await store.commit([], [Put("k", b"1")])
            last = await store.commit([], [Put("k", b"2")])
            host, port = server.endpoint.split(":")
            async with aetcd.Client(host=host, port=int(port)) as client:
                await client.compact(last)
            with pytest.raises(MetadataStoreError, match="compacted"):
                await take(store.watch("", first or 0), 1)
            events = store.watch("", last or 0)
            try:
                assert [e.value for e in await take(events, 1)] == [b"2"]
            finally:
                await stop(events)
        finally:
            await store.close()


async def test_unreachable_etcd_raises_store_errors(tmp_path: Path) -> None:
    closed = EtcdServer(tmp_path / "never")  # its ports are free and nothing listens on them
    store = EtcdMetadataStore(parse_metadata_uri(closed.uri("x")), connect_timeout_s=2.0)
    with pytest.raises(MetadataStoreError, match="cannot reach etcd"):
        await store.start()
    await store.close()


@pytest.mark.integration
async def test_a_killed_etcd_breaks_calls_and_watches_until_it_returns(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as server:
        store = EtcdMetadataStore(
            parse_metadata_uri(server.uri(f"t{uuid.uuid4().hex[:8]}")), request_timeout_s=3.0
        )
        await store.start()
        try:
            written = await store.commit([], [Put("k", b"v")])
            events = store.watch("", (written or 0) + 1)

            async def next_event() -> WatchEvent:
                return await anext(events)

            waiting = asyncio.create_task(next_event())
            server.kill()
            with pytest.raises(MetadataStoreError):
                async with asyncio.timeout(EVENT_TIMEOUT_S):
                    await waiting
            with pytest.raises(MetadataStoreError):
                await store.get("k")
            await asyncio.to_thread(server.restart)
            kv = await store.get("k")
            assert kv is not None and kv.mod_revision == written
        finally:
            await store.close()
