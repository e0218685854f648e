"""Run finder: the compiled run differs from eager (the case's ``verify``)."""

from __future__ import annotations

from collections.abc import Iterator

from compile_checks.findings.evidence import Evidence
from compile_checks.findings.record import Finding
from compile_checks.findings.registry import register_finder
from compile_checks.vocab import FinderSource, FindingKind


@register_finder("eager_mismatch", FinderSource.RUN)
def find_mismatch(e: Evidence) -> Iterator[Finding]:
    if e.eager_match is False:
        diff = "?" if e.max_abs_diff is None else f"{e.max_abs_diff:.3g}"
        yield Finding(
            FindingKind.MISMATCH,
            f"compiled != eager (max relative diff {diff})",
            source=FinderSource.RUN,
            details={"max_abs_diff": e.max_abs_diff},
        )
