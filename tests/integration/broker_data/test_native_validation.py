"""A real broker refuses poisoned batches whole (400/40003 naming the batch); the partition stays readable."""

from __future__ import annotations

import struct
import zlib

import pytest
import zstandard

from tests.integration.broker import Client
from tests.integration.broker_data.helpers import BATCHES, BINARY, expect_error
from tierlog.tiering.codec.batch import build_batch, decode_batch
from tierlog.tiering.codec.header import CRC_OFFSET, HEADER, HEADER_SIZE, crc32c, iter_batches
from tierlog.tiering.codec.records import Record

BASE = "/native/v1/topics/t/partitions/0"
CONTENT = {"Content-Type": BATCHES}
NOW = 1_750_000_000_000
MiB = 2**20


def sealed(section: bytes, count: int, *, attributes: int = 0, base_offset: int = 5) -> bytes:
    """A batch around ``section`` with a CRC that matches, so only the record checks can refuse it."""
    header = HEADER.pack(base_offset, HEADER_SIZE - 12 + len(section), 0, 2, 0, attributes, max(count - 1, 0),
                         NOW, NOW, -1, -1, -1, count)  # fmt: skip
    out = bytearray(header + section)
    struct.pack_into(">I", out, CRC_OFFSET, crc32c(bytes(out[21:])))
    return bytes(out)


def lying_count() -> bytes:
    good = build_batch([Record(None, b"v")] * 3, base_offset=5, now_ms=NOW)
    return sealed(good[HEADER_SIZE:], 2)


def gzip_bomb() -> bytes:
    member = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    return sealed((member.compress(bytes(16 * MiB)) + member.flush()) * 64, 1, attributes=1)


def zstd_bomb() -> bytes:
    stream = zstandard.ZstdCompressor().compressobj()
    return sealed(
        b"".join(stream.compress(bytes(MiB)) for _ in range(1024)) + stream.flush(), 1, attributes=4
    )


POISON = {
    "lying-records-count": (lying_count, "bytes left after the last of 2 records"),
    "garbage-records": (lambda: sealed(b"\x7f" * 40, 3), "impossible record length"),
    "codec-7": (lambda: sealed(lying_count()[HEADER_SIZE:], 3, attributes=7), "unknown compression codec 7"),
    "header-only": (lambda: sealed(b"", 1), "cannot fit in 0 bytes"),
    "gzip-bomb": (gzip_bomb, "more than 1048588 bytes"),
    "zstd-bomb": (zstd_bomb, "more than 1048588 bytes"),
}


@pytest.mark.parametrize("acks", ["1", "0"])
@pytest.mark.parametrize("name", list(POISON))
async def test_poisoned_batch_is_refused_and_the_partition_stays_readable(
    client: Client, name: str, acks: str
) -> None:
    first = build_batch([Record(b"k", f"v{i}".encode()) for i in range(5)], now_ms=NOW)
    response = await client.post(f"{BASE}/batches", data=first, params={"acks": "1"}, headers=CONTENT)
    assert response.status == 200, await response.text()

    make, why = POISON[name]
    good = build_batch([Record(None, b"after")], base_offset=5, now_ms=NOW)
    response = await client.post(
        f"{BASE}/batches", data=good + make(), params={"acks": acks}, headers=CONTENT
    )
    body = await expect_error(response, 400, 40003)
    assert "batch 1 (base offset 5" in body["message"], body
    assert why in body["message"], body

    response = await client.get(f"{BASE}/batches", params={"offset": "0"})
    data = await response.read()
    assert [decode_batch(data, p).header.records_count for p, _ in iter_batches(data)] == [5]
    response = await client.get(
        "/topics/t/partitions/0/records", params={"offset": "0", "timeout": "0"}, headers={"Accept": BINARY}
    )
    assert response.status == 200, await response.text()
    assert [r["offset"] for r in await response.json(content_type=None)] == [0, 1, 2, 3, 4]
