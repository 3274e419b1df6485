"""Deterministic test records and how to compare them with what Spark returns."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from typing import Any

from tests.integration.spark.archive import Produced
from tierlog.tiering.codec import Record

START_MS = 1_700_000_000_000
STEP_MS = 1000


def make_records(count: int, *, seed: int, start_ms: int = START_MS) -> list[Record]:
    """``count`` records with increasing timestamps, some null keys and values, some headers
    (including a null header value), values of mixed sizes.
    """
    rng = random.Random(seed)
    out = []
    for i in range(count):
        key = None if i % 11 == 0 else f"key-{i % 7}".encode()
        value = None if i % 13 == 5 else rng.randbytes(rng.choice((0, 8, 40, 300)))
        headers: tuple[tuple[str, bytes | None], ...] = ()
        if i % 3 == 0:
            headers = (("trace", f"t{i}".encode()), ("empty", None))
        out.append(Record(key, value, headers, start_ms + i * STEP_MS))
    return out


Row = tuple[str, int, int, bytes | None, bytes | None, int, tuple[tuple[str, bytes | None], ...]]


def expected_rows(produced: Iterable[Produced]) -> list[Row]:
    return sorted(
        (p.topic, p.partition, p.offset, p.key, p.value, p.timestamp, tuple(p.headers)) for p in produced
    )


COLUMNS = ("topic", "partition", "offset", "key", "value", "unix_millis(timestamp) AS ts", "headers")


def collect(df: Any) -> list[Row]:
    """Collect a tierlog DataFrame as comparable tuples (see :func:`spark_rows`)."""
    return spark_rows(df.selectExpr(*COLUMNS).collect())


def spark_rows(rows: Sequence[Any]) -> list[Row]:
    """Rows of :data:`COLUMNS` -> the tuples of :func:`expected_rows` (null headers = no headers)."""
    out = []
    for r in rows:
        ms = r["ts"]
        headers = tuple(
            (h["key"], None if h["value"] is None else bytes(h["value"])) for h in r["headers"] or ()
        )
        key = None if r["key"] is None else bytes(r["key"])
        value = None if r["value"] is None else bytes(r["value"])
        out.append((r["topic"], r["partition"], r["offset"], key, value, ms, headers))
    return sorted(out)


def checksum(rows: Iterable[Row]) -> str:
    """An order-independent digest of keys, values and offsets."""
    digest = hashlib.sha256()
    for topic, partition, offset, key, value, _, _ in sorted(rows):
        digest.update(f"{topic}/{partition}/{offset}/".encode())
        digest.update(b"-" if key is None else b"k" + key)
        digest.update(b"-" if value is None else b"v" + value)
    return digest.hexdigest()
