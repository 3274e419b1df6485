"""The docs test runner's parts that need no broker: reading blocks and annotations, checking every page's
annotations, comparing output, and running shell blocks (state carried, failures raised)."""

from __future__ import annotations

import os
import select
from pathlib import Path

import pytest

from tests.docs.blocks import (
    ROOT,
    Annotation,
    Block,
    DocsAnnotationError,
    comment_outputs,
    doc_pages,
    page_blocks,
    problems,
)
from tests.docs.runner import DocCommandFailed, matches, page_run, run_page


def blocks_of(tmp_path: Path, text: str) -> list[Block]:
    page = tmp_path / "page.md"
    page.write_text(text, encoding="utf-8")
    return page_blocks(page, root=tmp_path)


def test_every_page_parses_and_every_command_is_run_or_annotated() -> None:
    found = [problem for page in doc_pages() for problem in problems(page_blocks(page))]
    assert found == []


def test_the_pages_that_must_run_have_command_blocks_that_run() -> None:
    for page in ("README.md", "docs/user-guide.md", "docs/client.md"):
        assert any(block.kind == "run" for block in page_blocks(ROOT / page)), page


@pytest.mark.parametrize("body", ["skip", "skip —", "skip:  ", "sikp — typo", "setup=moon", "expect"])
def test_a_bad_annotation_is_refused(body: str) -> None:
    with pytest.raises(DocsAnnotationError):
        Annotation.parse(body)


def test_annotations_read() -> None:
    assert Annotation.parse("skip — needs three machines").skip == "needs three machines"
    assert Annotation.parse("setup=none background") == Annotation(setup="none", background=True)
    assert Annotation.parse("expect-output").expect_output


def test_blocks_and_their_kinds(tmp_path: Path) -> None:
    text = (
        "# Page\n<!-- docs-test: page setup=none -->\n\n```sh\necho hi\n```\n\n"
        "<!-- docs-test: expect-output -->\n```text\nhi\n```\n\n"
        "<!-- docs-test: skip — needs\n  three machines -->\n\n```python\nimport x\n```\n\n"
        "Some text after a comment <!-- docs-test: skip — lost -->\n\n```json\n{}\n```\n\n"
        "```\ntierlog topics list\n```\n\n```\ntierlog serve: error: bad value\n```\n\n"
        "  ```bash\n  tierlog --version\n  ```\n"
    )
    blocks = blocks_of(tmp_path, text)
    assert [(b.line, b.language, b.kind) for b in blocks] == [
        (4, "sh", "run"),
        (9, "text", "output"),
        (16, "python", "skip"),
        (22, "json", "example"),
        (26, "", "unmarked-command"),
        (30, "", "example"),
        (34, "bash", "run"),
    ]
    assert blocks[2].annotation == Annotation(skip="needs three machines")
    assert blocks[6].text == "tierlog --version\n"
    assert blocks[0].page_default == Annotation(setup="none")
    assert [p.split(":")[1] for p in problems(blocks)] == ["26"]


def test_an_output_needs_a_command_before_it(tmp_path: Path) -> None:
    blocks = blocks_of(tmp_path, "<!-- docs-test: expect-output -->\n```text\nhi\n```\n")
    assert "expect-output" in problems(blocks)[0]


def test_an_unclosed_fence_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="never closed"):
        blocks_of(tmp_path, "```sh\necho\n")


def test_outputs_compare_normalised() -> None:
    assert matches("stored at page-views-0@1\n", "stored   at page-views-0@1")
    assert matches('{"id": "...", "n": 1}', '{"id":"x-y-z","n":1}\n')
    assert matches(
        "run 1a2b3c4d-0000-4000-8000-000000000001 at 1700000000000",
        "run 9f8e7d6c-1111-4111-8111-111111111111 at 1764370000000",
    )
    assert not matches("acknowledged 2", "acknowledged 3")
    assert not matches("0 b'k1'", "0 b'k1' and more")


def test_shell_blocks_share_variables_and_a_failure_fails(tmp_path: Path) -> None:
    blocks = blocks_of(
        tmp_path,
        '```sh\nCID=$(echo abc)\nexport WHO=docs\n```\n\n```sh\necho "$CID $WHO"\n```\n\n'
        "<!-- docs-test: expect-output -->\n```text\nabc docs\n```\n",
    )
    with page_run(tmp_path / "work", None) as run:
        assert run_page(blocks, run) == ["page.md:1", "page.md:6", "page.md:11"]
    failing = blocks_of(tmp_path, "```sh\ntrue\nfalse\necho never\n```\n")
    with page_run(tmp_path / "work2", None) as run, pytest.raises(DocCommandFailed, match="exit status 1"):
        run_page(failing, run)


def test_a_wrong_output_fails(tmp_path: Path) -> None:
    blocks = blocks_of(tmp_path, "```sh\necho 41\n```\n<!-- docs-test: expect-output -->\n```text\n42\n```\n")
    with page_run(tmp_path / "work", None) as run, pytest.raises(DocCommandFailed, match="something else"):
        run_page(blocks, run)


def test_console_blocks_run_their_prompt_lines(tmp_path: Path) -> None:
    blocks = blocks_of(tmp_path, "```console\n$ echo one\none\n$ echo two\ntwo\n```\n")
    with page_run(tmp_path / "work", None) as run:
        run_page(blocks, run)
        assert run.last_output == "one\ntwo\n"


def test_a_block_needing_a_missing_command_is_left_out_with_its_output(tmp_path: Path) -> None:
    blocks = blocks_of(
        tmp_path,
        "<!-- docs-test: needs=no-such-tool-here -->\n```sh\nno-such-tool-here -L\n```\n\n"
        "<!-- docs-test: expect-output -->\n```text\nlisting\n```\n\n```sh\necho after\n```\n",
    )
    with page_run(tmp_path / "work", None) as run:
        assert run_page(blocks, run) == ["page.md:11"]
        assert run.left_out == ["page.md:2 (needs no-such-tool-here)", "page.md:7"]


def test_background_blocks_are_stopped_when_the_page_is_done(tmp_path: Path) -> None:
    blocks = blocks_of(tmp_path, "<!-- docs-test: background -->\n```sh\nexec sleep 300\n```\n")
    with page_run(tmp_path / "work", None) as run:
        run_page(blocks, run)
        (process,) = run.background
        assert process.poll() is None
    assert process.returncode is not None and run.background == []


def test_comments_right_after_a_command_are_its_output() -> None:
    script = "# list\necho a \\\n  b\n# a b\n#  c\n\n# a note\necho d\necho e\n# e\ntrue\n"
    assert comment_outputs(script) == [
        ("# list\necho a \\\n  b\n", " a b\n  c\n"),
        ("\n# a note\necho d\necho e\n", " e\n"),
        ("true\n", None),
    ]


def test_output_in_comments_is_compared_command_by_command(tmp_path: Path) -> None:
    good = "<!-- docs-test: output-in-comments -->\n```sh\nX=1\necho $X\n# 1\necho 2\n# 2\n```\n"
    with page_run(tmp_path / "good", None) as run:
        run_page(blocks_of(tmp_path, good), run)
    bad = good.replace("# 2", "# 3")
    with page_run(tmp_path / "bad", None) as run, pytest.raises(DocCommandFailed, match="something else"):
        run_page(blocks_of(tmp_path, bad), run)


def test_what_a_block_leaves_running_is_stopped(tmp_path: Path) -> None:
    blocks = blocks_of(tmp_path, "```sh\nsleep 300 >/dev/null 2>&1 &\necho $! > pid\n```\n")
    with page_run(tmp_path / "work", None) as run:
        run_page(blocks, run)
        pid = int((tmp_path / "work" / "pid").read_text())
    try:
        exited = os.pidfd_open(pid)  # readable once the process has ended
    except ProcessLookupError:
        return  # gone and reaped already
    try:
        readable, _, _ = select.select([exited], [], [], 30)  # a deadline, not a timing assertion
        assert readable == [exited], f"the block's background sleep {pid} is still running"
    finally:
        os.close(exited)
