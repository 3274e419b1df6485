"""The error table as Markdown: what ``docs/errors.md`` holds, rendered from the classes themselves.

One row per registered code (:func:`tierlog.wire.errors.registered_errors`), sorted by code: our code, the
HTTP status it answers with, its kind, whether it is retriable, its Kafka error code and name, the class
and the first sentence of its docstring. The client's own classes register when :mod:`tierlog.client` is
imported, so the caller decides which classes the table holds; ``infra/error_docs.py`` imports them all and
prints the file (``python infra/error_docs.py > docs/errors.md``), and a test fails when the checked-in copy
differs.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tierlog.wire.errors import TierlogError, http_status

__all__ = ["REGENERATE", "render_markdown", "meaning"]

REGENERATE = "python infra/error_docs.py > docs/errors.md"

_HEADER = f"""# Error codes

<!-- Generated from the error classes by `{REGENERATE}`; do not edit by hand. -->

Every error a tierlog broker answers carries a stable numeric `error_code` in its JSON body
(`{{"error_code": 40401, "message": "..."}}`), and the client turns it back into the same class
(`tierlog.wire.errors.error_for_code`). Match on the class, its kind or the code, never on the message.

- **code**: our code. Confluent's REST Proxy codes where one exists; the first three digits of a five-digit
  code are its HTTP status.
- **HTTP**: the status of the answer.
- **kind**: the public kind the error rolls up into (`InvalidRequestError`, `NotFoundError`,
  `ConflictError`, `UnavailableError`, `CorruptRecordError`, `UnauthorizedError`, `ThrottledError`,
  `InternalError`).
- **retriable**: whether clients retry it (with capped, jittered backoff).
- **Kafka**: the code and name of Kafka's `Errors` enum the error maps to on a Kafka-protocol listener.
  *(nearest)* marks a class Kafka has no exact equivalent of; `-1 UNKNOWN_SERVER_ERROR` *(nearest)* means
  nothing comes close (the client-only errors never travel). An `AuthorizationError` answers the code of the
  refused resource: 29 `TOPIC_AUTHORIZATION_FAILED`, 30 `GROUP_AUTHORIZATION_FAILED`,
  31 `CLUSTER_AUTHORIZATION_FAILED` or 53 `TRANSACTIONAL_ID_AUTHORIZATION_FAILED`.
- **class**: the Python class (in `tierlog.wire.errors` unless a module is named); client-only classes
  are importable from `tierlog.client`.

| code | HTTP | kind | retriable | Kafka code | Kafka name | class | meaning |
|---:|---:|---|---|---:|---|---|---|
"""

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`])")


def meaning(cls: type[TierlogError]) -> str:
    """The first sentence of the class's own docstring, on one line (empty without one). Pure."""
    doc = cls.__dict__.get("__doc__") or ""
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(paragraph, 1)[0].replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _class_name(cls: type[TierlogError]) -> str:
    if cls.__module__ == TierlogError.__module__:
        return f"`{cls.__qualname__}`"
    return f"`{cls.__qualname__}` ({cls.__module__})"


def render_markdown(classes: Iterable[type[TierlogError]]) -> str:
    """The Markdown of ``docs/errors.md`` for ``classes`` (each row keyed by the class's ``code``; a class
    listed twice is one row). Pure and idempotent."""
    rows = []
    for cls in sorted(set(classes), key=lambda c: c.code):
        kafka = cls.kafka
        name = f"`{kafka.name}`" + ("" if kafka.exact else " *(nearest)*")
        cells = [
            str(cls.code),
            str(http_status(cls.code)),
            cls.kind,
            "yes" if cls.retriable else "no",
            str(kafka.code),
            name,
            _class_name(cls),
            _cell(meaning(cls)),
        ]
        rows.append("| " + " | ".join(cells) + " |\n")
    return _HEADER + "".join(rows)
