"""One record for everything the check can say (:class:`Finding`), and the finders that produce it.

Every output (the gate's table, ``--json``, JUnit, the pytest plugin, ``dump``'s index, the traffic
report, ``repro`` and ``scan``) renders a list of :class:`Finding` and the :class:`Verdict` computed
from it once; none computes a story of its own. Finders (:mod:`compile_checks.findings.finders`) read
plain :class:`Evidence`; this package imports nothing of the checker (no torch).
"""

from compile_checks.findings.collect import collect_findings
from compile_checks.findings.evidence import Evidence
from compile_checks.findings.finders._common import copy_label
from compile_checks.findings.record import COPY_KINDS, UNDECIDED_KINDS, Finding, Verdict, findings_from_dicts
from compile_checks.findings.registry import Finder, finders, register_finder
from compile_checks.findings.render import finding_line, finding_lines, kind_name


def verdict_of(evidence: Evidence, *, expect_clean: bool) -> Verdict:
    """Every finder over ``evidence``, and the verdict they come to."""
    return Verdict.of(collect_findings(evidence), expect_clean=expect_clean)


__all__ = [
    "COPY_KINDS",
    "UNDECIDED_KINDS",
    "Evidence",
    "Finder",
    "Finding",
    "Verdict",
    "collect_findings",
    "copy_label",
    "finders",
    "finding_line",
    "finding_lines",
    "findings_from_dicts",
    "kind_name",
    "register_finder",
    "verdict_of",
]
