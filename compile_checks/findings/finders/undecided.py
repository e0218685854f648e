"""Graph finder: what kept the check from a verdict: its errors, regions it could not analyse, and the
problems found outside the report (``Evidence.undecided``)."""

from __future__ import annotations

from collections.abc import Iterator

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind

NOT_ANALYSED_FIX = "allow_unanalysed=True (Case) accepts it, listed; or compile that part so the check can see it"


def unreceived_error(pool: str) -> str:
    """The report's error for a pool no region received (:mod:`.pools` reports it as its own kind)."""
    return f"named pool {pool!r} was never received by any compiled region"


@register_finder("undecided", FinderSource.GRAPH)
def find_undecided(e: Evidence) -> Iterator[Finding]:
    report = e.report
    unreceived = [unreceived_error(p) for p in report.get("unreceived_pools") or ()]
    for error in report.get("errors") or ():
        if not any(str(error).startswith(u) for u in unreceived):
            yield Finding(FindingKind.UNDECIDED, str(error), details={"what": "check_error"})
    allowed = bool(report.get("allow_unanalysed"))
    for u in report.get("unanalysed") or ():
        yield Finding(
            FindingKind.UNDECIDED,
            f"not analysed: {u}",
            fails=not allowed,
            fix=None if allowed else NOT_ANALYSED_FIX,
            details={"what": "unanalysed", "allowed": allowed},
        )
    for problem in e.undecided:
        yield Finding(FindingKind.UNDECIDED, str(problem), details={"what": "check_error"})
