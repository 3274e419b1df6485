"""The fenced code blocks of README.md and docs/, with the ``docs-test`` annotations that say how each runs.

Pure parsing, no I/O beyond reading a page: the runner (``tests/docs/runner.py``) executes what this module
classifies, and ``tests/docs/test_blocks.py`` checks every page's annotations without a broker.

An annotation is an HTML comment on lines of its own just before a fence (blank lines may sit between), so
readers never see it (docs/design/0015-docs-test-runner.md is the reference)::

    <!-- docs-test: skip — needs three machines -->
    <!-- docs-test: setup=broker -->        the block starts the page's broker: the runner starts its own
    <!-- docs-test: setup=none -->          the page runs without a broker
    <!-- docs-test: setup=own-broker -->    the page gets a broker of its own instead of the shared one
    <!-- docs-test: expect-output -->       the block is the output of the command block before it
    <!-- docs-test: background -->          the block runs until the page is done, then is stopped
    <!-- docs-test: needs=kcat -->          the block (and its output) is left out where kcat is missing
    <!-- docs-test: output-in-comments -->  the ``# ...`` lines right after a command are what it prints
    <!-- docs-test: page skip — <reason> -->  (anywhere on a page) the default for its unannotated blocks;
                                              ``page setup=<name>`` likewise

How a block is treated (:attr:`Block.kind`): ``sh``/``bash``/``shell``/``console`` and ``python`` blocks run
unless annotated; other blocks (JSON, diagrams, config files, synopses) are examples and do not run, but one
whose first line reads as a command (``tierlog ...``, ``curl ...``) must say which it is (a language, or an
annotation), so a command cannot hide from the runner in an untagged block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMMAND_LANGUAGES",
    "Annotation",
    "Block",
    "DocsAnnotationError",
    "ROOT",
    "comment_outputs",
    "doc_pages",
    "page_annotation",
    "page_blocks",
    "problems",
]

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGUAGES = frozenset({"sh", "bash", "shell", "console"})
COMMAND_LANGUAGES = SHELL_LANGUAGES | {"python", "py"}
SETUPS = frozenset({"broker", "own-broker", "none"})

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>```+|~~~+)(?P<info>.*)$")
_ANNOTATION = re.compile(r"<!--\s*docs-test:\s*(?P<body>.*?)\s*-->", re.DOTALL)
_SKIP = re.compile(r"^skip\b\s*[\u2014\u2013:-]*\s*(?P<reason>.*)$", re.DOTALL)
# The first line of an untagged block that is a command a reader would paste into a shell.
_LOOKS_LIKE_COMMAND = re.compile(
    r"^\s*(\$\s+)?((tierlog|curl|kcat|make|export|echo|pip|python3?)(\s(?!\S*:\s)|$)|\.venv/bin/\w+\s)"
)


class DocsAnnotationError(ValueError):
    """A ``docs-test`` comment that does not parse: an unknown word, or a skip without its reason."""


@dataclass(frozen=True)
class Annotation:
    """What a ``docs-test`` comment says about the block after it."""

    skip: str | None = None  # the reason, never empty
    setup: str | None = None  # one of SETUPS
    expect_output: bool = False
    background: bool = False
    needs: str | None = None  # a command the block needs that the suite may not have (kcat)
    output_in_comments: bool = False  # `# ...` lines right after a command are what it prints

    @classmethod
    def parse(cls, body: str) -> Annotation:
        """``body`` is the comment's text after ``docs-test:``. Raises DocsAnnotationError."""
        body = " ".join(body.split())
        skip = _SKIP.match(body)
        if skip is not None:
            reason = skip.group("reason").strip()
            if not reason:
                raise DocsAnnotationError(f"'docs-test: {body}': a skip must say why (skip — <reason>)")
            return cls(skip=reason)
        setup, expect_output, background, needs, in_comments = None, False, False, None, False
        for word in body.split():
            if word.startswith("setup="):
                setup = word.removeprefix("setup=")
                if setup not in SETUPS:
                    raise DocsAnnotationError(f"unknown setup {setup!r}; known: {', '.join(sorted(SETUPS))}")
            elif word == "expect-output":
                expect_output = True
            elif word == "background":
                background = True
            elif word == "output-in-comments":
                in_comments = True
            elif word.startswith("needs=") and len(word) > len("needs="):
                needs = word.removeprefix("needs=")
            else:
                raise DocsAnnotationError(
                    f"unknown docs-test word {word!r} "
                    "(skip — <reason>, setup=<name>, expect-output, output-in-comments, background, "
                    "needs=<command>)"
                )
        if setup is None and not (expect_output or background or in_comments) and needs is None:
            raise DocsAnnotationError("an empty docs-test annotation")
        return cls(
            setup=setup,
            expect_output=expect_output,
            background=background,
            needs=needs,
            output_in_comments=in_comments,
        )


@dataclass(frozen=True)
class Block:
    """One fenced block of a page: where it starts, its language, its text and its annotation."""

    page: str  # relative to the repository root
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    annotation: Annotation | None  # its own
    page_default: Annotation | None = None  # the page's ``page ...`` annotation

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def kind(self) -> str:
        """``run``, ``background``, ``setup``, ``skip``, ``output``, ``example`` or ``unmarked-command``."""
        a = self.annotation
        if a is None and self.page_default is not None and self.page_default.skip is not None:
            return "skip"
        if a is not None and a.skip is not None:
            return "skip"
        if a is not None and a.expect_output:
            return "output"
        if a is not None and a.setup is not None and self.language in COMMAND_LANGUAGES:
            return "setup"
        if self.language in COMMAND_LANGUAGES:
            return "background" if a is not None and a.background else "run"
        first = next((line for line in self.text.splitlines() if line.strip()), "")
        if a is None and _LOOKS_LIKE_COMMAND.match(first):
            return "unmarked-command"
        return "example"


def doc_pages(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def page_blocks(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of ``path`` in order. Raises DocsAnnotationError for a comment that does not parse
    (naming the page and line) and ValueError for a fence that is never closed."""
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    page = str(path.relative_to(root))
    try:
        default = page_annotation(text)
    except DocsAnnotationError as err:
        raise DocsAnnotationError(f"{page}: {err}") from None
    blocks: list[Block] = []
    pending: list[str] = []  # the lines since the last block or text paragraph, for the annotation
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if opening is None:
            starts_annotation = lines[i].lstrip().startswith("<!--") and "docs-test:" in lines[i]
            if lines[i].strip() and not starts_annotation and not pending_comment_open(pending):
                pending = []
            else:
                pending.append(lines[i])
            i += 1
            continue
        fence, indent = opening.group("fence"), len(opening.group("indent"))
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == fence), None)
        if end is None:
            raise ValueError(f"{page}:{i + 1}: a code fence that is never closed")
        body = "\n".join(line[indent:] if line[:indent].isspace() else line for line in lines[i + 1 : end])
        try:
            annotation = annotation_of("\n".join(pending))
        except DocsAnnotationError as err:
            raise DocsAnnotationError(f"{page}:{i + 1}: {err}") from None
        info = opening.group("info").strip().split()
        language = info[0].lower() if info else ""
        blocks.append(Block(page, i + 1, language, body + "\n", annotation, default))
        pending = []
        i = end + 1
    return blocks


def pending_comment_open(pending: list[str]) -> bool:
    """Whether the lines gathered so far hold a ``docs-test`` comment that has not closed yet."""
    text = "\n".join(pending)
    start = text.rfind("<!--")
    return start >= 0 and "docs-test:" in text[start:] and "-->" not in text[start:]


def annotation_of(preceding: str) -> Annotation | None:
    found = [m.group("body") for m in _ANNOTATION.finditer(preceding) if not is_page_wide(m.group("body"))]
    return Annotation.parse(found[-1]) if found else None


def is_page_wide(body: str) -> bool:
    return body.split(maxsplit=1)[:1] == ["page"]


def page_annotation(text: str) -> Annotation | None:
    """The page's ``<!-- docs-test: page ... -->`` annotation, if it has one."""
    found = [m.group("body") for m in _ANNOTATION.finditer(text) if is_page_wide(m.group("body"))]
    if len(found) > 1:
        raise DocsAnnotationError("more than one page-wide docs-test annotation")
    return Annotation.parse(found[0].split(maxsplit=1)[1]) if found else None


def problems(blocks: list[Block]) -> list[str]:
    """What a page's blocks get wrong: commands in unmarked blocks, outputs with no command before them."""
    found = []
    for index, block in enumerate(blocks):
        if block.kind == "unmarked-command":
            found.append(
                f"{block.where}: a command in a ```{block.language or '(no language)'} block: give it a "
                "language (```sh) so it runs, or a <!-- docs-test: skip — <reason> --> annotation"
            )
        if block.kind == "output" and (index == 0 or blocks[index - 1].kind != "run"):
            found.append(f"{block.where}: expect-output, but the block before it is not a command that runs")
    return found


def comment_outputs(script: str) -> list[tuple[str, str | None]]:
    """``script`` cut after each command that ``# ...`` lines follow at once: (commands, what the comments
    say they print, without the ``#``). Comments after a blank line, or first in the script, stay comments;
    so do the ``#`` lines after a command none follows directly (the last piece has None)."""
    pieces: list[tuple[str, str | None]] = []
    commands: list[str] = []
    output: list[str] = []
    after_command = False
    for line in script.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") and (after_command or output):
            output.append(stripped[1:])
            after_command = False
            continue
        if output:
            pieces.append(("\n".join(commands) + "\n", "\n".join(output) + "\n"))
            commands, output = [], []
        commands.append(line)
        after_command = bool(stripped) and not stripped.startswith("#")
    if output:
        pieces.append(("\n".join(commands) + "\n", "\n".join(output) + "\n"))
    elif any(line.strip() for line in commands):
        pieces.append(("\n".join(commands) + "\n", None))
    return pieces
