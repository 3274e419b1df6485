"""``make demo`` (``infra/demo.py``) as a newcomer runs it, kept short: a broker process, a tiered topic,
records produced with the CLI, uploaded to the local-directory tier, read back by Spark (the session of the
test run, as the demo's ``run(spark=...)`` allows) and by ``tierlog consume``, then the directory removed.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.integration

DEMO = Path(__file__).resolve().parents[2] / "infra" / "demo.py"
RECORDS = 300


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tierlog_demo", DEMO)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_demo_archives_the_topic_and_reads_it_back_with_spark_and_the_cli(spark: Any) -> None:
    demo = load_demo()
    said: list[str] = []
    result = demo.run(spark, count=RECORDS, say=said.append)
    text = "\n".join(said)

    assert result.produced == result.spark_rows == result.cli_records == RECORDS
    assert sum(result.spark_per_partition.values()) == RECORDS
    for state in result.archived.values():  # everything in the archive, nothing left on the broker's disk
        assert state["remote_next_offset"] == state["log_end_offset"] == state["local_log_start_offset"] > 0
        assert state["remote_segments"] >= 1 and state["upload_failures"] == 0
    assert sum(s["log_end_offset"] for s in result.archived.values()) == RECORDS
    assert "remote.storage.enable=true" in text and f"produced {RECORDS} record(s) to events" in text
    assert f"{RECORDS} rows, per partition" in text and f"consumed {RECORDS} record(s)" in text
    assert re.search(r"7\. broker stopped \(exit status 0\)", text)
    workdir = re.search(r"data in (\S+)/data,", text)
    assert workdir and not Path(workdir.group(1)).exists()  # cleaned up


def test_a_failed_step_is_named_with_what_was_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    demo = load_demo()
    monkeypatch.setattr(demo, "BROKER_SETTINGS", ("--remote-upload-interval-ms", "soon"))
    said: list[str] = []
    with pytest.raises(
        demo.DemoError, match=r"(?s)the broker exited with 2; its log:.*remote-upload-interval-ms"
    ):
        demo.run(object(), count=10, say=said.append)  # fails before Spark is needed
    assert "7. broker stopped (exit status 2)" in said
