"""Every registered finder over one :class:`~compile_checks.findings.evidence.Evidence`: the case's findings.

Finders live in :mod:`compile_checks.findings.finders`, one module each, found by importing that
package (every module in it is imported, so a new finder is its module and its one
``@register_finder`` line).
"""

from __future__ import annotations

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import run_finders


def collect_findings(evidence: Evidence) -> list[Finding]:
    """What every registered finder finds in ``evidence`` (:func:`~compile_checks.findings.registry.run_finders`)."""
    import compile_checks.findings.finders  # noqa: F401  # registers every finder module

    return run_finders(evidence)


__all__ = ["collect_findings"]
