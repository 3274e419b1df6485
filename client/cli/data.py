"""``tierlog produce TOPIC`` and ``tierlog consume TOPIC``: lines in, JSON lines out.

``produce`` reads lines (stdin or ``--file``) off the event loop in chunks, sends each line as one record
(split into key and value at the first ``--key-separator``), and shows a progress bar with rates on a
terminal for large inputs. ``consume`` prints one line per record: a JSON object of the ``--format``
fields, or, when the format names one field (``--format value``), that field's plain text, as Kafka's
console consumer prints values; ``--format json`` is every field. Keys, values and header values are UTF-8
text (``--encoding text``, invalid bytes replaced) or base64.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from tierlog.client.cli.health import EXIT_SKIPPED, FetchReporter, skipped_line
from tierlog.client.consumer import AsyncConsumer
from tierlog.client.producer import AsyncProducer
from tierlog.client.progress import Progress
from tierlog.client.types import ConsumerRecord, RecordMetadata, TopicPartition
from tierlog.wire.errors import NO_KAFKA_EQUIVALENT, InvalidRequestError

__all__ = ["FIELDS", "line_renderer", "parse_format", "render", "render_plain", "run_produce", "run_consume"]

FIELDS = ("topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "headers")
DEFAULT_FORMAT = "partition,offset,timestamp,key,value,headers"
_CHUNK = 1 << 20
_PROGRESS_MIN_BYTES = 1 << 20


class LineError(InvalidRequestError):
    """An input line cannot be turned into a record (no key separator)."""

    code = 40006
    kafka = NO_KAFKA_EQUIVALENT  # a command-line input error, never on the wire


def _split(line: bytes, separator: bytes | None, number: int) -> tuple[bytes | None, bytes]:
    if separator is None:
        return None, line
    key, sep, value = line.partition(separator)
    if not sep:
        raise LineError(f"line {number} has no key separator {separator.decode(errors='replace')!r}")
    return key, value


def _want_progress(mode: str, total: int | None) -> bool:
    if mode == "never":
        return False
    if mode == "always":
        return True
    return sys.stderr.isatty() and (total is None or total >= _PROGRESS_MIN_BYTES)


async def run_produce(args: argparse.Namespace) -> int:
    stream: IO[bytes] = await asyncio.to_thread(open, args.file, "rb") if args.file else sys.stdin.buffer
    try:
        total = os.fstat(stream.fileno()).st_size if args.file else None
        progress = Progress(sys.stderr, total) if _want_progress(args.progress, total) else None
        return await _produce(args, stream, progress)
    finally:
        if args.file:
            stream.close()


async def _produce(args: argparse.Namespace, stream: IO[bytes], progress: Progress | None) -> int:
    separator = args.key_separator.encode() if args.key_separator is not None else None
    failures: list[Exception] = []

    def delivered(_: RecordMetadata | None, error: Exception | None) -> None:
        if error is not None and not failures:
            failures.append(error)

    options: dict[str, Any] = {
        "acks": args.acks,
        "linger_ms": args.linger_ms,
        "batch_size": args.batch_size,
        "max_block_ms": args.max_block_ms,
        "delivery_timeout_ms": args.delivery_timeout_ms,
        "max_request_size": max(2**20, args.batch_size),
    }
    if args.compression:
        options["compression_type"] = args.compression
    if args.no_idempotence:
        options["enable_idempotence"] = False
    if args.no_create_topic:
        options["allow_auto_create_topics"] = False
    sent = 0
    options.update(args.security.options())
    async with AsyncProducer(args.bootstrap_server, **options) as producer:
        try:
            while not failures:
                lines = await asyncio.to_thread(stream.readlines, _CHUNK)
                if not lines:
                    break
                size = 0
                for raw in lines:
                    line = raw[:-1] if raw.endswith(b"\n") else raw
                    line = line[:-1] if line.endswith(b"\r") else line
                    key, value = _split(line, separator, sent + 1)
                    await producer.send(
                        args.topic, value, key=key, partition=args.partition, callback=delivered
                    )
                    sent += 1
                    size += len(raw)
                if progress is not None:
                    progress.update(len(lines), size)
            await producer.flush()
        finally:
            if progress is not None:
                progress.finish()
    if failures:
        raise failures[0]
    if not args.quiet:
        if args.topic in producer.auto_created_topics:
            sys.stderr.write(
                f"topic {args.topic} did not exist: created it with the broker's default partition count "
                "(--no-create-topic refuses instead)\n"
            )
        sys.stderr.write(f"produced {sent} record(s) to {args.topic}\n")
    return 0


def _text(data: bytes | None, encoding: str) -> str | None:
    if data is None:
        return None
    if encoding == "base64":
        return base64.b64encode(data).decode("ascii")
    return data.decode("utf-8", errors="replace")


def render(record: ConsumerRecord, fields: list[str], encoding: str) -> str:
    """One JSON line for ``record`` with ``fields`` (in that order). Pure."""
    out: dict[str, Any] = {}
    for name in fields:
        if name in ("key", "value"):
            out[name] = _text(getattr(record, name), encoding)
        elif name == "headers":
            out[name] = [[k, _text(v, encoding)] for k, v in record.headers]
        else:
            out[name] = getattr(record, name)
    return json.dumps(out, ensure_ascii=False, separators=(",", ":"))


def render_plain(record: ConsumerRecord, field: str, encoding: str) -> str:
    """One field of ``record`` as plain text: key and value as text (or base64), ``null`` for none (as
    Kafka's console consumer prints it), headers as a JSON array, numbers and the topic as they are. Pure."""
    if field in ("key", "value"):
        text = _text(getattr(record, field), encoding)
        return "null" if text is None else text
    if field == "headers":
        return json.dumps([[k, _text(v, encoding)] for k, v in record.headers], ensure_ascii=False)
    return str(getattr(record, field))


def line_renderer(fields: list[str], encoding: str) -> Callable[[ConsumerRecord], str]:
    """How ``consume`` prints a record with ``fields``: one field as plain text, several as JSON. Pure."""
    if len(fields) == 1:
        field = fields[0]
        return lambda record: render_plain(record, field, encoding)
    return lambda record: render(record, fields, encoding)


def parse_format(spec: str) -> list[str]:
    """The field list of ``--format``: comma-separated fields, or ``json`` for all of them. Raises
    InvalidRequestError for an unknown field."""
    if spec.strip() == "json":
        return list(FIELDS)
    fields = [f.strip() for f in spec.split(",") if f.strip()]
    unknown = [f for f in fields if f not in FIELDS]
    if unknown or not fields:
        raise InvalidRequestError(f"--format must be json or fields among {', '.join(FIELDS)}; got {spec!r}")
    return fields


async def run_consume(args: argparse.Namespace) -> int:
    fields = parse_format(args.format)
    options: dict[str, Any] = {
        "auto_offset_reset": "earliest" if args.from_beginning else "latest",
        "enable_auto_commit": False,
    }
    if args.group:
        options["group_id"] = args.group
    options.update(args.security.options())
    consumer = AsyncConsumer(bootstrap_servers=args.bootstrap_server, **options)
    try:
        await _assign(consumer, args)
        return await _consume_loop(consumer, args, fields)
    finally:
        await consumer.close(autocommit=False)


async def _assign(consumer: AsyncConsumer, args: argparse.Namespace) -> None:
    if args.group and args.partition is None:
        consumer.subscribe([args.topic])
        return
    partitions = (
        [args.partition]
        if args.partition is not None
        else sorted(await consumer.partitions_for_topic(args.topic))
    )
    tps = [TopicPartition(args.topic, p) for p in partitions]
    consumer.assign(tps)
    if args.offset is None:
        return
    for tp in tps:
        if args.offset == "earliest":
            consumer.seek_to_beginning(tp)
        elif args.offset == "latest":
            consumer.seek_to_end(tp)
        else:
            consumer.seek(tp, int(args.offset))


async def _consume_loop(consumer: AsyncConsumer, args: argparse.Namespace, fields: list[str]) -> int:
    loop = asyncio.get_running_loop()
    printed = 0
    line = line_renderer(fields, args.encoding)
    reporter = FetchReporter(sys.stderr, "tierlog consume", loop.time)
    idle_deadline = loop.time() + args.timeout_ms / 1000 if args.timeout_ms is not None else None
    while args.max_messages is None or printed < args.max_messages:
        # at most a second per poll, so that lost brokers and leaderless partitions are reported promptly
        wait = 1.0 if idle_deadline is None else min(1.0, max(0.0, idle_deadline - loop.time()))
        limit = None if args.max_messages is None else args.max_messages - printed
        records = await consumer.poll(timeout=wait, max_records=limit)
        reporter.check(consumer.fetch_problems())
        if records:
            text = "".join(line(r) + "\n" for r in records)
            sys.stdout.write(text)
            sys.stdout.flush()
            printed += len(records)
            if args.group:
                await consumer.commit()
            if idle_deadline is not None:
                idle_deadline = loop.time() + args.timeout_ms / 1000
        elif idle_deadline is not None and loop.time() >= idle_deadline:
            break
    if not args.quiet:
        sys.stderr.write(f"consumed {printed} record(s)\n")
    skipped = consumer.fetch_problems()
    if skipped:
        sys.stderr.write(skipped_line("tierlog consume", skipped))
        return EXIT_SKIPPED
    return 0


def check_consume_args(args: argparse.Namespace) -> None:
    """Usage rules argparse cannot express. Raises ValueError with the message to print."""
    if args.offset is not None:
        if args.partition is None:
            raise ValueError("--offset needs --partition")
        if args.from_beginning:
            raise ValueError("--offset and --from-beginning exclude each other")
        if args.offset not in ("earliest", "latest") and not args.offset.isdigit():
            raise ValueError("--offset must be a non-negative number, earliest or latest")
    if args.max_messages is not None and args.max_messages <= 0:
        raise ValueError("--max-messages must be positive")
