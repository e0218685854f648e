"""Graph finder: copy sites whose buffer is Inductor's lowering choice that no generated code settled
(``CloneReport.undecided``): neither a copy nor none, so the case is undecided, never failed or passed by them."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.finders.copies import copy_finding
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind

SETTLE_FIX = (
    "run the case with --full (a full compile's generated code settles it), or see the note for why Inductor's "
    "code could not be generated"
)


@register_finder("undecided_copies", FinderSource.GRAPH)
def find_undecided_copies(e: Evidence) -> Iterator[Finding]:
    for c in e.report.get("undecided") or ():
        f = copy_finding(c, other=False)
        yield dataclasses.replace(
            f,
            kind=FindingKind.UNDECIDED,
            message=f"{f.message}: undecided, no generated code said whether Inductor gives it a buffer",
            upper_bound=True,
            fix=SETTLE_FIX,
            details={**f.details, "what": "undecided_copy"},
        )
