"""``tierlog users ...`` and ``tierlog acls ...``: manage SCRAM users and Kafka-model ACLs.

    tierlog users add NAME --password-stdin [--mechanism SCRAM-SHA-256|SCRAM-SHA-512] [--iterations N]
    tierlog users remove NAME
    tierlog users list [--json]
    tierlog acls add    --principal User:x [--host H] --operation OP [--operation OP ...] [--deny]
                        (--topic T | --group G | --cluster | --transactional-id T)
                        [--resource-pattern-type literal|prefixed]
    tierlog acls remove [--principal P] [--host H] [--operation OP ...] [--allow | --deny] RESOURCE
                        [--resource-pattern-type literal|prefixed|any|match]
    tierlog acls list   [filters as remove, all optional] [--json]

Each command works on one target:

* ``--data-dir DIR``: offline, the local metadata store of a stopped broker without ``metadata.uri``
  (``DIR/cluster-metadata.json``), e.g. to create the first users before the broker ever starts. While a
  broker runs on DIR it holds that file: the command says so and exits 1.
* ``--metadata-uri URI``: offline, the metadata store of a cluster (``etcd://host:port/prefix``) or of a
  broker started with ``metadata.uri=file:///path``.
* ``--bootstrap-server URL`` (the default, ``$TIERLOG_BOOTSTRAP_SERVER`` or http://127.0.0.1:8082): online,
  through the broker's v3 API, with the client security options (``--ssl-cafile``, ``--username`` with the
  password in ``$TIERLOG_PASSWORD``, ...).

The password of ``users add`` is read from stdin (one trailing newline removed; on a terminal it is asked
twice without echo), never from the command line. ``users add`` on an existing user replaces its password:
the user keeps one credential, of ``--mechanism``.
Exit codes: 0 success, 1 an error (one line on stderr), 2 a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import itertools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from tierlog.client.cli.cluster import table
from tierlog.client.config import DEFAULT_BOOTSTRAP, bootstrap_urls
from tierlog.client.security import add_security_arguments, security_from_args
from tierlog.service.cluster.etcd_store import EtcdTls
from tierlog.service.security.acl import validate_binding, validate_filter
from tierlog.service.security.cli_targets import (
    BrokerTarget,
    OfflineTarget,
    Target,
    TargetError,
    UserInfo,
)
from tierlog.service.security.model import (
    CLUSTER_NAME,
    WILDCARD_HOST,
    AclBinding,
    AclFilter,
    Operation,
    ResourceType,
)
from tierlog.service.security.scram import DEFAULT_ITERATIONS, MAX_ITERATIONS, MECHANISMS, MIN_ITERATIONS
from tierlog.wire.errors import InvalidRequestError, TierlogError

__all__ = ["build_parser", "main"]

EXIT_OK, EXIT_ERROR, EXIT_USAGE = 0, 1, 2
_ADD_PATTERNS = ("literal", "prefixed")
_FILTER_PATTERNS = ("literal", "prefixed", "any", "match")
_OPERATIONS = [op.kafka_name for op in Operation if op is not Operation.ANY]
_ACL_COLUMNS = (
    "PRINCIPAL",
    "HOST",
    "OPERATION",
    "PERMISSION",
    "RESOURCE-TYPE",
    "RESOURCE-NAME",
    "PATTERN-TYPE",
)


class UsageError(Exception):
    """The command line is wrong; printed with exit code 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: error: {message}")


def _target_options(parser: _Parser) -> None:
    where = parser.add_argument_group("target (one of)")
    where.add_argument(
        "--bootstrap-server",
        default=argparse.SUPPRESS,
        metavar="URL",
        help=f"a running broker's base URL (default $TIERLOG_BOOTSTRAP_SERVER or {DEFAULT_BOOTSTRAP})",
    )
    where.add_argument(
        "--data-dir", metavar="DIR", help="offline: the metadata store in a stopped broker's data directory"
    )
    where.add_argument(
        "--metadata-uri", metavar="URI", help="offline: etcd://host:port/prefix or file:///path"
    )
    where.add_argument("--metadata-ssl-cafile", metavar="PEM", help="with an etcd:// URI: etcd's CA (TLS)")
    where.add_argument(
        "--metadata-ssl-certfile", metavar="PEM", help="with an etcd:// URI: client certificate"
    )
    where.add_argument("--metadata-ssl-keyfile", metavar="PEM", help="the key of --metadata-ssl-certfile")
    add_security_arguments(parser)


def _resource_options(parser: _Parser, *, required: bool, patterns: tuple[str, ...], default: str) -> None:
    resource = parser.add_mutually_exclusive_group(required=required)
    resource.add_argument("--topic", metavar="NAME", help="a topic (or * or, with prefixed, a prefix)")
    resource.add_argument("--group", metavar="NAME", help="a consumer group")
    resource.add_argument("--cluster", action="store_true", help="the cluster")
    resource.add_argument("--transactional-id", metavar="NAME", help="a transactional id")
    parser.add_argument(
        "--resource-pattern-type",
        choices=patterns,
        default=default,
        type=str.lower,
        help=f"how the resource name matches (default {default})",
    )


def _acl_options(parser: _Parser, *, adding: bool, resource_required: bool) -> None:
    parser.add_argument(
        "--principal",
        action="append",
        required=adding,
        metavar="TYPE:NAME",
        help="User:alice or User:* (repeatable)" + ("" if adding else "; default any"),
    )
    parser.add_argument(
        "--host",
        action="append",
        metavar="HOST",
        help="client address (repeatable); default " + ("* (any host)" if adding else "any"),
    )
    parser.add_argument(
        "--operation",
        action="append",
        required=adding,
        metavar="OP",
        help=f"repeatable: {', '.join(_OPERATIONS)}" + ("" if adding else "; default any"),
    )
    permission = parser.add_mutually_exclusive_group()
    permission.add_argument("--allow", dest="permission", action="store_const", const="ALLOW")
    permission.add_argument(
        "--deny", dest="permission", action="store_const", const="DENY", help="a Deny ACL (Deny wins)"
    )
    patterns = _ADD_PATTERNS if adding else _FILTER_PATTERNS
    _resource_options(parser, required=resource_required, patterns=patterns, default="literal")


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``tierlog [--bootstrap-server URL] users|acls ...``."""
    parser = _Parser(prog="tierlog", description="manage users and ACLs")
    parser.add_argument("--bootstrap-server", default=argparse.SUPPRESS, metavar="URL")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=_Parser)
    common = _Parser(add_help=False)
    _target_options(common)

    users = commands.add_parser("users", help="SCRAM users")
    actions = users.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)
    add = actions.add_parser(
        "add",
        parents=[common],
        help="add a user, or replace its password (its one credential, of --mechanism)",
        description="Add a user, or replace its password: the user keeps one SCRAM credential, of "
        "--mechanism; a credential of another mechanism (an older password) is dropped.",
    )
    add.add_argument("name")
    add.add_argument(
        "--password-stdin", action="store_true", required=True, help="read the password from stdin"
    )
    add.add_argument(
        "--mechanism",
        choices=MECHANISMS,
        default=MECHANISMS[0],
        type=str.upper,
        help=f"the SCRAM mechanism (default {MECHANISMS[0]}); replaces the user's other one",
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, {MIN_ITERATIONS}-{MAX_ITERATIONS} (default {DEFAULT_ITERATIONS})",
    )
    remove = actions.add_parser("remove", parents=[common], help="remove a user")
    remove.add_argument("name")
    listing = actions.add_parser("list", parents=[common], help="every user and its mechanisms")
    listing.add_argument("--json", action="store_true", help="print a JSON array")

    acls = commands.add_parser("acls", help="ACLs (Kafka's model)")
    actions = acls.add_subparsers(dest="action", metavar="ACTION", required=True, parser_class=_Parser)
    add = actions.add_parser("add", parents=[common], help="add ACLs")
    _acl_options(add, adding=True, resource_required=True)
    remove = actions.add_parser("remove", parents=[common], help="remove the ACLs a filter matches")
    _acl_options(remove, adding=False, resource_required=True)
    listing = actions.add_parser("list", parents=[common], help="list the ACLs a filter matches")
    _acl_options(listing, adding=False, resource_required=False)
    listing.set_defaults(resource_pattern_type=None)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    return parser


# ---- from options to ACLs ------------------------------------------------------------------------------


def _resource(args: argparse.Namespace) -> tuple[ResourceType | None, str | None]:
    if args.topic is not None:
        return ResourceType.TOPIC, args.topic
    if args.group is not None:
        return ResourceType.GROUP, args.group
    if args.transactional_id is not None:
        return ResourceType.TRANSACTIONAL_ID, args.transactional_id
    if args.cluster:
        return ResourceType.CLUSTER, CLUSTER_NAME
    return None, None


def bindings_of(args: argparse.Namespace) -> list[AclBinding]:
    """The ACLs ``acls add`` names: every principal x host x operation. Raises InvalidRequestError."""
    resource_type, name = _resource(args)
    if resource_type is None or name is None:
        raise InvalidRequestError("name a resource: --topic, --group, --cluster or --transactional-id")
    permission = args.permission or "ALLOW"
    return [
        validate_binding(
            resource_type, name, args.resource_pattern_type, principal, host, operation, permission
        )
        for principal, host, operation in itertools.product(
            args.principal, args.host or [WILDCARD_HOST], args.operation
        )
    ]


def filters_of(args: argparse.Namespace) -> list[AclFilter]:
    """The filters ``acls remove|list`` names (one per principal x host x operation; a missing option
    matches anything). Raises InvalidRequestError."""
    resource_type, name = _resource(args)
    pattern = args.resource_pattern_type
    if pattern is None:  # list: a named resource defaults to its literal ACLs; nothing named lists all
        pattern = "literal" if name is not None else "any"
    return [
        validate_filter(resource_type, name, pattern, principal, host, operation, args.permission)
        for principal, host, operation in itertools.product(
            args.principal or [None], args.host or [None], args.operation or [None]
        )
    ]


# ---- output ---------------------------------------------------------------------------------------------


def _print(text: str) -> None:
    sys.stdout.write(text + "\n")


def acl_row(b: AclBinding) -> list[str]:
    return [
        b.principal, b.host, b.operation.name, b.permission.name, b.resource_type.name, b.resource_name,
        b.pattern_type.name,
    ]  # fmt: skip


def acl_dict(b: AclBinding) -> dict[str, str]:
    return dict(zip(("principal", "host", "operation", "permission", "resource_type", "resource_name",
                     "pattern_type"), acl_row(b), strict=True))  # fmt: skip


def _print_acls(found: Sequence[AclBinding], *, as_json: bool) -> None:
    if as_json:
        _print(json.dumps([acl_dict(b) for b in found], sort_keys=True))
    elif found:
        _print(table([list(_ACL_COLUMNS), *(acl_row(b) for b in found)]))


def _print_users(users: Sequence[UserInfo], *, as_json: bool) -> None:
    if as_json:
        doc = [
            {"name": u.name, "mechanisms": [{"mechanism": m, "iterations": i} for m, i in u.mechanisms]}
            for u in users
        ]
        _print(json.dumps(doc, sort_keys=True))
    elif users:
        rows = [["NAME", "MECHANISMS"]]
        rows += [[u.name, ",".join(f"{m}({i})" for m, i in u.mechanisms)] for u in users]
        _print(table(rows))


# ---- running --------------------------------------------------------------------------------------------


def _read_password() -> str:
    """The password on stdin (one trailing newline removed); on a terminal, asked twice without echo.
    Blocking. Raises InvalidRequestError (empty, not UTF-8, the two entries differ)."""
    if sys.stdin.isatty():
        text = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != text:
            raise InvalidRequestError("the two passwords differ")
        if not text:
            raise InvalidRequestError("no password given")
        return text
    raw = sys.stdin.buffer.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidRequestError("the password on stdin is not UTF-8") from None
    if text.endswith("\n"):
        text = text[:-1].removesuffix("\r")
    if not text:
        raise InvalidRequestError("no password on stdin")
    return text


async def _run_users(args: argparse.Namespace, target: Target) -> int:
    if args.action == "list":
        _print_users(await target.list_users(), as_json=args.json)
        return EXIT_OK
    if args.action == "remove":
        await target.remove_user(args.name)
        _print(f"removed user {args.name}")
        return EXIT_OK
    password = await asyncio.to_thread(_read_password)
    created = await target.put_user(args.name, password, args.mechanism, args.iterations)
    what = "created user" if created else "replaced the password of user"
    _print(f"{what} {args.name} ({args.mechanism}, {args.iterations} iterations)")
    return EXIT_OK


async def _run_acls(args: argparse.Namespace, target: Target) -> int:
    if args.action == "add":
        bindings = bindings_of(args)
        await target.create_acls(bindings)
        _print(f"added {len(bindings)} ACL(s)")
        _print_acls(bindings, as_json=False)
        return EXIT_OK
    found: dict[AclBinding, None] = {}
    for f in filters_of(args):
        matched = await (target.delete_acls(f) if args.action == "remove" else target.list_acls(f))
        found.update(dict.fromkeys(matched))
    if args.action == "remove":
        _print(f"removed {len(found)} ACL(s)")
        _print_acls(list(found), as_json=False)
    else:
        _print_acls(list(found), as_json=args.json)
    return EXIT_OK


def _etcd_tls(args: argparse.Namespace) -> EtcdTls | None:
    """The etcd TLS options, or None without ``--metadata-ssl-cafile``. Raises ValueError (a certificate
    without its key, or the other way round; a certificate without a CA)."""
    cafile, certfile, keyfile = (
        args.metadata_ssl_cafile,
        args.metadata_ssl_certfile,
        args.metadata_ssl_keyfile,
    )
    if cafile is None:
        if certfile is not None or keyfile is not None:
            raise ValueError("--metadata-ssl-certfile and --metadata-ssl-keyfile need --metadata-ssl-cafile")
        return None
    return EtcdTls(Path(cafile), Path(certfile) if certfile else None, Path(keyfile) if keyfile else None)


def _open_target(args: argparse.Namespace) -> Target:
    """The target the options name. Raises UsageError (several targets, a bad URI)."""
    given = [name for name in ("data_dir", "metadata_uri", "bootstrap_server") if getattr(args, name, None)]
    if len(given) > 1:
        names = " and ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"tierlog {args.command}: error: {names} exclude each other: name one target")
    prog = f"tierlog {args.command}"
    try:
        if args.data_dir:
            return OfflineTarget.data_dir(args.data_dir, create=args.action == "add")
        if args.metadata_uri:
            return OfflineTarget.metadata_uri(args.metadata_uri, etcd_tls=_etcd_tls(args))
        server = getattr(args, "bootstrap_server", None) or os.environ.get(
            "TIERLOG_BOOTSTRAP_SERVER", DEFAULT_BOOTSTRAP
        )
        urls = bootstrap_urls(server)
        return BrokerTarget(urls, security_from_args(args).for_urls(urls))
    except (InvalidRequestError, ValueError) as err:
        raise UsageError(f"{prog}: error: {err}") from None


async def _run(args: argparse.Namespace, target: Target) -> int:
    try:
        await target.open()
        if args.command == "users":
            return await _run_users(args, target)
        return await _run_acls(args, target)
    finally:
        await target.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``users`` or ``acls``; answer the exit code (0, 1 or 2). Never raises for expected errors."""
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(raw)
        target = _open_target(args)
    except UsageError as err:
        sys.stderr.write(f"{err}\n")
        return EXIT_USAGE
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0)
    prog = f"tierlog {args.command}"
    try:
        return asyncio.run(_run(args, target))
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        return 130
    except TargetError as err:
        sys.stderr.write(f"{prog}: error: {err}\n")
        return EXIT_ERROR
    except TierlogError as err:
        sys.stderr.write(f"{prog}: error: {err.message} (error code {err.code})\n")
        return EXIT_ERROR
    except OSError as err:
        sys.stderr.write(f"{prog}: error: {err}\n")
        return EXIT_ERROR
