"""Golden record batches written by an independent Kafka implementation (see
tests/unit/tiering/codec/data/README.md)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

import pytest

from tierlog.tiering.codec import (
    BatchHeader,
    Compression,
    Record,
    build_batch,
    decode_batch,
    iter_records,
    set_base_offset,
    set_log_append_time,
    verify_batch,
)
from tierlog.tiering.codec.header import TIMESTAMP_TYPE_BIT, TRANSACTIONAL_BIT

DATA = pathlib.Path(__file__).parent / "data"
GOLDEN: dict[str, Any] = json.loads((DATA / "golden.json").read_text())["batches"]
T0 = 1_700_000_000_000


def _bytes(hexed: str | None) -> bytes | None:
    return None if hexed is None else bytes.fromhex(hexed)


def expected_records(name: str) -> list[Record]:
    spec = GOLDEN[name]["records"]
    if spec == "LARGE":  # the formula in make_golden.py
        return [Record(b"key-%d" % i, (b"%05d" % i) * 100, (), T0 + i) for i in range(200)]
    return [
        Record(
            _bytes(r["key"]),
            _bytes(r["value"]),
            tuple((k, _bytes(v)) for k, v in r["headers"]),
            r["timestamp"],
        )
        for r in spec
    ]


def golden_bytes(name: str) -> bytes:
    file: str = GOLDEN[name]["file"]
    return (DATA / file).read_bytes()


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_golden_batch_decodes(name: str) -> None:
    data = golden_bytes(name)
    spec = GOLDEN[name]
    batch = decode_batch(data)
    header = batch.header
    assert header.crc == spec["crc"]
    assert header.attributes == spec["attributes"]
    assert header.size == len(data)
    want = expected_records(name)
    assert header.records_count == len(want) == header.last_offset_delta + 1
    assert header.max_timestamp == spec.get("append_time", max(r.timestamp for r in want))
    assert header.base_timestamp == want[0].timestamp
    base = header.base_offset
    if header.log_append_time:
        want = [Record(r.key, r.value, r.headers, spec["append_time"]) for r in want]
    assert batch.records == [
        Record(r.key, r.value, r.headers, r.timestamp, base + i) for i, r in enumerate(want)
    ]


def test_every_codec_has_a_golden_batch() -> None:
    codecs = {GOLDEN[name]["attributes"] & 0x07 for name in GOLDEN}
    assert codecs == {int(c) for c in Compression}
    assert "small-snappy-raw" in GOLDEN
    assert not golden_bytes("small-snappy-raw")[61:].startswith(b"\x82SNAPPY\x00")
    assert golden_bytes("small-snappy")[61:].startswith(b"\x82SNAPPY\x00")


def test_transactional_and_log_append_time_fields() -> None:
    txn = decode_batch(golden_bytes("txn-none")).header
    assert (txn.producer_id, txn.producer_epoch, txn.base_sequence) == (12345, 3, 42)
    assert (txn.base_offset, txn.partition_leader_epoch) == (1000, 7)
    assert txn.is_transactional and not txn.is_control and not txn.log_append_time
    lat = decode_batch(golden_bytes("txn-logappendtime-none"))
    assert lat.header.attributes == TRANSACTIONAL_BIT | TIMESTAMP_TYPE_BIT
    assert {r.timestamp for r in lat.records} == {T0 + 99_999}


def test_our_encoder_reproduces_the_uncompressed_golden_bytes() -> None:
    records = expected_records("small-none")
    # kafka-python's builder leaves base offset and leader epoch at 0 for the broker to set.
    assert build_batch(records, partition_leader_epoch=0) == golden_bytes("small-none")
    txn = build_batch(
        records,
        base_offset=1000,
        partition_leader_epoch=7,
        producer_id=12345,
        producer_epoch=3,
        base_sequence=42,
        is_transactional=True,
    )
    assert txn == golden_bytes("txn-none")
    lat = bytearray(txn)
    set_log_append_time(lat, 0, T0 + 99_999)
    assert bytes(lat) == golden_bytes("txn-logappendtime-none")


@pytest.mark.parametrize("name", sorted(n for n in GOLDEN if GOLDEN[n]["attributes"] & 0x07))
def test_our_encoder_agrees_with_golden_compressed_batches(name: str) -> None:
    golden = decode_batch(golden_bytes(name))
    codec = Compression(golden.header.compression)
    ours = decode_batch(build_batch(expected_records(name), compression=codec, partition_leader_epoch=0))
    assert ours.records == golden.records
    strip = {"crc": 0, "batch_length": 0}
    assert _fields(ours.header) | strip == _fields(golden.header) | strip


def _fields(header: BatchHeader) -> dict[str, int]:
    return {name: getattr(header, name) for name in BatchHeader.__slots__}


def test_iter_records_spans_concatenated_golden_batches() -> None:
    first = bytearray(golden_bytes("small-zstd"))
    set_base_offset(first, 0, 10)
    stream = bytes(first) + golden_bytes("txn-none") + golden_bytes("large-lz4")
    pairs = list(iter_records(stream))
    assert [r.offset for _, r in pairs] == [10, 11, 12, 13, 14, *range(1000, 1005), *range(200)]
    assert [h.compression for h, _ in pairs[:6]] == [4] * 5 + [0]
    assert verify_batch(stream, len(first)).base_offset == 1000
