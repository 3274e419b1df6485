"""Running the third-party clients' driver scripts (``node/*.js``, ``python/*.py``) as child processes, and
the plain REST Proxy v2 requests the tests make themselves."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from tests.compat.install import COMPAT_DIR, NodeEnv, PythonEnv

__all__ = ["ClientRun", "b64", "committed_offsets", "http_json", "run_node", "run_python"]

CLIENT_TIMEOUT_S = 120.0  # bound on one client process; the scripts give up on their own after 60 s
HTTP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class ClientRun:
    """A finished client process: its exit status, its JSON report (see each script) and its stderr."""

    returncode: int
    report: dict[str, Any]
    stderr: str

    @property
    def trace(self) -> list[dict[str, Any]]:
        """Every HTTP exchange the library made, in order: method, url or path, headers, body, status,
        content_type, response (truncated)."""
        return list(self.report.get("trace") or [])

    def explain(self) -> str:
        """The client's error and its exchanges, for assertion messages."""
        lines = [f"exit {self.returncode}; error: {self.report.get('error')}"]
        for ex in self.trace:
            target = ex.get("url") or ex.get("path")
            lines.append(
                f"  {ex['method']} {target} headers={ex['headers']} body={str(ex['body'])[:300]!r}"
                f" -> {ex['status']} {ex['content_type']} {str(ex['response'])[:300]!r}"
            )
        if self.stderr.strip():
            lines.append("stderr: " + self.stderr[-3000:])
        return "\n".join(lines)


def run_client(argv: list[str], *, env: dict[str, str] | None = None) -> ClientRun:
    """Run a client script to completion (bounded); its stdout must be one JSON object."""
    done = subprocess.run(
        argv,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CLIENT_TIMEOUT_S,
        env={**os.environ, **(env or {})},
        check=False,
    )
    try:
        report = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(
            f"{argv[:2]} exited {done.returncode} without a JSON report:\n{done.stdout}\n{done.stderr}"
        ) from None
    assert isinstance(report, dict)
    return ClientRun(done.returncode, report, done.stderr)


def run_node(node: NodeEnv, script: str, *args: str) -> ClientRun:
    return run_client(
        [node.node, str(COMPAT_DIR / "node" / script), *args], env={"NODE_PATH": str(node.node_modules)}
    )


def run_python(python: PythonEnv, script: str, *args: str) -> ClientRun:
    return run_client(
        [str(python.python), str(COMPAT_DIR / "python" / script), *args], env={"PYTHONPATH": ""}
    )


def http_json(
    method: str, url: str, body: Any = None, *, content_type: str | None = None, accept: str | None = None
) -> tuple[int, str | None, Any]:
    """One plain HTTP request; returns the status, the response's Content-Type and its JSON body (or None)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    if content_type is not None:
        request.add_header("Content-Type", content_type)
    if accept is not None:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            status, ctype, raw = response.status, response.headers.get("Content-Type"), response.read()
    except urllib.error.HTTPError as err:
        status, ctype, raw = err.code, err.headers.get("Content-Type"), err.read()
    return status, ctype, json.loads(raw) if raw.strip() else None


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def committed_offsets(url: str, group: str) -> dict[tuple[str, int], int]:
    """The offsets ``group`` has committed, from the v3 admin API's lag listing (not from the client)."""
    status, _, clusters = http_json("GET", f"{url}/v3/clusters")
    assert status == 200, clusters
    cluster = clusters["data"][0]["cluster_id"]
    status, _, lags = http_json("GET", f"{url}/v3/clusters/{cluster}/consumer-groups/{group}/lags")
    assert status == 200, lags
    return {(lag["topic_name"], lag["partition_id"]): lag["current_offset"] for lag in lags["data"]}
