"""``python -m compile_checks.reports ARGS``: the same as ``compile-checks report ARGS`` (see compile_checks.cli)."""

import sys

from compile_checks.cli import main

sys.exit(main(["report", *sys.argv[1:]]))
