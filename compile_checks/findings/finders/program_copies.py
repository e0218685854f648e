"""Graph finder: the pool-sized buffers the program itself makes from a pool (``report.program_copies``:
:mod:`compile_checks.check.graph.program_copies`), one ``program_copy`` finding each, named by pool with its
bytes per call; failing only where the case or the gate asks (``fail_on_program_copies``)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.finders._common import layers_of
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind

FIX = (
    "keep the window in place: write the new chunk at a moving position (a ring index) instead of rolling "
    "the cache, and hand the attention op the cache in the layout it reads"
)


def program_copy_line(copy: Mapping[str, Any]) -> str:
    """One program copy as the gate prints it (a ``ProgramCopy.to_dict()``)."""
    pool = f"pool {copy['pool']}" if copy.get("pool") else "an unnamed written input"
    seen = " (seen in the post-grad graph; --full counts the generated code's)" if copy.get("graph_only") else ""
    return (
        f"program copy: {pool}, {copy['nbytes']} B/call on {copy['calls']} call(s), region {copy['region']} "
        f"{copy['buffer']}: {copy['what']}{seen}"
    )


@register_finder("program_copies", FinderSource.GRAPH)
def find_program_copies(e: Evidence) -> Iterator[Finding]:
    fails = bool(e.report.get("fail_on_program_copies"))
    for c in e.report.get("program_copies") or ():
        pool = c.get("pool")
        yield Finding(
            FindingKind.PROGRAM_COPY,
            program_copy_line(c).removeprefix("program copy: "),
            fails=fails,
            source=FinderSource.GRAPH,
            pool=pool,
            layers=layers_of(pool),
            bytes_per_call=int(c.get("nbytes") or 0),
            bytes_per_run=int(c.get("nbytes") or 0) * int(c.get("calls") or 0),
            calls=c.get("calls"),
            region=c.get("region"),
            node=c.get("buffer"),
            cause=str(c.get("what") or "") or None,
            fix=FIX,
            details={"graph_only": bool(c.get("graph_only"))},
        )
