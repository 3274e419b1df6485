"""Kafka-style ``server.properties`` files: Java properties syntax, and Kafka's setting names mapped to ours.

Syntax (``java.util.Properties.load``): one ``key=value``, ``key: value`` or ``key value`` per logical line;
lines whose first non-blank character is ``#`` or ``!`` are comments; a line ending in an odd number of
backslashes continues on the next one (whose leading blanks are dropped); ``\\t``, ``\\n``, ``\\r``,
``\\f``, ``\\uXXXX`` and ``\\<any>`` (that character) are escapes in keys and values; the last of a repeated
key wins.

Names: most of our settings already carry Kafka's names (``num.partitions``, ``log.segment.bytes``,
``min.insync.replicas`` ...) and are taken as they are. :data:`KAFKA_ALIASES` maps the Kafka names that
differ: ``listeners``/``advertised.listeners`` (their ``PLAINTEXT://`` entry) to ``kafka.listener``/
``kafka.advertised.listener``, ``log.dirs``/``log.dir`` to ``data.dir``, ``node.id`` to ``broker.id`` and
the hour and minute forms of ``log.retention.*`` and ``log.roll.*`` to their milliseconds. When several
names give one setting, Kafka's precedence holds (``log.retention.ms`` over ``.minutes`` over ``.hours``,
``log.dirs`` over ``log.dir``, our own name over any alias). An unknown name is an error naming the
closest known one.

Pure: no I/O (the caller reads the file).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["KAFKA_ALIASES", "Alias", "PropertiesError", "looks_like_properties", "map_kafka_names", "parse"]


class PropertiesError(ValueError):
    """A properties file that cannot be read, or a name or value it gives that cannot be mapped."""


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}
_SEPARATORS = "=:"
_BLANKS = " \t\f"


def parse(text: str) -> dict[str, str]:
    """Parse properties ``text`` into key -> value, as ``java.util.Properties.load`` does.

    Raises:
        PropertiesError: a malformed ``\\uXXXX`` escape (naming the line).
    """
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line)
        try:
            result[_unescape(key)] = _unescape(value)
        except ValueError as err:
            raise PropertiesError(f"line {number}: {err}") from None
    return result


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """(number of the first physical line, logical line) for each line that is not blank or a comment."""
    pending: list[str] = []
    start = 0
    for number, physical in enumerate(text.splitlines(), start=1):
        stripped = physical.lstrip(_BLANKS)
        if not pending:
            if not stripped or stripped[0] in "#!":
                continue
            start = number
        trailing = len(stripped) - len(stripped.rstrip("\\"))
        if trailing % 2:
            pending.append(stripped[:-1])
            continue
        pending.append(stripped)
        yield start, "".join(pending)
        pending = []
    if pending:  # a continuation on the last line continues into nothing
        yield start, "".join(pending)


def _split(line: str) -> tuple[str, str]:
    """The raw (still escaped) key and value of one logical line."""
    index = 0
    while index < len(line):
        char = line[index]
        if char == "\\":
            index += 2
            continue
        if char in _SEPARATORS or char in _BLANKS:
            break
        index += 1
    key, rest = line[:index], line[index:].lstrip(_BLANKS)
    if rest[:1] and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(raw: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(raw):
        char = raw[index]
        index += 1
        if char != "\\" or index == len(raw):
            out.append(char if char != "\\" else "")
            continue
        escaped = raw[index]
        index += 1
        if escaped == "u":
            digits = raw[index : index + 4]
            if not re.fullmatch(r"[0-9A-Fa-f]{4}", digits):
                raise ValueError(f"malformed \\uXXXX escape: \\u{digits}")
            out.append(chr(int(digits, 16)))
            index += 4
        else:
            out.append(_ESCAPES.get(escaped, escaped))
    # Java escapes a character outside the BMP as a \uXXXX surrogate pair
    try:
        return "".join(out).encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:
        raise ValueError("a \\uXXXX escape is half of a surrogate pair") from None


_PROPERTY_LINE = re.compile(r"[A-Za-z0-9_.\-]+[ \t\f]*(?:[=:](?![ \t\f]*[=:])|(?<=[ \t\f])[^=:\s]|$)")


def looks_like_properties(text: str) -> bool:
    """Whether ``text`` reads as a properties file: every logical line a plain dotted name, then one
    separator and a value (used to recognise a ``server.properties`` under another file name)."""
    lines = list(_logical_lines(text))
    return bool(lines) and all(_PROPERTY_LINE.match(line) for _, line in lines)


@dataclass(frozen=True, slots=True)
class Alias:
    """A Kafka name that gives one of our settings: ``name`` is ours, ``convert`` turns Kafka's value into
    ours (raising ValueError), ``rank`` orders names that give the same setting (higher wins)."""

    name: str
    convert: Callable[[str], str]
    rank: int = 1


def _same(value: str) -> str:
    return value


def _plaintext_listener(value: str) -> str:
    """``host:port`` of the ``PLAINTEXT://`` entry in a Kafka listener list (an empty host: every
    interface)."""
    entries = [entry.strip() for entry in value.split(",") if entry.strip()]
    for entry in entries:
        protocol, sep, address = entry.partition("://")
        if sep and protocol.upper() == "PLAINTEXT":
            host, colon, port = address.rpartition(":")
            if not colon:
                raise ValueError(f"expected PLAINTEXT://HOST:PORT, got {entry!r}")
            return f"{host or '0.0.0.0'}:{port}"
    raise ValueError(
        "tierlog's Kafka listener speaks PLAINTEXT only and this list has no PLAINTEXT://HOST:PORT entry"
    )


def _one_dir(value: str) -> str:
    dirs = [part.strip() for part in value.split(",") if part.strip()]
    if len(dirs) != 1:
        raise ValueError("tierlog keeps its logs in one directory; give one path")
    return dirs[0]


def _times(factor: int) -> Callable[[str], str]:
    def convert(value: str) -> str:
        try:
            number = int(value.strip())
        except ValueError:
            raise ValueError("expected an integer") from None
        return str(number if number < 0 else number * factor)

    return convert


_HOUR_MS = 3_600_000
_MINUTE_MS = 60_000

KAFKA_ALIASES: Mapping[str, Alias] = {
    "listeners": Alias("kafka.listener", _plaintext_listener),
    "advertised.listeners": Alias("kafka.advertised.listener", _plaintext_listener),
    "log.dirs": Alias("data.dir", _one_dir, rank=2),
    "log.dir": Alias("data.dir", _one_dir),
    "node.id": Alias("broker.id", _same),
    "log.retention.minutes": Alias("log.retention.ms", _times(_MINUTE_MS), rank=2),
    "log.retention.hours": Alias("log.retention.ms", _times(_HOUR_MS)),
    "log.roll.hours": Alias("log.roll.ms", _times(_HOUR_MS)),
    "log.local.retention.minutes": Alias("log.local.retention.ms", _times(_MINUTE_MS), rank=2),
    "log.local.retention.hours": Alias("log.local.retention.ms", _times(_HOUR_MS)),
}
"""Kafka broker names that differ from ours, by Kafka name."""

_OWN_RANK = 10


def map_kafka_names(properties: Mapping[str, str], known: Iterable[str]) -> dict[str, tuple[str, str]]:
    """Map ``properties`` (Kafka or our names) to our setting names: name -> (value, the name it was
    given as). ``known`` are our setting names.

    Raises:
        PropertiesError: an unknown name (naming the closest known one), or a value an alias cannot
            convert (naming the Kafka name).
    """
    ours = set(known)
    chosen: dict[str, tuple[int, str, str]] = {}
    for key, value in properties.items():
        if key in ours:
            name, rank, converted = key, _OWN_RANK, value
        elif key in KAFKA_ALIASES:
            alias = KAFKA_ALIASES[key]
            try:
                name, rank, converted = alias.name, alias.rank, alias.convert(value)
            except ValueError as err:
                raise PropertiesError(f"invalid value {value!r} for {key}: {err}") from None
        else:
            raise PropertiesError(f"unknown setting {key!r}{_closest(key, ours | set(KAFKA_ALIASES))}")
        if name not in chosen or rank > chosen[name][0]:
            chosen[name] = (rank, converted, key)
    return {name: (value, given) for name, (_, value, given) in chosen.items()}


def _closest(key: str, names: Iterable[str]) -> str:
    matches = difflib.get_close_matches(key, sorted(names), n=1, cutoff=0.6)
    return f"; did you mean {matches[0]!r}?" if matches else ""
