"""A small Prometheus registry: counters, gauges and histograms, rendered in text format 0.0.4.

Metric families are created on first use; :meth:`Metrics.describe` adds a help line. Collectors are
callables run at scrape time (in a worker thread) that return gauge samples computed from live state,
such as per-partition offsets, so nothing stale survives a deleted topic.
"""

from __future__ import annotations

import bisect
import math
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

__all__ = [
    "AUTHENTICATION_FAILURES",
    "AUTHENTICATION_THROTTLED",
    "AUTHORIZATION_DENIED",
    "CONTENT_TYPE",
    "Metrics",
    "Sample",
    "describe_security_metrics",
    "metrics_middleware",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip

LabelKey = tuple[tuple[str, str], ...]

#: Failed authentications, by method (basic, bearer, mtls).
AUTHENTICATION_FAILURES = "tierlog_authentication_failures_total"
#: Requests refused (429) because their host failed too often.
AUTHENTICATION_THROTTLED = "tierlog_authentication_throttled_total"
#: Authorization refusals (403), by resource type (TOPIC, GROUP, CLUSTER, ROUTE).
AUTHORIZATION_DENIED = "tierlog_authorization_denied_total"


@dataclass(frozen=True, slots=True)
class Sample:
    """One gauge sample produced by a collector."""

    name: str
    value: float
    labels: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class _Histogram:
    buckets: tuple[float, ...]
    counts: list[int]
    total: float = 0.0
    count: int = 0


@dataclass(slots=True)
class _Family:
    kind: str
    help: str = ""
    values: dict[LabelKey, float] = field(default_factory=dict)
    histograms: dict[LabelKey, _Histogram] = field(default_factory=dict)


def _key(labels: dict[str, str]) -> LabelKey:
    return tuple(sorted(labels.items()))


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(key: Iterable[tuple[str, str]], extra: tuple[str, str] | None = None) -> str:
    pairs = list(key)
    if extra is not None:
        pairs.append(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 2**53:
        return str(int(value))
    return repr(value)


class Metrics:
    """The broker's metric registry.

    Every method is safe to call concurrently from the event loop and from worker threads (one lock).
    """

    def __init__(self, *, buckets: tuple[float, ...] = DEFAULT_BUCKETS) -> None:
        self._lock = threading.Lock()
        self._families: dict[str, _Family] = {}
        self._buckets = buckets
        self._collectors: list[Callable[[], Iterable[Sample]]] = []

    def describe(self, name: str, kind: str, help_text: str) -> None:
        """Declare ``name`` as a ``counter``, ``gauge`` or ``histogram`` with a help line. Idempotent.

        Raises:
            ValueError: ``name`` was already used as another kind.
        """
        with self._lock:
            self._family(name, kind).help = help_text

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        """Add ``value`` to the counter ``name`` with these labels.

        Raises:
            ValueError: ``value`` is negative, or ``name`` is not a counter.
        """
        if value < 0:
            raise ValueError(f"counter {name} cannot decrease (inc by {value})")
        key = _key(labels)
        with self._lock:
            values = self._family(name, "counter").values
            values[key] = values.get(key, 0.0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        """Set the gauge ``name`` with these labels to ``value``.

        Raises:
            ValueError: ``name`` is not a gauge.
        """
        with self._lock:
            self._family(name, "gauge").values[_key(labels)] = value

    def observe(self, name: str, value: float, **labels: str) -> None:
        """Record ``value`` (seconds, usually) in the histogram ``name`` with these labels.

        Raises:
            ValueError: ``name`` is not a histogram.
        """
        key = _key(labels)
        with self._lock:
            family = self._family(name, "histogram")
            hist = family.histograms.get(key)
            if hist is None:
                hist = family.histograms[key] = _Histogram(self._buckets, [0] * len(self._buckets))
            index = bisect.bisect_left(hist.buckets, value)
            if index < len(hist.counts):
                hist.counts[index] += 1
            hist.total += value
            hist.count += 1

    def value(self, name: str, **labels: str) -> float:
        """The current value of a counter or gauge (0 when never set). For tests and the CLI."""
        with self._lock:
            family = self._families.get(name)
            return 0.0 if family is None else family.values.get(_key(labels), 0.0)

    def add_collector(self, collector: Callable[[], Iterable[Sample]]) -> None:
        """Run ``collector`` at every scrape; its samples are rendered as gauges. Not idempotent."""
        with self._lock:
            self._collectors.append(collector)

    def render(self) -> str:
        """The whole registry in Prometheus text format 0.0.4.

        Runs the collectors, which may block briefly on partition locks: call it from a worker thread.
        Safe to call concurrently. Raises whatever a collector raises.
        """
        with self._lock:
            collectors = list(self._collectors)
        collected: dict[str, list[Sample]] = {}
        for collector in collectors:
            for sample in collector():
                collected.setdefault(sample.name, []).append(sample)
        lines: list[str] = []
        with self._lock:
            names = sorted(set(self._families) | set(collected))
            for name in names:
                family = self._families.get(name) or _Family("gauge")
                lines.append(f"# HELP {name} {family.help or name.replace('_', ' ')}")
                lines.append(f"# TYPE {name} {family.kind}")
                if family.kind == "histogram":
                    self._render_histograms(name, family, lines)
                for key, value in sorted(family.values.items()):
                    lines.append(f"{name}{_labels(key)} {_number(value)}")
                for sample in collected.get(name, ()):
                    lines.append(f"{name}{_labels(sorted(sample.labels.items()))} {_number(sample.value)}")
        return "\n".join(lines) + "\n"

    @staticmethod
    def _render_histograms(name: str, family: _Family, lines: list[str]) -> None:
        for key, hist in sorted(family.histograms.items()):
            cumulative = 0
            for bound, count in zip(hist.buckets, hist.counts, strict=True):
                cumulative += count
                lines.append(f"{name}_bucket{_labels(key, ('le', _number(bound)))} {cumulative}")
            lines.append(f"{name}_bucket{_labels(key, ('le', '+Inf'))} {hist.count}")
            lines.append(f"{name}_sum{_labels(key)} {_number(hist.total)}")
            lines.append(f"{name}_count{_labels(key)} {hist.count}")

    def _family(self, name: str, kind: str) -> _Family:
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = _Family(kind)
        elif family.kind != kind:
            raise ValueError(f"metric {name} is a {family.kind}, not a {kind}")
        return family


def _route_label(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


def metrics_middleware(metrics: Metrics) -> Middleware:
    """A middleware that counts and times every request by method, route template and status.

    Place it outermost so it sees the status the error middleware chose. Safe concurrently.
    """
    metrics.describe("tierlog_http_requests_total", "counter", "HTTP requests by method, route and status")
    metrics.describe(
        "tierlog_http_request_duration_seconds",
        "histogram",
        "Time to produce the response (headers and body handed to aiohttp; for a REST records fetch of 64 "
        "KiB or more, until its body is written), by method, route and status",
    )

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        start = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            labels = {"method": request.method, "route": _route_label(request), "status": str(status)}
            metrics.inc("tierlog_http_requests_total", 1.0, **labels)
            metrics.observe("tierlog_http_request_duration_seconds", time.perf_counter() - start, **labels)

    return middleware


def describe_security_metrics(metrics: Metrics) -> None:
    """Declare the authentication and authorization counters. Idempotent."""
    metrics.describe(AUTHENTICATION_FAILURES, "counter", "Failed authentications by method")
    metrics.describe(
        AUTHENTICATION_THROTTLED,
        "counter",
        "Requests refused because their host failed authentication too often",
    )
    metrics.describe(AUTHORIZATION_DENIED, "counter", "Requests refused by the ACLs, by resource type")
