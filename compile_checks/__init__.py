"""Checks that Inductor re-inplaces the paged-KV commit write (no pool-sized clones).

The public names are loaded lazily (PEP 562) so ``python -m compile_checks --help`` / usage
errors answer without importing torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

_EXPORTS: dict[str, str] = {
    "Case": "compile_checks.case",
    "CaseResult": "compile_checks.case",
    "run_case": "compile_checks.case",
    "LazyCase": "compile_checks.lazy_case",
    "CheckSessionError": "compile_checks.check.hooks",
    "IncompatibleTorchError": "compile_checks.check.hooks",
    "TargetError": "compile_checks.gate.targets",
    "CloneCheck": "compile_checks.api",
    "CompileCheckError": "compile_checks.api",
    "analyze_pool_clones": "compile_checks.api",
    "assert_no_pool_clones": "compile_checks.api",
    "dump": "compile_checks.api",
    "find_pool_clones": "compile_checks.api",
    "format_report": "compile_checks.api",
    "CloneReport": "compile_checks.check.findings",
    "MutatedArgRecord": "compile_checks.check.findings",
    "SurvivingClone": "compile_checks.check.findings",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from compile_checks.api import (
        CloneCheck,
        CompileCheckError,
        analyze_pool_clones,
        assert_no_pool_clones,
        dump,
        find_pool_clones,
        format_report,
    )
    from compile_checks.case import Case, CaseResult, run_case
    from compile_checks.check.findings import CloneReport, MutatedArgRecord, SurvivingClone
    from compile_checks.check.hooks import CheckSessionError, IncompatibleTorchError
    from compile_checks.gate.targets import TargetError
    from compile_checks.lazy_case import LazyCase


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'compile_checks' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value
