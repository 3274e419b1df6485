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
