"""The broker's import graph holds no test-only package (issue #29: start-up no slower than before).

kio, under the Kafka listener, registers Hypothesis strategies at import when Hypothesis can be imported,
which costs more than half a second of a broker's start-up; :mod:`tierlog.service.kafka` hides it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

# what a broker imports until it is ready: the entry point, the app with every API and the Kafka listener
AT_START = "tierlog.service.serve, tierlog.service.app, tierlog.service.kafka.setup"
# and then on the first Kafka request: every API's handler, kio's schemas
SERVING = AT_START + ", tierlog.service.kafka.handlers"
TEST_ONLY = ("hypothesis", "pytest", "_pytest", "moto", "pyspark", "testcontainers")


def run(code: str) -> str:
    """The output of ``code`` in a fresh interpreter of this venv."""
    argv = [sys.executable, "-c", code]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120)
    return out.stdout


def loaded_after(statement: str) -> set[str]:
    return set(run(f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))").split())


def test_the_broker_imports_no_test_only_package() -> None:
    pytest.importorskip("hypothesis")  # else the check below proves nothing
    loaded = loaded_after(f"import {SERVING}")
    assert "kio.index" in loaded  # the Kafka listener's schemas are there
    assert "tierlog.service.kafka.handlers.produce" in loaded
    found = sorted(name for name in loaded if name.split(".")[0] in TEST_ONLY)
    assert found == []


def test_the_broker_starts_without_the_kafka_handlers_and_the_client() -> None:
    """The Kafka listener imports its handlers on its first request. The broker's peers use
    :class:`tierlog.client.security.ClientSecurity`; the client package loads its producers, consumers and
    admin client only when a program asks for them."""
    loaded = loaded_after(f"import {AT_START}")
    assert "tierlog.service.kafka.server" in loaded
    assert "tierlog.service.kafka.handlers" not in loaded
    assert "kio.index" not in loaded
    assert "tierlog.client.security" in loaded
    for client_only in ("tierlog.client.admin", "tierlog.client.producer", "tierlog.client.consumer"):
        assert client_only not in loaded
    assert "tierlog.client.producer" in loaded_after("from tierlog.client import AsyncProducer")


def test_kio_keeps_its_hypothesis_hooks_when_hypothesis_came_first() -> None:
    """A test process that imported Hypothesis before kio still gets kio's strategies (property tests)."""
    pytest.importorskip("hypothesis")
    code = (
        "import hypothesis.strategies\nimport tierlog.service.kafka.messages\n"
        "import kio.static._phantom as phantom\nprint(phantom.hypothesis is not None)"
    )
    assert run(code).strip() == "True"


def test_the_hidden_hypothesis_is_importable_afterwards() -> None:
    """Hiding Hypothesis from kio leaves no trace: a later ``import hypothesis`` works."""
    pytest.importorskip("hypothesis")
    loaded = loaded_after("import tierlog.service.kafka.messages\nimport hypothesis.strategies")
    assert "hypothesis.strategies" in loaded
