"""docs/spark.md's setup snippet runs exactly as written, with this venv's Python and no PYTHONPATH.

The snippet is the first ```python block after the marker comment naming this file. It runs in a fresh
interpreter (its own SparkSession, so it registers the source itself) from a directory outside the checkout,
with the environment the doc tells users to set: ``PYSPARK_PYTHON`` (the venv's Python, so the executors
import tierlog from the editable install), ``SPARK_LOCAL_IP`` and ``TIERLOG_ARCHIVE`` (the archive to read,
here a local directory written by the log engine in the uploader's layout).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.spark.archive import open_partition
from tierlog.tiering.codec import Record
from tierlog.tiering.remote.factory import open_object_store
from tierlog.tiering.remote.manifest_store import ManifestStore

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # starts a JVM of its own

DOC = Path(__file__).resolve().parents[3] / "docs" / "spark.md"
MARKER = "tests/integration/spark/test_docs_snippet.py"


def documented_snippet() -> str:
    text = DOC.read_text(encoding="utf-8")
    assert MARKER in text, f"{DOC.name} lost the marker naming {MARKER}"
    found = re.search(r"```python\n(.*?)```", text[text.index(MARKER) :], re.DOTALL)
    assert found is not None, f"no python block after the marker in {DOC.name}"
    return found.group(1)


def write_archive(root: Path, archive: Path) -> list[tuple[int, int, str, str]]:
    """Topic ``events``: three records in partition 0, two in partition 1, archived under ``archive``."""

    async def upload() -> list[tuple[int, int, str, str]]:
        store = open_object_store(str(archive))
        manifests = ManifestStore(store)
        rows = []
        try:
            for partition, count in ((0, 3), (1, 2)):
                part = open_partition(root, "events", partition, segment_bytes=1 << 20)
                try:
                    records = [
                        Record(
                            f"user-{i}".encode(), f"event {partition}.{i}".encode(), (), 1_700_000_000_000 + i
                        )
                        for i in range(count)
                    ]
                    part.append(records, per_batch=2)
                    await part.upload_sealed(store, manifests)
                    for r in part.records:
                        assert r.key is not None and r.value is not None
                        rows.append((r.partition, r.offset, r.key.decode(), r.value.decode()))
                finally:
                    part.log.close()
        finally:
            await store.close()
        return rows

    return asyncio.run(upload())


def shown_rows(stdout: str) -> list[tuple[int, int, str, str]]:
    """The data rows of ``DataFrame.show()``'s table (``|0|1|user-1|event 0.1|``)."""
    rows = []
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].isdigit():
            rows.append((int(cells[0]), int(cells[1]), cells[2], cells[3]))
    return rows


def test_the_documented_snippet_runs_as_written(tmp_path: Path) -> None:
    archive = tmp_path / "remote"
    expected = write_archive(tmp_path / "logs", archive)
    script = tmp_path / "read_events.py"
    script.write_text(documented_snippet(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SPARK_HOME")}
    env.update(
        PYSPARK_PYTHON=sys.executable,
        SPARK_LOCAL_IP="127.0.0.1",
        TIERLOG_ARCHIVE=str(archive),
    )
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,  # not the checkout: tierlog must come from the venv's install
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert shown_rows(done.stdout) == sorted(expected)
    assert [(p, o) for p, o, _, _ in sorted(expected)] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
