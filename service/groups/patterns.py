"""Topic-pattern subscriptions: compiling a client's pattern and resolving it over topic names.

A pattern matches a whole topic name (``re.fullmatch``, as Kafka's Java regex ``matches``) and never an
internal topic (a name starting with ``__``). With security on, the REST consumers and the native group
routes resolve a pattern only over the topics the principal may Read, and a resolution that matches nothing
is handed to the group as :data:`NO_TOPIC`, a pattern that matches no name.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from tierlog.wire.errors import InvalidRequestError

__all__ = ["NO_TOPIC", "compile_pattern", "matching_topics"]

NO_TOPIC = "(?!)"  # the group subscription of a resolved pattern that matches no topic the principal may Read


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """Raises InvalidRequestError (42201) for a malformed pattern."""
    try:
        return re.compile(pattern)
    except re.error as err:
        raise InvalidRequestError(f"invalid topic pattern {pattern!r}: {err}") from err


def matching_topics(
    pattern: re.Pattern[str], names: Iterable[str], may_read: Callable[[str], bool] | None = None
) -> list[str]:
    """The ``names`` that ``pattern`` matches whole, internal topics never, and that ``may_read`` allows
    (None: every one), sorted."""
    return sorted(
        name
        for name in names
        if pattern.fullmatch(name) and not name.startswith("__") and (may_read is None or may_read(name))
    )
