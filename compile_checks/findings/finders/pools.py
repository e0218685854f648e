"""Run finder: a named pool no compiled region received on any call (its copies could not be seen)."""

from __future__ import annotations

from collections.abc import Iterator

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.finders._common import layers_of
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind


@register_finder("pools_not_received", FinderSource.RUN)
def find_unreceived(e: Evidence) -> Iterator[Finding]:
    if e.report.get("num_regions") == 0:  # nothing compiled: the report's error says so, once
        return
    for pool in e.report.get("unreceived_pools") or ():
        yield Finding(
            FindingKind.POOL_NOT_RECEIVED,
            f"named pool {pool!r} was never received by any compiled region: its copies could not be seen",
            source=FinderSource.RUN,
            pool=pool,
            layers=layers_of(pool),
            cause="a stale or rebuilt tensor: the engine compiled against another tensor than the one named",
            fix="name the tensors the compiled step receives (pools=callable re-reads them after a rebuild)",
        )
