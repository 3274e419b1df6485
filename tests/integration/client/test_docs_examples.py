"""The ``python`` examples of docs/client.md run in order against a real broker, each in its own process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.integration.broker import BrokerThread

ROOT = Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "client.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.DOTALL)


def run_example(code: str, url: str) -> str:
    env = {**os.environ, "TIERLOG_BOOTSTRAP_SERVER": url}
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_guide_has_the_three_examples() -> None:
    assert len(examples()) == 3


def test_examples_run_against_a_broker(thread_broker: BrokerThread) -> None:
    producer, group_consumer, service = examples()
    out = run_example(producer, thread_broker.url)
    assert re.search(r"stored at page-views-\d+@1", out)
    assert "acknowledged 2" in out
    out = run_example(group_consumer, thread_broker.url)
    assert "{'user-42': 3}" in out
    assert re.search(r"assigned \['page-views-0'", out)
    out = run_example(service, thread_broker.url)
    assert "enriched 3 page views" in out
