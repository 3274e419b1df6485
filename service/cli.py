"""``tierlog serve``: run a broker (the dispatcher of every ``tierlog`` command is :mod:`tierlog.cli`).

Bad settings end the process with one line on stderr and exit code 2. ``serve`` logs to stderr, stops
cleanly on SIGTERM or SIGINT (logs flushed and closed, exit code 0) and exits 1 if the logs cannot be
opened or the port cannot be bound.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from aiohttp import web

from tierlog.service.config import SETTINGS_TABLE, Settings, SettingsError, env_name, flag_name, load_settings

if TYPE_CHECKING:
    from tierlog.service.broker import Broker

__all__ = ["main"]

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
    parser.add_argument("--config", type=Path, metavar="FILE", help="TOML settings file (env TIERLOG_CONFIG)")
    for name, spec in SETTINGS_TABLE.items():
        default = "none" if spec.default is None else spec.default
        parser.add_argument(
            flag_name(name),
            dest=name,
            metavar="VALUE",
            default=None,
            # argparse %-formats help text: a literal % in a doc must be doubled
            help=f"{spec.doc} [{env_name(name)}; default {default}]".replace("%", "%%"),
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
    except SettingsError as err:
        sys.stderr.write(f"tierlog serve: error: {err}\n")
        return 2
    logging.basicConfig(
        level=settings.logging_level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    return asyncio.run(serve(settings))


async def serve(settings: Settings) -> int:
    """Serve until SIGTERM or SIGINT. Returns 0 after a clean shutdown, 1 when start-up fails."""
    from tierlog.service.app import CONNECTIONS, OPEN_TASK, create_app
    from tierlog.service.connections import GuardedSite, install_accept_error_handler
    from tierlog.service.state import BROKER, METRICS

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
    site = GuardedSite(runner, settings.host, settings.port, app[CONNECTIONS])
    try:
        await site.start()
    except OSError as err:
        log.error("cannot listen on %s:%d: %s", settings.host, settings.port, err.strerror or err)
        await runner.cleanup()
        return 1
    port = _bound_port(runner, settings.port)
    broker = app[BROKER]
    if "advertised.url" not in settings.sources and port != settings.port:
        broker.advertise(f"http://{settings.host}:{port}")
    log.info("listening on http://%s:%d", settings.host, port)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    opening = app[OPEN_TASK]
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({opening, stopper}, return_when=asyncio.FIRST_COMPLETED)
        failed = opening.done() and not opening.cancelled() and opening.exception() is not None
        if not failed:
            if opening.done():
                _log_ready(broker)
            await stopper
            log.info("shutting down")
    finally:
        stopper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopper
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        await runner.cleanup()
    if failed:
        return 1
    if broker.close_failures:
        log.error("stopped, but %d partition log(s) could not be closed cleanly", broker.close_failures)
        return 1
    log.info("stopped")
    return 0


def _log_ready(broker: Broker) -> None:
    node = broker.cluster
    if node is None:
        log.info("ready: cluster %s", broker.cluster_id)
        return
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


def _bound_port(runner: web.AppRunner, configured: int) -> int:
    for address in runner.addresses:
        if isinstance(address, tuple) and len(address) >= 2:
            return int(address[1])
    return configured
