"""Alias: this module is :mod:`compile_checks.reports.traffic` (moved there to ship with the package)."""

import sys

from compile_checks.reports import traffic as _module

sys.modules[__name__] = _module
