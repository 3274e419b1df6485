"""``python -m service`` runs the ``tierlog`` command line."""

import sys

from service.cli import main

sys.exit(main())
