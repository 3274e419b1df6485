"""Request helpers shared by the REST v2 and native routes: path and query parsing, bodies, CPU offload.

Handlers stay thin: they call these to turn a request into validated values (raising the v2 error
kinds), call one broker method, and serialise. Everything here is safe to use concurrently.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TypeVar

from aiohttp import hdrs, web

from tierlog.service.topics.data_dir import topic_name_problem
from tierlog.service.web.budget import Hold
from tierlog.service.web.keys import METRICS, SETTINGS
from tierlog.wire.errors import (
    BadRequestError,
    InvalidConfigError,
    RecordTooLargeError,
    UnknownPartitionError,
)

__all__ = [
    "OFFLOAD_BYTES",
    "topic_name",
    "producible_topic_name",
    "partition_index",
    "int_param",
    "read_body",
    "check_body_size",
    "offload",
    "send_body",
    "count",
    "describe_metrics",
]

OFFLOAD_BYTES = 64 * 1024

# Bodies from this size on are written after their headers, not joined to them (see send_body).
SEPARATE_HEADERS_BYTES = 64 * 1024

T = TypeVar("T")

log = logging.getLogger(__name__)


def topic_name(request: web.Request) -> str:
    """The ``{topic}`` path segment, refused unless it is a legal Kafka topic name.

    The rule is :func:`tierlog.service.topics.data_dir.topic_name_problem` (the one v3 create and auto-create
    use): 1 to 249 characters from ``[a-zA-Z0-9._-]``, not ``.`` or ``..``.

    Raises:
        BadRequestError: (40001) not a legal topic name; the message says why.
    """
    name = request.match_info["topic"]
    problem = topic_name_problem(name)
    if problem is not None:
        raise BadRequestError(problem)
    return name


def producible_topic_name(request: web.Request) -> str:
    """The ``{topic}`` path segment of a produce: a legal topic name (:func:`topic_name`) that is not
    internal. Clients never write to ``__consumer_offsets`` (the broker does), as Kafka refuses them: a
    Write ACL on it would let a client forge any group's commits.

    Raises:
        BadRequestError: (40001) not a legal topic name.
        InvalidConfigError: (40002) a name starting with ``__``.
    """
    name = topic_name(request)
    if name.startswith("__"):
        raise InvalidConfigError(f"Topic {name} is internal: clients cannot produce to it")
    return name


def partition_index(request: web.Request) -> int:
    """The ``{partition}`` path segment as an int; a non-number is a partition that does not exist.

    Raises:
        UnknownPartitionError: (40402) not a non-negative decimal integer.
    """
    raw = request.match_info["partition"]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 10:
        raise UnknownPartitionError(f"Partition not found. ({raw!r} is not a partition number)")
    return int(raw)


def int_param(
    request: web.Request, name: str, default: int | None, *, low: int, high: int = 2**63 - 1
) -> int:
    """Query parameter ``name`` as an int in ``[low, high]``; ``default`` when absent (None = required).

    Raises:
        BadRequestError: (40001) missing when required, not an integer, or out of range.
    """
    raw = request.query.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequestError(f"query parameter {name!r} is required")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadRequestError(f"query parameter {name!r} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise BadRequestError(f"query parameter {name!r} must be between {low} and {high}, got {value}")
    return value


async def read_body(request: web.Request, held: Hold | None = None) -> bytes:
    """The whole request body, bounded by the broker's ``max.request.size``.

    A declared ``Content-Length`` over the limit is refused before reading; a chunked body is cut off by
    aiohttp's ``client_max_size`` (the same setting), which the error middleware answers with 413.
    Without ``held``, ``Request.read`` reads it (it raises the stream's buffer limits and copies each
    chunk as it arrives; holding the chunks and joining them later measured three times slower for 1 MiB
    bodies before the broker fixed glibc's allocator thresholds, ``tierlog.service.allocator``).

    With ``held``, a hold of a byte budget (REST produce), the body's bytes are held before they are read:
    the declared ``Content-Length`` at once, a chunked body chunk by chunk as it arrives, with the limit
    checked per chunk. A declared body is read as ``Request.read`` does (the same buffer limits, the same
    limit on what arrives: a body with a ``Content-Encoding`` arrives decompressed and may outgrow its
    ``Content-Length``, and the hold grows with it), but its chunks are joined once instead of copied
    twice: 5-10% less broker CPU per MiB of REST produce with the allocator thresholds set.

    Raises:
        RecordTooLargeError: (41301) the body is larger than ``max.request.size``.
        UnavailableError: (503, 50301, retriable) ``held`` cannot grow to hold the body; the rest of the
            body is not read.
    """
    limit = request.app[SETTINGS].max_request_size
    declared = request.content_length
    if declared is not None:
        check_body_size(request, declared)
    if held is None:
        return await request.read()
    if declared is not None:
        held.resize(declared)
        # joined once (aiohttp's read() grows a bytearray, then copies it into bytes), with read()'s limit:
        # a body sent with a Content-Encoding arrives decompressed and may outgrow its Content-Length
        chunks, size = [], 0
        raise_limits = getattr(request.content, "set_read_chunk_size", None)  # aiohttp 3.14 and later
        if raise_limits is not None:
            raise_limits(limit)  # as Request.read does: fewer pause/resume cycles
        while chunk := await request.content.readany():
            size += len(chunk)
            if size > limit:
                raise RecordTooLargeError(
                    f"request body of over {limit} bytes exceeds max.request.size={limit}"
                )
            if size > declared:
                held.resize(size)
            chunks.append(chunk)
        return b"".join(chunks)
    body = bytearray()
    while chunk := await request.content.readany():
        if len(body) + len(chunk) > limit:
            raise RecordTooLargeError(f"request body of over {limit} bytes exceeds max.request.size={limit}")
        held.resize(len(body) + len(chunk))
        body += chunk
    return bytes(body)


def check_body_size(request: web.Request, declared: int) -> None:
    """Refuse a declared ``Content-Length`` over ``max.request.size`` before any of the body is read.

    Raises:
        RecordTooLargeError: (41301) the body is too large.
    """
    limit = request.app[SETTINGS].max_request_size
    if declared > limit:
        raise RecordTooLargeError(f"request body of {declared} bytes exceeds max.request.size={limit}")


async def offload(size: int, fn: Callable[[], T]) -> T:
    """Run CPU-heavy ``fn`` in a worker thread when it handles more than 64 KiB, inline otherwise.

    Raises whatever ``fn`` raises.
    """
    if size > OFFLOAD_BYTES:
        return await asyncio.to_thread(fn)
    return fn()


async def send_body(
    request: web.Request, body: bytes | bytearray, content_type: str, *, what: str
) -> web.StreamResponse:
    """Answer ``request`` with ``body`` (status 200, ``content_type``) and return the response.

    A body under 64 KiB, and any answer to a HEAD request (no body may follow its headers), goes out as a
    plain ``web.Response``: aiohttp writes headers and body in one write. A larger one is written here,
    after its headers, as a view: aiohttp joins headers and body into one new ``bytes`` before writing on
    Pythons where it does not use ``writelines`` (before 3.12.9, and 3.13.0-3.13.1): a copy of the whole
    answer on the event loop, some 6% of the broker's CPU under REST fetches of 1 MiB. The socket
    transport also copies a ``bytes`` remainder once more when the kernel takes part of it. The handler
    then returns once the body is written (its duration includes the client's download). A client that
    leaves midway is logged at debug level (``what`` names the answer) and answered no further; one gone
    before the headers are sent raises ConnectionError (the error middleware's 499).
    """
    if len(body) < SEPARATE_HEADERS_BYTES or request.method == hdrs.METH_HEAD:
        return web.Response(body=body, content_type=content_type)
    response = web.StreamResponse()
    response.content_type = content_type
    response.content_length = len(body)
    await response.prepare(request)  # a StreamResponse sends its headers here, on their own
    try:
        # Not released here: a transport may keep the view itself for a later send (Python 3.12's).
        await response.write(memoryview(body))
        await response.write_eof()
    except ConnectionError:
        log.debug("client left during %s", what)
    return response


def describe_metrics(app: web.Application) -> None:
    """Declare the counters the data-path routes add to the registry. Idempotent."""
    metrics = app[METRICS]
    metrics.describe(
        "tierlog_http_body_bytes_total", "counter", "Bytes of data-path request and response bodies"
    )
    metrics.describe("tierlog_records_out_total", "counter", "Records delivered by REST records fetches")


def count(request: web.Request, name: str, value: float, **labels: str) -> None:
    """Add ``value`` to counter ``name`` in the app's metrics registry. Raises ValueError if negative."""
    request.app[METRICS].inc(name, value, **labels)
