"""The client half of the ``tierlog`` command line: topics, produce, consume, groups and cluster.

    tierlog topics create|list|describe|delete|alter ...
    tierlog produce TOPIC [--file F] [--key-separator SEP] [--partition N] [--compression C]
    tierlog consume TOPIC [--from-beginning | --offset N] [--partition N] [--group G] [--max-messages N]
    tierlog groups list|describe GROUP
    tierlog cluster describe [--output table|json]

Every command talks to ``--bootstrap-server`` (default ``$TIERLOG_BOOTSTRAP_SERVER`` or
http://127.0.0.1:8082), which may list several brokers of a cluster comma-separated: ``produce`` and
``consume`` learn the cluster from any of them, the other commands use the first that answers. Every command
takes the security options of :func:`tierlog.client.security.add_security_arguments` (``--ssl-cafile``,
``--username`` with the password in ``$TIERLOG_PASSWORD`` ...); with TLS a bare host:port is https. Exit
codes: 0 success, 1 a broker or request error (one line on stderr naming the error code), 2 a usage
error, 130 interrupted (Ctrl-C). ``python -m tierlog ...`` runs the same commands.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from tierlog.client.admin import AsyncAdmin
from tierlog.client.cli.admin import parse_configs, run_groups, run_topics
from tierlog.client.cli.cluster import reachable_broker, run_cluster
from tierlog.client.cli.data import DEFAULT_FORMAT, check_consume_args, parse_format, run_consume, run_produce
from tierlog.client.config import DEFAULT_BOOTSTRAP, bootstrap_urls
from tierlog.client.security import add_security_arguments, security_from_args
from tierlog.wire.errors import InvalidRequestError, TierlogError

__all__ = ["COMMANDS", "main"]

COMMANDS = ("topics", "produce", "consume", "groups", "cluster")
EXIT_OK, EXIT_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
_COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")


class UsageError(Exception):
    """The command line is wrong; printed with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def _add_bootstrap(parser: _Parser, *, default: str) -> None:
    parser.add_argument(
        "--bootstrap-server",
        default=default,
        metavar="URL",
        help="broker base URL, or several of one cluster comma-separated "
        f"(default $TIERLOG_BOOTSTRAP_SERVER or {DEFAULT_BOOTSTRAP})",
    )


def _common() -> _Parser:
    """Options of every command. They are accepted before the command too (``build_parser`` adds them
    there with the real default); here they default to SUPPRESS so they override only when given."""
    common = _Parser(add_help=False)
    _add_bootstrap(common, default=argparse.SUPPRESS)
    add_security_arguments(common)
    return common


def _topics_parser(commands: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    topics = commands.add_parser("topics", help="create, list, describe, alter and delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)
    create = actions.add_parser("create", parents=[common], help="create a topic")
    create.add_argument("topic")
    create.add_argument(
        "--partitions", type=int, help="partition count (default: the broker's num.partitions)"
    )
    create.add_argument(
        "--replication-factor",
        type=int,
        help="replicas of each partition (default: the cluster's default.replication.factor)",
    )
    create.add_argument("--config", action="append", metavar="NAME=VALUE", help="topic config (repeatable)")
    listing = actions.add_parser("list", parents=[common], help="list topic names")
    listing.add_argument("--internal", action="store_true", help="include internal topics")
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    describe = actions.add_parser("describe", parents=[common], help="partitions, offsets and configs")
    describe.add_argument("topic")
    describe.add_argument("--json", action="store_true", help="print one JSON object")
    delete = actions.add_parser("delete", parents=[common], help="delete a topic and its data")
    delete.add_argument("topic")
    alter = actions.add_parser("alter", parents=[common], help="add partitions, set or delete configs")
    alter.add_argument("topic")
    alter.add_argument("--partitions", type=int, help="new (larger) partition count")
    alter.add_argument("--config", action="append", metavar="NAME=VALUE", help="set a config (repeatable)")
    alter.add_argument("--delete-config", action="append", metavar="NAME", help="remove an override")


def _produce_parser(commands: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    produce = commands.add_parser(
        "produce", parents=[common], help="send lines of stdin or a file as records"
    )
    produce.add_argument("topic")
    produce.add_argument("--file", help="read lines from this file instead of stdin")
    produce.add_argument("--key-separator", metavar="SEP", help="split each line into key SEP value")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument("--compression", choices=_COMPRESSIONS, default="none")
    produce.add_argument(
        "--acks", choices=("0", "1", "all"), default="all",
        help="all (the default) keeps the producer idempotent; 0 or 1 turn idempotence off",
    )  # fmt: skip
    produce.add_argument(
        "--no-idempotence", action="store_true",
        help="send without a producer id (retries after a lost answer may store records twice)",
    )  # fmt: skip
    produce.add_argument(
        "--no-create-topic", action="store_true",
        help="fail on a topic that does not exist instead of creating it (Kafka's allow.auto.create.topics)",
    )  # fmt: skip
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument("--batch-size", type=int, default=256 * 1024)
    produce.add_argument(
        "--max-block-ms", type=int, default=15_000, help="how long to wait for the broker before giving up"
    )
    produce.add_argument("--delivery-timeout-ms", type=int, default=30_000, help="per-record delivery bound")
    produce.add_argument(
        "--progress", choices=("auto", "always", "never"), default="auto",
        help="progress bar on stderr (auto: on a terminal, for inputs over 1 MiB)",
    )  # fmt: skip
    produce.add_argument("--quiet", action="store_true", help="no summary line on stderr")


def _consume_parser(commands: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    consume = commands.add_parser(
        "consume", parents=[common], help="print records as JSON lines (or one field's text)"
    )
    consume.add_argument("topic")
    consume.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    consume.add_argument("--offset", help="start offset (a number, earliest or latest); needs --partition")
    consume.add_argument("--partition", type=int, help="read only this partition")
    consume.add_argument("--group", help="consume as a member of this group, committing what was printed")
    consume.add_argument("--max-messages", type=int, help="exit after this many records")
    consume.add_argument("--timeout-ms", type=int, help="exit when no record arrives for this long")
    consume.add_argument(
        "--format", default=DEFAULT_FORMAT,
        help="json (every field), or comma-separated fields among topic,partition,offset,timestamp,"
        "timestamp_type,key,value,headers; one field prints its plain text (--format value)",
    )  # fmt: skip
    consume.add_argument("--encoding", choices=("text", "base64"), default="text", help="for keys and values")
    consume.add_argument("--quiet", action="store_true", help="no summary line on stderr")


def _groups_parser(commands: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    groups = commands.add_parser("groups", help="list and describe consumer groups (with lag)")
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)
    listing = actions.add_parser("list", parents=[common], help="every group and its state")
    listing.add_argument("--json", action="store_true")
    describe = actions.add_parser("describe", parents=[common], help="members, assignments and lag")
    describe.add_argument("group")
    describe.add_argument("--json", action="store_true")


def _cluster_parser(commands: argparse._SubParsersAction[_Parser], common: _Parser) -> None:
    cluster = commands.add_parser("cluster", help="the cluster: brokers, controller and its epoch")
    actions = cluster.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)
    describe = actions.add_parser(
        "describe", parents=[common], help="cluster id, controller id and epoch, live brokers (url, rack)"
    )
    describe.add_argument("--output", choices=("table", "json"), default="table")
    describe.add_argument("--json", dest="output", action="store_const", const="json", help="--output json")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the client commands."""
    parser = _Parser(prog="tierlog", description="tierlog client commands")
    _add_bootstrap(parser, default=os.environ.get("TIERLOG_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP))
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    common = _common()
    _topics_parser(commands, common)
    _produce_parser(commands, common)
    _consume_parser(commands, common)
    _groups_parser(commands, common)
    _cluster_parser(commands, common)
    return parser


def _parse(argv: list[str]) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    prog = f"tierlog {args.command}"
    try:
        security = security_from_args(args)
        if security.tls and args.bootstrap_server == DEFAULT_BOOTSTRAP:
            args.bootstrap_server = DEFAULT_BOOTSTRAP.replace("http://", "https://", 1)
        args.bootstrap_urls = bootstrap_urls(args.bootstrap_server, scheme=security.scheme)
        args.bootstrap_server = ",".join(args.bootstrap_urls)
        args.security = security.for_urls(args.bootstrap_urls)
        if getattr(args, "config", None):
            parse_configs(args.config)
        if args.command == "consume":
            parse_format(args.format)
            check_consume_args(args)
    except (InvalidRequestError, ValueError) as err:
        raise UsageError(f"{prog}: error: {err}") from None
    return args


async def _run(args: argparse.Namespace) -> int:
    if args.command == "produce":
        return await run_produce(args)
    if args.command == "consume":
        return await run_consume(args)
    broker = await reachable_broker(args.bootstrap_urls, security=args.security)
    try:
        if args.command == "cluster":
            return await run_cluster(args, broker)
        admin = AsyncAdmin.over(broker)
        if args.command == "topics":
            return await run_topics(args, admin, broker)
        return await run_groups(args, admin)
    finally:
        await broker.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run one client command; answer its exit code (0, 1, 2, 3 or 130: docs/client.md). Never raises for
    expected errors."""
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        args = _parse(raw)
    except UsageError as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_USAGE
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        sys.stderr.write(f"tierlog {args.command}: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``| head``); stop quietly and keep the interpreter from complaining at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except TierlogError as err:
        sys.stderr.write(f"tierlog {args.command}: error: {err.message} (error code {err.code})\n")
        return EXIT_ERROR
    except OSError as err:
        sys.stderr.write(f"tierlog {args.command}: error: {err}\n")
        return EXIT_ERROR
