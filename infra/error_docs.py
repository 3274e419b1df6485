"""Print docs/errors.md: the error table rendered from every class that registers a code.

Usage: ``python infra/error_docs.py > docs/errors.md``. The broker's classes live in
:mod:`tierlog.wire.errors`; the client's register when their modules are imported, which this tool does
(``tierlog.wire`` itself may import no layer). tests/unit/wire/test_error_table.py fails when the file
differs.
"""

from __future__ import annotations

import importlib
import sys

from tierlog.wire.errors import registered_errors
from tierlog.wire.errors_doc import render_markdown

# The modules outside tierlog.wire that declare error codes (the test checks that no other module does).
DECLARING_MODULES = ("tierlog.client.errors", "tierlog.client.cli.data")


def main() -> None:
    for name in DECLARING_MODULES:
        importlib.import_module(name)
    sys.stdout.write(render_markdown(registered_errors().values()))


if __name__ == "__main__":
    main()
