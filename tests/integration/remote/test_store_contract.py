"""The object-store contract, written once and run against every backend (see conftest.BACKENDS).

Each test gets an empty namespace: a fresh directory for the local store, a fresh bucket on moto_server or
LocalStack. S3 backends list with a page size of 7 and use a small multipart threshold, so pagination and
multipart uploads are exercised with little data.
"""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path

import pytest

from tests.integration.remote.conftest import Backend
from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.object_store import ObjectStore
from tierlog.tiering.remote.prefixed import PrefixedStore
from tierlog.tiering.remote.retrying import RetryingStore, RetryPolicy
from tierlog.wire.errors import InvalidRequestError, NotFoundError, UnavailableError

PAYLOAD = bytes(range(256)) * 4  # 1024 distinct-ish bytes: a wrong offset shows as wrong content


async def keys_of(store: ObjectStore, prefix: str = "", start_after: str | None = None) -> list[str]:
    return [info.key async for info in store.list(prefix, start_after=start_after)]


async def test_put_get_head_roundtrip(store: ObjectStore) -> None:
    await store.put("a/b/c.log", PAYLOAD)
    assert await store.get("a/b/c.log") == PAYLOAD
    info = await store.head("a/b/c.log")
    assert (info.key, info.size) == ("a/b/c.log", len(PAYLOAD))
    assert info.etag
    assert info.last_modified.tzinfo is not None


async def test_put_replaces_and_changes_etag(store: ObjectStore) -> None:
    await store.put("k", b"first")
    first = await store.head("k")
    await store.put("k", b"second version")
    assert await store.get("k") == b"second version"
    second = await store.head("k")
    assert second.size == len(b"second version")
    assert second.etag != first.etag


async def test_empty_object(store: ObjectStore) -> None:
    await store.put("empty", b"")
    assert await store.get("empty") == b""
    assert (await store.head("empty")).size == 0
    assert await store.get_range("empty", 0, 10) == b""


@pytest.mark.parametrize(
    ("start", "end"),
    [
        (0, 1),
        (0, 1024),
        (1, 1023),
        (1023, 1024),
        (1000, 5000),
        (1024, 2000),
        (5000, 6000),
        (10, None),
        (1023, None),
    ],
)
async def test_get_range_edges(store: ObjectStore, start: int, end: int | None) -> None:
    await store.put("r", PAYLOAD)
    assert await store.get_range("r", start, end) == PAYLOAD[start:end]


async def test_get_range_empty_and_invalid(store: ObjectStore) -> None:
    await store.put("r", PAYLOAD)
    assert await store.get_range("r", 5, 5) == b""
    with pytest.raises(InvalidRequestError):
        await store.get_range("r", 5, 4)
    with pytest.raises(InvalidRequestError):
        await store.get_range("r", -1, 4)


async def test_missing_keys_are_not_found(store: ObjectStore) -> None:
    with pytest.raises(NotFoundError):
        await store.get("nope")
    with pytest.raises(NotFoundError):
        await store.get_range("nope", 0, 10)
    with pytest.raises(NotFoundError):
        await store.get_range("nope", 10, None)
    with pytest.raises(NotFoundError):
        await store.head("dir/nope")


async def test_invalid_keys_are_rejected_before_any_request(store: ObjectStore) -> None:
    for key in ["", "/abs", "a//b", "a/../b", "./a", "a/", "a\\b", ".tierlog-tmp/x"]:
        with pytest.raises(InvalidRequestError):
            await store.put(key, b"x")


async def test_delete_is_idempotent(store: ObjectStore) -> None:
    await store.put("d/x", b"1")
    await store.delete("d/x")
    await store.delete("d/x")
    await store.delete("never/existed")
    with pytest.raises(NotFoundError):
        await store.get("d/x")
    assert await keys_of(store) == []


async def test_delete_many(store: ObjectStore) -> None:
    keys = [f"many/{i:03d}" for i in range(12)]
    await asyncio.gather(*(store.put(k, b"v") for k in keys))
    await store.delete_many([*keys[:8], "many/absent"])
    assert await keys_of(store) == keys[8:]
    await store.delete_many([])
    await store.delete_many(keys)
    assert await keys_of(store) == []


async def test_list_paginates_in_key_order(store: ObjectStore) -> None:
    keys = [f"topic/{p}/{i:020d}.log" for p in (0, 1) for i in range(15)]
    shuffled = keys[:]
    random.Random(7).shuffle(shuffled)
    await asyncio.gather(*(store.put(k, k.encode()) for k in shuffled))
    await store.put("other/x", b"x")
    listed = [info async for info in store.list("topic/")]
    assert [i.key for i in listed] == sorted(keys)
    assert all(i.size == len(i.key) for i in listed)
    assert await keys_of(store, "topic/1/") == sorted(keys)[15:]
    assert await keys_of(store, "topic/1/000000000000000000") == sorted(keys)[15:]
    assert await keys_of(store, "topic/0/", start_after=keys[12]) == keys[13:15]
    assert await keys_of(store, "nothing/") == []
    assert len(await keys_of(store)) == 31


async def test_keys_with_slashes_and_unicode(store: ObjectStore) -> None:
    keys = ["deep/a/b/c/d/e.log", "deep/a/b.log", "deep/é/ü.log", "deep/space name.log"]
    for k in keys:
        await store.put(k, k.encode())
    for k in keys:
        assert await store.get(k) == k.encode()
    assert await keys_of(store, "deep/") == sorted(keys)


async def test_put_if_absent_creates_once(store: ObjectStore) -> None:
    assert await store.put_if_absent("once", b"first") is True
    assert await store.put_if_absent("once", b"second") is False
    assert await store.get("once") == b"first"


async def test_put_if_absent_concurrent_exactly_one_wins(store: ObjectStore) -> None:
    for round_ in range(5):
        key = f"race/{round_}"
        bodies = [f"writer-{i}".encode() for i in range(2 if round_ == 0 else 6)]
        results = await asyncio.gather(*(store.put_if_absent(key, body) for body in bodies))
        assert sum(results) == 1
        assert await store.get(key) == bodies[results.index(True)]


async def test_put_file_small_and_multipart(store: ObjectStore, backend: Backend, tmp_path: Path) -> None:
    rng = random.Random(42)
    small = tmp_path / "small.bin"
    small.write_bytes(rng.randbytes(100))
    big = tmp_path / "big.bin"
    big_data = rng.randbytes(backend.part_size * 3 + 12345)  # 4 parts, the last one short
    big.write_bytes(big_data)
    await store.put_file("seg/small.log", small)
    await store.put_file("seg/big.log", big)
    assert await store.get("seg/small.log") == small.read_bytes()
    assert await store.get("seg/big.log") == big_data
    mid = backend.part_size - 10
    assert await store.get_range("seg/big.log", mid, mid + 20) == big_data[mid : mid + 20]
    if backend.server is not None:
        # S3 gives a multipart object an ETag ending in -<number of parts>.
        assert (await store.head("seg/big.log")).etag.strip('"').endswith("-4")
        assert not (await store.head("seg/small.log")).etag.strip('"').endswith("-1")


async def test_put_file_missing_source(store: ObjectStore, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        await store.put_file("x", tmp_path / "no-such-file")
    assert await keys_of(store) == []


async def test_prefixed_store_isolates_and_strips(store: ObjectStore) -> None:
    left, right = PrefixedStore(store, "tenant-a/archive"), PrefixedStore(store, "tenant-b")
    await left.put("t/0/x", b"L")
    await right.put("t/0/x", b"R")
    assert await left.get("t/0/x") == b"L"
    assert await keys_of(left) == ["t/0/x"]
    assert (await left.head("t/0/x")).key == "t/0/x"
    assert await keys_of(store) == ["tenant-a/archive/t/0/x", "tenant-b/t/0/x"]
    await left.delete_many(["t/0/x"])
    assert await keys_of(store) == ["tenant-b/t/0/x"]


async def test_retry_recovers_from_transient_faults(store: ObjectStore) -> None:
    faults = FaultInjectingStore(store)
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)

    retrying = RetryingStore(faults, RetryPolicy(max_attempts=4, deadline=None), sleep=fake_sleep)
    faults.fail_next("put", 2)
    await retrying.put("k", b"v")
    faults.fail_next("get_range", 3)
    assert await retrying.get_range("k", 0, 1) == b"v"
    assert faults.calls["put"] == 3
    assert faults.calls["get_range"] == 4
    assert len(sleeps) == 5
    faults.fail_next("get", 4)
    with pytest.raises(UnavailableError):
        await retrying.get("k")
    assert faults.calls["get"] == 4
    with pytest.raises(NotFoundError):
        await retrying.get("missing")
    assert faults.calls["get"] == 5  # not-found is final: one attempt


async def test_retried_create_after_lost_response_reports_false(store: ObjectStore) -> None:
    """The ambiguity the manifest store resolves by comparing bytes (see ManifestStore.commit)."""
    faults = FaultInjectingStore(store)

    async def no_sleep(delay: float) -> None:
        return None

    retrying = RetryingStore(faults, RetryPolicy(max_attempts=3), sleep=no_sleep)
    faults.fail_next("put_if_absent", after=True)
    assert await retrying.put_if_absent("k", b"mine") is False
    assert await store.get("k") == b"mine"


async def test_manifest_commits_conflict_on_the_same_base(store: ObjectStore) -> None:
    from tierlog.tiering.remote import manifest as mf

    manifests = ManifestStore(store)
    base = await manifests.load("orders", 0)
    assert base.version == 0
    first = await manifests.commit(base, mf.set_log_start_offset(base, 10))
    results = await asyncio.gather(
        manifests.commit(first, mf.set_log_start_offset(first, 20)),
        manifests.commit(first, mf.set_log_start_offset(first, 30)),
        return_exceptions=True,
    )
    winners = [r for r in results if isinstance(r, mf.Manifest)]
    assert len(winners) == 1
    loaded = await manifests.load("orders", 0)
    assert loaded == winners[0]
    assert loaded.version == 2


async def test_blocking_io_stays_off_the_loop(store: ObjectStore, tmp_path: Path) -> None:
    """A loop-lag probe: the event loop keeps turning while a large object is written and read.

    The ticker sleeps a millisecond between ticks: a ticker spinning on ``sleep(0)`` holds the GIL
    whenever the loop runs, so every step of the store's worker thread waited a switch interval for it
    (a 4 MiB round trip took 50-70 s). A store blocking the loop would let it tick only at its awaits."""
    # 16 MiB: large enough that writing and reading it takes many ticker periods even on a tmpfs (at
    # 4 MiB a fast local round trip finished within one 1 ms tick: the probe failed with a store that
    # never blocked the loop)
    data = os.urandom(16 << 20)
    ticks = 0
    stop = asyncio.Event()

    async def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0.001)

    task = asyncio.create_task(ticker())
    try:
        await store.put("big", data)
        assert await store.get("big") == data
    finally:
        stop.set()
        await task
    assert ticks > 1
