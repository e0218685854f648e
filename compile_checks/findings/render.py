"""Words for findings that are not copies (copies read as :func:`compile_checks.verdict.render_copy`):
each finding on its own line, then its cause and fix, said once for findings that share them."""

from __future__ import annotations

from collections.abc import Sequence

from compile_checks.findings.record import UNDECIDED_KINDS, Finding
from compile_checks.vocab import FindingKind


def kind_name(f: Finding) -> str:
    """The kind as its producer named it (a kind this version does not know keeps its own name)."""
    return str(f.details.get("reported_kind") or f.kind)


def finding_line(f: Finding) -> str:
    """One line: ``lost_write: pool 'layer0.k': ...``; what kept the check from a verdict reads
    ``the check could not decide: ...``; a mismatch is its own sentence."""
    if f.kind == FindingKind.MISMATCH:
        return f.message
    if f.kind in UNDECIDED_KINDS and "reported_kind" not in f.details:
        return f"the check could not decide: {f.message}"
    where = f" (written at {f.user_line})" if f.user_line else ""
    return f"{kind_name(f)}: {f.message}{where}"


def finding_lines(findings: Sequence[Finding]) -> list[str]:
    """Each finding's line; after the findings that share a cause and fix (4 caches' lost writes),
    ``cause: ...`` and ``fix: ...`` once, indented."""
    lines: list[str] = []
    for i, f in enumerate(findings):
        lines.append(finding_line(f))
        after = findings[i + 1] if i + 1 < len(findings) else None
        if (f.cause or f.fix) and (after is None or (after.cause, after.fix) != (f.cause, f.fix)):
            lines += [f"  cause: {f.cause}"] if f.cause else []
            lines += [f"  fix: {f.fix}"] if f.fix else []
    return lines


__all__ = ["finding_line", "finding_lines", "kind_name"]
