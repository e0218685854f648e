"""``python -m reports``: alias of ``python -m compile_checks.reports`` in this repository."""

import sys

from compile_checks.reports.cli import main

sys.exit(main())
