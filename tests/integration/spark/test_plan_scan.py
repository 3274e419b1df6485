"""The planner and the executor scan without Spark, against a reference model.

An archive in a local directory (segments written by the real log engine, with timestamps that go
backwards now and then, mixed codecs and batch sizes) is planned and scanned with random offset and
timestamp bounds and random byte-range splits; the union of every task's rows must be exactly what
Kafka's semantics select from the produced list: offsets in ``[lo, hi)``, from the first record whose
timestamp is >= the start timestamp, up to (not including) the first one whose timestamp is >= the end.
The archive is made twice, with the indexes in the packed ``.indexes`` object and in the older separate
``.index`` / ``.timeindex`` objects, and every test over it runs on both.
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.integration.spark.archive import INDEX_LAYOUTS, ArchivedPartition, IndexLayout, open_partition
from tierlog.client.spark.archive_reader import LocalArchive, load_manifest
from tierlog.client.spark.options import Bound, parse_options
from tierlog.client.spark.plan import SegmentTask, load_manifests, plan_segments, resolve_range
from tierlog.client.spark.scan import (
    _OFFSET_ENTRY,
    _TIME_ENTRY,
    ARROW_SCHEMA,
    _Bounds,
    _decode_index,
    _fetch_index,
    _fetch_indexes,
    scan_task,
)
from tierlog.client.spark.stream import TierlogStreamReader, _prorate, decode_offsets, encode_offsets
from tierlog.tiering.codec import Compression, Record
from tierlog.tiering.log import SegmentInfo
from tierlog.tiering.remote import manifest as mf
from tierlog.tiering.remote.local import LocalObjectStore
from tierlog.tiering.remote.manifest_store import ManifestStore
from tierlog.tiering.remote.packed_indexes import IndexRef, index_refs, segment_index_refs
from tierlog.wire.errors import (
    CorruptRecordError,
    InvalidRequestError,
    UnknownPartitionError,
    UnknownTopicError,
)

TOPIC = "model"
COUNT = 400
T0 = 1_700_000_000_000


@pytest.fixture(scope="module", params=INDEX_LAYOUTS)
def archived(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[tuple[Path, ArchivedPartition]]:
    layout: IndexLayout = request.param
    root = tmp_path_factory.mktemp(f"model-{layout}")
    rng = random.Random(5)
    records = [
        Record(
            f"k{i}".encode(),
            rng.randbytes(rng.randrange(0, 120)),
            (),
            T0 + i * 1000 + rng.randrange(-4000, 4000),
        )
        for i in range(COUNT)
    ]
    part = open_partition(root / "logs", TOPIC, 0, segment_bytes=2048, layout=layout)
    i = 0
    codecs = list(Compression)
    while i < COUNT:
        n = rng.randrange(1, 9)
        part.append(records[i : i + n], compression=rng.choice(codecs), per_batch=n)
        i += n
    store = LocalObjectStore(root / "remote", fsync=False)
    asyncio.run(part.upload_sealed(store, ManifestStore(store)))
    assert len(part.uploaded) >= 8
    assert all((s.indexes is not None) == (layout == "packed") for s in part.uploaded)
    yield root / "remote", part
    part.log.close()


def reference(
    part: ArchivedPartition, lo: int, hi: int, start_ts: int | None, end_ts: int | None
) -> list[int]:
    records = part.records
    first = next((r.offset for r in records if start_ts is not None and r.timestamp >= start_ts), COUNT)
    stop = next((r.offset for r in records if end_ts is not None and r.timestamp >= end_ts), COUNT)
    lo = first if start_ts is not None else lo
    hi = stop if end_ts is not None else hi
    return [r.offset for r in records if lo <= r.offset < hi]


class RecordingArchive(LocalArchive):
    """A local archive that records its reads: ``(key, None)`` for a whole-object GET, ``(key, (start,
    end))`` for a ranged one."""

    def __init__(self, root: Path) -> None:
        super().__init__(parse_options({"uri": str(root), "topic": TOPIC}).store)
        self.reads: list[tuple[str, tuple[int, int] | None]] = []

    def get(self, key: str) -> bytes:
        self.reads.append((key, None))
        return super().get(key)

    def get_range(self, key: str, start: int, end: int) -> bytes:
        self.reads.append((key, (start, end)))
        return super().get_range(key, start, end)


def local_segment(part: ArchivedPartition, segment: mf.RemoteSegment) -> SegmentInfo:
    """The log engine's own segment an uploaded one was made from."""
    return next(i for i in part.log.sealed_segments() if i.base_offset == segment.base_offset)


def scan_all(
    root: Path, tasks: list[SegmentTask], archive: LocalArchive | None = None, **extra: str
) -> list[int]:
    options = parse_options({"uri": str(root), "topic": TOPIC, "maxRowsPerBatch": "7", **extra})
    archive = archive or LocalArchive(options.store)
    offsets: list[int] = []
    for task in tasks:
        for batch in scan_task(archive, options, task):
            assert batch.schema.equals(ARROW_SCHEMA) and batch.num_rows <= 7
            offsets.extend(batch.column("offset").to_pylist())
    return offsets


@settings(max_examples=60, deadline=None)
@given(
    lo=st.integers(0, COUNT + 5),
    length=st.integers(0, COUNT),
    start_ts=st.none() | st.integers(T0 - 10_000, T0 + COUNT * 1000 + 10_000),
    end_ts=st.none() | st.integers(T0 - 10_000, T0 + COUNT * 1000 + 10_000),
    max_bytes=st.sampled_from([100, 700, 2048, 10**9]),
)
def test_planned_tasks_return_exactly_the_reference_rows(
    archived: tuple[Path, ArchivedPartition],
    lo: int,
    length: int,
    start_ts: int | None,
    end_ts: int | None,
    max_bytes: int,
) -> None:
    root, part = archived
    manifest = load_manifest(LocalArchive(parse_options({"uri": str(root), "topic": TOPIC}).store), TOPIC, 0)
    wanted = resolve_range(
        manifest,
        Bound(lo if start_ts is None else -1, start_ts),
        Bound(lo + length if end_ts is None else -1, end_ts),
        fail_on_data_loss=True,
    )
    tasks = plan_segments(manifest, wanted, max_bytes=max_bytes)
    got = scan_all(root, tasks)
    assert got == reference(part, lo, lo + length, start_ts, end_ts)


def test_splits_read_each_batch_once_and_only_edge_segments_need_indexes(
    archived: tuple[Path, ArchivedPartition],
) -> None:
    root, part = archived
    manifest = load_manifest(LocalArchive(parse_options({"uri": str(root), "topic": TOPIC}).store), TOPIC, 0)
    whole = plan_segments(
        manifest, resolve_range(manifest, Bound(-2), Bound(-1), fail_on_data_loss=True), max_bytes=10**9
    )
    assert len(whole) == len(part.uploaded) and all(t.whole for t in whole)
    split = plan_segments(
        manifest, resolve_range(manifest, Bound(-2), Bound(-1), fail_on_data_loss=True), max_bytes=300
    )
    assert len(split) > 3 * len(whole) and not any(t.whole for t in split)
    assert scan_all(root, split) == list(range(COUNT))


def test_the_indexes_are_read_where_the_manifest_entry_says(archived: tuple[Path, ArchivedPartition]) -> None:
    root, part = archived
    archive = RecordingArchive(root)
    segment = part.uploaded[1]
    offset_ref, time_ref = segment_index_refs(TOPIC, 0, segment)
    offsets = _fetch_index(archive, offset_ref, _OFFSET_ENTRY, segment.size_bytes)
    times = _fetch_index(archive, time_ref, _TIME_ENTRY, None)
    # the entries of the log engine's own index files, whatever the layout
    info = local_segment(part, segment)
    assert offsets == _decode_index(info.index_path.read_bytes(), _OFFSET_ENTRY, segment.size_bytes)
    assert times == _decode_index(info.timeindex_path.read_bytes(), _TIME_ENTRY, None)
    assert offsets is not None and len(offsets.keys) >= 2 and times is not None and len(times.keys) >= 1
    stem = f"{TOPIC}/0/{segment.base_offset:020d}-{segment.segment_uuid}"
    if segment.indexes is None:  # the older layout: each whole object
        assert archive.reads == [(f"{stem}.index", None), (f"{stem}.timeindex", None)]
    else:  # one ranged GET of the packed object each, past its 16-byte header
        o, t = segment.indexes
        assert archive.reads == [(f"{stem}.indexes", (16, 16 + o)), (f"{stem}.indexes", (16 + o, 16 + o + t))]
    archive.reads.clear()
    assert _fetch_indexes(archive, offset_ref, time_ref, segment.size_bytes) == (offsets, times)
    if segment.indexes is None:  # the older layout: each whole object, as before
        assert archive.reads == [(f"{stem}.index", None), (f"{stem}.timeindex", None)]
    else:  # both in one ranged GET
        assert archive.reads == [(f"{stem}.indexes", (16, 16 + o + t))]
    archive.reads.clear()
    empty = _fetch_index(
        archive, IndexRef(f"{stem}.indexes#time", f"{stem}.indexes", 40, 40), _TIME_ENTRY, None
    )
    assert empty is not None and not empty.keys and not archive.reads  # no request for an empty index
    gone = index_refs(TOPIC, 0, segment.base_offset, uuid.uuid4(), segment.indexes)
    assert [_fetch_index(archive, ref, _OFFSET_ENTRY, None) for ref in gone] == [None, None]  # not found
    # a range the object does not fill (shorter than the manifest entry says) is no index
    past_end = IndexRef("past-end", time_ref.object_key, time_ref.start, (time_ref.end or 10**6) + 12)
    assert _fetch_index(archive, past_end, _TIME_ENTRY, None) is None
    if segment.indexes is not None:  # an object shorter than both ranges: the offset index alone is sound
        assert _fetch_indexes(archive, offset_ref, past_end, segment.size_bytes) == (offsets, None)
        assert _fetch_indexes(archive, gone[0], gone[1], None) == (None, None)


def test_the_uploaded_indexes_narrow_edge_segments_to_the_wanted_bytes(
    archived: tuple[Path, ArchivedPartition],
) -> None:
    root, part = archived
    archive = LocalArchive(parse_options({"uri": str(root), "topic": TOPIC}).store)
    manifest = load_manifest(archive, TOPIC, 0)
    segment = max(part.uploaded, key=lambda s: s.last_offset - s.base_offset)
    offset_ref, time_ref = segment_index_refs(TOPIC, 0, segment)
    offsets = _fetch_index(archive, offset_ref, _OFFSET_ENTRY, segment.size_bytes)
    times = _fetch_index(archive, time_ref, _TIME_ENTRY, None)
    assert offsets is not None and len(offsets.keys) >= 3 and times is not None and len(times.keys) >= 2
    middle = segment.base_offset + offsets.keys[1]  # the last offset of the second indexed batch
    (task,) = plan_segments(
        manifest,
        resolve_range(manifest, Bound(middle), Bound(middle + 1), fail_on_data_loss=True),
        max_bytes=10**9,
    )
    assert task.indexes == segment.indexes  # the executor learns the layout from the task
    bounds = _Bounds(task, offsets, None)
    # from the indexed batch holding it up to the next indexed batch
    assert (bounds.start, bounds.end) == (offsets.values[1], offsets.values[2])
    recording = RecordingArchive(root)
    assert scan_all(root, [task], recording) == [middle]
    ref = offset_ref.object_key, None if offset_ref.end is None else (offset_ref.start, offset_ref.end)
    assert recording.reads[0] == ref and all(key.endswith(".log") for key, _ in recording.reads[1:])


def test_option_errors_name_the_option() -> None:
    cases = {
        "uri": {"topic": "t"},
        "topic": {"uri": "/x"},
        "startingOffsets": {"uri": "/x", "topic": "t", "startingOffsets": "[1"},
        "endingOffsets": {"uri": "/x", "topic": "t", "endingOffsets": "earliest"},
        "onCorruption": {"uri": "/x", "topic": "t", "onCorruption": "ignore"},
        "maxBytesPerPartition": {"uri": "/x", "topic": "t", "maxBytesPerPartition": "0"},
        "assign": {"uri": "/x", "assign": '{"t": "0"}'},
    }
    for name, options in cases.items():
        with pytest.raises(InvalidRequestError, match=name):
            parse_options(options)


def test_options_follow_the_kafka_sources_spelling_and_precedence() -> None:
    options = parse_options(
        {
            "URI": "s3a://bucket/some/prefix",
            "subscribe": "a,b",
            "startingOffsets": json.dumps({"a": {"0": 5, "1": -2}}),
            "startingTimestamp": "1000",
            "startingOffsetsByTimestamp": json.dumps({"b": {"2": 77}}),
            "endingOffsets": json.dumps({"a": {"0": 9}}),
            "s3.endpoint.url": "http://127.0.0.1:9000",
        }
    )
    assert (options.store.scheme, options.store.location, options.store.prefix) == (
        "s3",
        "bucket",
        "some/prefix",
    )
    assert options.topics == ("a", "b")
    assert options.start_bound("b", 2) == Bound(-1, 77)  # by-timestamp wins over the other two
    assert options.end_bound("a", 0) == Bound(9) and options.end_bound("a", 1) == Bound(-1)
    assert parse_options({"uri": "/x", "topic": "t"}, streaming=True).starting_default == Bound(-1)
    assert parse_options({"uri": "/x", "topic": "t"}).starting_default == Bound(-2)


def test_stream_offsets_round_trip_and_the_trigger_limit_is_prorated() -> None:
    offsets = {("a", 0): 5, ("a", 1): 7, ("b", 0): 0}
    assert decode_offsets(encode_offsets(offsets)) == offsets
    assert encode_offsets(offsets) == {"a": {"0": 5, "1": 7}, "b": {"0": 0}}
    capped = _prorate({("a", 0): 0, ("a", 1): 0}, {("a", 0): 300, ("a", 1): 100}, 100)
    assert capped == {("a", 0): 75, ("a", 1): 25}
    assert _prorate({("a", 0): 0}, {("a", 0): 10}, 100) == {("a", 0): 10}
    assert _prorate({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1000, ("a", 1): 1}, 10) == {
        ("a", 0): 9,
        ("a", 1): 1,
    }


def test_a_missing_or_garbled_index_costs_bytes_not_correctness(
    archived: tuple[Path, ArchivedPartition], tmp_path: Path
) -> None:
    root, part = archived
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    segment = part.uploaded[2]
    offset_ref, time_ref = segment_index_refs(TOPIC, 0, segment)
    garbage = b"\x00" * 7 + b"\xff" * 17  # not increasing: ignored
    if segment.indexes is None:
        (copy / offset_ref.object_key).unlink()
        (copy / time_ref.object_key).write_bytes(garbage)
    else:  # the packed object keeps its size: the offset index all 0xff (negative), the time index garbled
        packed = copy / offset_ref.object_key
        data = bytearray(packed.read_bytes())
        assert offset_ref.end is not None and time_ref.end is not None and time_ref.end == len(data)
        data[offset_ref.start : offset_ref.end] = b"\xff" * (offset_ref.end - offset_ref.start)
        data[time_ref.start : time_ref.end] = (garbage * len(data))[: time_ref.end - time_ref.start]
        packed.write_bytes(bytes(data))
    archive = LocalArchive(parse_options({"uri": str(copy), "topic": TOPIC}).store)
    manifest = load_manifest(archive, TOPIC, 0)
    lo, hi = segment.base_offset + 2, segment.last_offset
    start_ts = min(r.timestamp for r in part.records if lo <= r.offset < hi)
    wanted = resolve_range(manifest, Bound(lo, None), Bound(hi), fail_on_data_loss=True)
    assert scan_all(copy, plan_segments(manifest, wanted, max_bytes=300)) == list(range(lo, hi))
    by_time = resolve_range(manifest, Bound(-1, start_ts), Bound(-1), fail_on_data_loss=True)
    assert scan_all(copy, plan_segments(manifest, by_time, max_bytes=10**9)) == reference(
        part, 0, COUNT, start_ts, None
    )


def test_a_corrupt_manifest_fails_planning_naming_the_object(
    archived: tuple[Path, ArchivedPartition], tmp_path: Path
) -> None:
    root, _ = archived
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    (newest,) = sorted((copy / TOPIC / "0" / "manifest").iterdir())[-1:]
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x01
    newest.write_bytes(bytes(data))
    archive = LocalArchive(parse_options({"uri": str(copy), "topic": TOPIC}).store)
    with pytest.raises(CorruptRecordError, match=f"corrupt manifest {newest}"):
        load_manifest(archive, TOPIC, 0)


def test_a_topic_or_partition_not_in_the_archive_is_an_error_naming_what_is_there(
    archived: tuple[Path, ArchivedPartition], tmp_path: Path
) -> None:
    """A batch read of a topic the archive lacks (a topic that is not tiered, a typo) fails naming the
    topics found, and one of a partition it lacks names the partitions found: never an empty table.
    A stream waits for them to appear instead."""
    root, _ = archived

    def load(uri: Path, require: bool = True, **extra: str) -> dict[tuple[str, int], mf.Manifest]:
        options = parse_options({"uri": str(uri), **extra})
        return load_manifests(LocalArchive(options.store), options, require=require)

    assert set(load(root, topic=TOPIC)) == {(TOPIC, 0)}
    with pytest.raises(
        UnknownTopicError, match=f"topic 'modle' is not in the archive at {root}: topics found: model"
    ):
        load(root, topic="modle")
    with pytest.raises(UnknownTopicError, match="the archive holds no topics"):
        load(tmp_path / "nothing-here", topic=TOPIC)
    with pytest.raises(
        UnknownPartitionError, match=r"has no partition 1, 3 in the archive .*: partitions found: 0"
    ):
        load(root, assign=json.dumps({TOPIC: [0, 1, 3]}))
    with pytest.raises(UnknownPartitionError, match="partitions found: 0"):
        load(root, topic=TOPIC, partitions="2")
    assert set(load(root, topic=TOPIC, partitions="0,2")) == {(TOPIC, 0)}
    assert load(root, require=False, topic="later") == {}


def test_the_s3_endpoint_follows_the_aws_chain_and_the_option_overrides_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert parse_options({"uri": "s3://b/p", "topic": "t"}).store.s3.resolved_endpoint() is None  # AWS
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://generic:1")
    assert parse_options({"uri": "s3://b/p", "topic": "t"}).store.s3.resolved_endpoint() == "http://generic:1"
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://s3-only:2")
    assert parse_options({"uri": "s3://b/p", "topic": "t"}).store.s3.resolved_endpoint() == "http://s3-only:2"
    explicit = parse_options({"uri": "s3://b/p", "topic": "t", "s3.endpoint.url": "http://mine:3"})
    assert explicit.store.s3.resolved_endpoint() == "http://mine:3"


def test_a_stream_starting_at_a_timestamp_starts_at_the_exact_offset(
    archived: tuple[Path, ArchivedPartition],
) -> None:
    root, part = archived
    for start_ts in (T0 + 123_456, T0 - 1, T0 + COUNT * 2000):
        reader = TierlogStreamReader(
            parse_options(
                {"uri": str(root), "topic": TOPIC, "startingTimestamp": str(start_ts)}, streaming=True
            )
        )
        expected = reference(part, 0, COUNT, start_ts, None)
        initial = reader.initialOffset()
        assert initial == {TOPIC: {"0": expected[0] if expected else COUNT}}
        latest = reader.latestOffset(initial, None)
        assert latest == {TOPIC: {"0": COUNT}}
        tasks = [t for t in reader.partitions(initial, latest) if isinstance(t, SegmentTask)]
        assert scan_all(root, tasks) == expected
