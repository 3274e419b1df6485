"""``tierlog serve`` as a real process: settings precedence, one-line start-up failures, SIGTERM shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TIERLOG_") and k != "AWS_ENDPOINT_URL"}
    env["PYTHONUNBUFFERED"] = "1"
    env["TIERLOG_KAFKA_LISTENER"] = "127.0.0.1:0"  # a free port: brokers of tests run side by side
    env.update(extra)
    return env


class ServeProcess:
    """A ``tierlog serve`` child whose stderr is collected line by line by a task this object owns."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        while line := await self.proc.stderr.readline():
            async with self._changed:
                self.lines.append(line.decode(errors="replace").rstrip("\n"))
                self._changed.notify_all()
        async with self._changed:
            self.lines.append("<eof>")
            self._changed.notify_all()

    async def wait_for_line(self, pattern: re.Pattern[str] | str) -> re.Match[str]:
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        found: list[re.Match[str]] = []

        def seen() -> bool:
            for line in self.lines:
                match = regex.search(line)
                if match:
                    found.append(match)
                    return True
            if self.lines and self.lines[-1] == "<eof>":
                raise AssertionError(f"process ended without {regex.pattern!r}:\n" + "\n".join(self.lines))
            return False

        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(seen), 60)
        return found[0]

    async def stop(self, signum: int = signal.SIGTERM) -> int:
        if self.proc.returncode is None:
            self.proc.send_signal(signum)
        code = await asyncio.wait_for(self.proc.wait(), 60)
        await self.closed()
        return code

    async def closed(self) -> None:
        """Wait until the child's stderr is fully read."""
        await self._reader


@contextlib.asynccontextmanager
async def serve(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[tuple[ServeProcess, str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tierlog", "serve", "--port", "0", *args,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env or clean_env(),
    )  # fmt: skip
    child = ServeProcess(proc)
    try:
        url = (await child.wait_for_line(LISTENING)).group(1)
        await child.wait_for_line("ready: cluster")
        yield child, url
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await child.closed()


async def get_json(session: aiohttp.ClientSession, url: str) -> Any:
    async with session.get(url) as resp:
        assert resp.status == 200, await resp.text()
        return await resp.json()


async def test_sigterm_flushes_closes_and_restarts_clean(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with serve("--data-dir", str(data)) as (child, url), aiohttp.ClientSession() as session:
        cluster = (await get_json(session, f"{url}/v3/clusters"))["data"][0]["cluster_id"]
        body = {
            "topic_name": "durable",
            "partitions_count": 1,
            "configs": [{"name": "flush.ms", "value": "0"}],
        }
        async with session.post(f"{url}/v3/clusters/{cluster}/topics", json=body) as resp:
            assert resp.status == 201
        records = {"records": [{"value": {"n": 1}}, {"value": {"n": 2}}]}
        headers = {"Content-Type": "application/vnd.kafka.json.v2+json"}
        async with session.post(f"{url}/topics/durable", json=records, headers=headers) as resp:
            assert resp.status == 200, await resp.text()
        assert await child.stop(signal.SIGTERM) == 0
    assert (data / ".tierlog_cleanshutdown").exists()
    assert (data / "durable-0" / ".tierlog_cleanshutdown").exists()
    assert any("broker closed cleanly" in line for line in child.lines)
    assert not any("Traceback" in line for line in child.lines)

    async with serve("--data-dir", str(data)) as (again, url), aiohttp.ClientSession() as session:
        await again.wait_for_line("after a clean shutdown")
        assert not (data / "durable-0" / ".tierlog_cleanshutdown").exists()
        async with session.get(f"{url}/metrics") as resp:
            text = await resp.text()
        assert 'tierlog_log_end_offset{partition="0",topic="durable"} 2' in text
        topic = await get_json(session, f"{url}/v3/clusters/{cluster}/topics/durable/configs/flush.ms")
        assert topic["value"] == "0"
        assert await again.stop(signal.SIGINT) == 0


async def test_sigkill_then_recovery(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with serve("--data-dir", str(data), "--log-flush-interval-ms", "0") as (child, url):
        async with aiohttp.ClientSession() as session:
            headers = {"Content-Type": "application/vnd.kafka.json.v2+json"}
            records = {"records": [{"value": i} for i in range(3)]}
            async with session.post(f"{url}/topics/crashy", json=records, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
        assert await child.stop(signal.SIGKILL) == -signal.SIGKILL
    assert not (data / ".tierlog_cleanshutdown").exists()

    async with serve("--data-dir", str(data)) as (again, url), aiohttp.ClientSession() as session:
        await again.wait_for_line("after an unclean")
        async with session.get(f"{url}/metrics") as resp:
            assert 'tierlog_log_end_offset{partition="0",topic="crashy"} 3' in await resp.text()
        assert await again.stop() == 0


async def test_precedence_flag_env_file(tmp_path: Path) -> None:
    config = tmp_path / "tierlog.toml"
    config.write_text(
        f'data_dir = "{tmp_path / "data"}"\nnum.partitions = 2\nremote.uri = "s3://tier-bucket/pre"\n'
        '[log]\n"segment.bytes" = 2048\n',
        encoding="utf-8",
    )
    env = clean_env(
        TIERLOG_NUM_PARTITIONS="3", TIERLOG_LOG_SEGMENT_BYTES="3072", AWS_ENDPOINT_URL="http://127.0.0.1:1"
    )
    async with serve("--config", str(config), "--log-segment-bytes", "4096", env=env) as (child, url):
        await child.wait_for_line(r"remote\.uri=s3://tier-bucket/pre s3\.endpoint\.url=http://127\.0\.0\.1:1")
        async with aiohttp.ClientSession() as session:
            described = (await get_json(session, f"{url}/v3/clusters"))["data"][0]
            assert described["remote_uri"] == "s3://tier-bucket/pre"
            cluster = described["cluster_id"]
            async with session.post(f"{url}/v3/clusters/{cluster}/topics", json={"topic_name": "p"}) as resp:
                assert (await resp.json())["partitions_count"] == 3
            entry = await get_json(session, f"{url}/v3/clusters/{cluster}/topics/p/configs/segment.bytes")
            assert entry["value"] == "4096"
            assert entry["source"] == "STATIC_BROKER_CONFIG"
            assert entry["synonyms"][0] == {
                "name": "log.segment.bytes",
                "value": "4096",
                "source": "STATIC_BROKER_CONFIG",
            }
        assert await child.stop() == 0


async def test_kafka_server_properties_file(tmp_path: Path) -> None:
    """A Kafka broker's server.properties (Kafka's names and syntax) configures the broker; the start-up
    log then says where it listens and what to try first."""
    data = tmp_path / "kafka-logs"
    config = tmp_path / "server.properties"
    config.write_text(
        "# Kafka's names, Java properties syntax\n"
        "listeners = PLAINTEXT://127.0.0.1:0,\\\n    CONTROLLER://127.0.0.1:9093\n"
        f"log.dirs: {data}\n"
        "num.partitions=2\n"
        "log.retention.hours=48\n",
        encoding="utf-8",
    )
    env = clean_env()
    del env["TIERLOG_KAFKA_LISTENER"]  # the file's listeners name the Kafka listener (port 0: a free one)
    async with serve("--config", str(config), env=env) as (child, url):
        kafka = (await child.wait_for_line(r"Kafka protocol listener on (127\.0\.0\.1:\d+)")).group(1)
        for expected in (
            rf"^  HTTP \(REST\)   {re.escape(url)}   ",
            rf"^  Kafka         {re.escape(kafka)}   \(bootstrap\.servers",
            rf"^  data dir      {re.escape(str(data.resolve()))}$",
            rf"^  try           curl -s {re.escape(url)}/topics$",
            rf" --bootstrap-server {re.escape(url)} topics list$",
        ):
            await child.wait_for_line(expected)
        assert (data / "cluster-metadata.json").exists()
        async with aiohttp.ClientSession() as session:
            cluster = (await get_json(session, f"{url}/v3/clusters"))["data"][0]["cluster_id"]
            async with session.post(f"{url}/v3/clusters/{cluster}/topics", json={"topic_name": "k"}) as resp:
                assert (await resp.json())["partitions_count"] == 2
            entry = await get_json(session, f"{url}/v3/clusters/{cluster}/topics/k/configs/retention.ms")
            assert entry["value"] == str(48 * 3_600_000)
        assert await child.stop() == 0


def test_unknown_kafka_name_names_the_closest(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_text("log.retention.hour=1\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "tierlog", "serve", "--config", str(config)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"tierlog serve: error: config file {config}: unknown setting 'log.retention.hour'; "
        "did you mean 'log.retention.hours'?"
    ]


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (
            ["--log-segment-bytes", "10"],
            {},
            "log.segment.bytes (from --log-segment-bytes): must be between 14",
        ),
        (["--colour", "blue"], {}, "unrecognized arguments: --colour blue"),
        ([], {"TIERLOG_PORT": "eighty"}, "port (from TIERLOG_PORT): not an integer"),
        (["--remote-uri", "s3://Bad_Bucket"], {}, "invalid S3 bucket name"),
        (["--config", "/nonexistent/tierlog.toml"], {}, "cannot read config file /nonexistent/tierlog.toml"),
    ],
)
def test_bad_settings_fail_with_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], expected: str
) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tierlog", "serve", "--data-dir", str(tmp_path / "d"), *args],
        env=clean_env(**env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert expected in lines[0]
    assert not (tmp_path / "d").exists()


def test_unknown_key_in_config_file(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("[log]\nsegment.megabytes = 1\n", encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "tierlog", "serve", "--config", str(config)],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"tierlog serve: error: unknown setting 'log.segment.megabytes' (from config file {config})"
    ]


async def test_unreadable_state_exits_1(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "tierlog-state.json").write_text("{ torn", encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tierlog", "serve", "--port", "0", "--data-dir", str(data),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env(),
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1
    assert "opening the logs failed" in stderr.decode()
    assert "tierlog-state.json is not valid JSON" in stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert not (data / ".tierlog_cleanshutdown").exists()


async def test_an_unreadable_old_security_file_fails_the_start_naming_it(tmp_path: Path) -> None:
    """A torn tierlog-security.json (an old broker's users and ACLs) stops the start with its name, rather
    than being retried forever as if the store were unreachable."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "tierlog-security.json").write_text("{ torn", encoding="utf-8")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tierlog", "serve", "--port", "0", "--data-dir", str(data),
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_env(),
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 1, stderr.decode()
    assert "tierlog-security.json cannot be imported" in stderr.decode()
    assert (data / "tierlog-security.json").exists()  # left for the operator, not renamed


def test_port_in_use_exits_1(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tierlog",
                "serve",
                "--data-dir",
                str(tmp_path / "d"),
                "--port",
                str(port),
            ],
            env=clean_env(),
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert "Traceback" not in proc.stderr
