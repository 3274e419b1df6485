"""A Hypothesis state machine: the partition log against a plain list of records, through appends, reads,
rolls, clean and crash reopens, retention, truncation and timestamp lookups."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tests.unit.tiering.log.support import NOW, Model, decode, make_batch
from tierlog.tiering.log import LogConfig, ManualClock, PartitionLog

CONFIG = LogConfig(segment_bytes=700, index_interval_bytes=100, segment_index_bytes=64, retention_ms=-1)

records = st.lists(
    st.tuples(st.binary(max_size=120), st.integers(NOW - 1000, NOW + 1000)), min_size=1, max_size=4
)


class LogMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="log-machine-"))
        self.generation = 0
        self.clock = ManualClock(NOW)
        self.log = PartitionLog.open(self.directory, CONFIG, clock=self.clock)
        self.model = Model()

    @property
    def directory(self) -> Path:
        return self.root / f"p{self.generation}"

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(batch=records)
    def append(self, batch: list[tuple[bytes, int]]) -> None:
        values = [v for v, _ in batch]
        stamps = [t for _, t in batch]
        info = self.log.append(make_batch(values, stamps))
        assert info.base_offset == self.model.end
        self.model.append(values, stamps)

    @rule(data=st.data(), max_bytes=st.integers(0, 2000))
    def read(self, data: st.DataObject, max_bytes: int) -> None:
        offset = data.draw(st.integers(self.model.start, self.model.end))
        got = decode(self.log.read(offset, max_bytes).data)
        expected = self.model.expected_from(offset)
        assert got == expected[: len(got)]
        assert bool(got) == bool(expected)

    @rule()
    def roll(self) -> None:
        info = self.log.roll()
        assert info is None or info.next_offset == self.model.end

    @rule()
    def reopen_clean(self) -> None:
        self.log.close()
        self.log = PartitionLog.open(self.directory, CONFIG, clock=self.clock)

    @rule()
    def reopen_after_crash(self) -> None:
        old = self.directory
        self.generation += 1
        shutil.copytree(old, self.directory)
        self.log.close()
        self.log = PartitionLog.open(self.directory, CONFIG, clock=self.clock)

    @rule(keep=st.integers(0, 3000))
    def retention_by_bytes(self, keep: int) -> None:
        deleted = self.log.apply_retention(retention_bytes=keep)
        if deleted:
            assert self.log.size_bytes >= keep
            assert self.log.log_start_offset == deleted[-1].next_offset
        self.model.drop_before(self.log.log_start_offset)

    @precondition(lambda self: self.model.end > self.model.start)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(self.model.start, self.model.end))
        self.log.truncate_to(offset)
        self.model.truncate_to(offset)

    @rule(timestamp=st.integers(NOW - 1100, NOW + 1100))
    def offset_for_timestamp(self, timestamp: int) -> None:
        expected = None
        for base, last in self.model.batches:
            stamp = max(
                t for _, t in self.model.records[base - self.model.start : last + 1 - self.model.start]
            )
            if stamp >= timestamp:
                expected = (base, stamp)
                break
        assert self.log.offset_for_timestamp(timestamp) == expected

    @invariant()
    def offsets_match(self) -> None:
        assert self.log.log_end_offset == self.model.end
        assert self.log.log_start_offset == self.model.start
        infos = self.log.segments()
        assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(infos))


LogMachine.TestCase.settings = settings(max_examples=20, stateful_step_count=30, deadline=None)
TestLogMachine = LogMachine.TestCase
