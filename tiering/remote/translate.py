"""The one place where vendor errors (botocore, OSError) become :mod:`tierlog.wire.errors` kinds.

Both object-store implementations wrap every backend call in :func:`translating`, which re-raises with
``raise kind(...) from err`` so the vendor error stays on ``__cause__`` for logs. Matching is on S3 error
codes, HTTP status codes, exception classes and ``errno`` values, never on message text.

=========================================  ===========================
vendor failure                              tierlog kind
=========================================  ===========================
NoSuchKey, NoSuchBucket, NoSuchUpload, 404  NotFoundError
PreconditionFailed, 412                     ConflictError
SlowDown, throttling, 5xx, 429, timeouts,   UnavailableError (retriable)
connection errors, ConditionalRequestConflict
AccessDenied, bad/expired credentials,      UnauthorizedError
401/403, no credentials
other 4xx, parameter validation             InvalidRequestError
OSError ENOENT                              NotFoundError
OSError EEXIST/EISDIR/ENOTDIR/ENOTEMPTY     ConflictError
OSError EACCES/EPERM/EROFS                  UnauthorizedError
OSError ENOSPC/EDQUOT/EIO/EAGAIN/EMFILE...  UnavailableError
OSError ENAMETOOLONG/EINVAL                 InvalidRequestError
anything else                               InternalError
=========================================  ===========================

:func:`describe_store_error` names the cause of a failure in an operator's words (a missing bucket, bad
or missing credentials, access denied, an unreachable endpoint) for the broker's store check.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from botocore import exceptions as bce

from tierlog.wire.errors import (
    ConflictError,
    InternalError,
    InvalidRequestError,
    NotFoundError,
    TierlogError,
    UnauthorizedError,
    UnavailableError,
)

__all__ = ["describe_store_error", "translate", "translating", "s3_error_code"]

_NOT_FOUND_CODES = frozenset({"NoSuchKey", "NoSuchBucket", "NoSuchUpload", "NotFound", "404"})
_CONFLICT_CODES = frozenset({"PreconditionFailed", "412"})
_UNAVAILABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "BandwidthLimitExceeded",
        "ProvisionedThroughputExceededException",
        "RequestTimeout",
        "RequestTimeoutException",
        "InternalError",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "XMinioServerNotInitialized",
        # S3 answers 409 to a conditional write racing another one on the same key; AWS asks callers
        # to retry, and the retry then sees the winner (412) or wins.
        "ConditionalRequestConflict",
    }
)
_UNAUTHORIZED_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "InvalidToken",
        "TokenRefreshRequired",
        "AccountProblem",
        "InvalidSecurity",
    }
)
_UNAVAILABLE_ERRNOS = frozenset(
    {
        errno.ENOSPC,
        errno.EDQUOT,
        errno.EIO,
        errno.EAGAIN,
        errno.EBUSY,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOMEM,
        errno.ETIMEDOUT,
        errno.EINTR,
        errno.ESTALE,
    }
)


def s3_error_code(err: bce.ClientError) -> tuple[str, int]:
    """The S3 error code and HTTP status of a ``ClientError`` ("" / 0 when absent). Pure."""
    error = err.response.get("Error", {})
    metadata = err.response.get("ResponseMetadata", {})
    return str(error.get("Code", "")), int(metadata.get("HTTPStatusCode", 0) or 0)


def _client_error_kind(code: str, status: int) -> type[TierlogError]:
    if code in _NOT_FOUND_CODES:
        return NotFoundError
    if code in _CONFLICT_CODES:
        return ConflictError
    if code in _UNAVAILABLE_CODES:
        return UnavailableError
    if code in _UNAUTHORIZED_CODES:
        return UnauthorizedError
    if status == 404:
        return NotFoundError
    if status == 412:
        return ConflictError
    if status in (401, 403):
        return UnauthorizedError
    if status == 429 or status >= 500:
        return UnavailableError
    if 400 <= status < 500:
        return InvalidRequestError
    return InternalError


def _os_error_kind(err: OSError) -> type[TierlogError]:
    if isinstance(err, FileNotFoundError):
        return NotFoundError
    if isinstance(err, FileExistsError | IsADirectoryError | NotADirectoryError):
        return ConflictError
    if isinstance(err, PermissionError):
        return UnauthorizedError
    if err.errno == errno.ENOTEMPTY:
        return ConflictError
    if err.errno == errno.EROFS:
        return UnauthorizedError
    if err.errno in _UNAVAILABLE_ERRNOS or isinstance(err, ConnectionError | TimeoutError):
        return UnavailableError
    if err.errno in (errno.ENAMETOOLONG, errno.EINVAL):
        return InvalidRequestError
    return InternalError


def translate(err: BaseException, *, op: str, key: str = "") -> TierlogError:
    """Build the :mod:`tierlog.wire.errors` kind for a vendor error raised while doing ``op`` on ``key``.

    Pure; a :class:`TierlogError` is returned unchanged. The caller raises the result ``from err``.
    """
    if isinstance(err, TierlogError):
        return err
    where = f"{op} {key!r}" if key else op
    if isinstance(err, bce.ClientError):
        code, status = s3_error_code(err)
        kind = _client_error_kind(code, status)
        return kind(f"object store {where}: {code or 'error'} (HTTP {status})")
    if isinstance(err, bce.NoCredentialsError | bce.PartialCredentialsError | bce.CredentialRetrievalError):
        return UnauthorizedError(f"object store {where}: no usable credentials ({type(err).__name__})")
    if isinstance(err, bce.HTTPClientError | bce.EndpointConnectionError | bce.ConnectionError):
        return UnavailableError(f"object store {where}: connection failed ({type(err).__name__})")
    if isinstance(err, bce.ParamValidationError):
        return InvalidRequestError(f"object store {where}: invalid request parameters")
    if isinstance(err, TimeoutError):
        return UnavailableError(f"object store {where}: timed out")
    if isinstance(err, OSError):
        kind = _os_error_kind(err)
        name = errno.errorcode.get(err.errno or 0, "OSError")
        return kind(f"object store {where}: {name}")
    return InternalError(f"object store {where}: unexpected {type(err).__name__}")


_MISSING_BUCKET_CODES = frozenset({"NoSuchBucket"})
_BAD_CREDENTIAL_CODES = frozenset(
    {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}
)
_NO_CREDENTIALS = (bce.NoCredentialsError, bce.PartialCredentialsError, bce.CredentialRetrievalError)


def _vendor_error(err: BaseException) -> BaseException:
    """The vendor error a tierlog kind was translated from (following ``__cause__`` through kinds that
    wrap kinds, as the retrying store's do), else the innermost kind."""
    seen = 0
    while isinstance(err, TierlogError) and err.__cause__ is not None and seen < 8:
        err, seen = err.__cause__, seen + 1
    return err


def describe_store_error(err: BaseException) -> str:
    """One line naming why an object-store call failed, in the words an operator acts on: a missing
    bucket, refused or missing credentials, access denied, an unreachable endpoint, a timeout. ``err``
    is a vendor error or the tierlog kind :func:`translate` made of one (its ``__cause__`` is read).
    Matches on error codes and classes, never on message text. Pure."""
    vendor = _vendor_error(err)
    if isinstance(vendor, bce.ClientError):
        code, status = s3_error_code(vendor)
        if code in _MISSING_BUCKET_CODES:
            return f"the bucket does not exist ({code})"
        if code in _BAD_CREDENTIAL_CODES:
            return f"bad credentials: the store refused the access key or its signature ({code})"
        if code in _UNAUTHORIZED_CODES or status in (401, 403):
            return f"access denied: the credentials may not use this bucket ({code or status})"
        return f"the store answered {code or 'an error'} (HTTP {status})"
    if isinstance(vendor, _NO_CREDENTIALS):
        return (
            f"no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile "
            f"({type(vendor).__name__})"
        )
    if isinstance(vendor, bce.EndpointConnectionError | bce.ConnectionError | bce.HTTPClientError):
        return f"the endpoint is unreachable ({type(vendor).__name__})"
    if isinstance(vendor, TimeoutError):
        return "the endpoint did not answer in time"
    if isinstance(vendor, OSError):
        return f"the store's directory cannot be used ({errno.errorcode.get(vendor.errno or 0, 'OSError')})"
    if isinstance(vendor, TierlogError):
        return f"{type(vendor).__name__}: {vendor.message}"
    return f"unexpected {type(vendor).__name__}"


@contextmanager
def translating(op: str, key: str = "") -> Iterator[None]:
    """Context manager that re-raises any vendor error as its tierlog kind, chained ``from`` it.

    ``asyncio.CancelledError`` and other ``BaseException`` s that are not ``Exception`` pass through.
    Safe to use concurrently; re-entrant.
    """
    try:
        yield
    except TierlogError:
        raise
    except Exception as err:
        raise translate(err, op=op, key=key) from err
