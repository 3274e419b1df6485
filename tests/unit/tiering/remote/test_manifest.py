"""The remote manifest codec (golden bytes, round trip, corruption) and its pure operations against a
plain-list reference model."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import ClassVar

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.manifest import RemoteSegment, SegmentState
from tierlog.wire.errors import ConflictError, CorruptRecordError, InvalidRequestError, NotFoundError

U1 = uuid.UUID("5f0c2a8e-0000-4000-8000-000000000001")
U2 = uuid.UUID("5f0c2a8e-0000-4000-8000-000000000002")

GOLDEN = (
    b'{"crc32c":2128291253,"format":1,"log_start_offset":100,"partition":3,"segments":['
    b'{"base_offset":0,"base_timestamp":1700000000000,"created_ms":1700000000500,"last_offset":99,'
    b'"max_timestamp":1700000000999,"segment_uuid":"5f0c2a8e-0000-4000-8000-000000000001",'
    b'"size_bytes":16384,"state":"deleted"},'
    b'{"base_offset":100,"base_timestamp":null,"created_ms":1700000002500,"last_offset":249,'
    b'"max_timestamp":1700000001999,"segment_uuid":"5f0c2a8e-0000-4000-8000-000000000002",'
    b'"size_bytes":32768,"state":"copy_finished"}],"topic":"orders","version":7}\n'
)
GOLDEN_MANIFEST = mf.Manifest(
    "orders",
    3,
    7,
    100,
    (
        RemoteSegment(0, 99, 1700000000999, 16384, U1, SegmentState.DELETED, 1700000000500, 1700000000000),
        RemoteSegment(100, 249, 1700000001999, 32768, U2, SegmentState.COPY_FINISHED, 1700000002500, None),
    ),
)


def seg(
    base: int, last: int, *, ts: int = 0, state: SegmentState = SegmentState.COPY_STARTED, n: int = 0
) -> RemoteSegment:
    return RemoteSegment(base, last, ts, 10 * (last - base + 1), uuid.UUID(int=n + 1), state, 1000 + n)


# -- codec ---------------------------------------------------------------------------------------


GOLDEN_WITH_EPOCHS = (
    b'{"crc32c":1407399815,"format":1,"leader_epoch":-1,"log_start_offset":100,"partition":3,"segments":['
    b'{"base_offset":0,"base_timestamp":1700000000000,"created_ms":1700000000500,"last_offset":99,'
    b'"leader_epochs":[],"max_timestamp":1700000000999,"segment_uuid":"5f0c2a8e-0000-4000-8000-000000000001",'
    b'"size_bytes":16384,"state":"deleted"},'
    b'{"base_offset":100,"base_timestamp":null,"created_ms":1700000002500,"last_offset":249,'
    b'"leader_epochs":[],"max_timestamp":1700000001999,"segment_uuid":"5f0c2a8e-0000-4000-8000-000000000002",'
    b'"size_bytes":32768,"state":"copy_finished"}],"topic":"orders","version":7}\n'
)


GOLDEN_WITH_INDEXES = (
    b'{"crc32c":3129998955,"format":1,"leader_epoch":-1,"log_start_offset":100,"partition":3,"segments":['
    b'{"base_offset":0,"base_timestamp":1700000000000,"created_ms":1700000000500,"indexes":null,'
    b'"last_offset":99,"leader_epochs":[],"max_timestamp":1700000000999,'
    b'"segment_uuid":"5f0c2a8e-0000-4000-8000-000000000001","size_bytes":16384,"state":"deleted"},'
    b'{"base_offset":100,"base_timestamp":null,"created_ms":1700000002500,"indexes":[96,144],'
    b'"last_offset":249,"leader_epochs":[],"max_timestamp":1700000001999,'
    b'"segment_uuid":"5f0c2a8e-0000-4000-8000-000000000002","size_bytes":32768,"state":"copy_finished"}],'
    b'"topic":"orders","version":7}\n'
)
GOLDEN_PACKED = replace(
    GOLDEN_MANIFEST,
    segments=(GOLDEN_MANIFEST.segments[0], replace(GOLDEN_MANIFEST.segments[1], indexes=(96, 144))),
)


def test_golden_bytes() -> None:
    # every additive field is always written; manifests written before them still decode
    assert mf.encode(GOLDEN_PACKED) == GOLDEN_WITH_INDEXES
    assert mf.decode(GOLDEN_WITH_INDEXES) == GOLDEN_PACKED
    assert mf.decode(GOLDEN_WITH_EPOCHS) == GOLDEN_MANIFEST
    assert mf.decode(GOLDEN) == GOLDEN_MANIFEST
    assert b'"indexes":null' in mf.encode(GOLDEN_MANIFEST)


@pytest.mark.parametrize("value", ["[1]", "[1,2,3]", '"packed"', "[true,1]", "[1.5,2]", "{}"])
def test_decode_rejects_a_malformed_indexes_field(value: str) -> None:
    obj = json.loads(GOLDEN_WITH_INDEXES)
    obj["segments"][1]["indexes"] = json.loads(value)
    del obj["crc32c"]
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    obj["crc32c"] = crc32c.crc32c(canonical)
    with pytest.raises(CorruptRecordError, match="indexes"):
        mf.decode(json.dumps(obj).encode())


@pytest.mark.parametrize("sizes", [(-1, 0), (0, 2**32)])
def test_index_sizes_are_checked(sizes: tuple[int, int]) -> None:
    with pytest.raises(InvalidRequestError, match="index sizes"):
        replace(GOLDEN_MANIFEST.segments[1], indexes=sizes)


def test_golden_checksum_covers_the_body_without_itself() -> None:
    body = GOLDEN.rstrip(b"\n").replace(b'"crc32c":2128291253,', b"")
    assert crc32c.crc32c(body) == 2128291253


def test_decode_accepts_whitespace_and_unknown_fields() -> None:
    obj = json.loads(GOLDEN)
    obj["future_field"] = {"x": 1}
    del obj["crc32c"]
    canonical = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    obj["crc32c"] = crc32c.crc32c(canonical)
    assert mf.decode(json.dumps(obj, indent=2).encode()) == GOLDEN_MANIFEST


timestamps = st.integers(min_value=-1, max_value=2**53)


@st.composite
def manifests(draw: st.DrawFn) -> mf.Manifest:
    count = draw(st.integers(0, 8))
    segments = []
    base = draw(st.integers(0, 1000))
    for i in range(count):
        last = base + draw(st.integers(0, 500))
        state = draw(st.sampled_from(list(SegmentState)))
        base_ts = draw(st.none() | st.integers(0, 2**53))
        segments.append(
            RemoteSegment(
                base,
                last,
                draw(timestamps),
                draw(st.integers(0, 2**40)),
                uuid.UUID(int=i + 1),
                state,
                draw(st.integers(0, 2**45)),
                base_ts,
                indexes=draw(st.none() | st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))),
            )
        )
        base = last + 1 + draw(st.integers(0, 100))
    segments.sort(key=lambda s: (s.base_offset, s.created_ms, str(s.segment_uuid)))
    topic = draw(
        st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True).filter(lambda t: t not in (".", ".."))
    )
    return mf.Manifest(
        topic,
        draw(st.integers(0, 10_000)),
        draw(st.integers(0, 2**40)),
        draw(st.integers(0, 2**62)),
        tuple(segments),
    )


@given(manifests())
def test_roundtrip(manifest: mf.Manifest) -> None:
    data = mf.encode(manifest)
    assert mf.decode(data) == manifest
    assert mf.encode(mf.decode(data)) == data


@settings(max_examples=300)
@given(manifests(), st.data())
def test_flipped_or_truncated_bytes_are_detected(manifest: mf.Manifest, data: st.DataObject) -> None:
    encoded = mf.encode(manifest)
    index = data.draw(st.integers(0, len(encoded) - 2))  # the final newline is insignificant whitespace
    flipped = bytearray(encoded)
    flipped[index] ^= data.draw(st.integers(1, 255))
    with pytest.raises(CorruptRecordError):
        mf.decode(bytes(flipped))
    cut = data.draw(st.integers(0, len(encoded) - 2))
    with pytest.raises(CorruptRecordError):
        mf.decode(encoded[:cut])


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o.update(format=2),
        lambda o: o.update(version="7"),
        lambda o: o.update(partition=True),
        lambda o: o.pop("topic"),
        lambda o: o.update(segments={}),
        lambda o: o["segments"][0].update(state="uploading"),
        lambda o: o["segments"][0].update(segment_uuid="not-a-uuid"),
        lambda o: o["segments"][0].update(last_offset=-5),
        lambda o: o["segments"].reverse(),
        lambda o: o["segments"][1].update(segment_uuid=str(U1)),
        lambda o: o.update(topic="bad/topic"),
        lambda o: o["segments"].append(7),
    ],
)
def test_semantically_invalid_manifests_are_corrupt(mutate: object) -> None:
    obj = json.loads(GOLDEN)
    del obj["crc32c"]
    mutate(obj)  # type: ignore[operator]
    obj["crc32c"] = crc32c.crc32c(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode())
    with pytest.raises(CorruptRecordError):
        mf.decode(json.dumps(obj).encode())


@pytest.mark.parametrize(
    "raw", [b"", b"[]", b"null", b"\xff\xfe", b'{"format":1}', b"{" * 100_000, b'{"crc32c":NaN}']
)
def test_garbage_is_corrupt(raw: bytes) -> None:
    with pytest.raises(CorruptRecordError):
        mf.decode(raw)


# -- operations ----------------------------------------------------------------------------------


def test_lifecycle_and_idempotence() -> None:
    m = mf.empty("t", 0)
    s = seg(0, 9)
    m1 = mf.add_segment(m, s)
    assert mf.add_segment(m1, s) == m1
    assert mf.readable_segments(m1) == ()
    m2 = mf.transition(m1, s.segment_uuid, SegmentState.COPY_FINISHED)
    assert mf.transition(m2, s.segment_uuid, SegmentState.COPY_FINISHED) == m2
    assert mf.segment_for_offset(m2, 5) == m2.segments[0]
    with pytest.raises(ConflictError):
        mf.transition(m2, s.segment_uuid, SegmentState.COPY_STARTED)
    with pytest.raises(ConflictError):
        mf.transition(m2, s.segment_uuid, SegmentState.DELETED)
    m3 = mf.transition(
        mf.transition(m2, s.segment_uuid, SegmentState.DELETE_STARTED), s.segment_uuid, SegmentState.DELETED
    )
    assert mf.segment_for_offset(m3, 5) is None
    assert mf.prune_deleted(m3).segments == ()
    with pytest.raises(NotFoundError):
        mf.transition(m3, uuid.UUID(int=999), SegmentState.DELETED)
    with pytest.raises(InvalidRequestError):
        mf.add_segment(m, seg(0, 1, state=SegmentState.COPY_FINISHED))
    with pytest.raises(ConflictError):
        mf.add_segment(m1, seg(50, 60))  # same uuid (n=0), different entry


def test_finished_segments_may_not_overlap_but_attempts_may() -> None:
    a, b = seg(0, 9, n=1), seg(5, 14, n=2)
    m = mf.add_segment(mf.add_segment(mf.empty("t", 0), a), b)  # two upload attempts may overlap
    m = mf.transition(m, a.segment_uuid, SegmentState.COPY_FINISHED)
    with pytest.raises(ConflictError):
        mf.transition(m, b.segment_uuid, SegmentState.COPY_FINISHED)
    m = mf.transition(m, b.segment_uuid, SegmentState.DELETE_STARTED)  # abandon the loser
    assert [s.state for s in m.segments] == [SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED]


def test_log_start_offset_only_rises() -> None:
    m = mf.set_log_start_offset(mf.empty("t", 0), 50)
    assert mf.set_log_start_offset(m, 10).log_start_offset == 50
    assert mf.set_log_start_offset(m, 50) is m


@st.composite
def finished_runs(draw: st.DrawFn) -> tuple[list[tuple[int, int, int]], int]:
    """Non-overlapping (base, last, max_ts) runs with gaps, and a log start offset."""
    runs = []
    base = draw(st.integers(0, 50))
    ts = 0
    for _ in range(draw(st.integers(0, 12))):
        last = base + draw(st.integers(0, 30))
        ts = max(-1, ts + draw(st.integers(-20, 100)))  # max timestamps need not be monotonic
        runs.append((base, last, ts))
        base = last + 1 + draw(st.integers(0, 5))
    return runs, draw(st.integers(0, base + 10))


@settings(max_examples=200)
@given(
    finished_runs(), st.lists(st.integers(0, 600), max_size=30), st.lists(st.integers(-50, 1500), max_size=20)
)
def test_lookups_match_a_linear_scan(
    runs_and_start: tuple[list[tuple[int, int, int]], int], offsets: list[int], stamps: list[int]
) -> None:
    runs, log_start = runs_and_start
    m = mf.empty("t", 0)
    for n, (base, last, ts) in enumerate(runs):
        s = seg(base, last, ts=ts, n=n)
        m = mf.transition(mf.add_segment(m, s), s.segment_uuid, SegmentState.COPY_FINISHED)
    m = mf.set_log_start_offset(m, log_start)
    model = [(b, e, t) for b, e, t in runs if e >= log_start]  # the reference: a plain list
    for offset in offsets:
        expected = next(((b, e) for b, e, _ in model if b <= offset <= e and offset >= log_start), None)
        found = mf.segment_for_offset(m, offset)
        assert (None if found is None else (found.base_offset, found.last_offset)) == expected
    for stamp in stamps:
        expected_ts = next(((b, e) for b, e, t in model if t >= stamp), None)
        found = mf.segment_for_timestamp(m, stamp)
        assert (None if found is None else (found.base_offset, found.last_offset)) == expected_ts


class ManifestMachine(RuleBasedStateMachine):
    """Random add/transition/log-start sequences against a dict of uuid -> (base, last, state) model."""

    ALLOWED: ClassVar[dict[SegmentState, set[SegmentState]]] = {
        SegmentState.COPY_STARTED: {SegmentState.COPY_FINISHED, SegmentState.DELETE_STARTED},
        SegmentState.COPY_FINISHED: {SegmentState.DELETE_STARTED},
        SegmentState.DELETE_STARTED: {SegmentState.DELETED},
        SegmentState.DELETED: set(),
    }

    def __init__(self) -> None:
        super().__init__()
        self.manifest = mf.empty("t", 0)
        self.model: dict[uuid.UUID, tuple[int, int, SegmentState]] = {}
        self.log_start = 0
        self.next_base = 0

    @rule(length=st.integers(0, 20), retry=st.booleans())
    def add(self, length: int, retry: bool) -> None:
        # A retry re-uploads from the base offset of an earlier attempt, overlapping it.
        base = max(v[0] for v in self.model.values()) if retry and self.model else self.next_base
        s = seg(base, base + length, n=len(self.model))
        self.manifest = mf.add_segment(self.manifest, s)
        self.model[s.segment_uuid] = (s.base_offset, s.last_offset, SegmentState.COPY_STARTED)
        self.next_base = max(self.next_base, base + length + 1)

    @rule(index=st.integers(0, 50), state=st.sampled_from(list(SegmentState)))
    def move(self, index: int, state: SegmentState) -> None:
        if not self.model:
            return
        key = list(self.model)[index % len(self.model)]
        base, last, current = self.model[key]
        overlaps = any(
            other_state is SegmentState.COPY_FINISHED
            and other != key
            and other_base <= last
            and base <= other_last
            for other, (other_base, other_last, other_state) in self.model.items()
        )
        if state is current:
            assert mf.transition(self.manifest, key, state) == self.manifest
        elif state in self.ALLOWED[current] and not (state is SegmentState.COPY_FINISHED and overlaps):
            self.manifest = mf.transition(self.manifest, key, state)
            self.model[key] = (base, last, state)
        else:
            with pytest.raises(ConflictError):
                mf.transition(self.manifest, key, state)

    @rule(offset=st.integers(0, 400))
    def raise_log_start(self, offset: int) -> None:
        self.manifest = mf.set_log_start_offset(self.manifest, offset)
        self.log_start = max(self.log_start, offset)

    @invariant()
    def agrees_with_model(self) -> None:
        assert {
            s.segment_uuid: (s.base_offset, s.last_offset, s.state) for s in self.manifest.segments
        } == self.model
        assert self.manifest.log_start_offset == self.log_start
        readable = [(b, e) for b, e, state in self.model.values() if state is SegmentState.COPY_FINISHED]
        for offset in range(self.log_start, self.next_base + 1, 3):
            hit = next(((b, e) for b, e in readable if b <= offset <= e), None)
            found = mf.segment_for_offset(self.manifest, offset)
            assert (None if found is None else (found.base_offset, found.last_offset)) == hit
        assert mf.decode(mf.encode(self.manifest)) == self.manifest


TestManifestMachine = ManifestMachine.TestCase
TestManifestMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
