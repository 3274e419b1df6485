"""What ``tierlog consume`` tells stderr while partitions cannot be read: lost brokers, leaderless partitions.

The consumer retries such partitions on its own (:meth:`AsyncConsumer.fetch_problems` names them); this
module turns them into a few lines a person can act on:

* ``broker URL unreachable: ERROR; retrying (partitions t-0, t-1)`` once a broker's partitions have failed
  for :data:`REPORT_AFTER_S` (shorter blips, as during a leader move, stay quiet), again every
  :data:`REPEAT_EVERY_S` while it lasts, and ``reconnected to broker URL`` when they are read again;
* ``partitions t-3, t-4 have no leader; retrying``, and ``partitions t-3, t-4 are readable again``;
* at exit, :func:`skipped_line` names the partitions that were not being read (the exit status is then
  :data:`EXIT_SKIPPED`).

Runs on the consumer's loop; not thread-safe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import IO

from tierlog.client.fetcher import FetchProblem
from tierlog.client.types import TopicPartition
from tierlog.wire.errors import LeaderNotAvailableError

__all__ = ["EXIT_SKIPPED", "REPEAT_EVERY_S", "REPORT_AFTER_S", "FetchReporter", "skipped_line"]

# The exit status of a consume that ended while some partitions could not be read.
EXIT_SKIPPED = 3
# A partition failing this long is reported; its broker is named again this often while it lasts.
REPORT_AFTER_S = 2.0
REPEAT_EVERY_S = 30.0
_UNKNOWN_BROKER = "(no broker known)"


def _names(tps: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))


def _leaderless(problem: FetchProblem) -> bool:
    return isinstance(problem.error, LeaderNotAvailableError)


def _reason(problem: FetchProblem) -> str:
    if _leaderless(problem):
        return "no leader"
    return f"broker {problem.url or _UNKNOWN_BROKER} unreachable"


def skipped_line(prog: str, problems: Mapping[TopicPartition, FetchProblem]) -> str:
    """The line naming the partitions not read at exit, each with why. Pure."""
    parts = ", ".join(f"{tp.topic}-{tp.partition} ({_reason(problems[tp])})" for tp in sorted(problems))
    return f"{prog}: skipped {len(problems)} partition(s) that could not be read: {parts}\n"


class FetchReporter:
    """Writes the lines above to ``out``; call :meth:`check` with the consumer's problems at least every
    second or so. ``clock`` is the clock the problems' ``since`` comes from (the loop's)."""

    def __init__(self, out: IO[str], prog: str, clock: Callable[[], float]) -> None:
        self._out = out
        self._prog = prog
        self._clock = clock
        self._brokers: dict[str, float] = {}  # broker reported as unreachable -> when it was last named
        self._leaderless: set[TopicPartition] = set()  # partitions reported as having no leader

    def check(self, problems: Mapping[TopicPartition, FetchProblem]) -> None:
        """Report new and lasting problems and the ones that ended. Idempotent for unchanged problems
        within :data:`REPEAT_EVERY_S`."""
        now = self._clock()
        ripe = {tp: p for tp, p in problems.items() if now - p.since >= REPORT_AFTER_S}
        leaderless = {tp for tp, p in ripe.items() if _leaderless(p)}
        by_broker: dict[str, list[TopicPartition]] = {}
        for tp, problem in ripe.items():
            if not _leaderless(problem):
                by_broker.setdefault(problem.url or _UNKNOWN_BROKER, []).append(tp)
        lines = []
        for url in sorted(set(self._brokers) - set(by_broker)):
            if not any((p.url or _UNKNOWN_BROKER) == url for p in problems.values()):
                del self._brokers[url]
                lines.append(f"{self._prog}: reconnected to broker {url}\n")
        for url, tps in sorted(by_broker.items()):
            named = self._brokers.get(url)
            if named is not None and now - named < REPEAT_EVERY_S:
                continue
            self._brokers[url] = now
            error = ripe[tps[0]].error
            lasting = f" for {now - min(ripe[tp].since for tp in tps):.0f} s" if named is not None else ""
            lines.append(
                f"{self._prog}: broker {url} unreachable{lasting}: {error.message}; "
                f"retrying (partitions {_names(tps)})\n"
            )
        back = {tp for tp in self._leaderless - leaderless if tp not in problems}
        if back:
            lines.append(f"{self._prog}: partitions {_names(back)} are readable again\n")
        self._leaderless -= back
        new = leaderless - self._leaderless
        if new:
            lines.append(f"{self._prog}: partitions {_names(new)} have no leader; retrying\n")
            self._leaderless |= new
        if lines:
            self._out.write("".join(lines))
            self._out.flush()
