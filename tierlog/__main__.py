"""``python -m tierlog ...`` runs the ``tierlog`` command line."""

import sys

from tierlog.cli import main

sys.exit(main())
