"""Spark executors import the layout and manifest modules: they must not drag in S3 clients or asyncio."""

from __future__ import annotations

import subprocess
import sys


def loaded_after(statement: str) -> set[str]:
    code = f"import sys\n{statement}\nprint('\\n'.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return set(out.stdout.split())


def test_pure_modules_import_no_vendor_or_async_code() -> None:
    loaded = loaded_after("import tierlog.tiering.remote.manifest, tierlog.tiering.remote.layout")
    for forbidden in ("botocore", "aiobotocore", "aiohttp", "asyncio", "tierlog.tiering.remote.s3"):
        assert forbidden not in loaded


def test_package_names_resolve_lazily() -> None:
    loaded = loaded_after(
        "from tierlog.tiering.remote import LocalObjectStore, open_object_store, ManifestStore"
    )
    assert "tierlog.tiering.remote.local" in loaded
    assert "aiobotocore" not in loaded  # the S3 backend loads only when an s3:// store is opened
