"""The HTTP mapping of tierlog's errors: the one middleware that turns every error into a JSON response.

Every :class:`~tierlog.wire.errors.TierlogError` becomes the body ``{"error_code": err.code, "message":
err.message}`` with the status its code encodes (:func:`tierlog.wire.errors.http_status`); an
:class:`~tierlog.wire.errors.OffsetOutOfRangeError` also carries ``log_start_offset`` and
``log_end_offset``. aiohttp's own HTTP errors (unknown route 404, wrong method 405, body over the size limit
413) get the same JSON envelope. Anything else is a bug: it is logged with its traceback and answered with 500
``{"error_code": 50001}``. A 401 carries the ``WWW-Authenticate`` challenges of the listed
``authentication.methods``; a 429 carries ``Retry-After``. The error classes and their codes live in
:mod:`tierlog.wire.errors`.

An unknown path answers 404 with code 40400 and a wrong method 405 with 40501, so every error carries a
five-digit code. Errors of the REST Proxy routes (``/topics``, ``/consumers``, ``/brokers``) carry the
Kafka content type the request's ``Accept`` header negotiates (``application/vnd.kafka.v2+json`` when it
allows none), as Confluent's REST Proxy answers them; every other route answers ``application/json``.
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from tierlog.service.security.authn import challenges
from tierlog.service.web.keys import SETTINGS
from tierlog.service.web.media import KAFKA_V2_JSON, negotiate, response_offers
from tierlog.wire.errors import (
    InternalError,
    MethodNotAllowedError,
    NoSuchRouteError,
    NotLeaderOrFollowerError,
    OffsetMovedToTieredStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
    TierlogError,
    http_status,
)

__all__ = [
    "REST_PROXY_PREFIXES",
    "error_content_type",
    "error_middleware",
    "error_body",
    "json_error",
]

REST_PROXY_PREFIXES = ("/topics", "/consumers", "/brokers")

log = logging.getLogger("tierlog.http")


def error_body(err: TierlogError) -> dict[str, Any]:
    """The JSON body for ``err``. Pure and idempotent."""
    message = err.message if err.message.startswith(err.PREFIX) else err.PREFIX + err.message
    body: dict[str, Any] = {"error_code": err.code, "message": message}
    if isinstance(err, OffsetOutOfRangeError):
        body["log_start_offset"] = err.log_start_offset
        body["log_end_offset"] = err.log_end_offset
        if isinstance(err, OffsetMovedToTieredStorageError):
            body["local_log_start_offset"] = err.local_log_start_offset
    elif isinstance(err, NotLeaderOrFollowerError):
        body["leader_id"] = err.leader_id
        body["leader_url"] = err.leader_url
        body["leader_epoch"] = err.leader_epoch
    return body


def json_error(err: TierlogError, content_type: str = "application/json") -> web.Response:
    """A JSON response for ``err`` with its HTTP status. Pure and idempotent."""
    return web.json_response(error_body(err), status=http_status(err.code), content_type=content_type)


def error_content_type(request: web.Request) -> str:
    """The ``Content-Type`` of an error answer to ``request``: the negotiated Kafka type on the REST Proxy
    routes (v2 JSON when the ``Accept`` header allows none of them), ``application/json`` elsewhere. Pure."""
    path = request.path
    if not path.startswith(REST_PROXY_PREFIXES):
        return "application/json"
    offer = negotiate(request.headers.get("Accept"), response_offers(request.headers.get("Content-Type")))
    return offer.response_type if offer is not None else KAFKA_V2_JSON


def _from_http_exception(exc: web.HTTPException, content_type: str) -> web.Response:
    headers = {k: v for k, v in exc.headers.items() if k.lower() == "allow"}
    if exc.status == 413:
        err: TierlogError = RecordTooLargeError(exc.text or "request body too large")
    elif exc.status == 404:
        err = NoSuchRouteError("HTTP 404 Not Found")
    elif exc.status == 405 and isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        err = MethodNotAllowedError(f"HTTP 405 Method Not Allowed: {exc.method}; allowed: {allowed}")
    else:
        body = {"error_code": exc.status * 100 + 1, "message": f"HTTP {exc.status} {exc.reason}"}
        return web.json_response(body, status=exc.status, headers=headers, content_type=content_type)
    response = json_error(err, content_type)
    response.headers.update(headers)
    return response


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Map errors raised by ``handler`` to JSON responses.

    Never raises for errors, except for cancellation and non-error HTTP exceptions such as redirects. A
    client that went away (say, during a long poll) is logged at debug level only and answered a
    connection-closing 499 that aiohttp fails to send quietly. Safe to use concurrently; holds no state.
    """
    try:
        return await handler(request)
    except ConnectionError:
        transport = request.transport
        if transport is not None and not transport.is_closing():
            log.exception("unhandled connection error in %s %s", request.method, request.path)
            return json_error(InternalError("internal server error"), error_content_type(request))
        log.debug("client left during %s %s", request.method, request.path)
        gone = web.Response(status=499, reason="Client Closed Request")
        gone.force_close()
        return gone
    except TierlogError as err:
        status = http_status(err.code)
        if status >= 500:
            log.warning("%s %s failed: %s (%d)", request.method, request.path, err.message, err.code)
        response = json_error(err, error_content_type(request))
        if status == 401:
            settings = request.app.get(SETTINGS)
            for challenge in challenges(() if settings is None else settings.security.authentication_methods):
                response.headers.add("WWW-Authenticate", challenge)
        elif status == 429:
            response.headers["Retry-After"] = str(getattr(err, "retry_after_s", 1))
        return response
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http_exception(exc, error_content_type(request))
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return json_error(InternalError("internal server error"), error_content_type(request))
