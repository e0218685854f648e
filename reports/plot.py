"""Alias: this module is :mod:`compile_checks.reports.plot` (moved there to ship with the package)."""

import sys

from compile_checks.reports import plot as _module

sys.modules[__name__] = _module
