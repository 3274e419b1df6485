"""The one wire-error table: the registry built from the classes, the broker's HTTP mapping of an error, and
the client's mapping back (tierlog.client.errors.error_from_response)."""

from __future__ import annotations

import json

import pytest

import tierlog.client
from tierlog.client import errors
from tierlog.service.web.errors import error_body
from tierlog.wire import errors as kinds
from tierlog.wire.errors import http_status


def answer(code: int, message: str = "m", **extra: int) -> bytes:
    return json.dumps({"error_code": code, "message": message, **extra}).encode()


# Every code on the wire today, with the status it answers and the class both sides use.
WIRE = [
    (404, 404, kinds.NotFoundError, kinds.NotFoundError, False),
    (400, 40001, kinds.BadRequestError, kinds.InvalidRequestError, False),
    (400, 40002, kinds.InvalidConfigError, kinds.InvalidRequestError, False),
    (400, 40003, kinds.CorruptBatchError, kinds.InvalidRequestError, False),
    (401, 40101, kinds.UnauthorizedError, kinds.UnauthorizedError, False),
    (404, 40401, kinds.UnknownTopicError, kinds.NotFoundError, False),
    (404, 40402, kinds.UnknownPartitionError, kinds.NotFoundError, False),
    (404, 40403, kinds.ConsumerInstanceNotFoundError, kinds.NotFoundError, False),
    (404, 40410, kinds.UnknownMemberError, kinds.NotFoundError, False),
    (404, 40411, kinds.UnknownGroupError, kinds.NotFoundError, False),
    (406, 40601, kinds.NotAcceptableError, kinds.InvalidRequestError, False),
    (409, 40901, kinds.ConflictError, kinds.ConflictError, False),
    (409, 40902, kinds.ConsumerInstanceExistsError, kinds.ConflictError, False),
    (409, 40903, kinds.IllegalStateError, kinds.ConflictError, False),
    (409, 40910, kinds.RebalanceInProgressError, kinds.ConflictError, True),
    (409, 40911, kinds.IllegalGenerationError, kinds.ConflictError, False),
    (413, 41301, kinds.RecordTooLargeError, kinds.InvalidRequestError, False),
    (415, 41501, kinds.UnsupportedMediaTypeError, kinds.InvalidRequestError, False),
    (416, 41601, kinds.OffsetOutOfRangeError, kinds.InvalidRequestError, False),
    (422, 42201, kinds.InvalidRequestError, kinds.InvalidRequestError, False),
    (422, 42202, kinds.InvalidValueError, kinds.InvalidRequestError, False),
    (422, 42204, kinds.InvalidConsumerConfigError, kinds.InvalidRequestError, False),
    (500, 50001, kinds.InternalError, kinds.InternalError, True),
    (500, 50002, kinds.CorruptRecordError, kinds.CorruptRecordError, False),
    (503, 50301, kinds.UnavailableError, kinds.UnavailableError, True),
]


@pytest.mark.parametrize(("status", "code", "cls", "kind", "retriable"), WIRE)
def test_codes_map_to_typed_errors(
    status: int, code: int, cls: type[kinds.TierlogError], kind: type[Exception], retriable: bool
) -> None:
    err = errors.error_from_response(status, answer(code, "what happened"))
    assert type(err) is cls
    assert isinstance(err, kind)
    assert (err.code, err.retriable, err.message) == (code, retriable, "what happened")
    assert http_status(cls.code) == status


def test_the_table_holds_every_wire_code_once() -> None:
    registry = kinds.registered_errors()
    assert {code: cls for _, code, cls, _, _ in WIRE}.items() <= registry.items()
    for code, cls in registry.items():
        assert cls.code == code
        assert "code" in vars(cls)
        assert kinds.error_for_code(code, "m").__class__ is cls


def test_a_second_class_with_a_taken_code_is_refused() -> None:
    with pytest.raises(TypeError, match=r"40401 .*held by tierlog.wire.errors.UnknownTopicError"):

        class TopicGoneError(kinds.NotFoundError):
            code = 40401

    assert kinds.error_for_code(40401, "m").__class__ is kinds.UnknownTopicError


def test_subclasses_without_their_own_code_share_their_parents() -> None:
    class DiskDetail(kinds.UnavailableError):
        pass

    assert DiskDetail("x").code == 50301
    assert kinds.registered_errors()[50301] is kinds.UnavailableError


def broker_raised() -> list[kinds.TierlogError]:
    out: list[kinds.TierlogError] = []
    for cls in kinds.registered_errors().values():
        if issubclass(cls, kinds.OffsetOutOfRangeError):
            out.append(cls("gone", log_start_offset=3, log_end_offset=9))
        else:
            out.append(cls(f"{cls.__name__} happened"))
    return out


@pytest.mark.parametrize("raised", broker_raised(), ids=lambda e: type(e).__name__)
def test_the_client_maps_a_broker_answer_to_the_class_the_broker_raised(raised: kinds.TierlogError) -> None:
    body = json.dumps(error_body(raised)).encode()
    err = errors.error_from_response(http_status(raised.code), body)
    assert type(err) is type(raised)
    assert (err.code, err.message, err.retriable) == (raised.code, raised.message, raised.retriable)
    if isinstance(raised, kinds.OffsetOutOfRangeError):
        assert isinstance(err, kinds.OffsetOutOfRangeError)
        assert (err.log_start_offset, err.log_end_offset) == (3, 9)


def test_http_status_is_the_codes_family() -> None:
    assert [http_status(c) for c in (404, 405, 40001, 40401, 41601, 42204, 50001, 50301)] == [
        404,
        405,
        400,
        404,
        416,
        422,
        500,
        503,
    ]


def test_out_of_range_carries_the_valid_range() -> None:
    err = errors.error_from_response(416, answer(41601, log_start_offset=3, log_end_offset=9))
    assert isinstance(err, kinds.OffsetOutOfRangeError)
    assert (err.log_start_offset, err.log_end_offset, err.retriable) == (3, 9, False)


@pytest.mark.parametrize(
    ("status", "code", "kind", "retriable"),
    [
        (404, 40499, kinds.NotFoundError, False),
        (409, 40999, kinds.ConflictError, False),
        (503, 50399, kinds.UnavailableError, True),
        (403, 40399, kinds.AuthorizationError, False),
        (418, 41899, kinds.InvalidRequestError, False),
        (400, 40099, kinds.InvalidRequestError, False),
        (502, 50201, kinds.InternalError, True),
        (405, 405, kinds.InvalidRequestError, False),
        (409, 409, kinds.ConflictError, False),
    ],
)
def test_unknown_codes_fall_back_on_their_family_and_keep_their_number(
    status: int, code: int, kind: type[kinds.TierlogError], retriable: bool
) -> None:
    err = errors.error_from_response(status, answer(code))
    assert type(err) is kind
    assert (err.code, err.retriable) == (code, retriable)
    assert kind.code != code


def test_plain_http_codes_of_the_admin_api_are_the_generic_kinds() -> None:
    err = errors.error_from_response(404, answer(404, "Cluster x cannot be found."))
    assert type(err) is kinds.NotFoundError and err.code == 404


@pytest.mark.parametrize("body", [b"", b"<html>bad gateway</html>", b"[1, 2]", b'{"error_code": "x"}'])
def test_bodies_without_a_code_use_the_status(body: bytes) -> None:
    err = errors.error_from_response(503, body)
    assert isinstance(err, kinds.UnavailableError) and err.retriable
    assert err.code == 503
    assert err.message


def test_client_side_errors_are_kinds_with_flags() -> None:
    assert errors.BrokerUnavailableError("x").retriable
    assert errors.RequestTimeoutError("x").retriable
    assert not errors.DeliveryTimeoutError("x").retriable
    assert not errors.BufferExhaustedError("x").retriable
    assert isinstance(errors.CommitFailedError("x"), kinds.ConflictError)
    own = [
        c
        for c in vars(errors).values()
        if isinstance(c, type) and issubclass(c, kinds.TierlogError) and c.__module__ == errors.__name__
    ]
    assert len(own) == 7
    for cls in own:
        assert kinds.registered_errors()[cls.code] is cls


def test_the_client_package_exports_the_errors_users_catch() -> None:
    exported = {name: getattr(tierlog.client, name) for name in tierlog.client.__all__}
    for cls in (
        kinds.UnknownTopicError,
        kinds.UnknownPartitionError,
        kinds.OffsetOutOfRangeError,
        kinds.RecordTooLargeError,
        kinds.InvalidConfigError,
        kinds.InternalError,
        kinds.NotFoundError,
        kinds.TierlogError,
        errors.BrokerUnavailableError,
        errors.CommitFailedError,
        errors.NoOffsetForPartitionError,
    ):
        assert exported[cls.__name__] is cls
