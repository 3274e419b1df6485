"""Kafka's topic name rule, the one check every entry point uses (v3 create, REST v2, native, auto-create,
restore, the remote layout and Spark). Pure.
"""

from __future__ import annotations

import re

__all__ = ["MAX_TOPIC_NAME", "TOPIC_NAME_PATTERN", "topic_name_problem"]

MAX_TOPIC_NAME = 249
# Kafka's legal topic name characters; use with fullmatch (see topic_name_problem).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# The same rule as one ECMA/JSON-Schema pattern, for the OpenAPI document: 1-249 legal characters, but
# not "." or ".." (a name starting with "." needs a second character that is not ".", or a third one).
TOPIC_NAME_PATTERN = (
    r"^([a-zA-Z0-9_-][a-zA-Z0-9._-]{0,248}|\.[a-zA-Z0-9_-][a-zA-Z0-9._-]{0,247}|\.\.[a-zA-Z0-9._-]{1,247})$"
)


def topic_name_problem(name: object) -> str | None:
    """Why ``name`` is not a legal Kafka topic name, or ``None`` when it is. Pure.

    The rule (Kafka's ``Topic.validate``): 1 to 249 characters, each an ASCII letter, digit, ``.``, ``_``
    or ``-``, and not ``.`` or ``..``. The character check is a full match (``\\Z``, not ``$``, which would
    let a trailing newline through). Every entry point (v3 create, v2 and native paths, auto-create,
    restore) uses this one rule.
    """
    if not isinstance(name, str) or not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if _TOPIC_NAME.fullmatch(name) is None:
        return (
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None
