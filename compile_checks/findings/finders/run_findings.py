"""Run finder: what the compiled calls did as they ran (``CloneReport.run_findings``): lost, undeclared and
diverged writes (``check.writes``), recompiles (``check.recompiles``), a warm cache's divergence, a scan's
findings. A kind this version does not know still reaches the verdict (:func:`._common.kind_of`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.finders._advice import advice
from compile_checks.findings.finders._common import kind_of, layers_of
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource

_FIELDS = {"kind", "message", "fails", "pool", "op", "region", "nbytes", "cause", "fix", "user_line", "culprit"}


def run_finding(d: Mapping[str, Any]) -> Finding:
    fails = bool(d.get("fails", True))
    kind, details = kind_of(d.get("kind"), fails=fails)
    cause, fix = advice(kind, d.get("op"))
    details.update({k: v for k, v in d.items() if k not in _FIELDS})
    nbytes = d.get("nbytes") or 0
    return Finding(
        kind=kind,
        message=str(d.get("message", "")),
        fails=fails,
        source=FinderSource.RUN,
        pool=d.get("pool"),
        layers=layers_of(d.get("pool")),
        op=d.get("op"),
        region=d.get("region"),
        bytes_per_run=int(nbytes) if isinstance(nbytes, int) else 0,
        cause=d.get("cause") or cause,
        fix=d.get("fix") or fix,
        user_line=d.get("user_line"),
        culprit=d.get("culprit"),
        details=details,
    )


@register_finder("run_findings", FinderSource.RUN)
def find_run(e: Evidence) -> Iterator[Finding]:
    for d in e.report.get("run_findings") or ():
        yield run_finding(d)
