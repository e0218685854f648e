"""The finders: one module per finder, each with one ``@register_finder`` line.

Importing this package imports every module in it (a new finder needs no list edited here).
A finder reads :class:`~compile_checks.findings.evidence.Evidence` with ``.get``: keys another
version of the check does not write are absent, never an error.
"""

from __future__ import annotations

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        importlib.import_module(f"{__name__}.{_module}")
