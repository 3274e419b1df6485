"""The broker's glibc allocator thresholds: set on glibc, left alone when the operator set them."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from tierlog.service import allocator

PROBE = "from tierlog.service import allocator; print(allocator.tune())"


def _tune_in_child(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    result = subprocess.run(
        [sys.executable, "-c", PROBE], env=clean | env, capture_output=True, text=True, check=True, timeout=60
    )
    return result.stdout.strip()


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's (mallopt)")
def test_glibc_takes_both_thresholds() -> None:
    assert _tune_in_child() == "True"


def test_an_operator_threshold_in_the_environment_wins() -> None:
    assert _tune_in_child(MALLOC_TRIM_THRESHOLD_="1048576") == "False"
    assert allocator.tune({"MALLOC_MMAP_THRESHOLD_": "65536"}) is False
    assert allocator.tune({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1048576"}) is False
