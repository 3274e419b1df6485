"""Vendor errors are mapped once, by code/class/errno (never by message), and chained with ``from``."""

from __future__ import annotations

import asyncio
import errno

import pytest
from botocore import exceptions as bce

from tierlog.tiering.remote.translate import describe_store_error, translate, translating
from tierlog.wire.errors import (
    ConflictError,
    InternalError,
    InvalidRequestError,
    NotFoundError,
    TierlogError,
    UnauthorizedError,
    UnavailableError,
)


def client_error(code: str, status: int, message: str = "whatever") -> bce.ClientError:
    return bce.ClientError(
        {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "GetObject",
    )


@pytest.mark.parametrize(
    ("code", "status", "kind"),
    [
        ("NoSuchKey", 404, NotFoundError),
        ("404", 404, NotFoundError),
        ("NoSuchBucket", 404, NotFoundError),
        ("NoSuchUpload", 404, NotFoundError),
        ("PreconditionFailed", 412, ConflictError),
        ("SlowDown", 503, UnavailableError),
        ("Throttling", 400, UnavailableError),
        ("RequestTimeout", 400, UnavailableError),
        ("InternalError", 500, UnavailableError),
        ("ConditionalRequestConflict", 409, UnavailableError),
        ("AccessDenied", 403, UnauthorizedError),
        ("SignatureDoesNotMatch", 403, UnauthorizedError),
        ("ExpiredToken", 400, UnauthorizedError),
        ("InvalidArgument", 400, InvalidRequestError),
        ("EntityTooSmall", 400, InvalidRequestError),
        ("Unknown", 429, UnavailableError),
        ("Unknown", 504, UnavailableError),
        ("Unknown", 401, UnauthorizedError),
        ("", 404, NotFoundError),
        ("", 412, ConflictError),
        ("Unknown", 0, InternalError),
    ],
)
def test_client_errors(code: str, status: int, kind: type[TierlogError]) -> None:
    err = translate(client_error(code, status), op="get", key="k")
    assert type(err) is kind


def test_message_text_is_ignored() -> None:
    err = translate(
        client_error("InvalidArgument", 400, "The specified key does not exist. SlowDown"), op="get"
    )
    assert type(err) is InvalidRequestError


@pytest.mark.parametrize(
    ("vendor", "kind"),
    [
        (bce.EndpointConnectionError(endpoint_url="http://x"), UnavailableError),
        (bce.ConnectTimeoutError(endpoint_url="http://x"), UnavailableError),
        (bce.ReadTimeoutError(endpoint_url="http://x"), UnavailableError),
        (bce.ConnectionClosedError(endpoint_url="http://x"), UnavailableError),
        (bce.NoCredentialsError(), UnauthorizedError),
        (bce.ParamValidationError(report="bad"), InvalidRequestError),
        (TimeoutError(), UnavailableError),
        (FileNotFoundError(errno.ENOENT, "x"), NotFoundError),
        (FileExistsError(errno.EEXIST, "x"), ConflictError),
        (IsADirectoryError(errno.EISDIR, "x"), ConflictError),
        (NotADirectoryError(errno.ENOTDIR, "x"), ConflictError),
        (PermissionError(errno.EACCES, "x"), UnauthorizedError),
        (OSError(errno.EROFS, "x"), UnauthorizedError),
        (OSError(errno.ENOSPC, "x"), UnavailableError),
        (OSError(errno.EIO, "x"), UnavailableError),
        (OSError(errno.ENAMETOOLONG, "x"), InvalidRequestError),
        (OSError(errno.ELOOP, "x"), InternalError),
        (ValueError("bug"), InternalError),
    ],
)
def test_other_vendor_errors(vendor: Exception, kind: type[TierlogError]) -> None:
    assert type(translate(vendor, op="put", key="k")) is kind


def test_translating_chains_and_passes_tierlog_errors_through() -> None:
    original = client_error("NoSuchKey", 404)
    with pytest.raises(NotFoundError) as info, translating("get", "k"):
        raise original
    assert info.value.__cause__ is original
    assert "get 'k'" in str(info.value)
    mine = ConflictError("mine")
    with pytest.raises(ConflictError) as info2, translating("get"):
        raise mine
    assert info2.value is mine


def test_cancellation_is_not_translated() -> None:
    with pytest.raises(asyncio.CancelledError), translating("get"):
        raise asyncio.CancelledError


@pytest.mark.parametrize(
    ("vendor", "named"),
    [
        (client_error("NoSuchBucket", 404), "the bucket does not exist (NoSuchBucket)"),
        (client_error("InvalidAccessKeyId", 403), "bad credentials"),
        (client_error("SignatureDoesNotMatch", 403), "bad credentials"),
        (client_error("AccessDenied", 403), "access denied"),
        (client_error("", 403), "access denied"),
        (bce.NoCredentialsError(), "no credentials"),
        (bce.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), "the endpoint is unreachable"),
        (bce.ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"), "the endpoint is unreachable"),
        (TimeoutError(), "did not answer in time"),
        (client_error("SlowDown", 503), "the store answered SlowDown (HTTP 503)"),
    ],
)
def test_describe_store_error_names_the_cause(vendor: Exception, named: str) -> None:
    """The one-line cause an operator acts on, from the vendor error or the kind translated from it (also
    when another kind wraps that one, as the retrying store's deadline does)."""
    assert named in describe_store_error(vendor)
    kind = translate(vendor, op="list")
    kind.__cause__ = vendor
    assert named in describe_store_error(kind)
    wrapper = UnavailableError("retry deadline exceeded")
    wrapper.__cause__ = kind
    assert named in describe_store_error(wrapper)
    if isinstance(vendor, bce.ClientError) and vendor.response["Error"]["Code"]:
        assert vendor.response["Error"]["Code"] in describe_store_error(vendor)  # the code S3 gave


def test_describe_store_error_of_a_kind_without_a_vendor_cause() -> None:
    assert describe_store_error(NotFoundError("gone")) == "NotFoundError: gone"
