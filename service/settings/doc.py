"""The settings tables of ``docs/configuration.md``, generated from the rows of the settings table.

Each table under a settings heading of the doc is one tuple of :mod:`tierlog.service.settings.table`, row
for row; the prose around the tables is the doc's own. A test checks that the checked-in doc equals what
:func:`render_configuration` makes of it; after changing a row, run
``python -m tierlog.service.settings.doc docs/configuration.md`` to write the tables again.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tierlog.service.settings import table as t
from tierlog.service.settings.spec import SettingSpec

__all__ = ["SECTIONS", "markdown_table", "render_configuration"]

SECTIONS: dict[str, tuple[SettingSpec[Any], ...]] = {
    "### Process settings": t.PROCESS_TABLE,
    "### Cluster settings": t.CLUSTER_TABLE,
    "### Security settings": t.SECURITY_TABLE,
    "### Topic defaults": t.TOPIC_DEFAULTS_TABLE,
}


def markdown_table(rows: Sequence[SettingSpec[Any]]) -> list[str]:
    """The Markdown lines of the table of ``rows``: setting, flag, default and meaning; for topic defaults,
    setting, topic config and default. Pure."""
    if all(spec.topic_config is not None for spec in rows):
        lines = ["| Setting | Topic config | Default |", "| --- | --- | --- |"]
        return lines + [f"| `{s.name}` | `{s.topic_config}` | {s.default_doc} |" for s in rows]
    lines = ["| Setting | Flag | Default | Meaning |", "| --- | --- | --- | --- |"]
    return lines + [f"| `{s.name}` | `{s.flag}` | {s.default_doc} | {_cell(s.doc)} |" for s in rows]


def _cell(text: str) -> str:
    """``text`` in a Markdown table cell: a ``|`` escaped."""
    return text.replace("|", "\\|")


def render_configuration(text: str) -> str:
    """``text`` (the doc) with the first table after each heading of :data:`SECTIONS` replaced by the
    table its rows give. Pure.

    Raises:
        ValueError: a heading is missing, or no table follows it.
    """
    lines = text.splitlines()
    for heading, rows in SECTIONS.items():
        start = lines.index(heading)
        first = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("|")), None)
        if first is None:
            raise ValueError(f"no table after {heading!r}")
        end = first
        while end < len(lines) and lines[end].startswith("|"):
            end += 1
        lines[first:end] = markdown_table(rows)
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str]) -> int:
    """Write the generated tables into the doc named by ``argv[0]``. Returns the exit code."""
    if len(argv) != 1:
        sys.stderr.write("usage: python -m tierlog.service.settings.doc docs/configuration.md\n")
        return 2
    path = Path(argv[0])
    path.write_text(render_configuration(path.read_text(encoding="utf-8")), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
