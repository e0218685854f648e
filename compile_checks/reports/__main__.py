"""``python -m compile_checks.reports``: see :mod:`compile_checks.reports.cli`."""

import sys

from compile_checks.reports.cli import main

sys.exit(main())
