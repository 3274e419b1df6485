"""Regenerate the golden record batches in this folder with an independent Kafka implementation.

Not part of the test suite and not run by CI. It needs kafka-python (and python-snappy, lz4, zstandard,
crc32c), installed in a throwaway virtualenv, never in the project's::

    python3 -m venv /tmp/kpvenv
    /tmp/kpvenv/bin/pip install kafka-python python-snappy lz4 zstandard crc32c
    /tmp/kpvenv/bin/python tests/unit/data/make_golden.py

It writes one ``<name>.bin`` per batch and ``golden.json``, which lists for each batch the inputs given to
kafka-python's v2 batch builder (the records we expect to decode) and the CRC it wrote.
"""

from __future__ import annotations

import json
import pathlib
import struct
from typing import Any

import crc32c
import kafka
from kafka.codec import snappy_encode
from kafka.record import default_records
from kafka.record.default_records import DefaultRecordBatchBuilder

HERE = pathlib.Path(__file__).parent
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
T0 = 1_700_000_000_000

# One record as given to the builder: key, value, headers, timestamp.
RecordSpec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]

SMALL: list[RecordSpec] = [
    (b"key-0", b"value-0 " * 20, [("h1", b"v1"), ("null-h", None)], T0),
    (None, b"no key " * 20, [], T0 + 5),
    (b"k2", None, [("tomb", b"stone")], T0 + 3),
    (b"", b"", [("", b"")], T0 + 10),
    (b"\x00\xff", b"x" * 300, [("cl\u00e9", b"\x00" * 130)], T0 - 10),
]
# Written to golden.json as "LARGE"; the tests rebuild this list from the same formula.
LARGE: list[RecordSpec] = [(b"key-%d" % i, (b"%05d" % i) * 100, [], T0 + i) for i in range(200)]


def build(
    records: list[RecordSpec],
    codec: int,
    *,
    transactional: bool = False,
    producer: tuple[int, int, int] = (-1, -1, -1),
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 30,
    )
    for i, (key, value, headers, ts) in enumerate(records):
        assert builder.append(i, timestamp=ts, key=key, value=value, headers=headers) is not None
    return bytes(builder.build())


def describe(name: str, data: bytes, records: list[RecordSpec], **extra: int) -> dict[str, Any]:
    (crc,) = struct.unpack_from(">I", data, 17)
    (attributes,) = struct.unpack_from(">h", data, 21)
    if records is LARGE:
        return {"file": f"{name}.bin", "crc": crc, "attributes": attributes, "records": "LARGE", **extra}
    return {
        "file": f"{name}.bin",
        "crc": crc,
        "attributes": attributes,
        "records": [
            {
                "key": None if k is None else k.hex(),
                "value": None if v is None else v.hex(),
                "headers": [[hk, None if hv is None else hv.hex()] for hk, hv in h],
                "timestamp": ts,
            }
            for k, v, h, ts in records
        ],
        **extra,
    }


def main() -> None:
    described: dict[str, dict[str, Any]] = {}
    out = {"producer": f"kafka-python {kafka.__version__} DefaultRecordBatchBuilder", "batches": described}
    batches: dict[str, tuple[bytes, list[RecordSpec], dict[str, int]]] = {}
    for codec_name, codec in CODECS.items():
        batches[f"small-{codec_name}"] = (build(SMALL, codec), SMALL, {})
    for codec_name in ("snappy", "lz4", "zstd", "gzip"):
        batches[f"large-{codec_name}"] = (build(LARGE, CODECS[codec_name]), LARGE, {})

    # Raw (non-xerial) snappy, as librdkafka-based clients write it.
    default_records.snappy_encode = lambda data: snappy_encode(data, xerial_compatible=False)
    batches["small-snappy-raw"] = (build(SMALL, CODECS["snappy"]), SMALL, {})
    default_records.snappy_encode = snappy_encode

    txn = bytearray(build(SMALL, CODECS["none"], transactional=True, producer=(12345, 3, 42)))
    # The broker's part, done by hand: base offset and leader epoch (outside the CRC) ...
    struct.pack_into(">q", txn, 0, 1000)
    struct.pack_into(">i", txn, 12, 7)
    batches["txn-none"] = (bytes(txn), SMALL, {})
    # ... and LogAppendTime: the timestamp-type bit, max_timestamp = append time, CRC recomputed.
    lat = bytearray(txn)
    (attributes,) = struct.unpack_from(">h", lat, 21)
    struct.pack_into(">h", lat, 21, attributes | 0x08)
    struct.pack_into(">q", lat, 35, T0 + 99_999)
    struct.pack_into(">I", lat, 17, crc32c.crc32c(bytes(lat[21:])))
    batches["txn-logappendtime-none"] = (bytes(lat), SMALL, {"append_time": T0 + 99_999})

    for name, (data, records, extra) in batches.items():
        (HERE / f"{name}.bin").write_bytes(data)
        described[name] = describe(name, data, records, **extra)
    (HERE / "golden.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
