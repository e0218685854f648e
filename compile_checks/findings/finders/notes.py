"""Run finder: the caveats of the run and of the analysis, and a dump that failed: never a failure."""

from __future__ import annotations

from collections.abc import Iterator

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind


@register_finder("notes", FinderSource.RUN)
def find_notes(e: Evidence) -> Iterator[Finding]:
    for note in e.notes:
        yield Finding(FindingKind.NOTE, str(note), fails=False, source=FinderSource.RUN)
    for failure in e.report.get("dump_failures") or ():
        yield Finding(
            FindingKind.NOTE,
            f"dump failed (the verdict stands): {failure}",
            fails=False,
            source=FinderSource.RUN,
            details={"what": "dump_failure"},
        )
