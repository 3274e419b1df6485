"""Request routing rules that hold for every route: trailing slashes and the request size limit.

A path with one trailing slash routes as the path without it (``GET /topics/`` is ``GET /topics``), as
Confluent's REST Proxy (Jersey) and Karapace route it; nothing is redirected, so a ``POST`` body is never
lost on a client that does not follow redirects. A body whose declared ``Content-Length`` is over
``max.request.size`` answers 413 (41301) before anything else looks at the request, whatever its content
type; a chunked body over the limit is cut off by aiohttp's ``client_max_size`` when a handler reads it.
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from tierlog.service.web.keys import SETTINGS
from tierlog.wire.errors import RecordTooLargeError

__all__ = ["body_limit_middleware", "trailing_slash_middleware"]


@web.middleware
async def body_limit_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Refuse a request whose declared body is larger than ``max.request.size``. Stateless.

    Raises:
        RecordTooLargeError: (41301) ``Content-Length`` over the limit.
    """
    limit = request.app[SETTINGS].max_request_size
    declared = request.content_length
    if declared is not None and declared > limit:
        raise RecordTooLargeError(f"request body of {declared} bytes exceeds max.request.size={limit}")
    return await handler(request)


@web.middleware
async def trailing_slash_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Route ``/path/`` as ``/path`` when only the former has no route. Stateless.

    Must be the innermost middleware: it calls the route's handler itself, with a copy of the request
    whose URL has no trailing slash. Unmatched paths without a trailing slash go on to ``handler`` (the
    404 or 405 that the error middleware maps).
    """
    path = request.rel_url.path
    if request.match_info.http_exception is None or len(path) < 2 or not path.endswith("/"):
        return await handler(request)
    url = request.rel_url.with_path(path.rstrip("/") or "/").with_query(request.rel_url.query)
    stripped = request.clone(rel_url=url)
    match_info = await request.app.router.resolve(stripped)
    if match_info.http_exception is not None:
        return await handler(request)
    match_info.add_app(request.app)
    match_info.freeze()
    # aiohttp has no public way to hand a re-resolved route to a request: set what its dispatcher sets
    stripped._match_info = match_info
    return await match_info.handler(stripped)
