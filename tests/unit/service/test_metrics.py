"""The Prometheus registry: exposition format, label escaping, histograms, collectors."""

from __future__ import annotations

import pytest

from tierlog.service.metrics import Metrics, Sample


def test_counter_gauge_and_escaping() -> None:
    metrics = Metrics()
    metrics.describe("requests_total", "counter", "Requests")
    metrics.inc("requests_total", route='/a"b\\c\n')
    metrics.inc("requests_total", 2, route='/a"b\\c\n')
    metrics.set("depth", 1.5, queue="q")
    text = metrics.render()
    assert "# HELP requests_total Requests\n# TYPE requests_total counter\n" in text
    assert 'requests_total{route="/a\\"b\\\\c\\n"} 3\n' in text
    assert '# TYPE depth gauge\ndepth{queue="q"} 1.5\n' in text
    assert metrics.value("requests_total", route='/a"b\\c\n') == 3


def test_histogram_buckets_are_cumulative() -> None:
    metrics = Metrics(buckets=(0.1, 1.0))
    for value in (0.05, 0.5, 0.5, 5.0):
        metrics.observe("latency_seconds", value, route="/x")
    lines = metrics.render().splitlines()
    assert 'latency_seconds_bucket{route="/x",le="0.1"} 1' in lines
    assert 'latency_seconds_bucket{route="/x",le="1"} 3' in lines
    assert 'latency_seconds_bucket{route="/x",le="+Inf"} 4' in lines
    assert 'latency_seconds_count{route="/x"} 4' in lines
    assert 'latency_seconds_sum{route="/x"} 6.05' in lines


def test_collectors_run_at_scrape_time() -> None:
    metrics = Metrics()
    offsets = {"0": 5}
    metrics.add_collector(lambda: [Sample("log_end_offset", v, {"partition": p}) for p, v in offsets.items()])
    assert 'log_end_offset{partition="0"} 5' in metrics.render()
    offsets.clear()
    assert "log_end_offset{" not in metrics.render()


def test_kind_mismatch_and_negative_counter() -> None:
    metrics = Metrics()
    metrics.inc("x_total")
    with pytest.raises(ValueError, match="is a counter"):
        metrics.set("x_total", 1)
    with pytest.raises(ValueError, match="cannot decrease"):
        metrics.inc("x_total", -1)
