"""Walking one JSON document value by value, with the stdlib decoder's semantics and bounded memory.

``json.loads`` of a large body is one C call: it holds the GIL from start to end (the event loop stalls
even when it runs in a worker thread) and builds every value before the caller can look at one. A
:class:`JsonCursor` walks the outer containers itself and decodes one member or element at a time with
``JSONDecoder.raw_decode``, so the caller converts each value and drops it, and the GIL is given up between
values. It accepts exactly what ``json.loads(body, parse_constant=...)`` accepts: the same decoding of
bytes (UTF-8/16/32, BOM), the same whitespace, the same errors (``json.JSONDecodeError`` with the same
messages and positions for the structure walked here), duplicate keys seen in order (the last wins when the
caller keeps the last).

Pure; a cursor is not thread-safe (use one per document).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["JsonCursor", "Skipped", "decode_text", "dump_json", "load_json", "reject_constant"]

_WS = re.compile(r"[ \t\n\r]*")
_WS_CHARS = " \t\n\r"
# the decoder's own string scanner (C), as its object parser uses it for keys
_scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]


class Skipped:
    """An array element :meth:`JsonCursor.objects` skipped (not an object): its Python type's name."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name


def decode_text(body: bytes) -> str:
    """The text of ``body`` as ``json.loads`` decodes bytes. Raises UnicodeDecodeError (a ValueError)."""
    return body.decode(json.detect_encoding(body), "surrogatepass")


class JsonCursor:
    """A position in one JSON text; every method leaves it on the next non-whitespace character.

    Raises ``json.JSONDecodeError`` (a ValueError) where the text is not JSON, and whatever
    ``parse_constant`` raises for NaN and the infinities.
    """

    def __init__(self, text: str, parse_constant: Callable[[str], Any]) -> None:
        self.text = text
        self._decoder = json.JSONDecoder(parse_constant=parse_constant)
        self.pos = _WS.match(text, 0).end()  # type: ignore[union-attr]

    def peek(self) -> str:
        """The character at the cursor ('' at the end)."""
        return self.text[self.pos : self.pos + 1]

    def _skip_ws(self, pos: int) -> None:
        self.pos = _WS.match(self.text, pos).end()  # type: ignore[union-attr]

    def value(self) -> Any:
        """Decode the value at the cursor and move past it."""
        found, end = self._decoder.raw_decode(self.text, self.pos)
        self._skip_ws(end)
        return found

    def skip(self) -> str:
        """Move past the value at the cursor, building at most one scalar at a time (containers are walked),
        and answer its Python type's name. Raises RecursionError for containers nested too deeply."""
        char = self.peek()
        if char == "{":
            for _ in self.members():
                self.skip()
            return "dict"
        if char == "[":
            for _ in self.items():
                self.skip()
            return "list"
        return type(self.value()).__name__

    def members(self) -> Iterator[str]:
        """The keys of the object at the cursor, in order; at each, the cursor is on the member's value,
        which the caller must consume (:meth:`value`, :meth:`skip`, :meth:`items`) before asking for the
        next key."""
        text = self.text
        if self.peek() != "{":
            raise json.JSONDecodeError("Expecting value", text, self.pos)
        self._skip_ws(self.pos + 1)
        if self.peek() == "}":
            self._skip_ws(self.pos + 1)
            return
        while True:
            if self.peek() != '"':
                raise json.JSONDecodeError(
                    "Expecting property name enclosed in double quotes", text, self.pos
                )
            key, end = _scanstring(text, self.pos + 1)
            self._skip_ws(end)
            if self.peek() != ":":
                raise json.JSONDecodeError("Expecting ':' delimiter", text, self.pos)
            self._skip_ws(self.pos + 1)
            yield key
            char = self.peek()
            if char != "}" and char != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, self.pos)
            self._skip_ws(self.pos + 1)
            if char == "}":
                return

    def items(self) -> Iterator[int]:
        """The indexes of the elements of the array at the cursor; at each, the cursor is on the element,
        which the caller must consume before asking for the next."""
        text = self.text
        if self.peek() != "[":
            raise json.JSONDecodeError("Expecting value", text, self.pos)
        self._skip_ws(self.pos + 1)
        if self.peek() == "]":
            self._skip_ws(self.pos + 1)
            return
        index = 0
        while True:
            yield index
            index += 1
            char = self.peek()
            if char == "]":
                self._skip_ws(self.pos + 1)
                return
            if char != ",":
                raise json.JSONDecodeError("Expecting ',' delimiter", text, self.pos)
            self._skip_ws(self.pos + 1)

    def objects(self) -> Iterator[Any]:
        """The elements of the array at the cursor, in order: each object decoded (a dict), anything else
        skipped and given as :class:`Skipped`. The cursor moves by itself (the caller consumes nothing);
        this is :meth:`items` with :meth:`value` or :meth:`skip` made one tight loop, for large arrays."""
        text = self.text
        ws = _WS.match
        decode = self._decoder.raw_decode
        if not text.startswith("[", self.pos):
            raise json.JSONDecodeError("Expecting value", text, self.pos)
        pos = ws(text, self.pos + 1).end()  # type: ignore[union-attr]
        if text.startswith("]", pos):
            self._skip_ws(pos + 1)
            return
        while True:
            if text.startswith("{", pos):
                found, pos = decode(text, pos)
                yield found
            else:
                self.pos = pos
                yield Skipped(self.skip())
                pos = self.pos
            char = text[pos : pos + 1]
            if char and char in _WS_CHARS:
                pos = ws(text, pos).end()  # type: ignore[union-attr]
                char = text[pos : pos + 1]
            if char == ",":
                pos += 1
                if text[pos : pos + 1] in _WS_CHARS:  # '' (the end) too: then the next decode reports it
                    pos = ws(text, pos).end()  # type: ignore[union-attr]
            elif char == "]":
                self._skip_ws(pos + 1)
                return
            else:
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)

    def end(self) -> None:
        """Check that nothing follows the document. Raises JSONDecodeError ("Extra data")."""
        if self.pos != len(self.text):
            raise json.JSONDecodeError("Extra data", self.text, self.pos)


def reject_constant(name: str) -> Any:
    """The ``parse_constant`` of every JSON parse here: NaN and the infinities are not JSON. Raises
    ValueError, always."""
    raise ValueError(f"{name} is not valid JSON")


_DECODER = json.JSONDecoder(parse_constant=reject_constant)


def load_json(data: bytes | str) -> Any:
    """``json.loads`` refusing NaN and the infinities, with one decoder made once (``json.loads`` with an
    argument builds a decoder per call: a third of the time of checking a small value). Raises
    ValueError (JSONDecodeError included)."""
    if isinstance(data, bytes):
        data = decode_text(data)
    elif data.startswith("\ufeff"):  # as json.loads
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", data, 0)
    return _DECODER.decode(data)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def dump_json(value: Any) -> bytes:
    """Compact UTF-8 JSON for a response or a stored value. Pure.

    Raises ValueError for NaN or an infinity, TypeError for a value JSON cannot hold."""
    return _ENCODER.encode(value).encode()
