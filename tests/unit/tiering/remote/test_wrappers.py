"""The object-store wrappers over a real LocalObjectStore: retrying (with an injected sleep, clock and RNG),
instrumentation and fault injection."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tierlog.tiering.remote.faults import FaultInjectingStore
from tierlog.tiering.remote.instrumented import InstrumentedStore
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.object_store import ObjectInfo, ObjectStore
from tierlog.tiering.remote.retrying import DeadlineExceededError, RetryingStore, RetryPolicy
from tierlog.wire.errors import (
    ConflictError,
    InternalError,
    InvalidRequestError,
    NotFoundError,
    UnauthorizedError,
    UnavailableError,
)

DATA = bytes(range(256)) * 8


@pytest.fixture
async def local(tmp_path: Path) -> AsyncIterator[LocalObjectStore]:
    store = LocalObjectStore(tmp_path / "objects", fsync=False)
    yield store
    await store.close()


class FakeTime:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)
        self.now += delay


def retrying(inner: ObjectStore, policy: RetryPolicy, time: FakeTime, seed: int = 0) -> RetryingStore:
    return RetryingStore(inner, policy, sleep=time.sleep, clock=time.clock, rng=random.Random(seed))


# -- RetryingStore -------------------------------------------------------------------------------


def test_backoff_is_capped_full_jitter() -> None:
    policy = RetryPolicy(base_delay=0.1, max_delay=1.0)
    rng = random.Random(3)
    for retry in range(1, 12):
        cap = min(1.0, 0.1 * 2 ** (retry - 1))
        delays = [policy.backoff(retry, rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
        assert max(delays) > cap * 0.8  # jitter spreads over the whole window


async def test_retries_unavailable_until_success(local: LocalObjectStore) -> None:
    time = FakeTime()
    faults = FaultInjectingStore(local)
    store = retrying(faults, RetryPolicy(max_attempts=5, base_delay=0.1, max_delay=10, deadline=None), time)
    faults.fail_next("put", 4)
    await store.put("k", b"v")
    assert faults.calls["put"] == 5
    assert len(time.sleeps) == 4
    assert all(0 <= d <= 0.1 * 2**i for i, d in enumerate(time.sleeps))
    assert store.stats.retries == 4 and store.stats.gave_up == 0
    assert await local.get("k") == b"v"


async def test_gives_up_after_max_attempts(local: LocalObjectStore) -> None:
    time = FakeTime()
    faults = FaultInjectingStore(local)
    store = retrying(faults, RetryPolicy(max_attempts=3, deadline=None), time)
    faults.fail_next("head", 10)
    with pytest.raises(UnavailableError):
        await store.head("k")
    assert faults.calls["head"] == 3
    assert store.stats.gave_up == 1


async def test_deadline_stops_retrying_before_sleeping_past_it(local: LocalObjectStore) -> None:
    time = FakeTime()
    faults = FaultInjectingStore(local)
    policy = RetryPolicy(max_attempts=100, base_delay=1.0, max_delay=1.0, deadline=5.0)
    store = retrying(faults, policy, time)
    faults.fail_next("get", 100)
    with pytest.raises(UnavailableError):
        await store.get("k")
    assert time.now <= 5.0
    assert sum(time.sleeps) == pytest.approx(time.now)
    assert faults.calls["get"] == len(time.sleeps) + 1 < 100


@pytest.mark.parametrize(
    "error",
    [
        NotFoundError("x"),
        ConflictError("x"),
        InvalidRequestError("x"),
        UnauthorizedError("x"),
        InternalError("x"),
    ],
)
async def test_final_errors_are_never_retried(local: LocalObjectStore, error: Exception) -> None:
    time = FakeTime()
    faults = FaultInjectingStore(local)
    store = retrying(faults, RetryPolicy(max_attempts=5), time)
    faults.fail_next("get_range", 1, lambda: error)
    with pytest.raises(type(error)):
        await store.get_range("k", 0, 1)
    assert faults.calls["get_range"] == 1
    assert time.sleeps == []


async def test_list_resumes_after_the_last_yielded_key(local: LocalObjectStore) -> None:
    keys = [f"p/{i:02d}" for i in range(10)]
    for k in keys:
        await local.put(k, b"x")
    time = FakeTime()
    faults = FaultInjectingStore(local)
    store = retrying(faults, RetryPolicy(max_attempts=3, deadline=None), time)
    faults.fail_next("list", 1, after=True)  # fails after yielding the first item
    listed = [info.key async for info in store.list("p/")]
    assert listed == keys  # no duplicates, nothing missing
    assert faults.calls["list"] == 2


class HangingStore(LocalObjectStore):
    """A store whose reads hang like a blackholed endpoint (accepts, never answers) after ``answers``
    listed keys; records that the hung call was cancelled."""

    def __init__(self, root: Path, *, answers: int = 0) -> None:
        super().__init__(root, fsync=False)
        self.answers = answers
        self.cancelled = 0

    async def _hang(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise

    async def get(self, key: str) -> bytes:
        await self._hang()
        raise AssertionError("unreachable")

    async def list(self, prefix: str = "", *, start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        count = 0
        async for info in super().list(prefix, start_after=start_after):
            if count >= self.answers:
                await self._hang()
            count += 1
            yield info


async def test_deadline_cuts_off_a_hung_attempt(tmp_path: Path) -> None:
    hanging = HangingStore(tmp_path / "objects")
    store = RetryingStore(hanging, RetryPolicy(max_attempts=100, deadline=0.05))
    with pytest.raises(DeadlineExceededError) as caught:
        await store.get("k")  # returns only because the deadline cancels the hung attempt
    assert caught.value.retriable and isinstance(caught.value, UnavailableError)
    assert hanging.cancelled == 1
    assert store.stats.deadline_exceeded == 1 and store.stats.gave_up == 1


async def test_deadline_bounds_each_step_of_a_listing(tmp_path: Path) -> None:
    hanging = HangingStore(tmp_path / "objects", answers=2)
    for i in range(4):
        await hanging.put(f"p/{i}", b"x")
    store = RetryingStore(hanging, RetryPolicy(max_attempts=100, deadline=0.05))
    listed: list[str] = []
    with pytest.raises(DeadlineExceededError):
        async for info in store.list("p/"):
            listed.append(info.key)
    assert listed == ["p/0", "p/1"]
    assert hanging.cancelled == 1


def test_policy_validation() -> None:
    with pytest.raises(InvalidRequestError):
        RetryPolicy(max_attempts=0)


# -- InstrumentedStore ---------------------------------------------------------------------------


async def test_instrumented_counts_requests_bytes_errors_and_latency(local: LocalObjectStore) -> None:
    ticks = iter(range(0, 1000, 1))
    store = InstrumentedStore(local, clock=lambda: float(next(ticks)))
    await store.put("a", DATA)
    assert await store.put_if_absent("a", b"zz") is False
    assert await store.put_if_absent("b", b"zz") is True
    await store.get_range("a", 10, 110)
    await store.get("a")
    with pytest.raises(NotFoundError):
        await store.get("missing")
    assert [i.key async for i in store.list()] == ["a", "b"]
    await store.delete_many(["a", "b"])
    snap = store.snapshot()
    ops = snap["ops"]
    assert ops["put"]["requests"] == 1 and ops["put"]["bytes"] == len(DATA)
    assert ops["put_if_absent"]["requests"] == 2 and ops["put_if_absent"]["bytes"] == 2
    assert ops["get_range"]["bytes"] == 100
    assert ops["get"]["requests"] == 2 and ops["get"]["errors"] == 1 and ops["get"]["bytes"] == len(DATA)
    assert ops["list"]["requests"] == 1 and ops["list"]["items"] == 2
    assert ops["delete_many"]["items"] == 2
    assert snap["errors"] == {"NotFoundError": 1}
    assert ops["put"]["latency_seconds_sum"] == 1.0 and ops["put"]["latency_seconds_max"] == 1.0
    store.reset()
    assert store.requests("put") == 0


async def test_instrumented_put_file_counts_file_size(local: LocalObjectStore, tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(DATA)
    store = InstrumentedStore(local)
    await store.put_file("f", path)
    assert store.snapshot()["ops"]["put_file"]["bytes"] == len(DATA)


# -- FaultInjectingStore -------------------------------------------------------------------------


async def test_corruption_flips_one_byte_once(local: LocalObjectStore) -> None:
    faults = FaultInjectingStore(local)
    await local.put("k", DATA)
    faults.corrupt_next("get", byte_index=5)
    bad = await faults.get("k")
    assert [i for i in range(len(DATA)) if bad[i] != DATA[i]] == [5]
    assert await faults.get("k") == DATA
    with pytest.raises(InvalidRequestError):
        faults.corrupt_next("put")
    with pytest.raises(InvalidRequestError):
        faults.fail_next("nope")


async def test_post_call_fault_happens_after_the_write(local: LocalObjectStore) -> None:
    faults = FaultInjectingStore(local)
    faults.fail_next("put", after=True)
    with pytest.raises(UnavailableError):
        await faults.put("k", b"v")
    assert await local.get("k") == b"v"
    assert faults.pending("put") == 0
