"""Shaping one answer into each version's kio entity, and decoding requests."""

from __future__ import annotations

import datetime

import pytest

from tierlog.service.kafka.messages import (
    DecodeError,
    ErrorCode,
    decode_request,
    encode_response,
    is_flexible,
    response_class,
    shape,
)

ANSWER = {
    "throttle_time": 3,
    "brokers": [{"node_id": 0, "host": "127.0.0.1", "port": 9092, "rack": "r1"}],
    "cluster_id": "c",
    "controller_id": 0,
    "topics": [{"error_code": 3, "name": "t", "partitions": [{"partition_index": 0, "leader_id": 0}]}],
}


@pytest.mark.parametrize("version", range(13))
def test_one_metadata_answer_shapes_into_every_version(version: int) -> None:
    entity = shape(response_class(3, version), ANSWER)
    assert entity.brokers[0].node_id == 0
    assert entity.topics[0].error_code is ErrorCode.unknown_topic_or_partition
    assert entity.topics[0].partitions[0].leader_id == 0
    if hasattr(entity, "throttle_time"):
        assert entity.throttle_time == datetime.timedelta(milliseconds=3)
    assert encode_response(entity)  # every field has a value its writer accepts


def test_fields_the_answer_lacks_get_their_defaults() -> None:
    entity = shape(response_class(3, 12), {"brokers": [], "topics": []})
    assert entity.cluster_id is None and entity.controller_id == -1


def test_a_request_decodes_and_garbage_raises_decode_error() -> None:
    assert is_flexible(3, 9) and not is_flexible(3, 8)
    request = decode_request(3, 1, b"\xff\xff\xff\xff", 0)  # v1: null topics (all)
    assert request.topics is None
    with pytest.raises(DecodeError):
        decode_request(3, 1, b"\x00\x00\x00\x05", 0)
