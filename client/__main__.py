"""``python -m client topics|produce|consume|groups ...``: the client commands of the ``tierlog`` CLI."""

import sys

from client.cli import main

sys.exit(main())
