"""``python -m compile_checks`` (see compile_checks.cli)."""

import sys

from compile_checks.cli import main

sys.exit(main())
