"""The example job of ``infra/spark`` on an archive its own ``--demo`` writer made (local directory)."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.integration

JOB = Path(__file__).resolve().parents[3] / "infra" / "spark" / "events_per_key_hour.py"


def load_job() -> ModuleType:
    spec = importlib.util.spec_from_file_location("events_per_key_hour", JOB)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_events_per_key_per_hour_are_counted_and_written_as_parquet(spark: Any, tmp_path: Path) -> None:
    job = load_job()
    archive, out = tmp_path / "remote", tmp_path / "per-hour"
    asyncio.run(job._demo_archive(str(archive), "clicks", 300))  # 3 keys, one record a minute: 5 hours
    written = job.run(spark, str(archive), "clicks", str(out))
    rows = spark.read.parquet(str(out)).orderBy("hour", "key").collect()
    assert written == len(rows) == 3 * 6  # 300 minutes from 22:13 span six clock hours
    assert sum(r["events"] for r in rows) == 300
    assert {r["key"] for r in rows} == {"user-0", "user-1", "user-2"}
    first_hour = [r for r in rows if r["hour"] == rows[0]["hour"]]
    assert sum(r["events"] for r in first_hour) == 47  # 22:13 .. 22:59
    assert min(r["first_offset"] for r in rows) == 0 and max(r["last_offset"] for r in rows) == 299
