"""docs/kafka-protocol.md's kafkajs block, run with node against a real broker (when node and kafkajs are
installed: ``make kafkajs``). The page's shell and Python blocks run in tests/docs; this one needs node."""

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
KAFKAJS = ROOT / "infra" / "kafkajs" / "node_modules"


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def localized(text: str, broker: BrokerThread) -> str:
    return text.replace("127.0.0.1:9092", broker.kafka_bootstrap).replace("http://127.0.0.1:8082", broker.url)


def test_the_page_has_one_kafkajs_example() -> None:
    assert len(blocks("js")) == 1


@pytest.mark.skipif(
    shutil.which("node") is None, reason="node is not installed (make kafkajs installs it as root)"
)
@pytest.mark.skipif(
    not (KAFKAJS / "kafkajs").is_dir(), reason="kafkajs is not installed in infra/kafkajs (make kafkajs)"
)
def test_the_kafkajs_example_runs_as_written(kafka_broker: BrokerThread) -> None:
    admin_example = localized(blocks("python")[0], kafka_broker).split("producer =")[0]
    created = subprocess.run(
        [sys.executable, "-c", admin_example],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=90,
        check=False,
    )
    assert created.returncode == 0, created.stderr  # the page's first example creates "orders"
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
