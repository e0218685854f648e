"""Run finder: a ranked case's ranks, each rank's report through every finder, its findings tagged
with the rank (its copies are the case's own: ``Evidence.copies`` carry ``rank``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder, run_finders
from compile_checks.vocab import FinderSource


@register_finder("ranks", FinderSource.RUN)
def find_ranks(e: Evidence) -> Iterator[Finding]:
    for rank, result in sorted((e.report.get("ranks") or {}).items(), key=lambda kv: int(kv[0])):
        sub = Evidence(report=result.get("report") or {}, rank=int(rank))
        for f in run_finders(sub):
            yield dataclasses.replace(f, message=f"rank {rank}: {f.message}", details={**f.details, "rank": int(rank)})
