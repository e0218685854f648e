"""What a case's run found beyond copies: whether the write check runs, and recompiles.

Apart from :mod:`.run` because this is the case's side of the findings: the write check itself runs
per compiled call inside the check session (:mod:`compile_checks.check.writes.calls`), this module
says when it is on and adds what the session's report does not hold.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the checker imports torch: loading a case file must stay cheap
    from compile_checks.case.definition import Case
    from compile_checks.check.findings import CloneReport


def checks_writes(case: Case) -> bool:
    """Whether the write check runs: ``Case.check_writes``, a case that runs (a ``driver`` or ``verify``),
    and named pools (each compiled call is then compared with its own captured graph run eagerly)."""
    if not case.check_writes or (case.driver is None and case.verify is None):
        return False
    return callable(case.pools) or bool(case.pools)


def run_findings(case: Case, report: CloneReport) -> list[Any]:
    """Functions recompiled more often than ``max_recompiles``."""
    # lazy: the checker is loaded once a case runs, never by loading a case file
    from compile_checks.check.recompiles import recompile_findings

    return list(recompile_findings(report.recompiles, case.max_recompiles))


__all__ = ["checks_writes", "run_findings"]
