"""Cross-origin requests (CORS, the Fetch standard), opt-in by ``http.cors.allowed.origins``.

Off (the default), nothing here is installed: no ``Access-Control-*`` header is ever sent and an ``OPTIONS``
request is a 405 like any unrouted method. On, for a request whose ``Origin`` is allowed:

* a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) to a routed path is answered ``204`` by
  :func:`cors_middleware` before authentication (a browser sends a preflight without credentials), with the
  path's methods, the request headers the browser asked for, and ``Access-Control-Max-Age``;
* every other answer, errors and streamed bodies included, gets ``Access-Control-Allow-Origin`` and
  ``Access-Control-Expose-Headers`` (the headers it carries beyond the CORS-safelisted ones, such as the
  native API's offsets) from :func:`add_cors_headers`, run when the answer's headers are sent.

``Access-Control-Allow-Origin`` is ``*`` when every origin is allowed without credentials, else the request's
own origin (and ``Vary: Origin``); ``Access-Control-Allow-Credentials: true`` only with
``http.cors.allow.credentials``, which needs explicit origins. CORS is a browser's rule, not an access
control: authentication and ACLs apply to a cross-origin request as to any other.
"""

from __future__ import annotations

import re

from aiohttp import hdrs, web
from aiohttp.typedefs import Handler, Middleware

from tierlog.service.settings.config import Settings
from tierlog.service.web.keys import SETTINGS

__all__ = ["add_cors_headers", "cors_middleware", "setup_cors"]

# Response headers not listed in Access-Control-Expose-Headers: the ones a page may read without being told
# (the Fetch standard's CORS-safelisted ones), the connection's own, and CORS's.
_NOT_EXPOSED = frozenset(
    {
        *("cache-control", "content-language", "content-length", "content-type", "expires", "last-modified"),
        *("pragma", "connection", "keep-alive", "transfer-encoding", "date", "server", "vary"),
        *(name.lower() for name in (hdrs.ACCESS_CONTROL_ALLOW_ORIGIN, hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS)),
        *(name.lower() for name in (hdrs.ACCESS_CONTROL_ALLOW_METHODS, hdrs.ACCESS_CONTROL_ALLOW_HEADERS)),
        hdrs.ACCESS_CONTROL_MAX_AGE.lower(),
    }
)
_TOKEN_LIST = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+)*$")


def _allowed(settings: Settings, origin: str | None) -> bool:
    origins = settings.http_cors_allowed_origins
    return origin is not None and (origins == ("*",) or origin.lower() in origins)


def _origin_headers(settings: Settings, origin: str) -> dict[str, str]:
    if settings.http_cors_allowed_origins == ("*",) and not settings.http_cors_allow_credentials:
        return {hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: "*"}
    headers: dict[str, str] = {hdrs.ACCESS_CONTROL_ALLOW_ORIGIN: origin}
    if settings.http_cors_allow_credentials:
        headers[hdrs.ACCESS_CONTROL_ALLOW_CREDENTIALS] = "true"
    return headers


def _add_vary(headers: web.StreamResponse, names: str) -> None:
    existing = headers.headers.get(hdrs.VARY)
    headers.headers[hdrs.VARY] = f"{existing}, {names}" if existing else names


async def _route_methods(request: web.Request) -> set[str] | None:
    """The methods routed at the request's path (a trailing slash ignored, as the routes do); None when no
    route has the path."""
    exception = request.match_info.http_exception
    if isinstance(exception, web.HTTPMethodNotAllowed):
        return set(exception.allowed_methods)
    path = request.rel_url.path
    if path.endswith("/") and len(path) > 1:
        stripped = request.clone(rel_url=request.rel_url.with_path(path.rstrip("/")))
        exception = (await request.app.router.resolve(stripped)).http_exception
        if isinstance(exception, web.HTTPMethodNotAllowed):
            return set(exception.allowed_methods)
    return None


def cors_middleware(settings: Settings) -> Middleware:
    """The middleware answering an allowed origin's preflight; every other request goes on to ``handler``.
    Stateless; place it before authentication and the error middleware."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get(hdrs.ORIGIN)
        wanted = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_METHOD)
        if request.method != hdrs.METH_OPTIONS or wanted is None or not _allowed(settings, origin):
            return await handler(request)
        methods = await _route_methods(request)
        if methods is None:
            return await handler(request)  # no such path: the 404 (with the origin's headers)
        asked = request.headers.get(hdrs.ACCESS_CONTROL_REQUEST_HEADERS, "").strip()
        headers = {
            hdrs.ACCESS_CONTROL_ALLOW_METHODS: ", ".join(sorted(methods)),
            hdrs.ACCESS_CONTROL_MAX_AGE: str(settings.http_cors_max_age_seconds),
        }
        if asked and _TOKEN_LIST.match(asked):
            headers[hdrs.ACCESS_CONTROL_ALLOW_HEADERS] = asked
        return web.Response(status=204, headers=headers)

    return middleware


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: the origin headers on an allowed origin's answer (and ``Vary`` on every
    answer unless every origin gets ``*``). Never raises; safe for any response."""
    settings = request.app[SETTINGS]
    if not settings.http_cors_allowed_origins:
        return
    if settings.http_cors_allowed_origins != ("*",) or settings.http_cors_allow_credentials:
        _add_vary(response, "Origin")
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None or not _allowed(settings, origin):
        return
    if request.method == hdrs.METH_OPTIONS and hdrs.ACCESS_CONTROL_ALLOW_METHODS in response.headers:
        _add_vary(response, "Access-Control-Request-Method, Access-Control-Request-Headers")
    response.headers.update(_origin_headers(settings, origin))
    exposed = sorted({name.lower() for name in response.headers} - _NOT_EXPOSED)
    if exposed:
        response.headers[hdrs.ACCESS_CONTROL_EXPOSE_HEADERS] = ", ".join(exposed)


def setup_cors(app: web.Application) -> None:
    """Install :func:`add_cors_headers` on ``app`` when CORS is on (its middleware is
    :func:`cors_middleware`, placed by the app factory)."""
    if app[SETTINGS].http_cors_allowed_origins:
        app.on_response_prepare.append(add_cors_headers)
