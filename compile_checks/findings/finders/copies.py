"""Graph finder: each surviving copy of a pool (and of a mutated input no named pool matches)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.finders._common import copy_label, kind_of, layers_of
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind

_KEPT = ("shape", "dtype", "where", "written_bytes", "explanation", "rank", "graph_file", "line", "input")


def copy_finding(c: Mapping[str, Any], *, other: bool) -> Finding:
    """One copy (``compile_checks.verdict.copy_fields``; a scan's copy has fewer keys) as a finding."""
    kind, details = kind_of(c.get("kind", "functionalization_clone"), fails=True)
    if "reported_kind" in details:  # listed among the copies: a copy, whatever its producer calls it
        kind = FindingKind.FUNCTIONALIZATION_CLONE
    nbytes = c.get("nbytes", 0)
    calls = c.get("calls")
    per_call = nbytes if isinstance(nbytes, int) else 0  # a scan's symbolic size stays in details
    details.update({k: c[k] for k in _KEPT if c.get(k) is not None})
    if not isinstance(nbytes, int):
        details["nbytes"] = str(nbytes)
    if other:
        details["unnamed_input"] = True
    pool = c.get("pool")
    return Finding(
        kind=kind,
        message=f"{c.get('op', '?')} argument {c.get('arg', '?')!r} "
        + (f"(pool {pool})" if pool is not None else f"(no pool named: {copy_label(c)})"),
        source=FinderSource.GRAPH,
        pool=pool,
        layers=layers_of(pool),
        op=c.get("op"),
        arg=c.get("arg"),
        bytes_per_call=per_call,
        bytes_per_run=per_call * calls if isinstance(calls, int) else per_call,
        calls=calls,
        region=c.get("region"),
        node=c.get("node"),
        cause=c.get("cause"),
        fix=c.get("fix"),
        user_line=c.get("user_line"),
        culprit=c.get("culprit"),
        upper_bound=bool(c.get("upper_bound")),
        details=details,
    )


@register_finder("copies", FinderSource.GRAPH)
def find_copies(e: Evidence) -> Iterator[Finding]:
    for c in e.copies:
        yield copy_finding(c, other=False)
    for c in e.other_copies:
        yield copy_finding(c, other=True)
