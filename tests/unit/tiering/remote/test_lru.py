"""The generic byte-bounded single-flight LRU under the remote read caches: a Hypothesis state machine
against an OrderedDict model, then single-flight, failures, cancellation and close, driven by events."""

from __future__ import annotations

import asyncio
import gc
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from tierlog.tiering.remote.lru import CacheListener, LruCache, Uncached
from tierlog.wire.errors import InvalidRequestError, UnavailableError

Value = tuple[str, int]  # (what was loaded, its size)


def size_of(value: Value) -> int:
    return value[1]


class Recorder(CacheListener[str, Value]):
    def __init__(self) -> None:
        self.hits: list[str] = []
        self.misses: list[tuple[str, bool]] = []
        self.evicted: list[str] = []

    def on_hit(self, key: str, value: Value) -> None:
        self.hits.append(key)

    def on_miss(self, key: str, joined: bool) -> None:
        self.misses.append((key, joined))

    def on_evict(self, key: str, value: Value) -> None:
        self.evicted.append(key)


class Boom(Exception):
    pass


# -- the reference model ---------------------------------------------------------------------------


class LruMachine(RuleBasedStateMachine):
    """Every get runs to completion, so the cache must behave exactly like an OrderedDict LRU."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.cache: LruCache[str, Value] | None = None
        self.model: OrderedDict[str, Value] = OrderedDict()
        self.recorder = Recorder()
        self.loads = 0

    @initialize(max_bytes=st.integers(0, 40), max_entries=st.none() | st.integers(0, 4))
    def bounds(self, max_bytes: int, max_entries: int | None) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.cache = LruCache(
            max_bytes=max_bytes, max_entries=max_entries, size_of=size_of, listener=self.recorder
        )

    def teardown(self) -> None:
        if self.cache is not None:
            self.loop.run_until_complete(self.cache.close())
        self.loop.close()

    @rule(
        key=st.sampled_from("abcdef"),
        size=st.integers(0, 15),
        outcome=st.sampled_from(["cache", "uncached", "fail"]),
    )
    def get(self, key: str, size: int, outcome: str) -> None:
        assert self.cache is not None
        self.loads += 1
        fresh: Value = (f"{key}{self.loads}", size)

        async def loader() -> Value | Uncached[Value]:
            self.loaded = True
            if outcome == "fail":
                raise Boom
            return Uncached(fresh) if outcome == "uncached" else fresh

        self.loaded = False
        evicted_before = len(self.recorder.evicted)
        expected: Value | None = None
        if key in self.model:
            self.model.move_to_end(key)
            expected = self.model[key]
        elif outcome != "fail":
            expected = fresh
            if outcome == "cache" and size <= self.max_bytes and self.max_entries != 0:
                self.model[key] = fresh
        try:
            got = self.loop.run_until_complete(self.cache.get_or_load(key, loader))
        except Boom:
            assert expected is None and self.loaded
            return
        assert got == expected
        assert self.loaded == (got == fresh)  # a hit never calls the loader
        evicted = []
        while sum(v[1] for v in self.model.values()) > self.max_bytes or (
            self.max_entries is not None and len(self.model) > self.max_entries
        ):
            evicted.append(self.model.popitem(last=False)[0])
        assert self.recorder.evicted[evicted_before:] == evicted

    @rule(key=st.sampled_from("abcdef"))
    def discard(self, key: str) -> None:
        assert self.cache is not None
        self.cache.discard(key)
        self.model.pop(key, None)

    @invariant()
    def matches_the_model(self) -> None:
        if self.cache is None:
            return
        assert self.cache.keys() == list(self.model)
        assert len(self.cache) == len(self.model)
        assert self.cache.cached_bytes == sum(v[1] for v in self.model.values()) <= self.max_bytes
        assert not any(self.cache.is_loading(k) for k in "abcdef")


LruMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLruMachine = LruMachine.TestCase


# -- concurrency ------------------------------------------------------------------------------------


class GatedLoader:
    """A loader that signals when it starts and returns (or raises) only when released."""

    def __init__(self, value: Value = ("v", 1), error: Exception | None = None) -> None:
        self.value = value
        self.error = error
        self.calls = 0
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.cancelled = False

    async def __call__(self) -> Value:
        self.calls += 1
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.value


def new_cache(**kwargs: Any) -> tuple[LruCache[str, Value], Recorder]:
    recorder = Recorder()
    options: dict[str, Any] = {"max_bytes": 100, "size_of": size_of, "listener": recorder, **kwargs}
    return LruCache(**options), recorder


async def test_concurrent_gets_share_one_load() -> None:
    cache, recorder = new_cache()
    loader = GatedLoader()
    waiters = [asyncio.create_task(cache.get_or_load("k", loader)) for _ in range(10)]
    await loader.started.wait()
    assert cache.is_loading("k")
    loader.release.set()
    assert await asyncio.gather(*waiters) == [("v", 1)] * 10
    assert loader.calls == 1
    assert recorder.misses == [("k", False)] + [("k", True)] * 9
    assert await cache.get_or_load("k", GatedLoader(("other", 1))) == ("v", 1)
    assert recorder.hits == ["k"] and not cache.is_loading("k")
    await cache.close()


async def test_a_failed_load_reaches_every_waiter_and_is_retried() -> None:
    cache, _ = new_cache()
    failing = GatedLoader(error=Boom("down"))
    waiters = [asyncio.create_task(cache.get_or_load("k", failing)) for _ in range(3)]
    await failing.started.wait()
    failing.release.set()
    results = await asyncio.gather(*waiters, return_exceptions=True)
    assert all(isinstance(r, Boom) for r in results)
    assert "k" not in cache and not cache.is_loading("k")
    retry = GatedLoader()
    retry.release.set()
    assert await cache.get_or_load("k", retry) == ("v", 1)
    assert failing.calls == 1 and retry.calls == 1 and "k" in cache
    await cache.close()


async def test_an_uncached_result_is_returned_but_not_kept() -> None:
    cache, _ = new_cache()

    async def degraded() -> Value | Uncached[Value]:
        return Uncached(("stand-in", 1))

    assert await cache.get_or_load("k", degraded) == ("stand-in", 1)
    assert "k" not in cache and cache.cached_bytes == 0
    await cache.close()


async def test_a_waiter_giving_up_does_not_cancel_the_load() -> None:
    cache, _ = new_cache()
    loader = GatedLoader()
    quitter = asyncio.create_task(cache.get_or_load("k", loader))
    stayer = asyncio.create_task(cache.get_or_load("k", loader))
    await loader.started.wait()
    quitter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await quitter
    loader.release.set()
    assert await stayer == ("v", 1)
    assert not loader.cancelled and "k" in cache
    await cache.close()


async def test_the_byte_bound_holds_and_oversized_values_are_not_cached() -> None:
    cache, recorder = new_cache(max_bytes=10, max_entries=3)

    def value(name: str, size: int) -> GatedLoader:
        loader = GatedLoader((name, size))
        loader.release.set()
        return loader

    for name, size in [("a", 4), ("b", 4), ("c", 2)]:
        await cache.get_or_load(name, value(name, size))
    assert cache.keys() == ["a", "b", "c"] and cache.cached_bytes == 10
    await cache.get_or_load("a", value("x", 1))  # a hit: "a" becomes the most recent
    await cache.get_or_load("d", value("d", 3))  # 13 bytes: evict the least recent, "b"
    assert cache.keys() == ["c", "a", "d"] and cache.cached_bytes == 9
    await cache.get_or_load("e", value("e", 1))  # four entries: evict "c"
    assert cache.keys() == ["a", "d", "e"] and recorder.evicted == ["b", "c"]
    assert await cache.get_or_load("big", value("big", 11)) == ("big", 11)
    assert "big" not in cache and cache.keys() == ["a", "d", "e"]
    cache.discard("a")
    assert cache.cached_bytes == 4 and recorder.evicted == ["b", "c"]  # discarding is no eviction
    await cache.close()


async def test_close_cancels_and_awaits_loads_in_flight() -> None:
    cache, _ = new_cache()
    awaited, background = GatedLoader(), GatedLoader()
    waiter = asyncio.create_task(cache.get_or_load("k", awaited))
    assert cache.load_in_background("b", background)
    assert not cache.load_in_background("b", background)  # already loading
    await awaited.started.wait()
    await background.started.wait()
    await cache.close()
    assert awaited.cancelled and background.cancelled
    assert not cache.is_loading("k") and not cache.is_loading("b") and len(cache) == 0
    with pytest.raises(UnavailableError, match="closed while loading"):
        await waiter  # the waiter was not cancelled: it is told why its value never came
    with pytest.raises(UnavailableError, match="closed"):
        await cache.get_or_load("k", GatedLoader())
    assert not cache.load_in_background("c", GatedLoader())
    await cache.close()  # idempotent


async def test_a_failed_background_load_is_retrieved_and_drained() -> None:
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        cache, _ = new_cache()
        failing = GatedLoader(error=Boom("nobody waits"))
        assert cache.load_in_background("k", failing)
        await failing.started.wait()
        failing.release.set()
        await cache.drain()
        assert not cache.is_loading("k") and "k" not in cache
        gc.collect()  # a task whose exception nobody retrieved would be reported when collected
        assert reported == []
        await cache.close()
    finally:
        loop.set_exception_handler(None)


def test_negative_bounds_are_refused() -> None:
    with pytest.raises(InvalidRequestError):
        LruCache(max_bytes=-1, size_of=size_of)
    with pytest.raises(InvalidRequestError):
        LruCache(max_bytes=1, max_entries=-1, size_of=size_of)
