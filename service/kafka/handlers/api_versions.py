"""ApiVersions (key 18): the versions this listener serves, so clients pick one both sides speak."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tierlog.service.kafka.apis import API_VERSIONS_KEY, REGISTRY, api
from tierlog.service.kafka.context import KafkaRequest
from tierlog.service.kafka.messages import ErrorCode, encode_response, response_class, shape

__all__ = ["served_versions", "unsupported_version_answer"]


def served_versions() -> list[dict[str, int]]:
    """Every served API key with its version range, by key."""
    return [
        {"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
        for a in sorted(REGISTRY.values(), key=lambda a: a.key)
    ]


def unsupported_version_answer() -> bytes:
    """The body of Kafka's answer to an ApiVersions request of a version it does not serve: version 0's
    layout, error UNSUPPORTED_VERSION and the served versions, so the client retries with one of them."""
    entity = shape(
        response_class(API_VERSIONS_KEY, 0),
        {"error_code": ErrorCode.unsupported_version, "api_keys": served_versions()},
    )
    return encode_response(entity)


@api(API_VERSIONS_KEY, "ApiVersions", 0, 4)
async def handle(request: KafkaRequest, body: Any) -> Mapping[str, Any]:
    return {"error_code": ErrorCode.none, "api_keys": served_versions(), "throttle_time": 0}
