"""The follower's decisions: KIP-101/KIP-279 truncation and Kafka's out-of-range rule (pure functions),
checked on the classic divergence scenarios and against a model of replicas electing leaders and copying
each other; then the fetch loop itself over an in-memory partition and a scripted leader.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tierlog.service.cluster.model import BrokerRegistration
from tierlog.service.replication.client import ReplicaFetch
from tierlog.service.replication.fetcher import (
    OutOfRange,
    ReplicaFetcher,
    Truncation,
    follower_end_offset,
    out_of_range_action,
    truncation_point,
)
from tierlog.service.settings.config import build_settings
from tierlog.tiering.log.leader_epoch import EpochEntry, LeaderEpochCache
from tierlog.wire.errors import (
    FencedLeaderEpochError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    TierlogError,
)

# ---- a model of replicated logs ------------------------------------------------------------------------


@dataclasses.dataclass
class Replica:
    """A log as the epochs of its records, and its leader epoch cache (Kafka's rules, in memory)."""

    records: list[int] = dataclasses.field(default_factory=list)
    entries: list[EpochEntry] = dataclasses.field(default_factory=list)
    high_watermark: int = 0

    @property
    def leo(self) -> int:
        return len(self.records)

    def assign(self, epoch: int, start: int) -> None:
        if self.entries and (epoch <= self.entries[-1].epoch or start < self.entries[-1].start_offset):
            return
        self.entries = [e for e in self.entries if e.epoch < epoch and e.start_offset < start]
        self.entries.append(EpochEntry(epoch, start))

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """A leader's answer (``LeaderEpochCache.end_offset_for``): undefined below the first entry."""
        entries = self.entries
        if epoch < 0 or not entries or epoch > entries[-1].epoch or epoch < entries[0].epoch:
            return -1, -1
        if epoch == entries[-1].epoch:
            return epoch, self.leo
        below = [i for i, e in enumerate(entries) if e.epoch <= epoch]
        return entries[below[-1]].epoch, entries[below[-1] + 1].start_offset

    def truncate(self, offset: int) -> None:
        if offset < self.leo:
            del self.records[offset:]
            self.entries = [e for e in self.entries if e.start_offset < offset]
        self.high_watermark = min(self.high_watermark, self.leo)

    def append(self, epoch: int, count: int) -> None:
        self.assign(epoch, self.leo)
        self.records.extend([epoch] * count)


def settle(follower: Replica, leader: Replica) -> int:
    """The fetcher's truncation rounds of ``follower`` against ``leader`` (as ``ReplicaFetcher._truncate``
    runs them); returns the rounds taken."""
    if not follower.entries:
        follower.truncate(follower.high_watermark)
        return 0
    ask = follower.entries[-1].epoch
    for rounds in range(1, 65):
        answer = leader.end_offset_for(ask)
        own = follower_end_offset(follower.entries, answer[0], follower.leo) if answer[1] >= 0 else answer
        step = truncation_point(
            answer, own, log_end_offset=follower.leo, high_watermark=follower.high_watermark
        )
        follower.truncate(step.offset)
        if step.done:
            return rounds
        assert own[0] < ask
        ask = own[0]
    raise AssertionError("truncation did not converge")


def copy(follower: Replica, leader: Replica, count: int) -> None:
    """The follower fetches up to ``count`` records from its log end offset (offsets and epochs kept)."""
    for epoch in leader.records[follower.leo : follower.leo + count]:
        follower.assign(epoch, follower.leo)
        follower.records.append(epoch)


# ---- truncation_point ------------------------------------------------------------------------------------


def test_leader_without_the_epoch_truncates_to_the_high_watermark() -> None:
    assert truncation_point((-1, -1), (-1, -1), log_end_offset=10, high_watermark=4) == Truncation(4, True)
    assert truncation_point((-1, -1), (-1, -1), log_end_offset=3, high_watermark=4) == Truncation(3, True)


def test_same_epoch_truncates_to_the_smaller_end() -> None:
    assert truncation_point((2, 7), (2, 9), log_end_offset=9, high_watermark=0) == Truncation(7, True)
    assert truncation_point((2, 9), (2, 7), log_end_offset=12, high_watermark=0) == Truncation(7, True)
    # the follower's log is shorter than both: nothing to cut
    assert truncation_point((2, 9), (2, 9), log_end_offset=5, high_watermark=0) == Truncation(5, True)


def test_follower_missing_the_answered_epoch_truncates_to_its_own_end_and_asks_again() -> None:
    # leader answered epoch 3; the follower's largest epoch <= 3 is 1, ending at 6
    assert truncation_point((3, 8), (1, 6), log_end_offset=10, high_watermark=0) == Truncation(6, False)


def test_follower_with_no_epoch_that_old_truncates_to_the_leader_end() -> None:
    assert truncation_point((1, 5), (-1, -1), log_end_offset=9, high_watermark=0) == Truncation(5, True)


def test_kip_101_scenario_follower_keeps_what_the_leader_has() -> None:
    # KIP-101 scenario 1: A (leader, epoch 0) has m0 m1, B has m0 only and HW 1 on both; A restarts, B leads
    # in epoch 1 and writes m2 at offset 1. A must not truncate to its HW and lose nothing committed, and
    # must drop its m1 (epoch 0) for B's m2.
    b = Replica()
    b.append(0, 1)
    b.append(1, 1)
    a = Replica(high_watermark=1)
    a.append(0, 2)
    assert settle(a, b) == 1
    assert a.records == [0]
    copy(a, b, 10)
    assert a.records == b.records == [0, 1]


def test_kip_279_scenario_the_leader_answers_an_epoch_the_follower_never_saw() -> None:
    # KIP-279: the follower copied offsets 0-3 of epoch 0 and later led epoch 3 alone (offsets 4-6, an
    # unclean history); meanwhile the leader kept offsets 0-1 of epoch 0, led epochs 1 and 4. Asked about
    # epoch 3, the leader answers epoch 1 (ending at 5), which the follower never saw: it truncates to where
    # its own epoch 0 ends (4), asks about epoch 0, learns it ends at 2 on the leader, and truncates there.
    follower = Replica()
    follower.append(0, 4)
    follower.append(3, 3)
    leader = Replica()
    leader.append(0, 2)
    leader.append(1, 3)
    leader.append(4, 2)
    rounds = settle(follower, leader)
    assert rounds == 2
    assert follower.records == [0, 0]
    copy(follower, leader, 100)
    assert follower.records == leader.records


def test_truncation_uses_the_real_epoch_cache(tmp_path: Path) -> None:
    # The first round of the scenario above, on two LeaderEpochCache files as the partitions answer it.
    leader = LeaderEpochCache(tmp_path / "leader")
    follower = LeaderEpochCache(tmp_path / "follower")
    for epoch, start in ((0, 0), (1, 2), (4, 5)):
        leader.assign(epoch, start)
    for epoch, start in ((0, 0), (3, 4)):
        follower.assign(epoch, start)
    latest = follower.latest_epoch
    assert latest == 3
    answer = leader.end_offset_for(latest, 7)
    assert answer == (1, 5)
    own = follower.end_offset_for(answer[0], 7)
    assert truncation_point(answer, own, log_end_offset=7, high_watermark=0) == Truncation(4, False)


_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("elect"), st.integers(0, 2)),
        st.tuples(st.just("append"), st.integers(1, 4)),
        st.tuples(st.just("fetch"), st.integers(0, 2), st.integers(0, 6)),
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_OPS)
def test_after_truncation_a_follower_is_a_prefix_of_its_leader(ops: list[tuple[object, ...]]) -> None:
    """Any history of (possibly unclean) elections, appends and partial fetches: once a follower has run the
    truncation rounds against the current leader, its log is a prefix of the leader's, record for record
    (offset and epoch), and fetching then makes them equal."""
    replicas = [Replica(), Replica(), Replica()]
    leader, epoch = 0, 0
    replicas[0].assign(0, 0)
    for op in ops:
        if op[0] == "elect":
            leader, epoch = int(str(op[1])), epoch + 1
            replicas[leader].assign(epoch, replicas[leader].leo)
        elif op[0] == "append":
            replicas[leader].append(epoch, int(str(op[1])))
        else:
            follower = int(str(op[1]))
            if follower == leader:
                continue
            settle(replicas[follower], replicas[leader])
            theirs, ours = replicas[leader].records, replicas[follower].records
            assert ours == theirs[: len(ours)]
            copy(replicas[follower], replicas[leader], int(str(op[2])))
    for index, replica in enumerate(replicas):
        if index != leader:
            settle(replica, replicas[leader])
            copy(replica, replicas[leader], 10_000)
            assert replica.records == replicas[leader].records


def test_follower_end_offset_follows_kafka() -> None:
    entries = [EpochEntry(2, 3), EpochEntry(4, 6), EpochEntry(7, 9)]
    assert follower_end_offset(entries, 7, 12) == (7, 12)
    assert follower_end_offset(entries, 5, 12) == (4, 9)
    assert follower_end_offset(entries, 4, 12) == (4, 9)
    assert follower_end_offset(entries, 2, 12) == (2, 6)
    assert follower_end_offset(entries, 1, 12) == (1, 3)  # older than every entry: nothing of it is kept
    assert follower_end_offset(entries, 8, 12) == (-1, -1)
    assert follower_end_offset([], 1, 12) == (-1, -1)


def test_follower_whose_first_epoch_is_newer_than_the_leader_answer_keeps_nothing_of_it() -> None:
    # the follower led epoch 1 alone from offset 0; the leader (epoch 2) kept epoch 0's record there
    leader = Replica()
    leader.append(0, 1)
    leader.assign(2, 1)
    follower = Replica()
    follower.append(1, 1)
    settle(follower, leader)
    assert follower.records == []


# ---- out_of_range_action ---------------------------------------------------------------------------------


def test_out_of_range_past_the_leader_end_truncates() -> None:
    assert out_of_range_action(log_end_offset=10, leader_start=0, leader_end=7) == OutOfRange("truncate", 7)


def test_out_of_range_below_the_leader_start_resets() -> None:
    assert out_of_range_action(log_end_offset=3, leader_start=8, leader_end=20) == OutOfRange("reset", 8)


def test_out_of_range_with_an_unknown_or_moved_range_retries() -> None:
    assert out_of_range_action(log_end_offset=3, leader_start=-1, leader_end=-1) is None
    assert out_of_range_action(log_end_offset=5, leader_start=2, leader_end=9) is None


# ---- the loop over fakes ---------------------------------------------------------------------------------


class FakeEpochs:
    def __init__(self, partition: FakePartition) -> None:
        self._partition = partition

    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._partition.model.entries)


class FakeLog:
    def __init__(self, partition: FakePartition) -> None:
        self.epochs = FakeEpochs(partition)


class FakePartition:
    """The follower-side methods of a Partition over a :class:`Replica` model; records what was called."""

    topic = "t"
    index = 0
    label = "t-0"

    def __init__(self, model: Replica) -> None:
        self.model = model
        self.closed = False
        self.calls: list[tuple[object, ...]] = []
        self.log = FakeLog(self)
        self.append_started = asyncio.Event()
        self.append_gate: asyncio.Event | None = None  # set: appends wait for it (a slow disk)
        self.log_start = 0  # moved up to the leader's (DeleteRecords), at most to the high watermark

    @property
    def log_end_offset(self) -> int:
        return self.model.leo

    @property
    def high_watermark(self) -> int:
        return self.model.high_watermark

    async def epoch_end_offset(self, epoch: int) -> tuple[int, int]:
        return self.model.end_offset_for(epoch)

    async def truncate_to(self, offset: int) -> None:
        self.calls.append(("truncate_to", offset))
        self.model.truncate(offset)

    async def reset_to(self, offset: int, epochs: Sequence[EpochEntry]) -> None:
        self.calls.append(("reset_to", offset, tuple(epochs)))
        self.model.records = [-1] * offset  # offsets below the start are not held; the count is what matters
        self.model.entries = list(epochs)
        self.model.high_watermark = offset

    async def append_as_follower(self, batches: bytes) -> int:
        epochs = [int(b) for b in batches]  # the fake leader sends one byte per record: its epoch
        self.append_started.set()
        if self.append_gate is not None:
            await self.append_gate.wait()
        self.calls.append(("append", self.model.leo, len(epochs)))
        for epoch in epochs:
            self.model.assign(epoch, self.model.leo)
            self.model.records.append(epoch)
        return self.model.leo

    def set_follower_high_watermark(self, leader_hw: int) -> None:
        self.model.high_watermark = min(leader_hw, self.model.leo)

    async def follow_log_start_offset(self, leader_start: int) -> None:
        self.log_start = max(self.log_start, min(leader_start, self.model.high_watermark))


class FakeClient:
    """A leader over a :class:`Replica` model; ``errors`` are raised by the next fetches, in order."""

    def __init__(self, leader: Replica, *, local_start: int = 0) -> None:
        self.leader = leader
        self.local_start = local_start
        self.errors: list[TierlogError] = []
        self.fetched: list[int] = []
        self.fetch_event = asyncio.Event()

    async def epoch_end_offset(
        self, url: str, topic: str, partition: int, *, leader_epoch: int, epoch: int
    ) -> tuple[int, int]:
        return self.leader.end_offset_for(epoch)

    async def fetch(
        self,
        url: str,
        topic: str,
        partition: int,
        *,
        offset: int,
        leader_epoch: int,
        max_bytes: int,
        max_wait_ms: int,
    ) -> ReplicaFetch:
        self.fetched.append(offset)
        self.fetch_event.set()
        if self.errors:
            raise self.errors.pop(0)
        data = bytes(self.leader.records[offset : offset + 3])
        if not data:
            await asyncio.sleep(0)  # a long poll that found nothing: yield as the real one does
        return ReplicaFetch(
            data=data,
            high_watermark=self.leader.high_watermark,
            log_start_offset=0,
            local_log_start_offset=self.local_start,
            log_end_offset=self.leader.leo,
            leader_epoch=leader_epoch,
        )


LEADER = BrokerRegistration(1, "http://127.0.0.1:1")


def make_fetcher(
    partition: FakePartition, client: FakeClient, history: Sequence[EpochEntry] | None = None
) -> tuple[ReplicaFetcher, list[tuple[str, int, int]]]:
    asked: list[tuple[str, int, int]] = []

    async def remote_history(topic: str, index: int, offset: int) -> Sequence[EpochEntry]:
        asked.append((topic, index, offset))
        return list(history or ())

    settings_ = build_settings({"replica.fetch.backoff.ms": "1"})
    fetcher = ReplicaFetcher(
        partition,  # type: ignore[arg-type]
        broker_id=2,
        leader=LEADER,
        leader_epoch=2,
        client=client,  # type: ignore[arg-type]
        settings=settings_,
        remote_history=remote_history if history is not None else None,
    )
    return fetcher, asked


async def run_until_caught_up(fetcher: ReplicaFetcher) -> None:
    fetcher.start()
    try:
        await asyncio.wait_for(fetcher.caught_up.wait(), 10)
    finally:
        await fetcher.close()


async def test_fetcher_truncates_then_copies_the_leader() -> None:
    leader = Replica(high_watermark=5)
    leader.append(0, 3)
    leader.append(2, 4)
    follower = Replica(high_watermark=2)
    follower.append(0, 3)
    follower.append(1, 2)  # written as leader in epoch 1, never replicated
    partition = FakePartition(follower)
    client = FakeClient(leader)
    fetcher, _ = make_fetcher(partition, client)
    await run_until_caught_up(fetcher)
    assert partition.calls[0] == ("truncate_to", 3)
    assert follower.records == leader.records
    assert follower.high_watermark == 5
    assert client.fetched[0] == 3


async def test_fetcher_builds_from_the_remote_tier_on_41602() -> None:
    leader = Replica(high_watermark=12)
    leader.append(0, 12)
    partition = FakePartition(Replica())
    client = FakeClient(leader, local_start=10)
    client.errors.append(
        OffsetMovedToTieredStorageError(
            "moved", log_start_offset=0, log_end_offset=12, local_log_start_offset=10
        )
    )
    history = [EpochEntry(0, 0)]
    fetcher, asked = make_fetcher(partition, client, history)
    await run_until_caught_up(fetcher)
    assert asked == [("t", 0, 10)]
    assert ("reset_to", 10, (EpochEntry(0, 0),)) in partition.calls
    assert client.fetched[:2] == [0, 10]
    assert partition.model.leo == 12


async def test_fetcher_restarts_at_the_leader_start_on_41601_below_it() -> None:
    leader = Replica(high_watermark=9)
    leader.append(0, 9)
    partition = FakePartition(Replica())
    client = FakeClient(leader)
    client.errors.append(OffsetOutOfRangeError("gone", log_start_offset=6, log_end_offset=9))
    fetcher, _ = make_fetcher(partition, client)
    await run_until_caught_up(fetcher)
    assert ("reset_to", 6, ()) in partition.calls
    assert client.fetched[:2] == [0, 6]


async def test_fetcher_truncates_to_the_leader_end_on_41601_past_it() -> None:
    leader = Replica(high_watermark=4)
    leader.append(0, 4)
    follower = Replica()
    follower.append(0, 4)
    partition = FakePartition(follower)
    client = FakeClient(leader)
    # the leader's log ends at 2 in this answer (as after an unclean election); the truncation rounds kept 4
    client.errors.append(OffsetOutOfRangeError("past", log_start_offset=0, log_end_offset=2))
    fetcher, _ = make_fetcher(partition, client)
    await run_until_caught_up(fetcher)
    assert ("truncate_to", 2) in partition.calls
    assert follower.records == leader.records


async def test_fetcher_backs_off_on_a_fenced_epoch_and_tries_again() -> None:
    leader = Replica(high_watermark=2)
    leader.append(0, 2)
    partition = FakePartition(Replica())
    client = FakeClient(leader)
    client.errors.extend([FencedLeaderEpochError("old"), FencedLeaderEpochError("old")])
    fetcher, _ = make_fetcher(partition, client)
    await run_until_caught_up(fetcher)
    assert client.fetched[:3] == [0, 0, 0]
    assert partition.model.leo == 2


async def test_close_stops_a_fetcher_that_keeps_failing() -> None:
    leader = Replica()
    partition = FakePartition(Replica())
    client = FakeClient(leader)
    client.errors.extend([FencedLeaderEpochError("old")] * 10_000)
    fetcher, _ = make_fetcher(partition, client)
    fetcher.start()
    await asyncio.wait_for(client.fetch_event.wait(), 10)
    await fetcher.close()
    count = len(client.fetched)
    await fetcher.close()  # idempotent
    assert not fetcher.caught_up.is_set()
    assert len(client.fetched) == count


async def test_close_lets_an_append_in_flight_finish() -> None:
    # a fetcher closed mid-append (the manager replacing it on a new leader epoch) must not leave the append
    # to land after the next fetcher truncated: close waits for it
    leader = Replica(high_watermark=2)
    leader.append(0, 2)
    partition = FakePartition(Replica())
    partition.append_gate = asyncio.Event()
    fetcher, _ = make_fetcher(partition, FakeClient(leader))
    fetcher.start()
    await asyncio.wait_for(partition.append_started.wait(), 10)
    closing = asyncio.create_task(fetcher.close())
    await asyncio.sleep(0)  # close() cancels the loop now, while the append waits for the disk
    partition.append_gate.set()
    await asyncio.wait_for(closing, 10)
    assert partition.model.records == [0, 0]


async def test_no_history_source_means_back_off_not_reset() -> None:
    leader = Replica()
    leader.append(0, 3)
    partition = FakePartition(Replica())
    client = FakeClient(leader, local_start=2)
    client.errors.append(
        OffsetMovedToTieredStorageError(
            "moved", log_start_offset=0, log_end_offset=3, local_log_start_offset=2
        )
    )
    fetcher, _ = make_fetcher(partition, client, history=None)
    await run_until_caught_up(fetcher)
    assert not any(call[0] == "reset_to" for call in partition.calls)
    assert partition.model.records == leader.records


@pytest.mark.parametrize("epochs", [(), (EpochEntry(0, 0),)])
async def test_follower_without_epochs_truncates_to_its_high_watermark(
    epochs: tuple[EpochEntry, ...],
) -> None:
    leader = Replica(high_watermark=3)
    leader.append(0, 3)
    follower = Replica(records=[0, 0, 0, 0, 0], entries=[], high_watermark=3)
    if epochs:  # the leader's first epoch is newer than the follower's only one: the leader answers -1
        leader = Replica(high_watermark=3, records=[5, 5, 5], entries=[EpochEntry(5, 0)])
        follower.entries = list(epochs)
    partition = FakePartition(follower)
    client = FakeClient(leader)
    fetcher, _ = make_fetcher(partition, client)
    await run_until_caught_up(fetcher)
    assert partition.calls[0] == ("truncate_to", 3)
