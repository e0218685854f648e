"""``python -m reports ARGS`` (this repository only): the same as ``compile-checks report ARGS``."""

import sys

from compile_checks.cli import main

sys.exit(main(["report", *sys.argv[1:]]))
