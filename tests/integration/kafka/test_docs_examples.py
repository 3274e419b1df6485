"""docs/kafka-protocol.md's examples, run as written against a real broker: its Python blocks in order, each
in its own process, its kafkajs block with node (when node and kafkajs are installed: ``make kafkajs``),
then its kcat and curl commands (with the broker's real ports for 9092 and 8082)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker import BrokerThread

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "kafka-protocol.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def localized(text: str, broker: BrokerThread) -> str:
    return text.replace("127.0.0.1:9092", broker.kafka_bootstrap).replace("http://127.0.0.1:8082", broker.url)


def run(argv: list[str], stdin: str | None = None) -> str:
    done = subprocess.run(
        argv, input=stdin, capture_output=True, text=True, cwd=ROOT, timeout=90, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.stderr}"
    return done.stdout


def test_the_page_has_its_examples() -> None:
    assert len(blocks("python")) == 4
    assert len(blocks("js")) == 1
    assert len(blocks("sh")) == 3


def test_the_examples_run_as_written(kafka_broker: BrokerThread) -> None:
    confluent, aiokafka, kafka_python, security = (localized(b, kafka_broker) for b in blocks("python"))
    assert "consumed 10" in run([sys.executable, "-c", confluent])
    assert "read back b'order from aiokafka'" in run([sys.executable, "-c", aiokafka])
    assert "topics ['orders']" in run([sys.executable, "-c", kafka_python])
    assert "acls applying to orders-eu: 1" in run([sys.executable, "-c", security])
    curl = shutil.which("curl")
    if curl is not None:
        (command,) = [c for c in blocks("sh") if "curl" in c]
        out = run(["sh", "-c", localized(command, kafka_broker)])
        assert '"topic":"orders"' in out.replace(" ", "")


KAFKAJS = ROOT / "infra" / "kafkajs" / "node_modules"


@pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed (make kafkajs installs it as root)"
)
@pytest.mark.skipif(
    not (KAFKAJS / "kafkajs").is_dir(), reason="kafkajs is not installed in infra/kafkajs (make kafkajs)"
)
def test_the_kafkajs_example_runs_as_written(kafka_broker: BrokerThread) -> None:
    admin_example = localized(blocks("python")[0], kafka_broker).split("producer =")[0]
    run([sys.executable, "-c", admin_example])  # creates "orders"
    (example,) = blocks("js")
    done = subprocess.run(
        ["node", "-e", localized(example, kafka_broker)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
        check=False,
        env={**os.environ, "NODE_PATH": str(KAFKAJS)},
    )
    assert done.returncode == 0, done.stderr
    assert "read back order from kafkajs" in done.stdout


@pytest.mark.skipif(
    shutil.which("kcat") is None, reason="kcat is not installed (make test installs it as root)"
)
def test_the_kcat_commands_run_as_written(kafka_broker: BrokerThread) -> None:
    admin_example = localized(blocks("python")[0], kafka_broker).split("producer =")[0]
    run([sys.executable, "-c", admin_example])  # creates "orders"
    (commands,) = [c for c in blocks("sh") if "kcat" in c]
    lines = [line.split("#")[0].strip() for line in localized(commands, kafka_broker).splitlines()]
    listing, produce, consume = (line for line in lines if line)
    assert "orders" in run(["sh", "-c", listing])
    run(["sh", "-c", produce])
    assert "hello from kcat" in run(["sh", "-c", consume])
