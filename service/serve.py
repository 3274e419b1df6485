"""``tierlog serve``: run a broker (the dispatcher of every ``tierlog`` command is :mod:`tierlog.cli`).

Bad settings end the process with one line on stderr and exit code 2. ``serve`` logs to stderr (with
credentials redacted at every level: :mod:`~tierlog.service.security.log_filter`), stops cleanly on SIGTERM
or SIGINT (logs flushed and closed, exit code 0) and exits 1 if another broker uses the data directory
(:mod:`~tierlog.service.topics.dir_lock`), the logs cannot be opened or the port cannot be bound.

With ``ssl.certfile`` set the main listener (``host``:``port``) speaks HTTPS only; a plaintext listener
exists only on ``plaintext.port`` when that is set. SIGHUP loads the certificate and key again (new
handshakes present them, open connections keep theirs); a bad pair is logged and the old one kept.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shutil
import signal
import ssl
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from aiohttp import web

from tierlog.service import allocator, open_files
from tierlog.service.security.log_filter import install_redaction, known_secrets
from tierlog.service.security.tls import ServerTls, TlsError, server_context
from tierlog.service.settings.config import SETTINGS_TABLE, Settings, SettingsError, load_settings
from tierlog.service.topics.dir_lock import DataDirInUseError, lock_data_dir, unlock_data_dir
from tierlog.service.web.connections import GuardedSite

if TYPE_CHECKING:
    from tierlog.service.topics.broker import Broker

__all__ = ["how_to_reach", "main"]

log = logging.getLogger("tierlog")


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="tierlog serve",
        description="Run a broker. Every setting is also read from TIERLOG_<NAME> and from --config FILE; "
        "precedence is flag > environment > file > default. See docs/configuration.md.",
    )
    parser.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="settings file: TOML, or Kafka's server.properties format (env TIERLOG_CONFIG)",
    )
    for name, spec in SETTINGS_TABLE.items():
        # argparse %-formats help text: a literal % in a doc must be doubled
        parser.add_argument(
            spec.flag, dest=name, metavar="VALUE", default=None, help=spec.help.replace("%", "%%")
        )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``tierlog serve`` with ``argv`` (the arguments after ``serve``). Returns the exit code."""
    raw = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(raw)
    flags = {
        name: value for name, value in vars(args).items() if name in SETTINGS_TABLE and value is not None
    }
    config_file = args.config or (
        Path(os.environ["TIERLOG_CONFIG"]) if os.environ.get("TIERLOG_CONFIG") else None
    )
    try:
        settings = load_settings(flags, os.environ, config_file)
        if settings.data_dir.exists() and not settings.data_dir.is_dir():
            raise SettingsError(f"data.dir {settings.data_dir} exists and is not a directory")
        tls = server_context(settings.security) if settings.security.tls else None
    except (SettingsError, TlsError) as err:
        sys.stderr.write(f"tierlog serve: error: {err}\n")
        return 2
    try:
        lock = lock_data_dir(settings.data_dir)
    except (DataDirInUseError, OSError) as err:
        sys.stderr.write(f"tierlog serve: error: {err}\n")
        return 1
    logging.basicConfig(
        level=settings.logging_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # every record reaching the root handler, ours and the store libraries' (botocore logs signed
    # requests at DEBUG), loses its credentials first
    install_redaction(known_secrets(settings, os.environ))
    allocator.tune()
    open_files.raise_limit()
    listeners = 1 if settings.kafka_listener is None else 2
    open_files.warn_if_short(listeners * settings.max_connections)
    try:
        return asyncio.run(serve(settings, tls))
    finally:
        unlock_data_dir(lock)


async def serve(settings: Settings, tls: ssl.SSLContext | None = None) -> int:
    """Serve until SIGTERM or SIGINT. Returns 0 after a clean shutdown, 1 when start-up fails.

    ``tls`` is the listener's SSL context (:func:`~tierlog.service.security.tls.server_context`); None
    builds it here when ``settings`` ask for TLS. SIGHUP builds a new one from the same files and serves
    new handshakes with it (:class:`~tierlog.service.security.tls.ServerTls`).

    Raises:
        TlsError: ``tls`` is None and the certificate files cannot be used.
    """
    if tls is None and settings.security.tls:
        tls = await asyncio.to_thread(server_context, settings.security)
    served = ServerTls(tls) if tls is not None else None
    from tierlog.service.app import CONNECTIONS, OPEN_TASK, create_app
    from tierlog.service.web.connections import install_accept_error_handler
    from tierlog.service.web.keys import BROKER, METRICS, SERVER_TLS

    log.info("starting tierlog: %s", settings.describe())
    if settings.metadata_uri is not None:
        log.info(
            "cluster mode: metadata.uri=%s broker.id=%d broker.rack=%s advertised.url=%s",
            settings.metadata_uri,
            settings.broker_id,
            settings.broker_rack or "-",
            "(the bound port)" if settings.port == 0 and "advertised.url" not in settings.sources
            else settings.advertised_url,
        )  # fmt: skip
    app = create_app(settings)
    if served is not None:
        app[SERVER_TLS] = served  # before start-up: the Kafka listener shares it
    access_log = logging.getLogger("aiohttp.access") if settings.logging_level == "DEBUG" else None
    install_accept_error_handler(
        asyncio.get_running_loop(), app[METRICS], settings.accept_error_log_interval_ms
    )
    runner = web.AppRunner(
        app,
        handle_signals=False,
        access_log=access_log,
        # a backstop only: the ConnectionGuard closes idle connections first (and counts them)
        keepalive_timeout=settings.connections_max_idle_ms / 1000 + 1,
    )
    await runner.setup()
    scheme = "http" if tls is None else "https"
    listeners = [(settings.host, settings.port, tls)]
    if tls is not None and settings.security.plaintext_port is not None:
        listeners.append((settings.host, settings.security.plaintext_port, None))
    for host, wanted, context in listeners:
        try:
            await GuardedSite(runner, host, wanted, app[CONNECTIONS], context).start()
        except OSError as err:
            log.error("cannot listen on %s:%d: %s", host, wanted, err.strerror or err)
            await runner.cleanup()
            return 1
    ports = _bound_ports(runner)
    port = ports[0] if ports else settings.port
    broker = app[BROKER]
    if "advertised.url" not in settings.sources and port != settings.port:
        broker.advertise(f"{scheme}://{settings.host}:{port}")
    log.info("listening on %s://%s:%d", scheme, settings.host, port)
    if len(listeners) > 1:
        plain = ports[1] if len(ports) > 1 else settings.security.plaintext_port
        log.info("listening on plaintext http://%s:%d (plaintext.port)", settings.host, plain)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    reloads: set[asyncio.Task[None]] = set()
    if tls is not None:
        assert served is not None
        loop.add_signal_handler(signal.SIGHUP, _start_reload, served, settings, reloads)
    opening = app[OPEN_TASK]
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({opening, stopper}, return_when=asyncio.FIRST_COMPLETED)
        failed = opening.done() and not opening.cancelled() and opening.exception() is not None
        if not failed:
            if opening.done() and await _security_loaded(app, stopper, settings):
                _log_ready(broker)
                log.info("%s", how_to_reach(settings, broker.advertised_url, broker.kafka_endpoint))
            await stopper
            log.info("shutting down")
    finally:
        stopper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopper
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.remove_signal_handler(signum)
        for task in reloads:
            task.cancel()
        await asyncio.gather(*reloads, return_exceptions=True)
        await runner.cleanup()
    if failed:
        return 1
    if broker.close_failures:
        log.error("stopped, but %d partition log(s) could not be closed cleanly", broker.close_failures)
        return 1
    log.info("stopped")
    return 0


async def _security_loaded(app: web.Application, stopper: asyncio.Task[bool], settings: Settings) -> bool:
    """With authentication on, wait until the users and ACLs are loaded (until then authenticated routes
    answer 503, so the broker is not ready) or a stop signal; True when loaded or not needed."""
    from tierlog.service.security.security_store import SECURITY_STORE

    if not settings.security.enabled:
        return True
    loading = asyncio.create_task(app[SECURITY_STORE].wait_loaded())
    try:
        await asyncio.wait({loading, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        loading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await loading
    return not stopper.done()


def _log_ready(broker: Broker) -> None:
    view = broker.cluster_view()
    log.info(
        "ready: cluster %s, broker %d registered as %s; controller %d (epoch %d), %d live brokers",
        broker.cluster_id,
        broker.broker_id,
        broker.advertised_url,
        view.controller_id,
        view.controller_epoch,
        len(view.brokers),
    )


def how_to_reach(settings: Settings, url: str, kafka_endpoint: str | None) -> str:
    """The start-up log's lines on where this broker listens and the two quickest commands to try: the
    HTTP URL ``url``, the Kafka listener's ``kafka_endpoint`` (None: not started), the data directory, a
    curl and the ``tierlog`` CLI (named as this process was started when ``tierlog`` is not on PATH)."""
    lines = [
        "how to reach this broker:",
        f"  HTTP (REST)   {url}   (health: {url}/ready, metrics: {url}/metrics)",
        f"  Kafka         {kafka_endpoint or 'not started'}"
        + ("   (bootstrap.servers for Kafka's clients)" if kafka_endpoint else ""),
        f"  data dir      {settings.data_dir.resolve()}",
        f"  try           curl -s {url}/topics",
        f"                {_cli_name()} --bootstrap-server {url} topics list",
    ]
    return "\n".join(lines)


def _cli_name() -> str:
    """``tierlog`` when that is on PATH, else the path this process was started as (``.venv/bin/tierlog``
    from ``make run``), else ``python -m tierlog``."""
    if shutil.which("tierlog"):
        return "tierlog"
    started = sys.argv[0]
    if Path(started).name == "tierlog" and Path(started).exists():
        shown = os.path.relpath(started)
        if shown.startswith(".."):
            return str(Path(started).resolve())
        return shown if os.sep in shown else f".{os.sep}{shown}"
    return f"{Path(sys.executable).name} -m tierlog"


def _start_reload(tls: ServerTls, settings: Settings, reloads: set[asyncio.Task[None]]) -> None:
    """SIGHUP: reload the certificate in a worker thread, one reload at a time (a second SIGHUP during
    one is skipped: the running reload reads the files after it)."""
    if reloads:
        log.info("SIGHUP: a certificate reload is already running")
        return
    task = asyncio.get_running_loop().create_task(_reload(tls, settings))
    reloads.add(task)
    task.add_done_callback(reloads.discard)


async def _reload(tls: ServerTls, settings: Settings) -> None:
    try:
        context = await asyncio.to_thread(server_context, settings.security)
    except TlsError as err:
        log.error("SIGHUP: kept the old certificate: %s", err)
        return
    tls.install(context)
    log.info("SIGHUP: reloaded the TLS certificate from %s", settings.security.ssl_certfile)


def _bound_ports(runner: web.AppRunner) -> list[int]:
    """The bound port of each listener, in the order they were started."""
    return [
        int(address[1]) for address in runner.addresses if isinstance(address, tuple) and len(address) >= 2
    ]
