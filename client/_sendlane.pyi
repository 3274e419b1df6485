"""Type stub of the compiled send lane (client/_sendlane.c)."""

from typing import Any

from tierlog.client.delivery import FutureRecordMetadata

class SendLane:
    batches: dict[str, Any]
    snapshot: object
    closed: bool
    def __init__(
        self,
        accumulator: Any,
        router: Any,
        idempotence: Any,
        handle_type: type,
        make_record: Any,
        batch_size: int,
        buffer_memory: int,
        record_limit: int,
        overhead: int,
    ) -> None: ...
    def send(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Any,
        timestamp: int | None,
        callback: Any,
        /,
    ) -> FutureRecordMetadata | None: ...
    def arm(self, topic: str, batch: Any, snapshot: object, /) -> None: ...
    def close(self) -> None: ...
