"""The few public error kinds every tierlog layer raises.

Each kind has a stable ``code`` (Confluent REST proxy codes where one exists) and a ``retriable`` flag.
Fine-grained failures are subclasses of one of these kinds, so callers match on the kind or the code,
never on a message string. The web layer maps them to HTTP in exactly one middleware; the client maps
codes back to these classes through :func:`error_for_code`.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "TierlogError",
    "InvalidRequestError",
    "NotFoundError",
    "ConflictError",
    "UnavailableError",
    "CorruptRecordError",
    "UnauthorizedError",
    "InternalError",
    "OffsetOutOfRangeError",
    "RecordTooLargeError",
    "UnknownMemberError",
    "UnknownGroupError",
    "IllegalGenerationError",
    "RebalanceInProgressError",
    "error_for_code",
]


class TierlogError(Exception):
    """Base of every error tierlog raises on purpose.

    ``code`` is a stable numeric error code; ``http_status`` the status the broker answers with.
    """

    code: ClassVar[int] = 50001
    http_status: ClassVar[int] = 500
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code  # type: ignore[misc]

    def __str__(self) -> str:
        return self.message


class InvalidRequestError(TierlogError):
    """The request is malformed or names an invalid value. Never retried."""

    code = 42201
    http_status = 422


class NotFoundError(TierlogError):
    """A topic, partition, group or object does not exist. Never retried."""

    code = 40401
    http_status = 404


class ConflictError(TierlogError):
    """The request conflicts with the current state (already exists, fenced, stale generation)."""

    code = 40901
    http_status = 409


class UnavailableError(TierlogError):
    """A dependency is temporarily unavailable (object store down, disk budget full). Retriable."""

    code = 50301
    http_status = 503
    retriable = True


class CorruptRecordError(TierlogError):
    """Bytes failed validation: bad CRC, impossible length, truncated batch. Never served as data."""

    code = 50002
    http_status = 500


class UnauthorizedError(TierlogError):
    """The caller is not allowed to do this."""

    code = 40101
    http_status = 401


class InternalError(TierlogError):
    """A bug or an unexpected failure inside tierlog."""

    code = 50001
    http_status = 500


class OffsetOutOfRangeError(InvalidRequestError):
    """A fetch asked for an offset outside ``[log_start_offset, log_end_offset]``.

    Carries the valid range so a client can reset its position without another round trip.
    """

    code = 41601
    http_status = 416

    def __init__(self, message: str, *, log_start_offset: int, log_end_offset: int) -> None:
        super().__init__(message)
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset


class RecordTooLargeError(InvalidRequestError):
    """A batch is larger than ``max.message.bytes``."""

    code = 41301
    http_status = 413


class UnknownMemberError(NotFoundError):
    """The member id is not (or no longer) in its consumer group: it was evicted or never joined. Rejoin
    with an empty member id."""

    code = 40410


class UnknownGroupError(NotFoundError):
    """No such consumer group."""

    code = 40411


class IllegalGenerationError(ConflictError):
    """A group request carries a generation that is not the group's current one: the member is fenced."""

    code = 40911


class RebalanceInProgressError(ConflictError):
    """The group is rebalancing: the member must join again to get its new assignment."""

    code = 40910
    retriable = True


_KINDS: tuple[type[TierlogError], ...] = (
    InvalidRequestError,
    NotFoundError,
    ConflictError,
    UnavailableError,
    CorruptRecordError,
    UnauthorizedError,
    InternalError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    UnknownMemberError,
    UnknownGroupError,
    IllegalGenerationError,
    RebalanceInProgressError,
)

_BY_CODE: dict[int, type[TierlogError]] = {kind.code: kind for kind in _KINDS}
_BY_STATUS: dict[int, type[TierlogError]] = {
    400: InvalidRequestError,
    401: UnauthorizedError,
    403: UnauthorizedError,
    404: NotFoundError,
    406: InvalidRequestError,
    409: ConflictError,
    413: RecordTooLargeError,
    415: InvalidRequestError,
    416: OffsetOutOfRangeError,
    422: InvalidRequestError,
    503: UnavailableError,
}


def error_for_code(code: int, message: str) -> TierlogError:
    """Build the error kind registered for ``code`` (falling back on its HTTP status class).

    Idempotent and pure: the same code always maps to the same class.
    """
    kind = _BY_CODE.get(code)
    if kind is None:
        status = code // 100
        kind = _BY_STATUS.get(status, InternalError)
    if issubclass(kind, OffsetOutOfRangeError):
        return OffsetOutOfRangeError(message, log_start_offset=-1, log_end_offset=-1)
    return kind(message, code=code)
