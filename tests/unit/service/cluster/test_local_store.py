"""LocalMetadataStore beyond the shared contract: leases by a ManualClock, the reaper on the system clock,
bounded watch history, the persisted file, and a Hypothesis property against a plain dict model."""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tierlog.service.cluster.local_store import LocalMetadataStore
from tierlog.service.cluster.metadata_store import (
    Compare,
    Delete,
    KeyValue,
    LeaseExpiredError,
    MetadataStoreError,
    Op,
    Put,
    WatchEvent,
)
from tierlog.tiering.log import ManualClock

START_MS = 1_700_000_000_000
EVENT_TIMEOUT_S = 10.0


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[LocalMetadataStore]:
    opened = LocalMetadataStore(clock=clock)
    await opened.start()
    try:
        yield opened
    finally:
        await opened.close()


async def take(events: AsyncIterator[WatchEvent], count: int) -> list[WatchEvent]:
    taken: list[WatchEvent] = []
    async with asyncio.timeout(EVENT_TIMEOUT_S):
        while len(taken) < count:
            taken.append(await anext(events))
    return taken


async def stop(events: AsyncIterator[WatchEvent]) -> None:
    await cast(AsyncGenerator[WatchEvent, None], events).aclose()


# leases on a manual clock


async def test_a_lease_lives_for_its_ttl_from_the_last_keep_alive(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    lease = await store.grant_lease(3)
    await store.commit([], [Put("brokers/1", b"b", lease=lease)])
    clock.advance(2_999)
    assert store.expire_leases() == 0
    await store.keep_alive(lease)
    clock.advance(2_999)
    assert await store.get("brokers/1") is not None
    clock.advance(1)
    # every operation expires what is due, no explicit call needed
    assert await store.get("brokers/1") is None
    with pytest.raises(LeaseExpiredError):
        await store.keep_alive(lease)
    assert store.expire_leases() == 0


async def test_each_expired_lease_is_one_write_in_deadline_order(
    store: LocalMetadataStore, clock: ManualClock
) -> None:
    late = await store.grant_lease(5)
    early = await store.grant_lease(2)
    start = await store.commit(
        [], [Put("a", b"", lease=late), Put("b", b"", lease=late), Put("c", b"", lease=early), Put("d", b"")]
    )
    assert start is not None
    events = store.watch("", start + 1)
    try:
        clock.advance(10_000)
        assert store.expire_leases() == 2
        seen = await take(events, 3)
    finally:
        await stop(events)
    assert [(e.kind, e.key, e.mod_revision) for e in seen] == [
        ("delete", "c", start + 1),
        ("delete", "a", start + 2),
        ("delete", "b", start + 2),
    ]
    assert [kv.key for kv in (await store.range(""))[0]] == ["d"]


async def test_the_reaper_expires_leases_on_the_system_clock() -> None:
    store = LocalMetadataStore()
    await store.start()
    try:
        lease = await store.grant_lease(1)
        written = await store.commit([], [Put("controller", b"c", lease=lease)])
        events = store.watch("", (written or 0) + 1)
        try:
            (gone,) = await take(events, 1)  # nobody calls the store: the reaper does it
        finally:
            await stop(events)
        assert (gone.kind, gone.key) == ("delete", "controller")
    finally:
        await store.close()


async def test_lease_ttl_must_be_positive(store: LocalMetadataStore) -> None:
    with pytest.raises(ValueError, match="at least 1 s"):
        await store.grant_lease(0)


# watches


async def test_a_start_older_than_the_history_is_compacted(clock: ManualClock) -> None:
    store = LocalMetadataStore(clock=clock, history_limit=3)
    await store.start()
    try:
        revisions = [await store.commit([], [Put("k", str(i).encode())]) for i in range(5)]
        with pytest.raises(MetadataStoreError, match="compacted"):
            await anext(store.watch("", revisions[0] or 0))
        events = store.watch("", revisions[2] or 0)
        try:
            assert [e.value for e in await take(events, 3)] == [b"2", b"3", b"4"]
        finally:
            await stop(events)
    finally:
        await store.close()


async def test_a_watcher_that_falls_too_far_behind_is_broken(clock: ManualClock) -> None:
    store = LocalMetadataStore(clock=clock, history_limit=2)
    await store.start()
    try:
        events = store.watch("", store.revision + 1)
        await store.commit([], [Put("k", b"0")])
        await take(events, 1)
        for i in range(1, 5):
            await store.commit([], [Put("k", str(i).encode())])
        assert [e.value for e in await take(events, 2)] == [b"1", b"2"]
        with pytest.raises(MetadataStoreError, match="fell more than 2 revisions behind"):
            await anext(events)
    finally:
        await store.close()


async def test_calls_before_start_fail(clock: ManualClock) -> None:
    store = LocalMetadataStore(clock=clock)
    with pytest.raises(MetadataStoreError, match="not started"):
        await store.get("k")


# the file


async def test_the_file_holds_keys_without_a_lease_and_the_revision(
    tmp_path: Path, clock: ManualClock
) -> None:
    path = tmp_path / "metadata.json"
    store = LocalMetadataStore(path, clock=clock)
    await store.start()
    lease = await store.grant_lease(10)
    await store.commit([], [Put("cluster/id", b"\x00id"), Put("brokers/1", b"b", lease=lease)])
    await store.revoke_lease(lease)
    await store.close()
    doc = json.loads(path.read_text())
    assert doc["revision"] == 3
    assert [k["key"] for k in doc["keys"]] == ["cluster/id"]
    assert not path.with_name("metadata.json.tmp").exists()

    reopened = LocalMetadataStore(path, clock=clock)
    await reopened.start()
    try:
        assert reopened.revision == 3
        assert await reopened.get("cluster/id") == KeyValue("cluster/id", b"\x00id", 2, 2, 1)
        with pytest.raises(MetadataStoreError, match="compacted"):
            await anext(reopened.watch("", 3))
        events = reopened.watch("", 4)
        try:
            written = await reopened.commit([], [Put("topics/t", b"t")])
            assert [e.mod_revision for e in await take(events, 1)] == [written] == [4]
        finally:
            await stop(events)
    finally:
        await reopened.close()


@pytest.mark.parametrize(
    "content", [b"{not json", b"[]", b'{"format": 1, "revision": 1, "keys": [{"key": "k"}]}']
)
async def test_a_corrupt_file_fails_the_start(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "metadata.json"
    path.write_bytes(content)
    with pytest.raises(MetadataStoreError, match="corrupt"):
        await LocalMetadataStore(path).start()


# a property: any sequence of commits behaves as a plain dict


KEYS = ["a", "a/1", "a/2", "b"]


@dataclass(frozen=True)
class Step:
    compares: list[tuple[str, str]]  # (key, "current" | "absent" | "stale")
    ops: list[tuple[str, str, bool]]  # ("put", key, _) | ("delete", key, prefix)


steps = st.lists(
    st.builds(
        Step,
        st.lists(
            st.tuples(st.sampled_from(KEYS), st.sampled_from(["current", "absent", "stale"])), max_size=2
        ),
        st.lists(
            st.one_of(
                st.tuples(st.just("put"), st.sampled_from(KEYS), st.just(False)),
                st.tuples(st.just("delete"), st.sampled_from([*KEYS, "a/", ""]), st.booleans()),
            ),
            max_size=3,
        ),
    ),
    max_size=25,
)


class Model:
    """The contract on a dict: key -> KeyValue, and the revision."""

    def __init__(self) -> None:
        self.kv: dict[str, KeyValue] = {}
        self.revision = 1

    def mod(self, key: str) -> int:
        kv = self.kv.get(key)
        return kv.mod_revision if kv is not None else 0

    @staticmethod
    def refused(ops: list[Op]) -> bool:
        """etcd refuses a commit that writes a key twice: two puts, or a put in a deleted range."""
        puts = [op.key for op in ops if isinstance(op, Put)]
        deleted = [op for op in ops if isinstance(op, Delete)]
        in_range = any(k.startswith(d.key) if d.prefix else k == d.key for k in puts for d in deleted)
        return len(set(puts)) < len(puts) or in_range

    def commit(self, compares: list[Compare], ops: list[Op]) -> int | None:
        if any(self.mod(c.key) != c.mod_revision for c in compares):
            return None
        revision, changed = self.revision + 1, False
        for op in ops:
            if isinstance(op, Put):
                old = self.kv.get(op.key)
                created, version = (old.create_revision, old.version + 1) if old else (revision, 1)
                self.kv[op.key] = KeyValue(op.key, op.value, created, revision, version)
                changed = True
            else:
                gone = [k for k in self.kv if (k.startswith(op.key) if op.prefix else k == op.key)]
                for key in gone:
                    del self.kv[key]
                changed = changed or bool(gone)
        if changed:
            self.revision = revision
        return self.revision


def build(step: Step, model: Model, counter: int) -> tuple[list[Compare], list[Op]]:
    compares = []
    for key, kind in step.compares:
        current = model.mod(key)
        wanted = {"current": current, "absent": 0, "stale": current + 1 if current == 0 else current - 1}[
            kind
        ]
        compares.append(Compare(key, wanted))
    ops: list[Op] = [
        Put(key, f"v{counter}".encode()) if kind == "put" else Delete(key, prefix)
        for kind, key, prefix in step.ops
    ]
    return compares, ops


async def run_against_model(script: list[Step], path: Path) -> None:
    model = Model()
    store = LocalMetadataStore(path, clock=ManualClock(START_MS))
    await store.start()
    for counter, step in enumerate(script):
        compares, ops = build(step, model, counter)
        if model.refused(ops):
            with pytest.raises(MetadataStoreError):
                await store.commit(compares, ops)
        else:
            assert await store.commit(compares, ops) == model.commit(compares, ops)
        assert await store.range("") == (sorted(model.kv.values(), key=lambda kv: kv.key), model.revision)
    await store.close()
    reopened = LocalMetadataStore(path, clock=ManualClock(START_MS))
    await reopened.start()
    assert await reopened.range("") == (sorted(model.kv.values(), key=lambda kv: kv.key), model.revision)
    await reopened.close()


@given(steps)
def test_commits_behave_as_a_dict(script: list[Step]) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(run_against_model(script, Path(directory) / "metadata.json"))
