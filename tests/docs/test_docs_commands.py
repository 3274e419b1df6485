"""Every command block of README.md and docs/ runs, in page order, against a real ``tierlog serve`` process.

One test per page that has something to run. Pages share one broker (module-scoped) unless a page asks for
one of its own (``<!-- docs-test: setup=own-broker -->``) or none (``setup=none``); the blocks' annotations
and how blocks run: docs/design/0015-docs-test-runner.md. A command that fails, or prints something else
than its page's ``expect-output`` block, fails the page's test with the page, the line and its output.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, Block, doc_pages, page_blocks
from tests.docs.runner import ServedBroker, page_run, run_page

pytestmark = pytest.mark.integration

RUNS = ("run", "background", "output")


def page_setup(blocks: list[Block]) -> str:
    """The setup a page asks for (the first ``setup=`` on it), ``broker`` (the shared one) by default."""
    annotations = [b.page_default for b in blocks[:1]] + [b.annotation for b in blocks]
    return next((a.setup for a in annotations if a is not None and a.setup is not None), "broker")


def runnable_pages() -> list[str]:
    pages = []
    for path in doc_pages():
        if any(block.kind in RUNS for block in page_blocks(path)):
            pages.append(str(path.relative_to(ROOT)))
    return pages


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedBroker]:
    broker = ServedBroker.start(tmp_path_factory.mktemp("docs-shared-broker"))
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def page_broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ServedBroker | None]:
    setup = page_setup(page_blocks(ROOT / request.node.callspec.params["page"]))
    if setup == "none":
        yield None
    elif setup == "broker":
        yield request.getfixturevalue("shared_broker")
    else:
        broker = ServedBroker.start(tmp_path / "own-broker")
        try:
            yield broker
        finally:
            broker.stop()


def test_the_runner_finds_the_pages_it_should() -> None:
    pages = runnable_pages()
    for page in ("README.md", "docs/user-guide.md", "docs/client.md", "docs/kafka-protocol.md"):
        assert page in pages


@pytest.mark.parametrize("page", runnable_pages())
def test_page_commands_run(page: str, page_broker: ServedBroker | None, tmp_path: Path) -> None:
    blocks = page_blocks(ROOT / page)
    with page_run(tmp_path / "work", page_broker) as run:
        done = run_page(blocks, run)
    assert done == [
        b.where for b in blocks if b.kind in RUNS and b.where not in {w.split()[0] for w in run.left_out}
    ]
    if run.left_out:
        pytest.skip(f"ran the rest of {page}; left out: {', '.join(run.left_out)}")
