"""tierlog.client.errors.error_from_response: the one mapping from broker answers to typed errors."""

from __future__ import annotations

import json

import pytest

from tierlog.client import errors
from tierlog.tiering import errors as kinds


def answer(code: int, message: str = "m", **extra: int) -> bytes:
    return json.dumps({"error_code": code, "message": message, **extra}).encode()


@pytest.mark.parametrize(
    ("status", "code", "cls", "kind", "retriable"),
    [
        (400, 40001, errors.BadRequestError, kinds.InvalidRequestError, False),
        (400, 40002, errors.TopicExistsError, kinds.InvalidRequestError, False),
        (400, 40003, errors.CorruptBatchError, kinds.InvalidRequestError, False),
        (404, 40401, errors.UnknownTopicError, kinds.NotFoundError, False),
        (404, 40402, errors.UnknownPartitionError, kinds.NotFoundError, False),
        (404, 40410, errors.UnknownMemberError, kinds.NotFoundError, False),
        (404, 40411, errors.UnknownGroupError, kinds.NotFoundError, False),
        (406, 40601, errors.NotAcceptableError, kinds.InvalidRequestError, False),
        (409, 40910, errors.RebalanceInProgressError, kinds.ConflictError, True),
        (409, 40911, errors.IllegalGenerationError, kinds.ConflictError, False),
        (413, 41301, kinds.RecordTooLargeError, kinds.InvalidRequestError, False),
        (415, 41501, errors.UnsupportedMediaTypeError, kinds.InvalidRequestError, False),
        (422, 42201, kinds.InvalidRequestError, kinds.InvalidRequestError, False),
        (500, 50001, errors.BrokerInternalError, kinds.InternalError, True),
        (500, 50002, kinds.CorruptRecordError, kinds.CorruptRecordError, False),
        (503, 50301, kinds.UnavailableError, kinds.UnavailableError, True),
    ],
)
def test_codes_map_to_typed_errors(
    status: int, code: int, cls: type[Exception], kind: type[Exception], retriable: bool
) -> None:
    err = errors.error_from_response(status, answer(code, "what happened"))
    assert type(err) is cls
    assert isinstance(err, kind)
    assert (err.code, err.retriable, err.message) == (code, retriable, "what happened")


def test_out_of_range_carries_the_valid_range() -> None:
    err = errors.error_from_response(416, answer(41601, log_start_offset=3, log_end_offset=9))
    assert isinstance(err, kinds.OffsetOutOfRangeError)
    assert (err.log_start_offset, err.log_end_offset, err.retriable) == (3, 9, False)


def test_unknown_codes_fall_back_on_their_status_family() -> None:
    assert type(errors.error_from_response(404, answer(40499))) is kinds.NotFoundError
    assert type(errors.error_from_response(409, answer(40999))) is kinds.ConflictError
    assert type(errors.error_from_response(418, answer(41899))) is kinds.InternalError


def test_plain_http_codes_of_the_admin_api_keep_their_code() -> None:
    err = errors.error_from_response(404, answer(404, "Cluster x cannot be found."))
    assert isinstance(err, kinds.NotFoundError) and err.code == 404


@pytest.mark.parametrize("body", [b"", b"<html>bad gateway</html>", b"[1, 2]", b'{"error_code": "x"}'])
def test_bodies_without_a_code_use_the_status(body: bytes) -> None:
    err = errors.error_from_response(503, body)
    assert isinstance(err, kinds.UnavailableError) and err.retriable
    assert err.message


def test_client_side_errors_are_kinds_with_flags() -> None:
    assert errors.BrokerUnavailableError("x").retriable
    assert errors.RequestTimeoutError("x").retriable
    assert not errors.DeliveryTimeoutError("x").retriable
    assert not errors.BufferExhaustedError("x").retriable
    assert isinstance(errors.CommitFailedError("x"), kinds.ConflictError)
    own = [c for c in vars(errors).values() if isinstance(c, type) and c.__module__ == errors.__name__]
    codes = [c.code for c in own if issubclass(c, kinds.TierlogError)]
    assert len(codes) > 15
    assert len(codes) == len(set(codes))
