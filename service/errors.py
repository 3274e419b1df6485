"""HTTP-only error kinds and the one middleware that maps every error to a JSON response.

Every :class:`~tierlog.tiering.errors.TierlogError` becomes ``err.http_status`` with the body
``{"error_code": err.code, "message": err.message}``; an
:class:`~tierlog.tiering.errors.OffsetOutOfRangeError` also carries ``log_start_offset`` and
``log_end_offset``. aiohttp's own HTTP errors (unknown route 404, wrong method 405, body over the size limit
413) get the same JSON envelope. Anything else is a bug: it is logged with its traceback and answered with 500
``{"error_code": 50001}``.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tierlog.tiering.errors import InvalidRequestError, OffsetOutOfRangeError, TierlogError

__all__ = [
    "BadRequestError",
    "InvalidConfigError",
    "NotAcceptableError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "error_middleware",
    "error_body",
    "json_error",
]

log = logging.getLogger("tierlog.http")

TOPIC_NOT_FOUND = 40401
PARTITION_NOT_FOUND = 40402
CLUSTER_NOT_FOUND = 404


class BadRequestError(InvalidRequestError):
    """The body is not valid JSON or base64, or lacks a required field."""

    code = 40001
    http_status = 400


class InvalidConfigError(InvalidRequestError):
    """A topic name, topic config or partition count is invalid, or the topic already exists.

    Confluent's v3 admin API answers these with 400 and error code 40002 (Kafka's bad-request family).
    """

    code = 40002
    http_status = 400


class NotAcceptableError(InvalidRequestError):
    """No representation matching the ``Accept`` header."""

    code = 40601
    http_status = 406


class UnsupportedMediaTypeError(InvalidRequestError):
    """The ``Content-Type`` of the body is not one this route accepts."""

    code = 41501
    http_status = 415


class PayloadTooLargeError(InvalidRequestError):
    """The request body is larger than ``max.request.size``."""

    code = 41301
    http_status = 413


def error_body(err: TierlogError) -> dict[str, Any]:
    """The JSON body for ``err``. Pure and idempotent."""
    body: dict[str, Any] = {"error_code": err.code, "message": err.message}
    if isinstance(err, OffsetOutOfRangeError):
        body["log_start_offset"] = err.log_start_offset
        body["log_end_offset"] = err.log_end_offset
    return body


def json_error(err: TierlogError) -> web.Response:
    """A JSON response for ``err`` with its HTTP status. Pure and idempotent."""
    return web.json_response(error_body(err), status=err.http_status)


def _from_http_exception(exc: web.HTTPException) -> web.Response:
    if exc.status == 413:
        return json_error(PayloadTooLargeError(exc.text or "request body too large"))
    message = exc.reason
    if exc.status == 405 and isinstance(exc, web.HTTPMethodNotAllowed):
        message = f"method {exc.method} not allowed; allowed: {', '.join(sorted(exc.allowed_methods))}"
    headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
    body = {"error_code": exc.status, "message": message}
    return web.json_response(body, status=exc.status, headers=headers)


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map errors raised by ``handler`` to JSON responses.

    Never raises for errors, except for cancellation, non-error HTTP exceptions such as redirects, and a
    client that went away (nobody is left to answer: logged at debug level and re-raised so that aiohttp
    closes the connection). Safe to use concurrently; holds no state.
    """
    try:
        return await handler(request)
    except ConnectionError:
        log.debug("client left during %s %s", request.method, request.path)
        raise
    except TierlogError as err:
        if err.http_status >= 500:
            log.warning("%s %s failed: %s (%d)", request.method, request.path, err.message, err.code)
        return json_error(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http_exception(exc)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return web.json_response({"error_code": 50001, "message": "internal server error"}, status=500)
