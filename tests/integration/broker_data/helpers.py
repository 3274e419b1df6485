"""Small request helpers shared by the broker data-path tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

from tests.integration.broker import Client
from tierlog.tiering.codec.batch import decode_batch
from tierlog.tiering.codec.header import iter_batches
from tierlog.tiering.codec.records import Record

BINARY = "application/vnd.kafka.binary.v2+json"
JSON = "application/vnd.kafka.json.v2+json"
V2 = "application/vnd.kafka.v2+json"
BATCHES = "application/vnd.tierlog.batches"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def produce(
    client: Client, path: str, records: list[dict[str, Any]], *, content_type: str = BINARY, **extra: Any
) -> dict[str, Any]:
    """POST a v2 produce request that must succeed; returns the answer."""
    body = json.dumps({"records": records, **extra})
    response = await client.post(path, data=body, headers={"Content-Type": content_type})
    assert response.status == 200, await response.text()
    answer: dict[str, Any] = await response.json(content_type=None)
    return answer


async def expect_error(response: Any, status: int, code: int) -> dict[str, Any]:
    """Assert an error response's status and error code; returns its body."""
    body: dict[str, Any] = await response.json(content_type=None)
    assert response.status == status, body
    assert body["error_code"] == code, body
    assert isinstance(body["message"], str) and body["message"]
    return body


async def end_offset(client: Client, topic: str, partition: int) -> int:
    """The partition's high watermark, through the v2 offsets route."""
    response = await client.get(f"/topics/{topic}/partitions/{partition}/offsets")
    assert response.status == 200
    return int((await response.json(content_type=None))["end_offset"])


def segment_records(data_dir: Path, topic: str, partition: int) -> list[list[Record]]:
    """Every batch's records in the partition's first segment file, decoded from the bytes on disk."""
    path = data_dir / f"{topic}-{partition}" / f"{0:020d}.log"
    data = path.read_bytes()
    return [decode_batch(data, position).records for position, _ in iter_batches(data)]


def as_stored(data: bytes, leader_epoch: int = 0) -> bytes:
    """``data`` (whole v2 batches) as the leader stores and serves them: each batch's
    ``partition_leader_epoch`` (bytes 12-15, outside the CRC) set to the epoch it leads in, as Kafka's
    leader stamps it; everything else byte for byte. A single broker leads its partitions at epoch 0 after
    its first start. Pure."""
    out = bytearray(data)
    position = 0
    while position < len(out):
        size = 12 + int.from_bytes(out[position + 8 : position + 12], "big")
        out[position + 12 : position + 16] = leader_epoch.to_bytes(4, "big", signed=True)
        position += size
    return bytes(out)
