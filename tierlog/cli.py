"""The ``tierlog`` command line: one entry point for the broker, the storage tools and the client.

    tierlog [--version] [--bootstrap-server URL] COMMAND ...

``serve`` runs a broker (:mod:`tierlog.service.serve`), ``tiering`` the remote-tier tools, ``dump-log`` the
segment dumper (:mod:`tierlog.tiering.tools.dump_log`), and ``topics``/``produce``/``consume``/``groups``/
``cluster`` the client commands (:mod:`tierlog.client.cli.main`), ``users``/``acls`` the security
commands (:mod:`tierlog.service.security.cli`). Options that every client command takes
(``--bootstrap-server``) are accepted before the command as well as after it. Each command module is
imported only when it runs, so ``tierlog --version`` and the client commands never load the broker.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from tierlog import __version__

__all__ = ["COMMANDS", "main"]

# name -> (help, module path of its main(argv) -> int)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("run a broker", "tierlog.service.serve"),
    "topics": ("create, list, describe, delete and alter topics", "tierlog.client.cli.main"),
    "produce": ("produce lines from stdin or a file", "tierlog.client.cli.main"),
    "consume": ("consume records as JSON lines", "tierlog.client.cli.main"),
    "groups": ("list and describe consumer groups, with lag", "tierlog.client.cli.main"),
    "cluster": ("describe the cluster: brokers, controller and its epoch", "tierlog.client.cli.main"),
    "dump-log": (
        "print the batches and records of segment files (--verify checks them)",
        "tierlog.tiering.tools.dump_log",
    ),
    "tiering": (
        "remote tier tools: check (list leaked objects), restore (recreate topics from a bucket)",
        "tierlog.service.remote.cli",
    ),
    "users": ("add, remove and list users (SCRAM credentials)", "tierlog.service.security.cli"),
    "acls": ("add, remove and list ACLs (Kafka's model)", "tierlog.service.security.cli"),
}
CLIENT_COMMANDS = ("topics", "produce", "consume", "groups", "cluster")
# Commands whose module takes the whole command line (global options and the command's name first).
GLOBAL_AWARE_COMMANDS = (*CLIENT_COMMANDS, "users", "acls")
# Global options that take a value, and the commands they are passed to.
GLOBAL_OPTIONS = ("--bootstrap-server",)


def _usage() -> str:
    lines = [
        "usage: tierlog [--version] [--bootstrap-server URL] COMMAND [ARGS ...]",
        "",
        "tierlog: a Kafka-style commit log with tiered storage",
        "",
        "commands:",
    ]
    lines += [f"  {name:<10} {help_text}" for name, (help_text, _) in COMMANDS.items()]
    lines += ["", "Run 'tierlog COMMAND --help' for the options of a command."]
    return "\n".join(lines) + "\n"


def _split_globals(raw: list[str]) -> tuple[list[str], list[str]] | str:
    """Split ``raw`` into (global options, command and its arguments), or answer a usage error."""
    globals_: list[str] = []
    index = 0
    while index < len(raw) and raw[index].startswith("-"):
        token = raw[index]
        name = token.split("=", 1)[0]
        if name not in GLOBAL_OPTIONS:
            return f"unknown option {token!r}"
        if "=" in token:
            globals_.append(token)
            index += 1
        elif index + 1 < len(raw):
            globals_ += raw[index : index + 2]
            index += 2
        else:
            return f"{token} needs a value"
    return globals_, raw[index:]


def _load(module: str) -> Callable[[list[str]], int]:
    import importlib

    entry: Callable[[list[str]], int] = importlib.import_module(module).main
    return entry


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line. Answers the exit code: 0 success, 1 an error, 2 a usage error."""
    raw = list(sys.argv[1:] if argv is None else argv)
    if raw and raw[0] in ("--version", "-V"):
        sys.stdout.write(f"tierlog {__version__}\n")
        return 0
    if not raw or raw[0] in ("-h", "--help", "help"):
        (sys.stdout if raw else sys.stderr).write(_usage())
        return 0 if raw else 2
    split = _split_globals(raw)
    if isinstance(split, str):
        sys.stderr.write(f"tierlog: error: {split}\n")
        return 2
    globals_, rest = split
    if not rest or rest[0] not in COMMANDS:
        wrong = f"unknown command {rest[0]!r}" if rest else "a command is required"
        sys.stderr.write(f"tierlog: error: {wrong}\n{_usage()}")
        return 2
    command = rest[0]
    if globals_ and command not in GLOBAL_AWARE_COMMANDS:
        sys.stderr.write(f"tierlog {command}: error: {globals_[0].split('=', 1)[0]} is a client option\n")
        return 2
    entry = _load(COMMANDS[command][1])
    if command in GLOBAL_AWARE_COMMANDS:
        return entry([*globals_, *rest])
    return entry(rest[1:])
