"""The HTTP mapping of tierlog's errors: the one middleware that turns every error into a JSON response.

Every :class:`~tierlog.tiering.errors.TierlogError` becomes the body ``{"error_code": err.code, "message":
err.message}`` with the status its code encodes (:func:`http_status`); an
:class:`~tierlog.tiering.errors.OffsetOutOfRangeError` also carries ``log_start_offset`` and
``log_end_offset``. aiohttp's own HTTP errors (unknown route 404, wrong method 405, body over the size limit
413) get the same JSON envelope. Anything else is a bug: it is logged with its traceback and answered with 500
``{"error_code": 50001}``. The error classes and their codes live in :mod:`tierlog.tiering.errors`.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tierlog.tiering.errors import InternalError, OffsetOutOfRangeError, RecordTooLargeError, TierlogError

__all__ = ["error_middleware", "error_body", "http_status", "json_error"]

log = logging.getLogger("tierlog.http")


def http_status(code: int) -> int:
    """The HTTP status an error code answers with. Pure.

    Confluent's five-digit codes start with their status (40401 is a 404, 50301 a 503); its v3 admin API
    also answers plain three-digit codes, which are the status itself.
    """
    return code if code < 1000 else code // 100


def error_body(err: TierlogError) -> dict[str, Any]:
    """The JSON body for ``err``. Pure and idempotent."""
    body: dict[str, Any] = {"error_code": err.code, "message": err.message}
    if isinstance(err, OffsetOutOfRangeError):
        body["log_start_offset"] = err.log_start_offset
        body["log_end_offset"] = err.log_end_offset
    return body


def json_error(err: TierlogError) -> web.Response:
    """A JSON response for ``err`` with its HTTP status. Pure and idempotent."""
    return web.json_response(error_body(err), status=http_status(err.code))


def _from_http_exception(exc: web.HTTPException) -> web.Response:
    if exc.status == 413:
        return json_error(RecordTooLargeError(exc.text or "request body too large"))
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
        if http_status(err.code) >= 500:
            log.warning("%s %s failed: %s (%d)", request.method, request.path, err.message, err.code)
        return json_error(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http_exception(exc)
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_error(InternalError("internal server error"))
