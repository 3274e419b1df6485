"""Produce's pure parts: the batch checks and one partition's answer, shaped into every served version."""

from __future__ import annotations

import datetime

import pytest

from tierlog.service.kafka.handlers.produce import PRODUCE_KEY, check_batches, partition_answer
from tierlog.service.kafka.messages import ErrorCode, encode_response, response_class, shape
from tierlog.tiering.codec.batch import build_batch
from tierlog.tiering.codec.records import Record
from tierlog.tiering.log.types import AppendInfo
from tierlog.wire.errors import (
    CorruptBatchError,
    CorruptRecordError,
    NotLeaderOrFollowerError,
    OutOfOrderSequenceError,
    RecordTooLargeError,
)

STORED = AppendInfo(
    base_offset=40,
    last_offset=42,
    record_count=3,
    batch_base_offsets=[40],
    log_append_time=1_700_000_000_123,
)


def test_check_batches_counts_whole_valid_batches() -> None:
    one = build_batch([Record(b"k", b"v"), Record(None, b"w")])
    assert check_batches(one + one, max_size=1 << 20) == 2


def test_check_batches_refuses_empty_corrupt_and_oversized_records() -> None:
    batch = build_batch([Record(b"k", b"v" * 100)])
    with pytest.raises(CorruptBatchError):
        check_batches(b"", max_size=1 << 20)
    flipped = bytearray(batch)
    flipped[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        check_batches(bytes(flipped), max_size=1 << 20)
    with pytest.raises(CorruptRecordError):
        check_batches(batch[:-3], max_size=1 << 20)
    with pytest.raises(RecordTooLargeError):
        check_batches(batch, max_size=64)


def test_a_stored_append_answers_its_offsets_and_append_time() -> None:
    answer = partition_answer(2, info=STORED, log_start_offset=7)
    assert (answer["index"], answer["error_code"], answer["base_offset"]) == (2, ErrorCode.none, 40)
    assert answer["log_start_offset"] == 7
    appended = datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=datetime.UTC)
    assert answer["log_append_time"] == appended


def test_create_time_answers_no_append_time() -> None:
    info = AppendInfo(
        base_offset=0, last_offset=0, record_count=1, batch_base_offsets=[0], log_append_time=-1
    )
    assert partition_answer(0, info=info)["log_append_time"] is None


def test_an_error_answers_its_kafka_code_and_message() -> None:
    answer = partition_answer(1, error=OutOfOrderSequenceError("sequence 5, expected 2"))
    assert (answer["error_code"], answer["base_offset"]) == (45, -1)
    assert answer["error_message"] == "sequence 5, expected 2"
    assert "current_leader" not in answer


def test_not_leader_names_the_current_leader() -> None:
    answer = partition_answer(0, error=NotLeaderOrFollowerError("elsewhere", leader_id=3, leader_epoch=9))
    assert answer["error_code"] == 6
    assert answer["current_leader"] == {"leader_id": 3, "leader_epoch": 9}


@pytest.mark.parametrize("version", range(3, 13))
def test_one_answer_shapes_into_every_served_version(version: int) -> None:
    answers = [
        partition_answer(0, info=STORED, log_start_offset=0),
        partition_answer(1, error=NotLeaderOrFollowerError("elsewhere", leader_id=3, leader_epoch=9)),
        partition_answer(2, error_code=ErrorCode.invalid_record, message="magic 1"),
    ]
    entity = shape(
        response_class(PRODUCE_KEY, version),
        {
            "responses": [{"name": "t", "partition_responses": answers}],
            "throttle_time": 0,
            "node_endpoints": [{"node_id": 3, "host": "h", "port": 9092, "rack": None}],
        },
    )
    stored, moved, refused = entity.responses[0].partition_responses
    assert (stored.base_offset, moved.error_code, refused.error_code) == (
        40,
        ErrorCode.not_leader_or_follower,
        ErrorCode.invalid_record,
    )
    if version >= 10:
        assert moved.current_leader.leader_id == 3
    if version >= 8:
        assert refused.error_message == "magic 1"
    assert encode_response(entity)
